//! `kv_incr`: a counter's steps (Redis `INCR`, `DECRBY` …) where its shard lives, in
//! one run: the key's item read, its value parsed, the steps applied, and the result
//! written as a new item the slot swings to, keeping the key's expiry. A front end's
//! read-modify-write takes two round trips for the same; anything out of the ordinary
//! is answered as met, unchanged, and the client takes that road (see `kv_put`).

use farcache_kvformat::wire::{IncrReply, NO_ITEM, PutArgs, PutReply, PutStatus, put_target};

use super::put::check;
use super::*;
use crate::WriteMemory;

/// `kv_incr`, invoked at the key's home bucket.
pub struct KvIncr;

impl KvIncr {
    pub const NAME: &'static str = wire::KV_INCR;
}

/// Finds and swaps tried when the slot changes between the two.
const SWAPS: usize = 4;

impl Procedure for KvIncr {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, _mem: &dyn Memory, _addr: u64, _args: &[u8]) -> Result<Outcome, SprocError> {
        Err(SprocError::Flow(
            "kv_incr writes: a server runs it only where its bucket is".into(),
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
        const P: &str = wire::KV_INCR;
        let a = PutArgs::decode(args).map_err(|e| SprocError::bad(P, e.to_string()))?;
        let steps: Vec<i64> = a
            .value
            .chunks_exact(8)
            .map(|c| {
                let mut v = [0u8; 8];
                v.copy_from_slice(c);
                i64::from_le_bytes(v)
            })
            .collect();
        if a.value.len() % 8 != 0 || steps.is_empty() {
            return Err(SprocError::bad(
                P,
                format!("{} bytes of steps", a.value.len()),
            ));
        }
        // The item must hold the key with any integer.
        let widest = PutArgs {
            value: &[b'0'; wire::COUNTER_DIGITS],
            ..a
        };
        check(&widest).map_err(|why| SprocError::bad(P, why))?;
        let mut item = a.item;
        let r = SCRATCH
            .with(|s| incr(mem, addr, &a, &steps, &mut s.borrow_mut(), &mut item))
            .unwrap_or_else(|_| IncrReply {
                put: PutReply {
                    status: PutStatus::Refused,
                    old: 0,
                    generation: a.generation,
                    item,
                },
                not_integer: false,
                steps: vec![None; steps.len()],
            });
        r.encode_into(out);
        Ok(())
    }
}

type Missed = (Miss, u64, usize);

fn incr(
    mem: &dyn WriteMemory,
    addr: u64,
    a: &PutArgs<'_>,
    steps: &[i64],
    buf: &mut Vec<u8>,
    item: &mut u64,
) -> Result<IncrReply, Missed> {
    let l = wire::Lookup {
        mode: wire::MODE_VALUE,
        tag: a.tag,
        now_ms: a.now_ms,
        shard_base: a.shard_base,
        refs_addr: a.refs_addr,
        key: a.key,
    };
    let mut generation = a.generation;
    let answer =
        |status, old, generation, item, not_integer, applied: Vec<Option<i64>>| IncrReply {
            put: PutReply {
                status,
                old,
                generation,
                item,
            },
            not_integer,
            steps: applied,
        };
    let none = || vec![None; steps.len()];
    for _ in 0..SWAPS {
        let (f, hit) = find::find_reply(mem, addr, &l, buf)?;
        generation = f.generation;
        if a.item != NO_ITEM && f.generation != a.generation {
            return Ok(answer(
                PutStatus::Stale,
                0,
                f.generation,
                NO_ITEM,
                false,
                none(),
            ));
        }
        if f.status == wire::BUSY {
            return Ok(answer(
                PutStatus::Busy,
                0,
                f.generation,
                *item,
                false,
                none(),
            ));
        }
        // The value and expiry it starts from: an absent or expired key is 0.
        let (start, expires) = match hit.filter(|_| !f.expired) {
            // A coded value (or any flagged item) is the client's to handle.
            Some(it) if it.flags != 0 => {
                return Ok(answer(
                    PutStatus::Refused,
                    0,
                    f.generation,
                    *item,
                    false,
                    none(),
                ));
            }
            Some(it) => match std::str::from_utf8(&buf[it.value.0..it.value.1])
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
            {
                Some(n) => (n, it.expires_ms),
                None => {
                    return Ok(answer(
                        PutStatus::Skipped,
                        0,
                        f.generation,
                        *item,
                        true,
                        none(),
                    ));
                }
            },
            None => (0, item::NO_EXPIRY),
        };
        let mut cur = start;
        let applied: Vec<Option<i64>> = steps
            .iter()
            .map(|&d| {
                let next = cur.checked_add(d)?;
                cur = next;
                Some(next)
            })
            .collect();
        if applied.iter().all(Option::is_none) {
            return Ok(answer(
                PutStatus::Skipped,
                0,
                f.generation,
                *item,
                false,
                applied,
            ));
        }
        let Some(s) = put_target(&f) else {
            return Ok(answer(
                PutStatus::Full,
                0,
                f.generation,
                *item,
                false,
                none(),
            ));
        };
        let expect = f.words[s];
        if SlotWord::is_item(expect) && SlotWord(expect).is_hot() {
            return Ok(answer(
                PutStatus::Hot,
                0,
                f.generation,
                *item,
                false,
                none(),
            ));
        }
        if *item == NO_ITEM {
            let bump = a.shard_base.saturating_add(layout::BUMP);
            let old = mem
                .fetch_add(bump, u64::from(a.size))
                .map_err(|m| (m, bump, 8))?;
            match layout::carve(a.heap_start, a.shard_size, old, a.size) {
                Some(o) => *item = o,
                None => {
                    return Ok(answer(
                        PutStatus::NoHeap,
                        0,
                        f.generation,
                        NO_ITEM,
                        false,
                        none(),
                    ));
                }
            }
        }
        // The value may differ between attempts: the item is written every time.
        let value = cur.to_string();
        buf.clear();
        item::encode_into(buf, a.key, value.as_bytes(), expires, 0);
        let at = a.shard_base.saturating_add(*item);
        mem.write(at, buf).map_err(|m| (m, at, buf.len()))?;
        let bucket = if f.pair {
            layout::pair_bucket_addr(addr)
        } else {
            addr
        };
        let slot_at = bucket.saturating_add(s as u64 * 8);
        let new = SlotWord::new(a.tag, a.word_class, *item).after(expect).0;
        if mem.cas(slot_at, expect, new).map_err(|m| (m, slot_at, 8))? == expect {
            return Ok(answer(
                PutStatus::Written,
                expect,
                f.generation,
                *item,
                false,
                applied,
            ));
        }
    }
    Ok(answer(PutStatus::Busy, 0, generation, *item, false, none()))
}
