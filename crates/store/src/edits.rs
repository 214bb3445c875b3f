//! Values changed where their shards live (Redis `INCR`, `DECRBY`, `APPEND`,
//! `SETRANGE` …): one `kv_medit` per server reads each of its keys, applies the
//! key's edits in order and writes the result, in one round trip for a batch. A key
//! it cannot finish there (busy, full or locked bucket, hot key, a coded value or one
//! growing past what a small item holds, carved-out heap, a reset shard, an older
//! server) takes a read-modify-write ([`Store::update_many`]) with the same rules
//! ([`wire::apply_edits`]).

use farcache_kvformat::wire::{
    self, COUNTER_DIGITS, Edit, EditReply, Edited, NO_ITEM, PutArgs, PutGuard, PutStatus,
};
use farcache_kvformat::{SlotWord, class, item};

use crate::large::MAX_VALUE;
use crate::runs::{KeyRun, add_runs, run_replies};
use crate::store::{Store, now_ms};
use crate::update::Update;
use crate::{Result, StoreError};

/// Keys whose last length a handle remembers, at most (then it forgets them all).
const EDIT_LENGTHS: usize = 4096;

/// The item offered with a key's edits.
#[derive(Clone, Copy)]
struct Offered {
    item: Option<u64>,
    word_class: u8,
    generation: u32,
}

/// Per key: its outcome, once known.
type Outcomes = Vec<Option<Result<Vec<Edited>>>>;

