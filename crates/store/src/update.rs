//! Read-modify-write of many keys in two batched round trips: (1) each key's
//! `kv_find` in its `MODE_ENTRY`, which answers the key's slot word and the item it
//! names from one run on the key's server; (2) the caller's new values written and
//! each slot swung from the word that was read. A key whose slot moved in between
//! (another writer) is read and decided again, so the change applies to the value
//! it was computed from (Redis `INCR`, `APPEND`, `SETRANGE` …), whoever else writes
//! the store. A key rewritten back into the very item it had is told apart by its
//! slot word's rewrite stamp (`farcache_kvformat::SlotWord::after`).
//!
//! Erasure-coded values, and servers older than the mode, take the long way: the
//! slot is found, the item read, and the rewrite guarded by the same word.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use farcache_kvformat::item;
use farcache_kvformat::wire::{self, FindReply};

use crate::meta::Entry;
use crate::options::Condition;
use crate::put::{self, Guard, PutSpec};
use crate::store::{MAX_ATTEMPTS, Probe, Store, now_ms};
use crate::{Result, StoreError};

/// What a read-modify-write does to one key, given its entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// Leave the key as it is.
    Keep,
    /// Store `value`, expiring at `expires_ms` (Unix ms; `None`: never).
    Put {
        value: Vec<u8>,
        expires_ms: Option<u64>,
    },
}

/// A key's state as read for an update: its entry, the guard its rewrite needs,
/// and the find the rewrite can start from.
struct Seen {
    entry: Option<Entry>,
    guard: Guard,
    found: Option<FindReply>,
}

