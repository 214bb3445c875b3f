//! Free lists: the items a handle keeps for its own reuse ([`FreeCache`]), and each
//! shard's shared list, a tagged Treiber stack ([`push`], [`pop`]) whose head's tag
//! changes on every swap, so a head popped and pushed back meanwhile is not mistaken
//! for the one read. Also the shard's bump pointer ([`carved`], [`bump_addr`]).

use std::collections::{HashMap, HashSet};

use farcache_client::Cache;
use farcache_kvformat::layout::{BUMP, GENERATION, Layout};
use farcache_kvformat::{FreeHead, class};

use crate::{Result, StoreError};

/// Freed items a handle keeps per (shard, class) for its own reuse.
pub const LOCAL_CAP: usize = 64;
/// Attempts at a contended free-list head.
const HEAD_ATTEMPTS: u32 = 1000;

/// Items this handle may reuse, and shards whose heap it saw carved out, each
/// valid for the shard generation it was seen in.
#[derive(Default)]
pub struct FreeCache {
    lists: HashMap<(u32, u8), Vec<u64>>,
    exhausted: HashSet<u32>,
    generations: HashMap<u32, u32>,
}

impl FreeCache {
    /// Notes that `shard` is at generation `generation`; if it was reset since this handle
    /// last looked, forgets what it kept of the shard's past. True if it was reset.
    pub fn sync(&mut self, shard: u32, generation: u32) -> bool {
        // A shard never seen is at generation 0 (as created).
        let old = self.generations.insert(shard, generation).unwrap_or(0);
        if old == generation {
            return false;
        }
        self.lists.retain(|&(s, _), _| s != shard);
        self.exhausted.remove(&shard);
        true
    }

    /// The generation of `shard` this handle last saw (what its kept items are of).
    pub fn generation(&self, shard: u32) -> u32 {
        self.generations.get(&shard).copied().unwrap_or(0)
    }

    pub fn take(&mut self, shard: u32, class: u8) -> Option<u64> {
        self.lists.get_mut(&(shard, class))?.pop()
    }

    /// Keeps `offset` (seen in generation `generation`) for reuse; returns what no longer
    /// fits, to go to the shared list.
    pub fn give(
        &mut self,
        shard: u32,
        class: u8,
        offset: u64,
        generation: u32,
    ) -> Option<Vec<u64>> {
        self.sync(shard, generation);
        let l = self.lists.entry((shard, class)).or_default();
        l.push(offset);
        (l.len() > LOCAL_CAP).then(|| l.split_off(LOCAL_CAP / 2))
    }

    pub fn drain(&mut self) -> Vec<((u32, u8), u32, Vec<u64>)> {
        let gens = std::mem::take(&mut self.generations);
        self.lists
            .drain()
            .filter(|(_, v)| !v.is_empty())
            .map(|((s, c), v)| ((s, c), gens.get(&s).copied().unwrap_or(0), v))
            .collect()
    }

    pub fn heap_exhausted(&self, shard: u32) -> bool {
        self.exhausted.contains(&shard)
    }

    pub fn mark_exhausted(&mut self, shard: u32) {
        self.exhausted.insert(shard);
    }
}

/// Where a fetch-and-add of `size` on the bump pointer that returned `old` landed:
/// the item's offset in the shard, or `None` past the heap's end.
pub fn carved(lay: &Layout, old: u64, size: u32) -> Option<u64> {
    farcache_kvformat::layout::carve(lay.heap_start(), lay.0.shard_size, old, size)
}

pub fn bump_addr(lay: &Layout, shard: u32) -> u64 {
    lay.shard_base(shard) + BUMP
}

/// Pushes `offsets` (items of `class` in `shard` at generation `generation`, all
/// unreferenced) onto the shard's shared free list in one swap: they are chained
/// first, the last pointing at the current head. Items of a past generation are
/// dropped instead (the reset shard hands that memory out afresh).
pub fn push(
    cache: &Cache,
    lay: &Layout,
    shard: u32,
    class: u8,
    offsets: &[u64],
    generation: u32,
) -> Result<()> {
    let Some(&first) = offsets.first() else {
        return Ok(());
    };
    let base = lay.shard_base(shard);
    let head_at = lay.free_head_addr(shard, class);
    if le(&cache.read(base + GENERATION, 8)?) as u32 != generation {
        return Ok(());
    }
    let mut b = cache.batch();
    for w in offsets.windows(2) {
        b.write(base + w[0], &w[1].to_le_bytes());
    }
    b.run().first_error().map_or(Ok(()), |e| Err(e.clone()))?;
    let last = base + offsets[offsets.len() - 1];
    let mut head = FreeHead(cache.read(head_at, 8).map(|v| le(&v))?);
    for _ in 0..HEAD_ATTEMPTS {
        let mut b = cache.batch();
        b.write(last, &head.offset().to_le_bytes());
        let i = b.cas(head_at, head.0, head.next(first).0);
        let r = b.run();
        let seen = r.value(i)?;
        if seen == head.0 {
            return Ok(());
        }
        head = FreeHead(seen);
    }
    Err(StoreError::Contended {
        attempts: HEAD_ATTEMPTS,
    })
}

/// Returns every cached list to the shared lists.
pub fn push_all(cache: &Cache, lay: &Layout, lists: Vec<((u32, u8), u32, Vec<u64>)>) -> Result<()> {
    for ((shard, class), generation, offs) in lists {
        push(cache, lay, shard, class, &offs, generation)?;
    }
    Ok(())
}

/// Pops an item of `class` from the shard's shared free list.
pub fn pop(cache: &Cache, lay: &Layout, shard: u32, class: u8) -> Result<Option<u64>> {
    let base = lay.shard_base(shard);
    let head_at = lay.free_head_addr(shard, class);
    let mut head = FreeHead(cache.read(head_at, 8).map(|v| le(&v))?);
    for _ in 0..HEAD_ATTEMPTS {
        if head.is_empty() {
            return Ok(None);
        }
        // The link may be garbage if the head was popped meanwhile; the tagged head
        // makes the swap below fail in that case.
        let next = le(&cache.read(base + head.offset(), 8)?);
        let size = u64::from(class::size(class).unwrap_or(0));
        let sane = next == 0
            || (next >= lay.heap_start()
                && next.is_multiple_of(8)
                && next.saturating_add(size) <= lay.0.shard_size);
        let new = if sane { next } else { 0 };
        let seen = cache.cas(head_at, head.0, head.next(new).0)?;
        if seen == head.0 {
            if !sane {
                tracing::warn!(shard, class, "free list link damaged; list truncated");
            }
            return Ok(Some(head.offset()));
        }
        head = FreeHead(seen);
    }
    Err(StoreError::Contended {
        attempts: HEAD_ATTEMPTS,
    })
}

pub(crate) fn le(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    let n = b.len().min(8);
    a[..n].copy_from_slice(&b[..n]);
    u64::from_le_bytes(a)
}
