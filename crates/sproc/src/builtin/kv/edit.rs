//! `kv_medit`: values changed where their shards live — counters stepped, bytes
//! appended or overwritten — for many keys of one server in one run, their buckets
//! and items prefetched ahead as `kv_mget` does. Each key's edits apply in order to
//! its value (`wire::apply_edits`, the rules the client's own road follows too), and
//! the result is written once as a new item the slot swings to, keeping the key's
//! expiry. Anything out of the ordinary (a flagged value, one growing past the
//! caller's limit, a busy or full bucket, a hot key, carved-out heap) is answered
//! as met, unchanged, and the client takes its read-modify-write road for that key.

use farcache_kvformat::wire::{
    EDIT_REPLY_HEAD, Edit, EditReply, Edited, NO_ITEM, PutArgs, PutReply, PutStatus, apply_edits,
    decode_edits, decode_mput,
};

use super::put::{Decision, Held, Missed, check, each_key, swing, writes_only};
use super::*;
use crate::WriteMemory;

/// `kv_medit`, invoked at the first key's bucket.
pub struct KvMedit;

impl KvMedit {
    pub const NAME: &'static str = wire::KV_MEDIT;
}

impl Procedure for KvMedit {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, _mem: &dyn Memory, _addr: u64, _args: &[u8]) -> Result<Outcome, SprocError> {
        Err(writes_only(wire::KV_MEDIT))
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
        const P: &str = wire::KV_MEDIT;
        let keys = decode_mput(args).map_err(|e| SprocError::bad(P, e.to_string()))?;
        let mut edits = Vec::with_capacity(keys.len());
        let mut reply_len = 4;
        for (_, a) in &keys {
            // The value is the edits: the item must hold the key, at least.
            check(&PutArgs { value: &[], ..*a }).map_err(|why| SprocError::bad(P, why))?;
            let e = decode_edits(a.value).map_err(|e| SprocError::bad(P, e.to_string()))?;
            reply_len += 4 + EDIT_REPLY_HEAD + 9 * e.1.len();
            edits.push(e);
        }
        if reply_len > crate::procedure::MAX_OUTPUT {
            return Err(SprocError::TooLarge {
                proc: P,
                limit: crate::procedure::MAX_OUTPUT,
            });
        }
        out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
        each_key(mem, &keys, |i, bucket_addr, a, buf| {
            edit_or_refuse(mem, bucket_addr, a, &edits[i], buf).encode_into(out);
        });
        Ok(())
    }
}

/// [`edit`], with memory it may not write here answered as [`PutStatus::Refused`].
fn edit_or_refuse(
    mem: &dyn WriteMemory,
    addr: u64,
    a: &PutArgs<'_>,
    edits: &(u64, Vec<Edit<'_>>),
    buf: &mut Vec<u8>,
) -> EditReply {
    let mut held = Held::callers(a, true);
    let r = edit(mem, addr, a, edits, buf, &mut held);
    r.unwrap_or(EditReply {
        put: PutReply {
            status: PutStatus::Refused,
            old: 0,
            generation: a.generation,
            item: held.item,
        },
        word_class: held.class.0,
        spare: held.spare.unwrap_or(NO_ITEM),
        edits: Vec::new(),
    })
}

/// One key's edits, no value growing past their limit (a longer one is the
/// client's to write); `held` as for [`swing`].
fn edit(
    mem: &dyn WriteMemory,
    addr: u64,
    a: &PutArgs<'_>,
    (limit, edits): &(u64, Vec<Edit<'_>>),
    buf: &mut Vec<u8>,
    held: &mut Held,
) -> Result<EditReply, Missed> {
    let mut done = Vec::new();
    let put = swing(mem, addr, a, buf, held, |_, current| {
        done.clear();
        // A coded value (or any flagged item) is the client's to handle.
        if current.is_some_and(|(_, _, flags)| flags != 0) {
            return Decision::Answer(PutStatus::Refused);
        }
        let expires_ms = current.map_or(item::NO_EXPIRY, |(_, e, _)| e);
        let mut value = current.map(|(v, _, _)| v.to_vec());
        let (results, changed) = apply_edits(&mut value, edits, *limit);
        if results.contains(&Edited::TooLarge) {
            return Decision::Answer(PutStatus::Refused);
        }
        done = results;
        let value = value.unwrap_or_default();
        let need = item::len(a.key.len(), value.len());
        match (changed, class::for_len(need)) {
            (false, _) => Decision::Answer(PutStatus::Skipped),
            (true, Some(c)) => Decision::Write {
                value: std::borrow::Cow::Owned(value),
                expires_ms,
                flags: 0,
                // Fresh items take the class offered when it fits, so the items
                // this frees are the size the client offers next time.
                class: Some(match class::size(c).unwrap_or(u32::MAX) {
                    s if s > a.size => (c, s),
                    _ => (a.word_class, a.size),
                }),
            },
            // Past every class: the client's to write.
            (true, None) => Decision::Answer(PutStatus::Refused),
        }
    })?;
    // Edits count only when written, or when nothing was to be written.
    if !matches!(put.status, PutStatus::Written | PutStatus::Skipped) {
        done.clear();
    }
    Ok(EditReply {
        put,
        word_class: held.class.0,
        spare: held.spare.unwrap_or(NO_ITEM),
        edits: done,
    })
}
