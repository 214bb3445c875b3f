//! `kv_put` and `kv_mput`: a put of a small item where its shard lives, in one run:
//! the key's slot found, an item taken (the caller's, or fresh from the shard's bump
//! pointer), the item written and the slot swung to it by compare-and-swap, as the
//! client's two round trips do. Whatever needs more (a busy or full bucket, a hot key,
//! a carved-out heap, an item of a past generation, memory not writable here now) is
//! answered as met, unchanged, and the client takes its own road for that key.
//! `kv_mput` runs many keys of one server with their buckets and items prefetched
//! ahead, as `kv_mget` does.

use farcache_kvformat::slot::ITEM_OFFSET_MASK;
use farcache_kvformat::wire::{
    FindReply, NO_ITEM, PUT_REPLY_LEN, PutArgs, PutReply, PutStatus, decode_mput, put_target,
};

use super::*;
use crate::WriteMemory;

/// `kv_put`, invoked at the key's home bucket.
pub struct KvPut;

impl KvPut {
    pub const NAME: &'static str = wire::KV_PUT;
}

/// Finds and swaps tried when the slot changes between the two.
pub(super) const SWAPS: usize = 4;

impl Procedure for KvPut {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, _mem: &dyn Memory, _addr: u64, _args: &[u8]) -> Result<Outcome, SprocError> {
        Err(writes_only(wire::KV_PUT))
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
        let r = SCRATCH.with(|s| put_or_refuse(mem, addr, &a, &mut s.borrow_mut()));
        out.extend_from_slice(&r.encode());
        Ok(())
    }
}

/// `kv_mput`: [`KvPut`] for many keys of one server, invoked at the first one's bucket.
pub struct KvMput;

impl KvMput {
    pub const NAME: &'static str = wire::KV_MPUT;
}

impl Procedure for KvMput {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, _mem: &dyn Memory, _addr: u64, _args: &[u8]) -> Result<Outcome, SprocError> {
        Err(writes_only(wire::KV_MPUT))
    }

    fn writes(&self) -> bool {
        true
    }

    fn run_writing(
        &self,
        mem: &dyn WriteMemory,
        _addr: u64,
        args: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), SprocError> {
        const P: &str = wire::KV_MPUT;
        let keys = decode_mput(args).map_err(|e| SprocError::bad(P, e.to_string()))?;
        for (_, a) in &keys {
            check(a).map_err(|why| SprocError::bad(P, why))?;
        }
        if 4 + keys.len() * PUT_REPLY_LEN > crate::procedure::MAX_OUTPUT {
            return Err(SprocError::TooLarge {
                proc: P,
                limit: crate::procedure::MAX_OUTPUT,
            });
        }
        out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
        each_key(mem, &keys, |_, bucket_addr, a, buf| {
            out.extend_from_slice(&put_or_refuse(mem, bucket_addr, a, buf).encode());
        });
        Ok(())
    }
}

