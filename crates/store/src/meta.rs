//! A key's value together with its expiry, for callers that must keep a TTL across a
//! read-modify-write (Redis `INCR`, `SETRANGE`, `TTL`, and the store's own repair).
//!
//! Two round trips: `kv_find` for the key's slot, then a read of the item it names.
//! The item's checksum and key are checked, so an item recycled in between is seen
//! as such and the lookup runs again.

use std::time::Duration;

use bytes::Bytes;
use farcache_kvformat::wire::{self, FindReply};
use farcache_kvformat::{SlotWord, class, item};

use crate::put::backoff;
use crate::store::{MAX_ATTEMPTS, Store, now_ms};
use crate::{Result, StoreError};

/// A live key's value and when it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub value: Bytes,
    /// Milliseconds since the Unix epoch; `None` when the key never expires.
    pub expires_ms: Option<u64>,
}

impl Entry {
    /// Time left before the key expires (`None`: never).
    pub fn ttl(&self) -> Option<Duration> {
        self.expires_ms
            .map(|at| Duration::from_millis(at.saturating_sub(now_ms())))
    }
}

/// A live key's item as its slot names it now.
pub(crate) struct Current {
    /// The slot word naming the item (a guard for a later rewrite).
    pub word: u64,
    /// The item's flags (`item::FLAG_*`).
    pub flags: u8,
    /// The item's value: the value itself, or an erasure-coded value's manifest.
    pub value: Bytes,
    pub expires_ms: Option<u64>,
}

impl Store {
    /// `key`'s value and expiry, or `None` if it is absent or expired.
    pub fn entry(&self, key: &[u8]) -> Result<Option<Entry>> {
        Self::check_key(key)?;
        let Some(c) = self.current(key)? else {
            return Ok(None);
        };
        let expires_ms = c.expires_ms;
        if c.flags & item::FLAG_MANIFEST != 0 {
            // An erasure-coded value: the item holds its manifest.
            return Ok(self.get(key)?.map(|value| Entry { value, expires_ms }));
        }
        Ok(Some(Entry {
            value: c.value,
            expires_ms,
        }))
    }

    /// [`Store::entry`] of many keys in two round trips per server (their slots in
    /// one batch, then their items in one), in `keys`' order. A key whose item
    /// changed between the two, or that is erasure coded, is read alone.
    pub fn entries<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<Option<Entry>>> {
        let lay = self.inner.layout;
        let cache = &self.inner.cache;
        let now = now_ms();
        let mut out: Vec<Option<Result<Option<Entry>>>> = keys.iter().map(|_| None).collect();
        let mut b = cache.batch().with_capacity(keys.len());
        let mut args = Vec::new();
        let mut finds = Vec::with_capacity(keys.len());
        for (i, k) in keys.iter().enumerate() {
            let k = k.as_ref();
            if let Err(e) = Self::check_key(k) {
                out[i] = Some(Err(e));
                finds.push(None);
                continue;
            }
            let h = self.locate(k);
            let op = self.push_lookup(&mut b, crate::store::Probe::Find, k, h, now, &mut args);
            finds.push(Some((h, op)));
        }
        let r = b.run();
        let mut b = cache.batch().with_capacity(keys.len());
        let mut reads = Vec::with_capacity(keys.len());
        for (i, f) in finds.iter().enumerate() {
            let Some((h, op)) = f else {
                reads.push(None);
                continue;
            };
            let found = r
                .bytes(*op)
                .ok()
                .and_then(|raw| FindReply::decode(&raw).ok());
            let read = match found {
                Some(f) if f.status == wire::HIT && !f.expired => f.slot.and_then(|slot| {
                    let word = SlotWord(f.words[usize::from(slot)]);
                    let size = class::size(word.class())?;
                    Some(b.read(lay.shard_base(h.shard) + word.offset(), u64::from(size)))
                }),
                Some(f) if f.status == wire::MISS || (f.status == wire::HIT && f.expired) => {
                    out[i] = Some(Ok(None));
                    None
                }
                // Busy, moved or failed: read alone below.
                _ => None,
            };
            reads.push(read);
        }
        let r = b.run();
        for (i, read) in reads.into_iter().enumerate() {
            let Some(op) = read else { continue };
            let Ok(raw) = r.bytes(op) else { continue };
            let Ok(it) = item::decode(&raw) else { continue };
            if it.key != keys[i].as_ref()
                || it.expired(now_ms())
                || it.flags & item::FLAG_MANIFEST != 0
            {
                continue;
            }
            out[i] = Some(Ok(Some(Entry {
                value: raw.slice_ref(it.value),
                expires_ms: (it.expires_ms != item::NO_EXPIRY).then_some(it.expires_ms),
            })));
        }
        out.into_iter()
            .zip(keys)
            .map(|(o, k)| o.unwrap_or_else(|| self.entry(k.as_ref())))
            .collect()
    }

    /// The item `key`'s slot names, with the slot word; `None` if absent or expired.
    pub(crate) fn current(&self, key: &[u8]) -> Result<Option<Current>> {
        let h = self.locate(key);
        let lay = self.inner.layout;
        for attempt in 1..=MAX_ATTEMPTS {
            if attempt > 1 {
                backoff(attempt);
            }
            let now = now_ms();
            let f = self.find(key, h, now)?;
            let slot = match (f.status, f.slot) {
                (farcache_kvformat::wire::HIT, Some(s)) if !f.expired => s,
                (farcache_kvformat::wire::BUSY, _) => continue,
                _ => return Ok(None),
            };
            let word = SlotWord(f.words[usize::from(slot)]);
            let size = class::size(word.class()).ok_or_else(|| StoreError::Reply {
                proc: farcache_kvformat::wire::KV_FIND,
                reason: format!("slot names unknown size class {}", word.class()),
            })?;
            let raw = self
                .inner
                .cache
                .read(lay.shard_base(h.shard) + word.offset(), u64::from(size))?;
            let Ok(it) = item::decode(&raw) else {
                // Recycled between the two round trips.
                continue;
            };
            if it.key != key {
                continue;
            }
            if it.expired(now_ms()) {
                return Ok(None);
            }
            return Ok(Some(Current {
                word: word.0,
                flags: it.flags,
                value: raw.slice_ref(it.value),
                expires_ms: (it.expires_ms != item::NO_EXPIRY).then_some(it.expires_ms),
            }));
        }
        Err(StoreError::Contended {
            attempts: MAX_ATTEMPTS,
        })
    }
}
