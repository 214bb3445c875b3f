//! Occupancy and fragmentation of a store, from a census of every shard's index
//! (the `kv_stats` procedure, one per shard, all in one batch).

use farcache_kvformat::layout::DESCRIPTOR;
use farcache_kvformat::wire::{self, ShardStats};

use crate::store::{Store, now_ms};
use crate::{Result, StoreError};

/// A store's census.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StoreStats {
    pub shards: u32,
    /// Items a GET finds (including expired ones not yet overwritten).
    pub live: u64,
    pub expired: u64,
    pub tombstones: u64,
    pub empty_slots: u64,
    /// Bytes of heap (all shards).
    pub heap: u64,
    /// Heap carved into items so far.
    pub carved: u64,
    /// Size-class bytes live items occupy.
    pub reserved: u64,
    /// Bytes live items need (header, key, value).
    pub requested: u64,
    /// Carved bytes not held by a live item: on free lists, cached by handles for
    /// reuse, or lost with a handle that died.
    pub free_or_held: u64,
    pub evictions: u64,
}

impl StoreStats {
    /// Share of reserved bytes lost to size-class rounding.
    pub fn internal_fragmentation(&self) -> f64 {
        if self.reserved == 0 {
            0.0
        } else {
            1.0 - self.requested as f64 / self.reserved as f64
        }
    }

    /// Share of carved heap not holding a live item.
    pub fn external_fragmentation(&self) -> f64 {
        if self.carved == 0 {
            0.0
        } else {
            self.free_or_held as f64 / self.carved as f64
        }
    }
}

impl Store {
    /// Counts every shard's items and bytes. It scans the whole index, so it costs
    /// about one memory read per slot on each server: an operator's call, not a
    /// per-request one.
    pub fn stats(&self) -> Result<StoreStats> {
        let lay = self.inner.layout;
        let now = now_ms().to_le_bytes();
        let mut b = self.inner.cache.batch();
        for s in 0..lay.0.shards {
            b.execute(wire::KV_STATS, lay.shard_base(s) + DESCRIPTOR, &now);
        }
        let r = b.run();
        let mut sum = ShardStats::default();
        for s in 0..lay.0.shards as usize {
            let raw = r.data(s)?;
            let one = ShardStats::decode(raw).map_err(|e| StoreError::Reply {
                proc: wire::KV_STATS,
                reason: e.to_string(),
            })?;
            sum.add(&one);
        }
        Ok(StoreStats {
            shards: lay.0.shards,
            live: sum.live,
            expired: sum.expired,
            tombstones: sum.tombstones,
            empty_slots: sum.empty,
            heap: sum.heap,
            carved: sum.carved,
            reserved: sum.reserved,
            requested: sum.requested,
            free_or_held: sum.carved.saturating_sub(sum.reserved),
            evictions: sum.evictions,
        })
    }
}