impl Store {
    /// Applies `decide` to each of `keys` (called with the key's index and its live
    /// entry, `None` if absent or expired) and stores what it returns, atomically
    /// per key: the write lands only if the key still holds what `decide` saw;
    /// otherwise `decide` runs again on the new entry. One result per key:
    /// `Ok(true)` written, `Ok(false)` kept.
    ///
    /// Two round trips in all when nothing races and the handle has items of the
    /// right size to reuse (a rewrite frees one of the same size), three when fresh
    /// heap is carved.
    pub fn update_many<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        mut decide: impl FnMut(usize, Option<&Entry>) -> Update,
    ) -> Vec<Result<bool>> {
        let mut out: Vec<Option<Result<bool>>> = keys.iter().map(|_| None).collect();
        let mut todo = Vec::with_capacity(keys.len());
        for (i, k) in keys.iter().enumerate() {
            match Self::check_key(k.as_ref()) {
                Ok(()) => todo.push(i),
                Err(e) => out[i] = Some(Err(e)),
            }
        }
        let mut attempts = 0;
        let mut alone = HashSet::new();
        while !todo.is_empty() {
            attempts += 1;
            if attempts > MAX_ATTEMPTS {
                for &i in &todo {
                    out[i] = Some(Err(StoreError::Contended {
                        attempts: MAX_ATTEMPTS,
                    }));
                }
                break;
            }
            if attempts > 1 {
                put::backoff(attempts);
            }
            let mut again = Vec::new();
            // Round trip 1: every key's slot with its item.
            let seen = self.seen(keys, &todo, &mut alone);
            let mut writes: Vec<(usize, Vec<u8>, PutSpec, Option<FindReply>)> = Vec::new();
            for (&i, s) in todo.iter().zip(seen) {
                let s = match s {
                    Ok(Some(s)) => s,
                    // The bucket was changing under the lookup.
                    Ok(None) => {
                        again.push(i);
                        continue;
                    }
                    Err(e) => {
                        out[i] = Some(Err(e));
                        continue;
                    }
                };
                match decide(i, s.entry.as_ref()) {
                    Update::Keep => out[i] = Some(Ok(false)),
                    Update::Put { value, expires_ms } => {
                        let spec = PutSpec {
                            expires: expires_ms.map_or(item::NO_EXPIRY, |at| at.max(1)),
                            guard: s.guard,
                        };
                        writes.push((i, value, spec, s.found));
                    }
                }
            }
            // Round trip 2: the writes, each guarded by what was read.
            let small = self.max_small_value();
            let (large, writes): (Vec<_>, Vec<_>) =
                writes.into_iter().partition(|w| w.1.len() as u64 > small);
            for (i, value, spec, _) in large {
                let r = self.put_large_spec(keys[i].as_ref(), &value, spec, 0);
                settle(&mut out, &mut again, i, r);
            }
            let entries: Vec<put::Entry<'_>> = writes
                .iter()
                .map(|(i, value, _, _)| put::Entry {
                    key: keys[*i].as_ref(),
                    value,
                    flags: 0,
                })
                .collect();
            let results = self.put_found_entries(
                entries
                    .iter()
                    .zip(&writes)
                    .map(|(e, &(_, _, spec, found))| (e, spec, found)),
            );
            for ((i, ..), r) in writes.iter().zip(results) {
                settle(&mut out, &mut again, *i, r);
            }
            todo = again;
        }
        out.into_iter().map(|o| o.unwrap_or(Ok(false))).collect()
    }

    /// The entries of `keys[todo]` with their guards, in one batched round trip:
    /// a `kv_mfind` per server in its `MODE_ENTRY` (the keys' misses overlap, as a
    /// multi-get's do), a `kv_find` for a key alone on its server or in `alone`.
    /// `Ok(None)` for a key to ask again: its bucket was busy, or it was not where
    /// the table said (it goes into `alone`, to follow the move).
    fn seen<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        todo: &[usize],
        alone: &mut HashSet<usize>,
    ) -> Vec<Result<Option<Seen>>> {
        let now = now_ms();
        let info = self.inner.cache.info();
        let mut b = self.inner.cache.batch().with_capacity(todo.len());
        let mut args = Vec::new();
        // Per position of `todo`: its own op, or (op, entry) of a `kv_mfind`.
        let mut at: Vec<(usize, Option<usize>)> = vec![(0, None); todo.len()];
        let mut groups: Vec<(u32, Vec<usize>)> = Vec::new();
        for (p, &i) in todo.iter().enumerate() {
            let k = keys[i].as_ref();
            let h = self.locate(k);
            if alone.contains(&i) {
                at[p] = (
                    self.push_lookup(&mut b, Probe::FindEntry, k, h, now, &mut args),
                    None,
                );
                continue;
            }
            let server = self.server_of(&info, h.shard);
            match groups.iter_mut().find(|(s, _)| *s == server) {
                Some((_, g)) => g.push(p),
                None => groups.push((server, vec![p])),
            }
        }
        for (_, g) in &groups {
            for chunk in g.chunks(crate::lookup::MGET_KEYS) {
                if let [p] = chunk {
                    let k = keys[todo[*p]].as_ref();
                    at[*p] = (
                        self.push_lookup(
                            &mut b,
                            Probe::FindEntry,
                            k,
                            self.locate(k),
                            now,
                            &mut args,
                        ),
                        None,
                    );
                    continue;
                }
                let keys = chunk.iter().map(|&p| {
                    let k = keys[todo[p]].as_ref();
                    (k, self.locate(k))
                });
                let op = self.push_mfind(&mut b, wire::MODE_ENTRY, now, keys, &mut args);
                for (pos, &p) in chunk.iter().enumerate() {
                    at[p] = (op, Some(pos));
                }
            }
        }
        let r = b.run();
        let bad = |e: farcache_kvformat::FormatError| StoreError::Reply {
            proc: wire::KV_FIND,
            reason: e.to_string(),
        };
        // Each `kv_mfind` reply fetched once; its entries borrow from it.
        let mut raws: HashMap<usize, std::result::Result<Bytes, ()>> = HashMap::new();
        for &(op, pos) in &at {
            if pos.is_some() {
                raws.entry(op)
                    .or_insert_with(|| r.bytes(op).map_err(|_| ()));
            }
        }
        let many: HashMap<usize, std::result::Result<Vec<wire::FoundEntry<'_>>, String>> = raws
            .iter()
            .filter_map(|(&op, raw)| {
                let raw = raw.as_ref().ok()?;
                Some((
                    op,
                    wire::decode_mfind_entries(raw).map_err(|e| e.to_string()),
                ))
            })
            .collect();
        todo.iter()
            .zip(at)
            .map(|(&i, (op, pos))| {
                let (f, it) = match pos {
                    None => {
                        let raw = r.bytes(op)?;
                        let (f, it) = FindReply::decode_with_item(&raw).map_err(bad)?;
                        (
                            f,
                            it.map(|it| (it.flags, it.expires_ms, raw.slice_ref(it.value))),
                        )
                    }
                    Some(pos) => {
                        let (Some(Ok(raw)), Some(d)) = (raws.get(&op), many.get(&op)) else {
                            // The op failed: its error, for each of its keys.
                            return Err(r.bytes(op).err().map_or(
                                StoreError::Reply {
                                    proc: wire::KV_MFIND,
                                    reason: "reply missing".into(),
                                },
                                StoreError::from,
                            ));
                        };
                        let entries = d.as_ref().map_err(|e| StoreError::Reply {
                            proc: wire::KV_MFIND,
                            reason: e.clone(),
                        })?;
                        match entries.get(pos) {
                            Some(Some((f, it))) => (
                                *f,
                                it.map(|it| (it.flags, it.expires_ms, raw.slice_ref(it.value))),
                            ),
                            Some(None) => {
                                // Not where the table said: asked alone next.
                                alone.insert(i);
                                return Ok(None);
                            }
                            None => {
                                return Err(StoreError::Reply {
                                    proc: wire::KV_MFIND,
                                    reason: "fewer entries than keys asked".into(),
                                });
                            }
                        }
                    }
                };
                self.classify(keys[i].as_ref(), f, it)
            })
            .collect()
    }

    /// A key's find (and item) as what an update decides on; `None` for a busy
    /// bucket.
    fn classify(
        &self,
        key: &[u8],
        f: FindReply,
        it: Option<(u8, u64, Bytes)>,
    ) -> Result<Option<Seen>> {
        match (f.status, f.slot, it) {
            (wire::BUSY, _, _) => Ok(None),
            (wire::HIT, _, _) if f.expired => Ok(Some(Self::absent(Some(f)))),
            (wire::HIT, Some(s), Some((flags, expires, value)))
                if flags & item::FLAG_MANIFEST == 0 =>
            {
                Ok(Some(Seen {
                    entry: Some(Entry {
                        value,
                        expires_ms: (expires != item::NO_EXPIRY).then_some(expires),
                    }),
                    guard: Guard::Slot(f.words[usize::from(s)]),
                    found: Some(f),
                }))
            }
            (wire::HIT, _, _) => self.seen_slowly(key).map(Some),
            _ => Ok(Some(Self::absent(Some(f)))),
        }
    }

    /// [`Store::seen`] of one key the long way: an erasure-coded value (its item is
    /// the manifest), or a server that answered the find without the item.
    fn seen_slowly(&self, key: &[u8]) -> Result<Seen> {
        let Some(c) = self.current(key)? else {
            return Ok(Self::absent(None));
        };
        let value = if c.flags & item::FLAG_MANIFEST != 0 {
            match self.get(key)? {
                Some(v) => v,
                // Deleted since: its rewrite would find the slot changed anyway.
                None => return Ok(Self::absent(None)),
            }
        } else {
            c.value
        };
        Ok(Seen {
            entry: Some(Entry {
                value,
                expires_ms: c.expires_ms,
            }),
            guard: Guard::Slot(c.word),
            found: None,
        })
    }

    /// An absent key: its write goes ahead only while the key is still absent.
    fn absent(found: Option<FindReply>) -> Seen {
        Seen {
            entry: None,
            guard: Guard::Cond(Condition::IfAbsent),
            found,
        }
    }
}

/// Files key `i`'s put result: a guard that no longer held sends it round again.
fn settle(out: &mut [Option<Result<bool>>], again: &mut Vec<usize>, i: usize, r: Result<bool>) {
    match r {
        Ok(false) => again.push(i),
        r => out[i] = Some(r),
    }
}
