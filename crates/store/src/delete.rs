//! Deleting keys: one at a time (find the slot, swap it to a tombstone), or many in
//! two batched round trips (every key's `kv_find`, then every swap), which is what a
//! Redis `DEL` of 100 k keys needs to not hold its connection for seconds.

use farcache_kvformat::SlotWord;
use farcache_kvformat::slot::TOMB;
use farcache_kvformat::wire::{self, FindReply};

use crate::put::backoff;
use crate::store::{MAX_ATTEMPTS, Probe, Store, TRANSIENT_BUDGET, now_ms};
use crate::{Result, StoreError};

impl Store {
    /// Removes every key of `keys` (as [`Store::delete`] each); one result per key,
    /// `Ok(true)` where the key was present. Two batched round trips per server for
    /// the common case; a key that raced a writer, is hot, or whose lookup failed
    /// transiently is deleted alone. A key named twice counts once.
    pub fn delete_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<bool>> {
        let lay = self.inner.layout;
        let cache = &self.inner.cache;
        let now = now_ms();
        let mut out: Vec<Option<Result<bool>>> = keys.iter().map(|_| None).collect();
        // Round trip 1: every key's slot.
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
            finds.push(Some((
                h,
                self.push_lookup(&mut b, Probe::Find, k, h, now, &mut args),
            )));
        }
        let r = b.run();
        // Round trip 2: swap each found slot to a tombstone.
        let mut b = cache.batch().with_capacity(keys.len());
        let mut swaps = Vec::with_capacity(keys.len());
        for (i, f) in finds.iter().enumerate() {
            let Some((h, op)) = f else { continue };
            let found = r
                .bytes(*op)
                .ok()
                .and_then(|raw| FindReply::decode(&raw).ok());
            match found {
                Some(f) if f.status == wire::HIT => {
                    let Some(slot) = f.slot.map(usize::from) else {
                        continue;
                    };
                    let w = f.words[slot];
                    if SlotWord(w).is_hot() {
                        // Its copy must go first, with the lease wait: alone.
                        continue;
                    }
                    let at = lay.slot_addr(h.shard, f.bucket(h.bucket), slot);
                    swaps.push((i, b.cas(at, w, TOMB), w, *h, f));
                }
                Some(f) if f.status == wire::MISS => out[i] = Some(Ok(false)),
                // Busy, moved, or failed: alone below.
                _ => {}
            }
        }
        if !swaps.is_empty() {
            let r = b.run();
            for (i, op, w, h, f) in swaps {
                if r.value(op).is_ok_and(|seen| seen == w) {
                    self.retire(h.shard, SlotWord(w), f.generation);
                    out[i] = Some(Ok(!f.expired));
                }
            }
        }
        out.into_iter()
            .zip(keys)
            .map(|(o, k)| o.unwrap_or_else(|| self.delete_raw(k.as_ref())))
            .collect()
    }

    /// Removes `key` (an erasure-coded value's chunks too); `Ok(true)` if it was
    /// present.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        Self::check_key(key)?;
        self.delete_raw(key)
    }

    /// [`Store::delete`] of a key the caller checked.
    pub(crate) fn delete_raw(&self, key: &[u8]) -> Result<bool> {
        self.delete_if(key, None)
    }

    /// Deletes `key` if its slot still holds `word` (any word when `None`).
    pub(crate) fn delete_if(&self, key: &[u8], word: Option<u64>) -> Result<bool> {
        let h = self.locate(key);
        let lay = self.inner.layout;
        let started = std::time::Instant::now();
        let mut attempt = 0;
        while attempt < MAX_ATTEMPTS {
            attempt += 1;
            if attempt > 1 {
                backoff(attempt);
            }
            let f = match self.find(key, h, now_ms()) {
                Ok(f) => f,
                Err(e) if e.is_transient() && started.elapsed() < TRANSIENT_BUDGET => {
                    // Failing over: the transient budget bounds this, not the attempts.
                    attempt = attempt.min(8);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let s = match (f.status, f.slot) {
                (wire::BUSY, _) => continue,
                (wire::HIT, Some(s)) => usize::from(s),
                _ => return Ok(false),
            };
            let w = f.words[s];
            if word.is_some_and(|x| SlotWord::with_hot(x) != SlotWord::with_hot(w)) {
                return Ok(false);
            }
            let cas = self
                .inner
                .cache
                .cas(lay.slot_addr(h.shard, f.bucket(h.bucket), s), w, TOMB)
                .map_err(StoreError::from);
            let seen = match cas {
                Ok(seen) => seen,
                // Failing over: ask again (if the swap happened the key reads absent;
                // its item is not reused, as it may still be referenced).
                Err(e) if e.is_transient() && started.elapsed() < TRANSIENT_BUDGET => {
                    attempt = attempt.min(8);
                    continue;
                }
                Err(e) => return Err(e),
            };
            if seen == w {
                if SlotWord(w).is_hot() {
                    let at = std::time::Instant::now();
                    self.drop_copy(key, h.shard);
                    self.inner.hot.wait_lease(at);
                }
                self.retire(h.shard, SlotWord(w), f.generation);
                return Ok(!f.expired);
            }
        }
        Err(StoreError::Contended {
            attempts: MAX_ATTEMPTS,
        })
    }
}
