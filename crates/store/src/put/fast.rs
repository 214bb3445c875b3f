//! The one-round-trip put: each key's `kv_put` runs where its shard lives and finds
//! the slot, takes an item (one this handle kept, or fresh heap), writes it and swings
//! the slot in one run. A key it cannot finish there (busy, full or locked bucket,
//! hot key, carved-out heap, a shard reset, any failure) goes on by the two-round road
//! of [`Store::attempt`](super), with the item the run took, if any.

use std::sync::atomic::Ordering;

use farcache_client::OpError;
use farcache_kvformat::SlotWord;
use farcache_kvformat::wire::{self, NO_ITEM, PutArgs, PutGuard, PutReply, PutStatus};

use super::{FindAt, Guard, Job, PutResult};
use crate::options::Condition;
use crate::store::{Store, now_ms};

impl Guard {
    /// The guard as `kv_put` (and the two-round road) checks it.
    pub(super) fn wire(self) -> PutGuard {
        match self {
            Guard::Cond(Condition::Always) => PutGuard::Always,
            Guard::Cond(Condition::IfAbsent) => PutGuard::IfAbsent,
            Guard::Cond(Condition::IfPresent) => PutGuard::IfPresent,
            Guard::Slot(w) => PutGuard::Slot(w),
        }
    }
}

impl Store {
    /// Whether puts try `kv_put` first.
    pub(super) fn one_round(&self) -> bool {
        self.inner.one_round_puts.load(Ordering::Relaxed)
    }

    /// Puts by `kv_put` (one round trip, the default) or only by finding the slot
    /// first and swinging it in a second round trip (to compare the two).
    pub fn set_one_round_puts(&self, on: bool) {
        self.inner.one_round_puts.store(on, Ordering::Relaxed);
    }

    /// A first attempt at `todo`'s jobs, each by `kv_put`; returns those it
    /// finished and leaves the rest in `retry`.
    pub(super) fn attempt_fast(
        &self,
        jobs: &mut [(usize, Job<'_>)],
        todo: &[usize],
        retry: &mut Vec<usize>,
    ) -> Vec<(usize, PutResult)> {
        let lay = self.inner.layout;
        let now = now_ms();
        let mut b = self.inner.cache.batch().with_capacity(todo.len());
        let mut args = Vec::new();
        let mut sent = Vec::with_capacity(todo.len());
        {
            let mut free = self.inner.free.lock();
            for &j in todo {
                let job = &mut jobs[j].1;
                let (shard, bucket) = (job.h.shard, job.h.bucket);
                // A read-modify-write's own find decides its first attempt.
                if matches!(job.find, FindAt::Known(_)) {
                    retry.push(j);
                    continue;
                }
                if job.item.is_none() {
                    job.item = free.take(shard, job.class);
                    job.written = false;
                }
                if job.item.is_none() && free.heap_exhausted(shard) {
                    // Free lists and eviction are this side's.
                    retry.push(j);
                    continue;
                }
                args.clear();
                PutArgs {
                    guard: job.guard.wire(),
                    tag: job.h.tag,
                    word_class: job.word_class(),
                    flags: job.flags,
                    now_ms: now,
                    shard_base: lay.shard_base(shard),
                    refs_addr: lay.refs_addr(shard, bucket),
                    expires_ms: job.expires,
                    item: job.item.unwrap_or(NO_ITEM),
                    generation: free.generation(shard),
                    size: job.size,
                    heap_start: lay.heap_start(),
                    shard_size: lay.0.shard_size,
                    key: job.key,
                    value: job.value,
                }
                .encode_into(&mut args);
                let op = b.execute(wire::KV_PUT, lay.bucket_addr(shard, bucket), &args);
                sent.push((j, op));
            }
        }
        if sent.is_empty() {
            return Vec::new();
        }
        let r = b.run();
        let mut done = Vec::new();
        for (j, op) in sent {
            let job = &mut jobs[j].1;
            let reply = r
                .bytes(op)
                .map_err(|e| e.to_string())
                .and_then(|raw| PutReply::decode(&raw).map_err(|e| e.to_string()));
            let reply = match reply {
                Ok(p) => p,
                Err(why) => {
                    if matches!(
                        r.error(op),
                        Some(OpError::Status(farcache_client::Status::NoSuchProc))
                    ) {
                        // A server older than `kv_put`: the two-round road from now on.
                        self.set_one_round_puts(false);
                    }
                    tracing::trace!(error = %why, "kv_put: the key goes the two-round road");
                    retry.push(j);
                    continue;
                }
            };
            let (shard, generation) = (job.h.shard, reply.generation);
            let reset = self.inner.free.lock().sync(shard, generation);
            job.generation = Some(generation);
            job.written = false;
            job.item = (reply.item != NO_ITEM).then_some(reply.item);
            match reply.status {
                PutStatus::Written => {
                    // The item is the key's now.
                    job.item = None;
                    if SlotWord::is_item(reply.old) {
                        self.retire(shard, SlotWord(reply.old), generation);
                    }
                    done.push((j, Ok(true)));
                }
                PutStatus::Skipped => done.push((j, Ok(false))),
                PutStatus::Stale => {
                    // `sync` dropped this handle's kept items of the shard's past.
                    debug_assert!(reset || job.item.is_none());
                    job.item = None;
                    retry.push(j);
                }
                PutStatus::NoHeap => {
                    self.inner.free.lock().mark_exhausted(shard);
                    retry.push(j);
                }
                PutStatus::Busy | PutStatus::Full | PutStatus::Hot => retry.push(j),
            }
        }
        done
    }
}
