//! A key's value together with its expiry, for callers that must keep a TTL across a
//! read-modify-write (Redis `INCR`, `SETRANGE`, `TTL`, and the store's own repair).
//!
//! One key ([`Store::entry`]): `kv_find` in its `MODE_ENTRY`, which answers the key's
//! slot and the item it names from one run (a server older than that mode answers
//! the slot alone; the item is then read, and its checksum and key checked, so an
//! item recycled in between is seen as such and the lookup runs again). Many keys ([`Store::entries`]): one batched
//! round trip of `kv_get` in its `MODE_ENTRY`, which answers value and expiry.

use std::time::Duration;

use bytes::Bytes;
use farcache_kvformat::wire;
use farcache_kvformat::{SlotWord, class, item};

use crate::put::backoff;
use crate::store::{MAX_ATTEMPTS, Probe, Store, now_ms};
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

    /// [`Store::entry`] of many keys in one batched round trip (`kv_get` answering
    /// each value with its expiry), in `keys`' order. A key that is erasure coded,
    /// whose bucket was busy, or whose lookup failed is read alone.
    pub fn entries<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<Option<Entry>>> {
        let now = now_ms();
        let mut out: Vec<Option<Result<Option<Entry>>>> = keys.iter().map(|_| None).collect();
        let mut b = self.inner.cache.batch().with_capacity(keys.len());
        let mut args = Vec::new();
        let mut ops = Vec::with_capacity(keys.len());
        for (i, k) in keys.iter().enumerate() {
            let k = k.as_ref();
            if let Err(e) = Self::check_key(k) {
                out[i] = Some(Err(e));
                ops.push(None);
                continue;
            }
            let h = self.locate(k);
            ops.push(Some(self.push_lookup(
                &mut b,
                Probe::Entry,
                k,
                h,
                now,
                &mut args,
            )));
        }
        let r = b.run();
        for (i, op) in ops.into_iter().enumerate() {
            let Some(op) = op else { continue };
            let Ok(raw) = r.bytes(op) else { continue };
            let Ok(g) = wire::GetReply::decode(&raw) else {
                continue;
            };
            match g.status {
                wire::MISS => out[i] = Some(Ok(None)),
                wire::HIT
                    if g.flags & item::FLAG_MANIFEST == 0 && raw.len() >= wire::GET_HEAD + 8 =>
                {
                    let mut at = [0u8; 8];
                    at.copy_from_slice(&raw[wire::GET_HEAD..wire::GET_HEAD + 8]);
                    let at = u64::from_le_bytes(at);
                    out[i] = Some(Ok(Some(Entry {
                        value: raw.slice(wire::GET_HEAD + 8..),
                        expires_ms: (at != item::NO_EXPIRY).then_some(at),
                    })));
                }
                // Erasure coded, busy, or a server without `MODE_ENTRY`: alone below.
                _ => {}
            }
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
            let mut b = self.inner.cache.batch();
            let mut args = Vec::new();
            let i = self.push_lookup(&mut b, Probe::FindEntry, key, h, now, &mut args);
            let raw = b.run().bytes(i)?;
            let (f, found) =
                wire::FindReply::decode_with_item(&raw).map_err(|e| StoreError::Reply {
                    proc: wire::KV_FIND,
                    reason: e.to_string(),
                })?;
            let slot = match (f.status, f.slot) {
                (wire::HIT, Some(s)) if !f.expired => s,
                (wire::BUSY, _) => continue,
                _ => return Ok(None),
            };
            let word = SlotWord(f.words[usize::from(slot)]);
            if let Some(it) = found {
                // Read with the slot in one run on the key's server.
                return Ok(Some(Current {
                    word: word.0,
                    flags: it.flags,
                    value: raw.slice_ref(it.value),
                    expires_ms: (it.expires_ms != item::NO_EXPIRY).then_some(it.expires_ms),
                }));
            }
            // A server that answers the find alone: read the item it names.
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
