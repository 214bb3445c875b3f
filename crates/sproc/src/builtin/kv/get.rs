//! `kv_get` and `kv_mget`: a key's value (or many keys'), read where its bucket is.

use super::*;

/// `kv_get`: the value of a key (or only whether it is there), invoked at its bucket.
pub struct KvGet;

impl KvGet {
    pub const NAME: &'static str = wire::KV_GET;
}

impl Procedure for KvGet {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, mem: &dyn Memory, addr: u64, args: &[u8]) -> Result<Outcome, SprocError> {
        run_by_into(self, mem, addr, args)
    }

    fn run_into(
        &self,
        mem: &dyn Memory,
        addr: u64,
        args: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Outcome>, SprocError> {
        const P: &str = wire::KV_GET;
        let l = decode_args(P, args)?;
        if farcache_kvformat::hash::placed_shard(l.key).is_some() {
            crate::builtin::hot::count_only();
        } else {
            crate::builtin::hot::record(l.shard_base, l.key);
        }
        let load = crate::builtin::hot::lookups() as u32;
        SCRATCH.with(|s| {
            let mut buf = s.borrow_mut();
            let (mut words, mut pair) = ([0u64; SLOTS + 1], false);
            let found = match lookup(mem, addr, &l, &mut buf, &mut words, &mut pair) {
                Ok(f) => f,
                Err((m, at, len)) => return missed(P, mem, m, at, len, addr, args).map(Some),
            };
            match found {
                Found::Hit { slot, word, item } => {
                    let value = &buf[item.value.0..item.value.1];
                    if item.expired(l.now_ms) {
                        out.extend_from_slice(&wire::get_head(wire::MISS, 0, 0, 0, load));
                        return Ok(None);
                    }
                    let ref_at = ref_addr(l.refs_addr, slot);
                    let mut r = [0u8; 1];
                    if let Err(m) = mem.read(ref_at, &mut r) {
                        return missed(P, mem, m, ref_at, 1, addr, args).map(Some);
                    }
                    // `out` may already hold other replies: only this one counts.
                    if wire::GET_HEAD + 8 + value.len() > crate::procedure::MAX_OUTPUT {
                        return Err(SprocError::TooLarge {
                            proc: P,
                            limit: crate::procedure::MAX_OUTPUT,
                        });
                    }
                    out.extend_from_slice(&wire::get_head(
                        wire::HIT,
                        slot as u8,
                        r[0],
                        item.flags
                            | if SlotWord(word).is_hot() {
                                wire::REPLY_HOT
                            } else {
                                0
                            },
                        load,
                    ));
                    match l.mode {
                        wire::MODE_VALUE => out.extend_from_slice(value),
                        wire::MODE_ENTRY => {
                            out.extend_from_slice(&item.expires_ms.to_le_bytes());
                            out.extend_from_slice(value);
                        }
                        _ => {}
                    }
                }
                Found::Miss => out.extend_from_slice(&wire::get_head(wire::MISS, 0, 0, 0, load)),
                Found::Busy => out.extend_from_slice(&wire::get_head(wire::BUSY, 0, 0, 0, load)),
            }
            Ok(None)
        })
    }
}

/// `kv_mget`: many keys' values in one run, all held by this server (the client
/// groups a batch's keys by server); a key whose bucket is not readable here answers
/// `MOVED` and the client asks for it alone.
pub struct KvMget;

impl KvMget {
    pub const NAME: &'static str = wire::KV_MGET;
}

impl Procedure for KvMget {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, mem: &dyn Memory, addr: u64, args: &[u8]) -> Result<Outcome, SprocError> {
        run_by_into(self, mem, addr, args)
    }

    fn run_into(
        &self,
        mem: &dyn Memory,
        _addr: u64,
        args: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Outcome>, SprocError> {
        const P: &str = wire::KV_MGET;
        let (mode, now_ms, keys) =
            wire::decode_mget(args).map_err(|e| SprocError::bad(P, e.to_string()))?;
        crate::builtin::hot::count_many(keys.len());
        let start = out.len();
        out.extend_from_slice(&[0u8; 4]);
        out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
        let limit = crate::procedure::MAX_OUTPUT;
        SCRATCH.with(|s| {
            let mut buf = s.borrow_mut();
            let (mut words, mut pair) = ([0u64; SLOTS + 1], false);
            let mut full = false;
            pipelined(mem, &keys, |k| {
                if full {
                    out.extend_from_slice(&[wire::AGAIN, 0, 0, 0, 0, 0, 0, 0]);
                    return Ok(());
                }
                crate::builtin::hot::sample(k.shard_base, k.key);
                let l = Lookup {
                    mode,
                    tag: k.tag,
                    now_ms,
                    shard_base: k.shard_base,
                    refs_addr: k.refs_addr,
                    key: k.key,
                };
                let found = match lookup(mem, k.bucket_addr, &l, &mut buf, &mut words, &mut pair) {
                    Ok(f) => f,
                    Err((Miss::Budget, _, _)) => return Err(crate::builtin::budget(P, mem)),
                    Err(_) => {
                        out.extend_from_slice(&[wire::MOVED, 0, 0, 0, 0, 0, 0, 0]);
                        return Ok(());
                    }
                };
                match found {
                    Found::Hit { slot, word, item } => {
                        if item.expired(now_ms) {
                            out.extend_from_slice(&[wire::MISS, 0, 0, 0, 0, 0, 0, 0]);
                            return Ok(());
                        }
                        let value = if mode == wire::MODE_VALUE {
                            &buf[item.value.0..item.value.1]
                        } else {
                            &[]
                        };
                        if out.len() - start + wire::MGET_ENTRY_HEAD + value.len() > limit {
                            full = true;
                            out.extend_from_slice(&[wire::AGAIN, 0, 0, 0, 0, 0, 0, 0]);
                            return Ok(());
                        }
                        let mut r = [0u8; 1];
                        let ref_at = ref_addr(k.refs_addr, slot);
                        if mem.read(ref_at, &mut r).is_err() {
                            out.extend_from_slice(&[wire::MOVED, 0, 0, 0, 0, 0, 0, 0]);
                            return Ok(());
                        }
                        let hot = if SlotWord(word).is_hot() {
                            wire::REPLY_HOT
                        } else {
                            0
                        };
                        out.extend_from_slice(&[wire::HIT, slot as u8, r[0], item.flags | hot]);
                        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                        out.extend_from_slice(value);
                    }
                    Found::Miss => out.extend_from_slice(&[wire::MISS, 0, 0, 0, 0, 0, 0, 0]),
                    Found::Busy => out.extend_from_slice(&[wire::BUSY, 0, 0, 0, 0, 0, 0, 0]),
                }
                Ok(())
            })?;
            let load = (crate::builtin::hot::lookups() as u32).to_le_bytes();
            out[start..start + 4].copy_from_slice(&load);
            Ok(None)
        })
    }
}