impl Store {
    /// Applies `edits[i]` to the value under `keys[i]`, in order, atomically per
    /// key (see [`Edit`] for what each does; a value never grows past
    /// [`MAX_VALUE`]). A key's expiry is kept; a key created by its edits gets none.
    /// Per key, what each of its edits did.
    pub fn edit_values<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        edits: &[Vec<Edit<'_>>],
    ) -> Vec<Result<Vec<Edited>>> {
        let mut out: Outcomes = keys.iter().map(|_| None).collect();
        let mut slow = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            match Self::check_key(k.as_ref()) {
                Err(e) => out[i] = Some(Err(e)),
                Ok(()) if edits.get(i).is_none_or(Vec::is_empty) => out[i] = Some(Ok(Vec::new())),
                Ok(()) => slow.push(i),
            }
        }
        if self.one_round() && !slow.is_empty() {
            slow = self.edit_where_they_live(keys, edits, &slow, &mut out);
        }
        if !slow.is_empty() {
            self.edit_by_rmw(keys, edits, &slow, &mut out);
        }
        out.into_iter()
            .map(|o| {
                o.unwrap_or(Err(StoreError::Reply {
                    proc: wire::KV_MEDIT,
                    reason: "no outcome".into(),
                }))
            })
            .collect()
    }

    /// The class (word class, bytes) of an item offered for `key`'s edits: one
    /// that holds any integer for a counter's; for others, one that holds the
    /// value this handle last saw under the key (or none) grown by the edits. A
    /// guess too small costs a fresh item where the key lives, no round trip.
    fn edit_class(&self, key: &[u8], edits: &[Edit<'_>]) -> Option<(u8, u32)> {
        if edits.iter().all(|e| matches!(e, Edit::Step(_))) {
            return self.item_class(key, &[b'0'; COUNTER_DIGITS]).ok();
        }
        let mut len = self
            .inner
            .edit_lengths
            .lock()
            .get(key)
            .copied()
            .unwrap_or(0);
        for e in edits {
            len = match *e {
                Edit::Step(_) => len.max(COUNTER_DIGITS as u64),
                Edit::Append(b) => len.saturating_add(b.len() as u64),
                Edit::SetRange(_, []) => len,
                Edit::SetRange(off, b) => len.max(off.saturating_add(b.len() as u64)),
            };
        }
        let len = len.min(self.max_small_value());
        let c = class::for_len(item::len(key.len(), usize::try_from(len).ok()?))?;
        Some((c, class::size(c)?))
    }

    /// Notes the length `key`'s value had after its edits, for the next guess.
    fn note_length(&self, key: &[u8], done: &[Edited]) {
        let Some(len) = done.iter().rev().find_map(|d| match d {
            Edited::Len(n) => Some(*n),
            _ => None,
        }) else {
            return;
        };
        let mut m = self.inner.edit_lengths.lock();
        if m.len() >= EDIT_LENGTHS && !m.contains_key(key) {
            m.clear();
        }
        m.insert(key.to_vec(), len);
    }

    /// One `kv_medit` per server (in runs of at most `MGET_KEYS` keys) for `todo`'s
    /// keys; returns the keys left over.
    fn edit_where_they_live<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        edits: &[Vec<Edit<'_>>],
        todo: &[usize],
        out: &mut Outcomes,
    ) -> Vec<usize> {
        let lay = self.inner.layout;
        let now = now_ms();
        let info = self.inner.cache.info();
        let mut left = Vec::new();
        // Per key sent: its arguments, and its index, shard and the item offered.
        let mut sent: Vec<KeyRun> = Vec::with_capacity(todo.len());
        let mut sent_keys: Vec<(usize, u32, Offered)> = Vec::with_capacity(todo.len());
        let mut program = Vec::new();
        {
            let mut free = self.inner.free.lock();
            for &i in todo {
                let key = keys[i].as_ref();
                let h = self.locate(key);
                let Some((word_class, size)) = self.edit_class(key, &edits[i]) else {
                    left.push(i);
                    continue;
                };
                let item = free.take(h.shard, word_class);
                if item.is_none() && free.heap_exhausted(h.shard) {
                    // Free lists and eviction are this side's.
                    left.push(i);
                    continue;
                }
                program.clear();
                wire::encode_edits(&mut program, self.max_small_value(), &edits[i]);
                let mut args = Vec::with_capacity(wire::PUT_HEAD + key.len() + program.len());
                PutArgs {
                    guard: PutGuard::Always,
                    tag: h.tag,
                    word_class,
                    flags: 0,
                    now_ms: now,
                    shard_base: lay.shard_base(h.shard),
                    refs_addr: lay.refs_addr(h.shard, h.bucket),
                    expires_ms: item::NO_EXPIRY,
                    item: item.unwrap_or(NO_ITEM),
                    generation: free.generation(h.shard),
                    size,
                    heap_start: lay.heap_start(),
                    shard_size: lay.0.shard_size,
                    key,
                    value: &program,
                }
                .encode_into(&mut args);
                sent.push(KeyRun {
                    server: self.server_of(&info, h.shard),
                    bucket_addr: lay.bucket_addr(h.shard, h.bucket),
                    args,
                });
                let offered = Offered {
                    item,
                    word_class,
                    generation: free.generation(h.shard),
                };
                sent_keys.push((i, h.shard, offered));
            }
        }
        if sent.is_empty() {
            return left;
        }
        let mut b = self.inner.cache.batch();
        let ops = add_runs(&mut b, &sent, wire::KV_MEDIT, None);
        let r = b.run();
        for (op, carried) in ops {
            let replies = match run_replies(&r, op, carried.len(), wire::decode_medit_reply) {
                Ok(v) => v,
                Err(f) => {
                    let never_ran = f.never_ran;
                    if never_ran {
                        // A server older than `kv_medit`: the two-round road from now on.
                        self.set_one_round_puts(false);
                    }
                    tracing::trace!(error = %f.why, "kv_medit: its keys go the two-round road");
                    for &e in &carried {
                        let (i, shard, o) = sent_keys[e];
                        // A run that may have published its items keeps them (a
                        // slot may name them); one that never ran hands them back.
                        if let (true, Some(item)) = (never_ran, o.item) {
                            let _ = self.free_item(shard, o.word_class, item, o.generation);
                        }
                        left.push(i);
                    }
                    continue;
                }
            };
            for (&e, reply) in carried.iter().zip(replies) {
                let (i, shard, o) = sent_keys[e];
                match self.settle_edit(shard, o.word_class, reply) {
                    Some(done) => {
                        self.note_length(keys[i].as_ref(), &done);
                        out[i] = Some(Ok(done));
                    }
                    None => left.push(i),
                }
            }
        }
        left
    }

    /// What one key's `kv_medit` outcome did, or `None` if the key is left over;
    /// `offered` is the word class of the item offered with it.
    fn settle_edit(&self, shard: u32, offered: u8, reply: EditReply) -> Option<Vec<Edited>> {
        let p = reply.put;
        let reset = self.inner.free.lock().sync(shard, p.generation);
        if reply.spare != NO_ITEM && !reset {
            // The item offered was too small: kept for reuse.
            let _ = self.free_item(shard, offered, reply.spare, p.generation);
        }
        // An item the run took and did not publish is kept for reuse.
        let unused = || {
            if p.item != NO_ITEM && !reset {
                let _ = self.free_item(shard, reply.word_class, p.item, p.generation);
            }
        };
        match p.status {
            PutStatus::Written => {
                if SlotWord::is_item(p.old) {
                    self.retire(shard, SlotWord(p.old), p.generation);
                }
                Some(reply.edits)
            }
            PutStatus::Skipped => {
                unused();
                Some(reply.edits)
            }
            PutStatus::NoHeap => {
                self.inner.free.lock().mark_exhausted(shard);
                None
            }
            PutStatus::Stale => None,
            PutStatus::Busy | PutStatus::Full | PutStatus::Hot | PutStatus::Refused => {
                unused();
                None
            }
        }
    }

    /// The same edits by read-modify-write.
    fn edit_by_rmw<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        edits: &[Vec<Edit<'_>>],
        todo: &[usize],
        out: &mut Outcomes,
    ) {
        let ks: Vec<&[u8]> = todo.iter().map(|&i| keys[i].as_ref()).collect();
        let mut lengths: Vec<Option<u64>> = vec![None; todo.len()];
        let mut got: Vec<Option<Vec<Edited>>> = vec![None; todo.len()];
        let results = self.update_many(&ks, |k, entry| {
            let mut value = entry.map(|e| e.value.to_vec());
            let (done, changed) = wire::apply_edits(&mut value, &edits[todo[k]], MAX_VALUE);
            lengths[k] = value.as_ref().map(|v| v.len() as u64);
            got[k] = Some(done);
            match (changed, value) {
                (true, Some(value)) => Update::Put {
                    value,
                    // An expiry that passed while this ran stays just ahead.
                    expires_ms: entry
                        .and_then(|e| e.expires_ms)
                        .map(|at| at.max(now_ms() + 1)),
                },
                _ => Update::Keep,
            }
        });
        for (k, r) in results.into_iter().enumerate() {
            if let (Ok(_), Some(len)) = (&r, lengths[k]) {
                self.note_length(ks[k], &[Edited::Len(len)]);
            }
            out[todo[k]] = Some(r.and_then(|_| {
                got[k].take().ok_or(StoreError::Reply {
                    proc: wire::KV_MEDIT,
                    reason: "the update decided nothing".into(),
                })
            }));
        }
    }
}
