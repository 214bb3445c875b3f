//! `kv_incr`: a counter's steps (Redis `INCR`, `DECRBY` …) where its shard lives, in
//! one run: the key's item read, its value parsed, the steps applied, and the result
//! written as a new item the slot swings to, keeping the key's expiry. A front end's
//! read-modify-write takes two round trips for the same; anything out of the ordinary
//! is answered as met, unchanged, and the client takes that road (see `kv_put`).

use farcache_kvformat::wire::{IncrReply, PutArgs, PutReply, PutStatus};

use super::put::{Decision, Missed, check, swing};
use super::*;
use crate::WriteMemory;

/// `kv_incr`, invoked at the key's home bucket.
pub struct KvIncr;

impl KvIncr {
    pub const NAME: &'static str = wire::KV_INCR;
}

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

/// A counter's steps on its key; `item` as for [`swing`].
fn incr(
    mem: &dyn WriteMemory,
    addr: u64,
    a: &PutArgs<'_>,
    steps: &[i64],
    buf: &mut Vec<u8>,
    item: &mut u64,
) -> Result<IncrReply, Missed> {
    let (mut not_integer, mut applied) = (false, vec![None; steps.len()]);
    let put = swing(mem, addr, a, buf, item, |_, current| {
        (not_integer, applied) = (false, vec![None; steps.len()]);
        // An absent or expired key is 0, without expiry.
        let (start, expires_ms) = match current {
            // A coded value (or any flagged item) is the client's to handle.
            Some((_, _, flags)) if flags != 0 => return Decision::Answer(PutStatus::Refused),
            Some((value, expires, _)) => match std::str::from_utf8(value)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
            {
                Some(n) => (n, expires),
                None => {
                    not_integer = true;
                    return Decision::Answer(PutStatus::Skipped);
                }
            },
            None => (0, item::NO_EXPIRY),
        };
        let (last, steps) = wire::counter_steps(start, steps);
        let changed = steps.iter().any(Option::is_some);
        applied = steps;
        match changed {
            true => Decision::Write {
                value: std::borrow::Cow::Owned(last.to_string().into_bytes()),
                expires_ms,
                flags: 0,
            },
            false => Decision::Answer(PutStatus::Skipped),
        }
    })?;
    // Steps count only when they were written, or when nothing was to be written.
    if !matches!(put.status, PutStatus::Written | PutStatus::Skipped) {
        applied = vec![None; steps.len()];
    }
    Ok(IncrReply {
        put,
        not_integer,
        steps: applied,
    })
}
