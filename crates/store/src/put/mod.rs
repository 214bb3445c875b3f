//! The write path. A put of many keys runs in two batched round trips per attempt:
//! (1) `kv_find` of every key, with a fetch-and-add on the bump pointer for keys that
//! need fresh heap; (2) every new item written and its slot swung by compare-and-swap
//! (item first: ops to one server run in order, so no reader sees the slot before
//! the item). A key whose slot changed in between tries again. A key whose bucket has
//! no empty slot left takes the bucket lock ([`Store::put_locked`]), so that two puts
//! of one key can never land in two slots.

use std::time::Duration;

use farcache_kvformat::hash::KeyHash;
use farcache_kvformat::layout::SLOTS;
use farcache_kvformat::slot::{EMPTY, LockWord, TOMB};
use farcache_kvformat::wire::{self, FindReply};
use farcache_kvformat::{Layout, SlotWord, item};

use crate::free::{bump_addr, carved};
use crate::options::{Condition, PutOptions};
use crate::store::{MAX_ATTEMPTS, Probe, Store, TRANSIENT_BUDGET, now_ms};
use crate::{Result, StoreError};

mod fast;
mod locked;

/// How long a bucket lock holds before others may break it.
/// Longer than a client's op timeout, so a holder delayed by a failing server
/// still holds its lease when its last op lands.
const LEASE_MS: u64 = 15_000;

struct Job<'a> {
    key: &'a [u8],
    value: &'a [u8],
    flags: u8,
    expires: u64,
    guard: Guard,
    h: KeyHash,
    class: u8,
    size: u32,
    /// The new item's offset in the shard, once allocated.
    item: Option<u64>,
    written: bool,
    /// Ops of the current attempt.
    find: FindAt,
    /// Found `MOVED` by a `kv_mfind`: asked for with `kv_find` from now on.
    alone: bool,
    bump_i: Option<usize>,
    cas: Option<(usize, u64, u64)>,
    write_i: Option<usize>,
    /// The shard generation the last find saw.
    generation: Option<u32>,
    /// `item` came from this handle's cache in the current attempt.
    from_cache: bool,
}

/// What a put must find in the key's slot to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guard {
    /// The user's condition (always, NX, XX).
    Cond(Condition),
    /// Only while the key's slot still names this item (its hot flag aside): a
    /// repair's rewrite of the version it decoded never replaces a newer put.
    Slot(u64),
}

impl Guard {
    /// Whether a put may go ahead, given the key's `kv_find` reply.
    fn allows(self, f: &FindReply) -> bool {
        self.wire().allows(f)
    }
}

/// A put's absolute expiry and its guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PutSpec {
    /// Milliseconds since the epoch, or `item::NO_EXPIRY`.
    pub expires: u64,
    pub guard: Guard,
}

impl From<PutOptions> for PutSpec {
    fn from(opts: PutOptions) -> Self {
        let expires = match (opts.expires_at_ms, opts.ttl) {
            // 0 means never; a time that far back has long passed anyway.
            (Some(at), _) => at.max(1),
            (None, Some(t)) => now_ms().saturating_add(t.as_millis().max(1) as u64),
            (None, None) => item::NO_EXPIRY,
        };
        PutSpec {
            expires,
            guard: Guard::Cond(opts.condition),
        }
    }
}

/// Where a job's `kv_find` answer is in a round's results.
#[derive(Debug, Clone, Copy)]
enum FindAt {
    /// Its own `kv_find`, op `i`.
    One(usize),
    /// Entry `pos` of the `kv_mfind` at op `i`.
    Many(usize, usize),
    /// Found before the put (a read-modify-write's own find): the first attempt
    /// uses it without a find of its own, so the put takes one round trip.
    Known(FindReply),
}

/// An item to put: key, value and item flags (`item::FLAG_*`).
pub(crate) struct Entry<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u8,
}

impl Job<'_> {
    /// The class byte of this job's slot word (with the manifest flag).
    fn word_class(&self) -> u8 {
        if self.flags & item::FLAG_MANIFEST != 0 {
            self.class | SlotWord::MANIFEST
        } else {
            self.class
        }
    }
}

/// What one key's put ended with: `Ok(true)` written, `Ok(false)` skipped by its
/// condition.
pub type PutResult = Result<bool>;

