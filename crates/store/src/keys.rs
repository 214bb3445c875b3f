//! Listing a store's keys a page at a time (Redis's `SCAN`, `KEYS`, `DBSIZE`,
//! `FLUSHDB`, `RANDOMKEY`): the `kv_scan` procedure walks one shard's index from a bucket and
//! returns the live keys it finds.
//!
//! Like Redis's `SCAN`, a full pass returns every key present for the whole pass;
//! a key written or deleted meanwhile may or may not appear, and one moved between
//! a bucket and its pair bucket during the pass may appear twice.

use bytes::Bytes;
use farcache_kvformat::hash;
use farcache_kvformat::wire::{self, SCAN_DONE, SCAN_KEYS, Scan};

use crate::Result;
use crate::store::{Store, now_ms};

/// Bytes of keys one `kv_scan` call returns at most.
const PAGE_BYTES: u32 = 64 << 10;

/// A position in a pass over the keys: 0 starts a pass, and a pass is done when
/// [`Store::scan_keys`] answers 0.
pub type Cursor = u64;

impl Store {
    /// Live keys from `cursor` on, at least `count` of them unless the pass ends
    /// first (pages end at bucket boundaries), and the cursor to continue from.
    /// The store's own items (large values' chunks, hot keys' copies) are left out.
    pub fn scan_keys(&self, cursor: Cursor, count: usize) -> Result<(Cursor, Vec<Bytes>)> {
        let shards = self.inner.layout.0.shards;
        let (mut shard, mut from) = ((cursor >> 32) as u32, cursor as u32);
        let mut keys = Vec::new();
        let now = now_ms();
        while shard < shards {
            let args = Scan {
                mask: SCAN_KEYS,
                from,
                max_bytes: PAGE_BYTES,
                now_ms: now,
            }
            .encode();
            let base = self.inner.layout.shard_base(shard);
            let raw = self.inner.cache.execute(wire::KV_SCAN, base, &args)?;
            let (next, items) = wire::scan_reply(&raw)?;
            keys.extend(
                items
                    .into_iter()
                    .filter(|(k, _)| !k.starts_with(&hash::PLACED))
                    .map(|(k, _)| Bytes::copy_from_slice(k)),
            );
            if next == SCAN_DONE || next <= from {
                shard += 1;
                from = 0;
            } else {
                from = next;
            }
            if keys.len() >= count.max(1) {
                break;
            }
        }
        let next = if shard >= shards {
            0
        } else {
            (u64::from(shard) << 32) | u64::from(from)
        };
        Ok((next, keys))
    }

    /// A live key picked at random (Redis's `RANDOMKEY`), or `None` when the store
    /// holds none: the first key from a random bucket of a random shard on, wrapping
    /// around once. Keys in crowded buckets are picked a little more often.
    pub fn random_key(&self) -> Result<Option<Bytes>> {
        use rand::Rng;
        let d = self.inner.layout.0;
        let mut rng = rand::thread_rng();
        let shard = rng.gen_range(0..d.shards.max(1));
        let bucket = rng.gen_range(0..d.buckets.max(1));
        let start = (u64::from(shard) << 32) | u64::from(bucket);
        for cursor in [start, 0] {
            let (_, keys) = self.scan_keys(cursor, 1)?;
            if let Some(k) = keys.into_iter().next() {
                return Ok(Some(k));
            }
        }
        Ok(None)
    }

    /// Every live key (a full pass).
    pub fn keys(&self) -> Result<Vec<Bytes>> {
        let mut all = Vec::new();
        let mut cursor = 0;
        loop {
            let (next, keys) = self.scan_keys(cursor, 4096)?;
            all.extend(keys);
            if next == 0 {
                return Ok(all);
            }
            cursor = next;
        }
    }
}
