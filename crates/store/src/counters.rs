//! Counters stepped where their shards live (Redis `INCR`, `DECRBY` …): each key's
//! `kv_incr` reads its value, applies the steps in order and writes the result in one
//! run, one round trip for a batch of keys. A key it cannot finish there (busy, full
//! or locked bucket, hot key, a coded value, carved-out heap, a reset shard, an older
//! server) takes a read-modify-write ([`Store::update_many`]) with the same rules.

use farcache_kvformat::SlotWord;
use farcache_kvformat::item;
use farcache_kvformat::wire::{
    self, COUNTER_DIGITS, IncrReply, NO_ITEM, PutArgs, PutGuard, PutStatus,
};

use crate::store::{Store, now_ms};
use crate::update::Update;
use crate::{Result, StoreError};

/// What a counter's steps did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stepped {
    /// The key holds something other than a decimal integer: nothing changed.
    NotInteger,
    /// Each step's value after it, or `None` where it would have overflowed (that
    /// step was skipped). The key was written if any step applied.
    Steps(Vec<Option<i64>>),
}

impl Store {
    /// Applies `steps[i]` to the integer under `keys[i]`, in order: an absent or
    /// expired key counts as 0 (and gets no expiry), a present one keeps its expiry.
    pub fn step_counters<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        steps: &[Vec<i64>],
    ) -> Vec<Result<Stepped>> {
        let mut out: Vec<Option<Result<Stepped>>> = keys.iter().map(|_| None).collect();
        let mut slow = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            match Self::check_key(k.as_ref()) {
                Err(e) => out[i] = Some(Err(e)),
                Ok(()) if steps.get(i).is_none_or(Vec::is_empty) => {
                    out[i] = Some(Ok(Stepped::Steps(Vec::new())))
                }
                Ok(()) => slow.push(i),
            }
        }
        if self.one_round() && !slow.is_empty() {
            slow = self.step_where_they_live(keys, steps, &slow, &mut out);
        }
        if !slow.is_empty() {
            self.step_by_rmw(keys, steps, &slow, &mut out);
        }
        out.into_iter()
            .map(|o| {
                o.unwrap_or(Err(StoreError::Reply {
                    proc: wire::KV_INCR,
                    reason: "no outcome".into(),
                }))
            })
            .collect()
    }

    /// `kv_incr` of each of `todo`'s keys in one batch; returns the keys left over.
    fn step_where_they_live<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        steps: &[Vec<i64>],
        todo: &[usize],
        out: &mut [Option<Result<Stepped>>],
    ) -> Vec<usize> {
        let lay = self.inner.layout;
        let now = now_ms();
        let mut left = Vec::new();
        let mut b = self.inner.cache.batch().with_capacity(todo.len());
        let mut sent = Vec::with_capacity(todo.len());
        let mut args = Vec::new();
        let mut deltas = Vec::new();
        {
            let mut free = self.inner.free.lock();
            for &i in todo {
                let key = keys[i].as_ref();
                let h = self.locate(key);
                let Ok((class, size)) = self.item_class(key, &[b'0'; COUNTER_DIGITS]) else {
                    left.push(i);
                    continue;
                };
                let item = free.take(h.shard, class);
                if item.is_none() && free.heap_exhausted(h.shard) {
                    left.push(i);
                    continue;
                }
                deltas.clear();
                for d in &steps[i] {
                    deltas.extend_from_slice(&d.to_le_bytes());
                }
                args.clear();
                PutArgs {
                    guard: PutGuard::Always,
                    tag: h.tag,
                    word_class: class,
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
                    value: &deltas,
                }
                .encode_into(&mut args);
                let op = b.execute(wire::KV_INCR, lay.bucket_addr(h.shard, h.bucket), &args);
                sent.push((i, op, h.shard, class));
            }
        }
        if sent.is_empty() {
            return left;
        }
        let r = b.run();
        for (i, op, shard, class) in sent {
            let reply = match r.bytes(op).map_err(StoreError::from).and_then(|raw| {
                IncrReply::decode(&raw).map_err(|e| StoreError::Reply {
                    proc: wire::KV_INCR,
                    reason: e.to_string(),
                })
            }) {
                Ok(p) => p,
                Err(e) => {
                    if matches!(
                        e.op(),
                        Some(farcache_client::OpError::Status(
                            farcache_client::Status::NoSuchProc
                        ))
                    ) {
                        self.set_one_round_puts(false);
                    }
                    left.push(i);
                    continue;
                }
            };
            let p = reply.put;
            let reset = self.inner.free.lock().sync(shard, p.generation);
            // An item the run took and did not publish is kept for reuse.
            let unused = |s: &Self| {
                if p.item != NO_ITEM && !reset {
                    let _ = s.free_item(shard, class, p.item, p.generation);
                }
            };
            match p.status {
                PutStatus::Written => {
                    if SlotWord::is_item(p.old) {
                        self.retire(shard, SlotWord(p.old), p.generation);
                    }
                    out[i] = Some(Ok(Stepped::Steps(reply.steps)));
                }
                PutStatus::Skipped => {
                    unused(self);
                    out[i] = Some(Ok(match reply.not_integer {
                        true => Stepped::NotInteger,
                        false => Stepped::Steps(reply.steps),
                    }));
                }
                PutStatus::NoHeap => {
                    self.inner.free.lock().mark_exhausted(shard);
                    left.push(i);
                }
                PutStatus::Stale => left.push(i),
                PutStatus::Busy | PutStatus::Full | PutStatus::Hot | PutStatus::Refused => {
                    unused(self);
                    left.push(i);
                }
            }
        }
        left
    }

    /// The same steps by read-modify-write.
    fn step_by_rmw<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        steps: &[Vec<i64>],
        todo: &[usize],
        out: &mut [Option<Result<Stepped>>],
    ) {
        let ks: Vec<&[u8]> = todo.iter().map(|&i| keys[i].as_ref()).collect();
        let mut got: Vec<Option<Stepped>> = vec![None; todo.len()];
        let results = self.update_many(&ks, |k, entry| {
            let (mut cur, expires_ms) = match entry {
                None => (0, None),
                Some(e) => match std::str::from_utf8(&e.value)
                    .ok()
                    .and_then(|t| t.parse::<i64>().ok())
                {
                    // An expiry that passed while this ran stays just ahead.
                    Some(n) => (n, e.expires_ms.map(|at| at.max(now_ms() + 1))),
                    None => {
                        got[k] = Some(Stepped::NotInteger);
                        return Update::Keep;
                    }
                },
            };
            let (last, applied) = wire::counter_steps(cur, &steps[todo[k]]);
            cur = last;
            let changed = applied.iter().any(Option::is_some);
            got[k] = Some(Stepped::Steps(applied));
            match changed {
                true => Update::Put {
                    value: cur.to_string().into_bytes(),
                    expires_ms,
                },
                false => Update::Keep,
            }
        });
        for (k, r) in results.into_iter().enumerate() {
            out[todo[k]] = Some(r.and_then(|_| {
                got[k].take().ok_or(StoreError::Reply {
                    proc: wire::KV_INCR,
                    reason: "the update decided nothing".into(),
                })
            }));
        }
    }
}
