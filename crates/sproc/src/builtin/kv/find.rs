//! `kv_find` and `kv_mfind`: where a key is in its bucket, with the bucket's words,
//! for a write's compare-and-swap (and, in `MODE_ENTRY`, the item, for a
//! read-modify-write).

use super::*;

/// `kv_find`: where a key is in its bucket, with the bucket's words and CLOCK bytes
/// as read (what a PUT or DELETE needs for its compare-and-swap).
pub struct KvFind;

impl KvFind {
    pub const NAME: &'static str = wire::KV_FIND;
}

impl Procedure for KvFind {
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
        const P: &str = wire::KV_FIND;
        let l = decode_args(P, args)?;
        SCRATCH.with(|s| {
            let mut buf = s.borrow_mut();
            match find_reply(mem, addr, &l, &mut buf) {
                Ok((r, hit)) => {
                    out.extend_from_slice(&r.encode());
                    // MODE_ENTRY: the item the slot names, read in the same run as
                    // the slot word (what guards a read-modify-write's rewrite).
                    if let (wire::MODE_ENTRY, Some(item)) = (l.mode, hit) {
                        let value = &buf[item.value.0..item.value.1];
                        if wire::FIND_LEN + wire::FOUND_ITEM_HEAD + value.len()
                            > crate::procedure::MAX_OUTPUT
                        {
                            return Err(SprocError::TooLarge {
                                proc: P,
                                limit: crate::procedure::MAX_OUTPUT,
                            });
                        }
                        wire::FoundItem {
                            flags: item.flags,
                            expires_ms: item.expires_ms,
                            value,
                        }
                        .encode_into(out);
                    }
                    Ok(None)
                }
                Err((m, at, len)) => missed(P, mem, m, at, len, addr, args).map(Some),
            }
        })
    }
}

/// A key's place in its bucket at `addr`, with the bucket's words, CLOCK bytes and
/// the shard's generation as read; on a hit, the item (left in `buf`).
pub(super) fn find_reply(
    mem: &dyn Memory,
    addr: u64,
    l: &Lookup<'_>,
    buf: &mut Vec<u8>,
) -> Result<(FindReply, Option<Checked>), (Miss, u64, usize)> {
    let (mut words, mut pair) = ([0u64; SLOTS + 1], false);
    let found = lookup(mem, addr, l, buf, &mut words, &mut pair)?;
    let refs_at = if pair {
        layout::pair_refs_addr(l.refs_addr)
    } else {
        l.refs_addr
    };
    let mut refs = [0u8; 8];
    mem.read(refs_at, &mut refs).map_err(|m| (m, refs_at, 8))?;
    let gen_at = l.shard_base.saturating_add(layout::GENERATION);
    let generation = mem.read_u32(gen_at).map_err(|m| (m, gen_at, 4))?;
    let (status, slot, expired, hit) = match found {
        Found::Hit { slot, item, .. } => (
            wire::HIT,
            Some((slot % SLOTS) as u8),
            item.expired(l.now_ms),
            Some(item),
        ),
        Found::Miss => (wire::MISS, None, false, None),
        Found::Busy => (wire::BUSY, None, false, None),
    };
    Ok((
        FindReply {
            status,
            slot,
            expired,
            pair,
            generation,
            words,
            refs,
        },
        hit,
    ))
}

/// `kv_mfind`: [`KvFind`] for many keys of this server in one run, with
/// `kv_mget`'s software pipeline (a PUT of many keys pays one procedure run and
/// overlapped cache misses instead of one run per key). A key whose bucket is not
/// here answers `MOVED`; the client asks for it alone.
pub struct KvMfind;

impl KvMfind {
    pub const NAME: &'static str = wire::KV_MFIND;
}

impl Procedure for KvMfind {
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
        const P: &str = wire::KV_MFIND;
        let (mode, now_ms, keys) =
            wire::decode_mget(args).map_err(|e| SprocError::bad(P, e.to_string()))?;
        // MODE_ENTRY: each find followed by its item (a batched read-modify-write).
        let entries = mode == wire::MODE_ENTRY;
        let per_key = wire::FIND_LEN + if entries { 4 } else { 0 };
        if 4 + keys.len() * per_key > crate::procedure::MAX_OUTPUT {
            return Err(SprocError::bad(
                P,
                format!("{} keys: the reply would pass the output limit", keys.len()),
            ));
        }
        // `out` may already hold other replies: only this one counts.
        let start = out.len();
        out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
        SCRATCH.with(|s| {
            let mut buf = s.borrow_mut();
            pipelined(mem, &keys, |k| {
                let l = Lookup {
                    mode: wire::MODE_VALUE,
                    tag: k.tag,
                    now_ms,
                    shard_base: k.shard_base,
                    refs_addr: k.refs_addr,
                    key: k.key,
                };
                match find_reply(mem, k.bucket_addr, &l, &mut buf) {
                    Ok((r, _)) if !entries => out.extend_from_slice(&r.encode()),
                    Ok((r, hit)) => {
                        let item = hit.map(|c| wire::FoundItem {
                            flags: c.flags,
                            expires_ms: c.expires_ms,
                            value: &buf[c.value.0..c.value.1],
                        });
                        let len = item.map_or(0, |i| wire::FOUND_ITEM_HEAD + i.value.len());
                        if out.len() - start + per_key + len > crate::procedure::MAX_OUTPUT {
                            // No room left in this reply: the key is asked alone.
                            out.extend_from_slice(&wire::mfind_moved());
                            out.extend_from_slice(&0u32.to_le_bytes());
                        } else {
                            wire::mfind_entry_into(out, &r, item.as_ref());
                        }
                    }
                    Err((Miss::Budget, _, _)) => return Err(crate::builtin::budget(P, mem)),
                    Err(_) => {
                        out.extend_from_slice(&wire::mfind_moved());
                        if entries {
                            out.extend_from_slice(&0u32.to_le_bytes());
                        }
                    }
                }
                Ok(())
            })?;
            Ok(None)
        })
    }
}