/// Runs `serve` on each key of a multi-key run in order (its index, bucket address,
/// arguments and the scratch buffer), with `kv_mget`'s prefetch pipeline.
pub(super) fn each_key(
    mem: &dyn WriteMemory,
    keys: &[(u64, PutArgs<'_>)],
    mut serve: impl FnMut(usize, u64, &PutArgs<'_>, &mut Vec<u8>),
) {
    let views: Vec<wire::MgetKey<'_>> = keys
        .iter()
        .map(|(bucket_addr, a)| wire::MgetKey {
            tag: a.tag,
            bucket_addr: *bucket_addr,
            shard_base: a.shard_base,
            refs_addr: a.refs_addr,
            key: a.key,
        })
        .collect();
    let mut next = keys.iter().enumerate();
    SCRATCH.with(|s| {
        let mut buf = s.borrow_mut();
        let _ = pipelined(mem, &views, |_| {
            if let Some((i, (bucket_addr, a))) = next.next() {
                serve(i, *bucket_addr, a, &mut buf);
            }
            Ok::<(), std::convert::Infallible>(())
        });
    });
}

/// The error of a writing procedure asked to run as a reading one.
pub(super) fn writes_only(proc: &str) -> SprocError {
    SprocError::Flow(format!(
        "{proc} writes: a server runs it only where its buckets are"
    ))
}

/// [`put`], with memory it may not write here answered as [`PutStatus::Refused`]
/// (with the item it holds, for the caller to keep).
fn put_or_refuse(mem: &dyn WriteMemory, addr: u64, a: &PutArgs<'_>, buf: &mut Vec<u8>) -> PutReply {
    let mut held = Held::callers(a, false);
    let r = put(mem, addr, a, buf, &mut held);
    r.unwrap_or(PutReply {
        status: PutStatus::Refused,
        old: 0,
        generation: a.generation,
        item: held.item,
    })
}

/// Sizes a slot word and the item's class can hold, and an item inside the heap.
pub(super) fn check(a: &PutArgs<'_>) -> Result<(), String> {
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

pub(super) type Missed = (Miss, u64, usize);

/// What a writing run makes of a key, given its find and, if the key is there and
/// not expired, its item's value and expiry.
pub(super) enum Decision<'v> {
    /// Nothing to write: answer this.
    Answer(PutStatus),
    /// Write this value with this expiry and these item flags; `class` (word class,
    /// bytes) is the one a fresh item takes, where not the caller's.
    Write {
        value: std::borrow::Cow<'v, [u8]>,
        expires_ms: u64,
        flags: u8,
        class: Option<(u8, u32)>,
    },
}

/// The item a writing run holds (the caller's, one it took, or [`NO_ITEM`]), and
/// what it did with the caller's.
pub(super) struct Held {
    pub item: u64,
    /// `item`'s word class and bytes.
    pub class: (u8, u32),
    /// Where the caller allows it (`Some`), the caller's item set aside as too
    /// small, for the caller to keep ([`NO_ITEM`]: none).
    pub spare: Option<u64>,
}

impl Held {
    /// The caller's item, with a spare allowed or not.
    pub(super) fn callers(a: &PutArgs<'_>, spare: bool) -> Self {
        Held {
            item: a.item,
            class: (a.word_class, a.size),
            spare: spare.then_some(NO_ITEM),
        }
    }
}

/// The loop `kv_put` and `kv_medit` share: find the key's slot, let `decide` say
/// what to write, take an item (`held`: the caller's, or fresh heap), write it and
/// swing the slot to it, again if the slot changed meanwhile. `held` is what it
/// holds afterwards, also when memory refuses it.
pub(super) fn swing<'v>(
    mem: &dyn WriteMemory,
    addr: u64,
    a: &PutArgs<'_>,
    buf: &mut Vec<u8>,
    held: &mut Held,
    mut decide: impl FnMut(&FindReply, Option<(&[u8], u64, u8)>) -> Decision<'v>,
) -> Result<PutReply, Missed> {
    let l = wire::Lookup {
        mode: wire::MODE_VALUE,
        tag: a.tag,
        now_ms: a.now_ms,
        shard_base: a.shard_base,
        refs_addr: a.refs_addr,
        key: a.key,
    };
    let mut generation = a.generation;
    let answer = |status, old, generation, item| PutReply {
        status,
        old,
        generation,
        item,
    };
    for _ in 0..SWAPS {
        let (f, hit) = find::find_reply(mem, addr, &l, buf)?;
        generation = f.generation;
        if a.item != NO_ITEM && f.generation != a.generation {
            // The caller's item belongs to the shard's past: not to be written.
            return Ok(answer(PutStatus::Stale, 0, f.generation, NO_ITEM));
        }
        if f.status == wire::BUSY {
            return Ok(answer(PutStatus::Busy, 0, f.generation, held.item));
        }
        let current = hit
            .filter(|_| !f.expired)
            .map(|it| (&buf[it.value.0..it.value.1], it.expires_ms, it.flags));
        let (value, expires_ms, flags) = match decide(&f, current) {
            Decision::Answer(status) => return Ok(answer(status, 0, f.generation, held.item)),
            Decision::Write {
                value,
                expires_ms,
                flags,
                class: want,
            } => {
                match (want, held.spare) {
                    (Some(c), _) if held.item == NO_ITEM => held.class = c,
                    // The caller's item is too small for what is to be written now.
                    (Some(c), Some(_)) if c.1 > held.class.1 && held.item == a.item => {
                        held.spare = Some(held.item);
                        held.item = NO_ITEM;
                        held.class = c;
                    }
                    (Some(c), _) if c.1 > held.class.1 => {
                        return Ok(answer(PutStatus::Refused, 0, f.generation, held.item));
                    }
                    _ => {}
                }
                (value, expires_ms, flags)
            }
        };
        let Some(s) = put_target(&f) else {
            return Ok(answer(PutStatus::Full, 0, f.generation, held.item));
        };
        let expect = f.words[s];
        if SlotWord::is_item(expect) && SlotWord(expect).is_hot() {
            return Ok(answer(PutStatus::Hot, 0, f.generation, held.item));
        }
        if held.item == NO_ITEM {
            let bump = a.shard_base.saturating_add(layout::BUMP);
            let old = mem
                .fetch_add(bump, u64::from(held.class.1))
                .map_err(|m| (m, bump, 8))?;
            match layout::carve(a.heap_start, a.shard_size, old, held.class.1) {
                Some(o) => held.item = o,
                None => return Ok(answer(PutStatus::NoHeap, 0, f.generation, NO_ITEM)),
            }
        }
        buf.clear();
        item::encode_into(buf, a.key, &value, expires_ms, flags);
        if buf.len() > held.class.1 as usize {
            // The caller's class was checked for its widest value: not reached.
            return Ok(answer(PutStatus::Refused, 0, f.generation, held.item));
        }
        let at = a.shard_base.saturating_add(held.item);
        mem.write(at, buf).map_err(|m| (m, at, buf.len()))?;
        let bucket = if f.pair {
            layout::pair_bucket_addr(addr)
        } else {
            addr
        };
        let slot_at = bucket.saturating_add(s as u64 * 8);
        let new = SlotWord::new(a.tag, held.class.0, held.item)
            .after(expect)
            .0;
        // The item is whole before the slot names it (this run wrote it first).
        if mem.cas(slot_at, expect, new).map_err(|m| (m, slot_at, 8))? == expect {
            return Ok(answer(PutStatus::Written, expect, f.generation, held.item));
        }
    }
    Ok(answer(PutStatus::Busy, 0, generation, held.item))
}

/// One key's put.
fn put(
    mem: &dyn WriteMemory,
    addr: u64,
    a: &PutArgs<'_>,
    buf: &mut Vec<u8>,
    held: &mut Held,
) -> Result<PutReply, Missed> {
    swing(mem, addr, a, buf, held, |f, _| match a.guard.allows(f) {
        true => Decision::Write {
            value: std::borrow::Cow::Borrowed(a.value),
            expires_ms: a.expires_ms,
            flags: a.flags,
            class: None,
        },
        false => Decision::Answer(PutStatus::Skipped),
    })
}
