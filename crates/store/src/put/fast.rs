//! The one-round-trip put: each key's `kv_put` runs where its shard lives and finds
//! the slot, takes an item (one this handle kept, or fresh heap), writes it and swings
//! the slot in one run. A key it cannot finish there (busy, full or locked bucket,
//! hot key, carved-out heap, a shard reset, any failure) goes on by the two-round road
//! of [`Store::attempt`](super), with the item the run took, if any.

use std::sync::atomic::Ordering;

use farcache_kvformat::SlotWord;
use farcache_kvformat::wire::{self, NO_ITEM, PutArgs, PutGuard, PutReply, PutStatus};

use super::{FindAt, Guard, Job, PutResult};
use crate::options::Condition;
use crate::runs::{KeyRun, add_runs, run_replies};
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
    pub(crate) fn one_round(&self) -> bool {
        self.inner.one_round_puts.load(Ordering::Relaxed)
    }

    /// Puts by `kv_put`/`kv_mput` and edits by `kv_medit` (one round trip,
    /// the default), or only by finding the slot first and swinging it in a second
    /// round trip (to compare the two).
    pub fn set_one_round_puts(&self, on: bool) {
        self.inner.one_round_puts.store(on, Ordering::Relaxed);
    }

    /// A first attempt at `todo`'s jobs: one `kv_mput` per server for its keys (a key
    /// alone on its server: `kv_put`); returns those it finished and leaves the rest
    /// in `retry`.
    pub(super) fn attempt_fast(
        &self,
        jobs: &mut [(usize, Job<'_>)],
        todo: &[usize],
        retry: &mut Vec<usize>,
    ) -> Vec<(usize, PutResult)> {
        let lay = self.inner.layout;
        let now = now_ms();
        let info = self.inner.cache.info();
        // Each job's arguments, encoded once (a lone key's are its op's), and the
        // job they are for.
        let mut encoded: Vec<KeyRun> = Vec::with_capacity(todo.len());
        let mut job_of: Vec<usize> = Vec::with_capacity(todo.len());
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
                let mut args = Vec::with_capacity(wire::PUT_HEAD + job.key.len() + job.value.len());
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
                encoded.push(KeyRun {
                    server: self.server_of(&info, shard),
                    bucket_addr: lay.bucket_addr(shard, bucket),
                    args,
                });
                job_of.push(j);
            }
        }
        if encoded.is_empty() {
            return Vec::new();
        }
        let mut b = self.inner.cache.batch().with_capacity(encoded.len());
        // Per op: the jobs it carries, in order.
        let ops: Vec<(usize, Vec<usize>)> =
            add_runs(&mut b, &encoded, wire::KV_MPUT, Some(wire::KV_PUT))
                .into_iter()
                .map(|(op, keys)| (op, keys.into_iter().map(|e| job_of[e]).collect()))
                .collect();
        let r = b.run();
        let mut done = Vec::new();
        for (op, carried) in ops {
            let single = carried.len() == 1;
            let replies = match run_replies(&r, op, carried.len(), |raw| match single {
                true => PutReply::decode(raw).map(|p| vec![p]),
                false => wire::decode_mput_reply(raw),
            }) {
                Ok(v) => v,
                Err(f) => {
                    if f.never_ran {
                        // A server older than `kv_put`: the two-round road from now on.
                        self.set_one_round_puts(false);
                    }
                    tracing::trace!(error = %f.why, "kv_mput: its keys go the two-round road");
                    retry.extend_from_slice(&carried);
                    continue;
                }
            };
            for (j, reply) in carried.into_iter().zip(replies) {
                self.settle_fast(&mut jobs[j].1, j, reply, &mut done, retry);
            }
        }
        done
    }

    /// What one key's `kv_put` outcome leaves to do.
    fn settle_fast(
        &self,
        job: &mut Job<'_>,
        j: usize,
        reply: PutReply,
        done: &mut Vec<(usize, PutResult)>,
        retry: &mut Vec<usize>,
    ) {
        let (shard, generation) = (job.h.shard, reply.generation);
        self.inner.free.lock().sync(shard, generation);
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
                job.item = None;
                retry.push(j);
            }
            PutStatus::NoHeap => {
                self.inner.free.lock().mark_exhausted(shard);
                retry.push(j);
            }
            PutStatus::Busy | PutStatus::Full | PutStatus::Hot | PutStatus::Refused => {
                retry.push(j)
            }
        }
    }
}