/// `new` with the hot flag of `old` (a hot key stays hot across writes).
fn keep_hot(old: u64, new: u64) -> u64 {
    if SlotWord::is_item(old) && SlotWord(old).is_hot() {
        SlotWord::with_hot(new)
    } else {
        new
    }
}

/// A find reply's decoding, as the store's error.
fn decode_find<T>(
    proc: &'static str,
    r: std::result::Result<T, farcache_kvformat::FormatError>,
) -> Result<T> {
    r.map_err(|e| StoreError::Reply {
        proc,
        reason: e.to_string(),
    })
}

/// Forgets `job`'s item after an ambiguous swap (it may be referenced).
fn abandon(job: &mut Job<'_>) {
    job.item = None;
    job.written = false;
}

/// Sleeps a random time up to `2^attempt` µs, at most 2 ms.
pub(crate) fn backoff(attempt: u32) {
    let cap = 1u64 << attempt.min(11);
    // Cheap randomness: the clock's low bits differ between racing threads.
    let r = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::from(d.subsec_nanos()))
        .unwrap_or(0);
    std::thread::sleep(Duration::from_micros(1 + r % cap));
}

impl Store {
    /// Stores `value` under `key`, replacing any previous value.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.put_with(key, value, PutOptions::default()).map(|_| ())
    }

    /// Stores `value` under `key` with a TTL and/or a condition; `Ok(false)` when the
    /// condition did not hold.
    pub fn put_with(&self, key: &[u8], value: &[u8], opts: PutOptions) -> Result<bool> {
        self.mput_with(&[(key, value)], opts)
            .pop()
            .unwrap_or(Ok(false))
    }

    /// Stores many pairs in batches; one result per pair.
    pub fn mput<K: AsRef<[u8]>, V: AsRef<[u8]>>(&self, pairs: &[(K, V)]) -> Vec<Result<()>> {
        self.mput_with(pairs, PutOptions::default())
            .into_iter()
            .map(|r| r.map(|_| ()))
            .collect()
    }

    /// [`Store::mput`] with options applying to every pair. Values above the
    /// store's small-value limit are erasure coded ([`Store::put_large`]).
    pub fn mput_with<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        pairs: &[(K, V)],
        opts: PutOptions,
    ) -> Vec<PutResult> {
        let mut out: Vec<Option<PutResult>> = (0..pairs.len()).map(|_| None).collect();
        let mut entries = Vec::with_capacity(pairs.len());
        let mut at = Vec::with_capacity(pairs.len());
        let small = self.max_small_value();
        for (i, (k, v)) in pairs.iter().enumerate() {
            let (k, v) = (k.as_ref(), v.as_ref());
            if let Err(e) = Self::check_key(k) {
                out[i] = Some(Err(e));
            } else if v.len() as u64 > small {
                out[i] = Some(self.put_large_spec(k, v, opts.into(), 0));
            } else {
                entries.push(Entry {
                    key: k,
                    value: v,
                    flags: 0,
                });
                at.push(i);
            }
        }
        for (r, i) in self.put_entries(&entries, opts.into()).into_iter().zip(at) {
            out[i] = Some(r);
        }
        out.into_iter().map(|o| o.unwrap_or(Ok(false))).collect()
    }

    /// Puts items whose keys were checked by the caller (the store's own placed keys
    /// included); one result per entry.
    pub(crate) fn put_entries(&self, entries: &[Entry<'_>], spec: PutSpec) -> Vec<PutResult> {
        self.put_found_entries(entries.iter().map(|e| (e, spec, None)))
    }

    /// [`Store::put_entries`], each entry with its own expiry and guard, and maybe
    /// the `kv_find` reply it was decided on (see [`FindAt::Known`]).
    pub(crate) fn put_found_entries<'e, 'k: 'e>(
        &self,
        entries: impl ExactSizeIterator<Item = (&'e Entry<'k>, PutSpec, Option<FindReply>)>,
    ) -> Vec<PutResult> {
        let mut out: Vec<Option<PutResult>> = (0..entries.len()).map(|_| None).collect();
        let mut jobs = Vec::with_capacity(entries.len());
        let mut todo = Vec::with_capacity(entries.len());
        for (i, (e, spec, found)) in entries.enumerate() {
            match self.item_class(e.key, e.value) {
                Ok((class, size)) => {
                    todo.push(jobs.len());
                    jobs.push((
                        i,
                        Job {
                            key: e.key,
                            value: e.value,
                            flags: e.flags,
                            expires: spec.expires,
                            guard: spec.guard,
                            h: self.locate(e.key),
                            class,
                            size,
                            item: None,
                            written: false,
                            find: found.map_or(FindAt::One(0), FindAt::Known),
                            alone: false,
                            bump_i: None,
                            cas: None,
                            write_i: None,
                            generation: None,
                            from_cache: false,
                        },
                    ));
                }
                Err(e) => out[i] = Some(Err(e)),
            }
        }
        let mut attempts = 0;
        let started = std::time::Instant::now();
        while !todo.is_empty() {
            attempts += 1;
            let mut next = Vec::new();
            let done = if attempts == 1 && self.one_round() {
                self.attempt_fast(&mut jobs, &todo, &mut next)
            } else {
                self.attempt(&mut jobs, &todo, &mut next)
            };
            for (j, r) in done {
                match r {
                    Err(e) if e.is_transient() && started.elapsed() < TRANSIENT_BUDGET => {
                        attempts = attempts.min(MAX_ATTEMPTS - 1);
                        next.push(j);
                    }
                    r => out[jobs[j].0] = Some(r),
                }
            }
            if attempts >= MAX_ATTEMPTS {
                for &j in &next {
                    out[jobs[j].0] = Some(Err(StoreError::Contended { attempts }));
                }
                break;
            }
            if !next.is_empty() && attempts > 1 {
                // Lost the race again: let the winners through (randomised, capped
                // exponential backoff, so a descheduled writer is not starved).
                backoff(attempts);
            }
            todo = next;
        }
        // Items allocated for puts that did not happen are reused later.
        for (_, j) in &jobs {
            if let (Some(o), false, Some(g)) = (j.item, j.cas.is_some(), j.generation) {
                let _ = self.free_item(j.h.shard, j.class, o, g);
            }
        }
        out.into_iter().map(|o| o.unwrap_or(Ok(false))).collect()
    }

    /// One attempt at the keys `todo`; returns the finished ones and fills `retry`.
    fn attempt(
        &self,
        jobs: &mut [(usize, Job<'_>)],
        todo: &[usize],
        retry: &mut Vec<usize>,
    ) -> Vec<(usize, PutResult)> {
        let mut done = Vec::new();
        let cache = &self.inner.cache;
        let lay = self.inner.layout;
        let now = now_ms();
        let mut args = Vec::new();
        // Round trip 1: where is each key (one `kv_mfind` per server for its keys);
        // fresh heap where none is cached.
        let mut b = cache.batch().with_capacity(todo.len() * 2);
        let info = cache.info();
        let mut groups: Vec<(u32, Vec<usize>)> = Vec::new();
        {
            let mut free = self.inner.free.lock();
            for &j in todo {
                let job = &mut jobs[j].1;
                job.cas = None;
                job.bump_i = None;
                job.write_i = None;
                if matches!(job.find, FindAt::Known(_)) {
                    // Found already.
                } else if job.alone {
                    let i = self.push_lookup(&mut b, Probe::Find, job.key, job.h, now, &mut args);
                    job.find = FindAt::One(i);
                } else {
                    let server = self.server_of(&info, job.h.shard);
                    match groups.iter_mut().find(|(s, _)| *s == server) {
                        Some((_, g)) => g.push(j),
                        None => groups.push((server, vec![j])),
                    }
                }
                job.from_cache = false;
                if job.item.is_none() {
                    job.item = free.take(job.h.shard, job.class);
                    job.from_cache = job.item.is_some();
                    if job.item.is_none() && !free.heap_exhausted(job.h.shard) {
                        job.bump_i =
                            Some(b.fetch_add(bump_addr(&lay, job.h.shard), u64::from(job.size)));
                    }
                }
            }
        }
        for (_, g) in &groups {
            for chunk in g.chunks(crate::lookup::MGET_KEYS) {
                self.push_finds(&mut b, jobs, chunk, now, &mut args);
            }
        }
        let r = b.run();
        let decode_many = |i: usize| {
            r.bytes(i)
                .map_err(StoreError::from)
                .and_then(|raw| decode_find(wire::KV_MFIND, wire::decode_mfind_reply(&raw)))
        };
        // Each `kv_mfind` reply decoded once, by op index (`None`: it failed).
        let mut many: Vec<(usize, Option<Vec<Option<FindReply>>>)> = Vec::new();
        let mut finds = Vec::with_capacity(todo.len());
        for &j in todo {
            let job = &mut jobs[j].1;
            if let Some(bi) = job.bump_i {
                match r.value(bi) {
                    Ok(old) => match carved(&lay, old, job.size) {
                        Some(o) => job.item = Some(o),
                        None => self.inner.free.lock().mark_exhausted(job.h.shard),
                    },
                    Err(e) => {
                        done.push((j, Err(e.into())));
                        continue;
                    }
                }
            }
            let f = match job.find {
                FindAt::Known(f) => {
                    // Only once: a retry finds the slot again.
                    job.find = FindAt::One(usize::MAX);
                    Ok(f)
                }
                FindAt::One(i) => r
                    .bytes(i)
                    .map_err(StoreError::from)
                    .and_then(|raw| decode_find(wire::KV_FIND, FindReply::decode(&raw))),
                FindAt::Many(i, pos) => {
                    if !many.iter().any(|(op, _)| *op == i) {
                        many.push((i, decode_many(i).ok()));
                    }
                    match many.iter().find(|(op, _)| *op == i).map(|(_, d)| d) {
                        Some(Some(entries)) => match entries.get(pos) {
                            Some(Some(f)) => Ok(*f),
                            Some(None) => {
                                // Not where the table said: ask alone (follows moves).
                                job.alone = true;
                                retry.push(j);
                                continue;
                            }
                            None => Err(StoreError::Reply {
                                proc: wire::KV_MFIND,
                                reason: "fewer entries than keys asked".into(),
                            }),
                        },
                        // The same failure again, as this key's own error.
                        Some(None) => decode_many(i).and_then(|_| {
                            Err(StoreError::Reply {
                                proc: wire::KV_MFIND,
                                reason: "reply unreadable".into(),
                            })
                        }),
                        None => Err(StoreError::Reply {
                            proc: wire::KV_MFIND,
                            reason: "reply missing".into(),
                        }),
                    }
                }
            };
            match f {
                Ok(f) => {
                    let reset = self.inner.free.lock().sync(job.h.shard, f.generation);
                    job.generation = Some(f.generation);
                    if reset && job.from_cache {
                        // Kept from before the shard was reset: not ours any more.
                        job.item = None;
                        job.written = false;
                        retry.push(j);
                        continue;
                    }
                    finds.push((j, f))
                }
                Err(e) => done.push((j, Err(e))),
            }
        }
        // Round trip 2: write items and swing slots.
        let mut b = cache.batch().with_capacity(finds.len() * 2);
        let mut locked = Vec::new();
        let mut buf = Vec::new();
        for (j, f) in finds {
            let job = &mut jobs[j].1;
            let target = match f.status {
                wire::BUSY => {
                    retry.push(j);
                    continue;
                }
                _ if !job.guard.allows(&f) => {
                    done.push((j, Ok(false)));
                    continue;
                }
                wire::HIT => f.slot.map(usize::from),
                _ => f.words[..SLOTS].iter().position(|&w| w == EMPTY),
            };
            let Some(s) = target else {
                locked.push(j);
                continue;
            };
            if let Err(e) = self.ensure_item(job) {
                done.push((j, Err(e)));
                continue;
            }
            let Some(off) = job.item else { continue };
            if !job.written {
                buf.clear();
                item::encode_into(&mut buf, job.key, job.value, job.expires, job.flags);
                job.write_i = Some(b.write(lay.shard_base(job.h.shard) + off, &buf));
            }
            let expect = f.words[s];
            let new = keep_hot(
                expect,
                SlotWord::new(job.h.tag, job.word_class(), off)
                    .after(expect)
                    .0,
            );
            let ci = b.cas(
                lay.slot_addr(job.h.shard, f.bucket(job.h.bucket), s),
                expect,
                new,
            );
            job.cas = Some((ci, expect, new));
        }
        let r = b.run();
        let swapped_at = std::time::Instant::now();
        let mut hot_written = false;
        for &j in todo {
            let job = &mut jobs[j].1;
            let Some((ci, expect, new)) = job.cas else {
                continue;
            };
            let write_ok = job.write_i.is_none_or(|wi| r.is_ok(wi));
            let swapped = r.value(ci).map(|seen| seen == expect);
            if !write_ok {
                let e = job
                    .write_i
                    .and_then(|wi| r.error(wi).cloned())
                    .map(StoreError::from);
                job.cas = None;
                if let Ok(true) = swapped {
                    // The slot points at an item that may not be whole: take it back.
                    self.unpublish(job, new);
                } else if swapped.is_err() {
                    abandon(job);
                }
                done.push((j, Err(e.unwrap_or(StoreError::Contended { attempts: 1 }))));
                continue;
            }
            job.written = true;
            match swapped {
                Ok(true) => {
                    if SlotWord(expect).is_hot() {
                        self.drop_copy(job.key, job.h.shard);
                        hot_written = true;
                    }
                    if SlotWord::is_item(expect) {
                        self.retire(
                            job.h.shard,
                            SlotWord(expect),
                            job.generation.unwrap_or_default(),
                        );
                    }
                    done.push((j, Ok(true)));
                }
                Ok(false) => {
                    job.cas = None;
                    retry.push(j);
                }
                Err(e) => {
                    // The swap may have happened: the item may be referenced, so it
                    // is never reused (a leak only at a failing server).
                    job.cas = None;
                    abandon(job);
                    done.push((j, Err(e.into())));
                }
            }
        }
        if hot_written {
            // A hot key's old copy may be served until its lease runs out.
            self.inner.hot.wait_lease(swapped_at);
        }
        for j in locked {
            let job = &mut jobs[j].1;
            done.push((j, self.put_locked(job)));
        }
        done
    }

    /// Appends the finds of `chunk`'s jobs (all on one server): one `kv_mfind`, or a
    /// `kv_find` for a lone key.
    fn push_finds(
        &self,
        b: &mut farcache_client::Batch,
        jobs: &mut [(usize, Job<'_>)],
        chunk: &[usize],
        now: u64,
        args: &mut Vec<u8>,
    ) {
        if let [j] = chunk {
            let job = &mut jobs[*j].1;
            let i = self.push_lookup(b, Probe::Find, job.key, job.h, now, args);
            job.find = FindAt::One(i);
            return;
        }
        let keys = chunk.iter().map(|&j| (jobs[j].1.key, jobs[j].1.h));
        let i = self.push_mfind(b, wire::MODE_VALUE, now, keys, args);
        for (pos, &j) in chunk.iter().enumerate() {
            jobs[j].1.find = FindAt::Many(i, pos);
        }
    }

    /// Appends one `kv_mfind` (in `mode`) of `keys`, all on one server; returns its op.
    pub(crate) fn push_mfind<'k>(
        &self,
        b: &mut farcache_client::Batch,
        mode: u8,
        now: u64,
        keys: impl ExactSizeIterator<Item = (&'k [u8], KeyHash)>,
        args: &mut Vec<u8>,
    ) -> usize {
        let lay = self.inner.layout;
        args.clear();
        wire::mget_head(args, mode, now, keys.len() as u32);
        let mut first = None;
        for (key, h) in keys {
            let bucket_addr = lay.bucket_addr(h.shard, h.bucket);
            first.get_or_insert(bucket_addr);
            wire::MgetKey {
                tag: h.tag,
                bucket_addr,
                shard_base: lay.shard_base(h.shard),
                refs_addr: lay.refs_addr(h.shard, h.bucket),
                key,
            }
            .encode_into(args);
        }
        b.execute(wire::KV_MFIND, first.unwrap_or_default(), args)
    }

    pub(crate) fn find(&self, key: &[u8], h: KeyHash, now: u64) -> Result<FindReply> {
        let mut b = self.inner.cache.batch();
        let mut args = Vec::new();
        let i = self.push_lookup(&mut b, Probe::Find, key, h, now, &mut args);
        let raw = b.run().bytes(i)?;
        FindReply::decode(&raw).map_err(|e| StoreError::Reply {
            proc: wire::KV_FIND,
            reason: e.to_string(),
        })
    }
}
