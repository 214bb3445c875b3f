//! `kv_put`: a put of one small item where its shard lives, in one run: the key's slot
//! found, an item taken (the caller's, or fresh from the shard's bump pointer), the
//! item written and the slot swung to it by compare-and-swap, as the client's two
//! round trips do. Whatever needs more (a busy or full bucket, a hot key, a carved-out
//! heap, an item of a past generation) is answered as met, unchanged, and the client
//! takes its own road for that key.

use farcache_kvformat::slot::ITEM_OFFSET_MASK;
use farcache_kvformat::wire::{NO_ITEM, PutArgs, PutReply, PutStatus, put_target};

use super::*;
use crate::WriteMemory;

/// `kv_put`, invoked at the key's home bucket.
pub struct KvPut;

impl KvPut {
    pub const NAME: &'static str = wire::KV_PUT;
}

/// Finds and swaps tried when the slot changes between the two.
const SWAPS: usize = 4;

impl Procedure for KvPut {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, _mem: &dyn Memory, _addr: u64, _args: &[u8]) -> Result<Outcome, SprocError> {
        Err(SprocError::Flow(
            "kv_put writes: a server runs it only where its bucket is".into(),
        ))
    }

    fn writes(&self) -> bool {
        true
    }

    fn run_writing(
        &self,
        mem: &dyn WriteMemory,
        addr: u64,
        args: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), SprocError> {
        const P: &str = wire::KV_PUT;
        let a = PutArgs::decode(args).map_err(|e| SprocError::bad(P, e.to_string()))?;
        check(&a).map_err(|why| SprocError::bad(P, why))?;
        let r = SCRATCH
            .with(|s| put(mem, addr, &a, &mut s.borrow_mut()))
            .map_err(|(m, at, len)| match m {
                // One region is all a writing run sees.
                Miss::Remote | Miss::OutOfRange => SprocError::OutOfRange {
                    proc: P,
                    addr: at,
                    len: len as u64,
                },
                Miss::Lost => SprocError::Lost {
                    proc: P,
                    addr: at,
                    len: len as u64,
                },
                Miss::Budget => super::super::budget(P, mem),
            })?;
        out.extend_from_slice(&r.encode());
        Ok(())
    }
}

/// Sizes a slot word and the item's class can hold, and an item inside the heap.
fn check(a: &PutArgs<'_>) -> Result<(), String> {
    let need = item::HEADER + a.key.len() + a.value.len();
    if need > a.size as usize || class::for_len(u64::from(a.size)).is_none() {
        return Err(format!("an item of {need} bytes in a class of {}", a.size));
    }
    if a.heap_start >= a.shard_size || a.shard_size.saturating_sub(8) >> 3 > ITEM_OFFSET_MASK {
        return Err(format!(
            "heap from {} in a shard of {} bytes",
            a.heap_start, a.shard_size
        ));
    }
    let inside = a.item.is_multiple_of(8)
        && a.item >= a.heap_start
        && a.item
            .checked_add(u64::from(a.size))
            .is_some_and(|e| e <= a.shard_size);
    if a.item != NO_ITEM && !inside {
        return Err(format!("item at {} outside the heap", a.item));
    }
    Ok(())
}

type Missed = (Miss, u64, usize);

fn put(
    mem: &dyn WriteMemory,
    addr: u64,
    a: &PutArgs<'_>,
    buf: &mut Vec<u8>,
) -> Result<PutReply, Missed> {
    let l = wire::Lookup {
        mode: wire::MODE_VALUE,
        tag: a.tag,
        now_ms: a.now_ms,
        shard_base: a.shard_base,
        refs_addr: a.refs_addr,
        key: a.key,
    };
    let mut item = a.item;
    let mut written = false;
    let mut generation = a.generation;
    let answer = |status, old, generation, item| PutReply {
        status,
        old,
        generation,
        item,
    };
    for _ in 0..SWAPS {
        let (f, _) = find::find_reply(mem, addr, &l, buf)?;
        generation = f.generation;
        if a.item != NO_ITEM && f.generation != a.generation {
            // The caller's item belongs to the shard's past: not to be written.
            return Ok(answer(PutStatus::Stale, 0, f.generation, NO_ITEM));
        }
        if f.status == wire::BUSY {
            return Ok(answer(PutStatus::Busy, 0, f.generation, item));
        }
        if !a.guard.allows(&f) {
            return Ok(answer(PutStatus::Skipped, 0, f.generation, item));
        }
        let Some(s) = put_target(&f) else {
            return Ok(answer(PutStatus::Full, 0, f.generation, item));
        };
        let expect = f.words[s];
        if SlotWord::is_item(expect) && SlotWord(expect).is_hot() {
            return Ok(answer(PutStatus::Hot, 0, f.generation, item));
        }
        if item == NO_ITEM {
            let bump = a.shard_base.saturating_add(layout::BUMP);
            let old = mem
                .fetch_add(bump, u64::from(a.size))
                .map_err(|m| (m, bump, 8))?;
            match layout::carve(a.heap_start, a.shard_size, old, a.size) {
                Some(o) => item = o,
                None => return Ok(answer(PutStatus::NoHeap, 0, f.generation, NO_ITEM)),
            }
        }
        if !written {
            buf.clear();
            item::encode_into(buf, a.key, a.value, a.expires_ms, a.flags);
            let at = a.shard_base.saturating_add(item);
            mem.write(at, buf).map_err(|m| (m, at, buf.len()))?;
            written = true;
        }
        let bucket = if f.pair {
            layout::pair_bucket_addr(addr)
        } else {
            addr
        };
        let slot_at = bucket.saturating_add(s as u64 * 8);
        let new = SlotWord::new(a.tag, a.word_class, item).after(expect).0;
        // The item is whole before the slot names it (this run wrote it first).
        if mem.cas(slot_at, expect, new).map_err(|m| (m, slot_at, 8))? == expect {
            return Ok(answer(PutStatus::Written, expect, f.generation, item));
        }
    }
    Ok(answer(PutStatus::Busy, 0, generation, item))
}
