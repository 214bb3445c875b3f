//! CLOCK eviction over a shard's index. The hand is a counter in the shard header:
//! a sweeper claims the next [`WINDOW`] buckets with one fetch-and-add, clears the
//! reference byte of referenced items (their second chance) and evicts unreferenced
//! items of the size class it needs, each with a compare-and-swap of its slot to a
//! tombstone. GET hits set the byte again.

use farcache_kvformat::SlotWord;
use farcache_kvformat::layout::{BUCKET_BYTES, EVICTIONS, GENERATION, HAND, SLOTS};
use farcache_kvformat::slot::TOMB;

use crate::Result;
use crate::free::le;
use crate::store::Store;

/// Buckets one sweep step looks at.
pub const WINDOW: u64 = 16;
/// Items of the wanted class one step evicts at most (extras are kept for reuse).
const TAKE: usize = 4;

impl Store {
    /// Evicts an item of `class` from `shard` and returns its offset, or `None` when
    /// two turns of the hand found none.
    pub(crate) fn evict(&self, shard: u32, class: u8) -> Result<Option<u64>> {
        let cache = &self.inner.cache;
        let lay = &self.inner.layout;
        let base = lay.shard_base(shard);
        let buckets = u64::from(lay.0.buckets);
        let steps = 2 * buckets.div_ceil(WINDOW) + 1;
        for _ in 0..steps {
            let hand = cache.fetch_add(base + HAND, WINDOW)?;
            let start = hand % buckets;
            let n = WINDOW.min(buckets - start);
            let mut b = cache.batch();
            let bi = b.read(lay.bucket_addr(shard, start as u32), n * BUCKET_BYTES);
            let ri = b.read(lay.refs_addr(shard, start as u32), n * 8);
            let gi = b.read(base + GENERATION, 8);
            let r = b.run();
            let generation = le(r.data(gi)?) as u32;
            let words = r.data(bi)?;
            let refs = r.data(ri)?;
            let mut b = cache.batch();
            let mut tries = Vec::new();
            // Like a textbook CLOCK hand, stop at the last victim: items past it keep
            // their reference bytes (clearing the whole window turned the hand several
            // times faster and cost about 3 points of hit ratio against LRU).
            'window: for k in 0..n as usize {
                for s in 0..SLOTS {
                    if tries.len() == TAKE {
                        break 'window;
                    }
                    let w = le(&words[k * 64 + s * 8..]);
                    // Hot keys stay: their copies would outlive them.
                    if !SlotWord::is_item(w) || SlotWord(w).is_hot() {
                        continue;
                    }
                    let bucket = start as u32 + k as u32;
                    if refs[k * 8 + s] != 0 {
                        b.write(lay.refs_addr(shard, bucket) + s as u64, &[0]);
                    } else if SlotWord(w).class() == class {
                        let i = b.cas(lay.slot_addr(shard, bucket, s), w, TOMB);
                        tries.push((i, w));
                    }
                }
            }
            if b.is_empty() {
                continue;
            }
            let r = b.run();
            let mut won = Vec::new();
            for (i, w) in tries {
                if r.value(i)? == w {
                    won.push(SlotWord(w).offset());
                }
            }
            if let Some((&first, rest)) = won.split_first() {
                cache.fetch_add(base + EVICTIONS, won.len() as u64)?;
                for &o in rest {
                    self.free_item(shard, class, o, generation)?;
                }
                return Ok(Some(first));
            }
        }
        Ok(None)
    }
}
