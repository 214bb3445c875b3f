//! How a store is created and how a value is put.

use std::time::Duration;

/// Largest shard: lookups stay in one region and stats scans stay short.
pub const MAX_SHARD: u64 = 64 << 20;
/// Shard size chosen when the region is larger.
pub const DEFAULT_SHARD: u64 = 16 << 20;

/// Options of [`crate::StoreExt::create_store`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// Expected bytes per value, to size the index (about two slots per item).
    pub avg_value_size: u64,
    /// Bytes per shard (must divide the region size); default: the region size up to
    /// 16 MiB.
    pub shard_size: Option<u64>,
    /// Region size of the cache; default: the manager's.
    pub region_size: Option<u64>,
    /// Copies of every region (see `CreateOptions::replicas`).
    pub replicas: u32,
    /// Values longer than this are erasure coded across servers.
    pub large_threshold: u64,
    /// Data and parity chunks of an erasure-coded value.
    pub ec_data: u8,
    pub ec_parity: u8,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            avg_value_size: 128,
            shard_size: None,
            region_size: None,
            replicas: 0,
            large_threshold: 1 << 20,
            ec_data: 4,
            ec_parity: 2,
        }
    }
}

/// When a put applies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Condition {
    #[default]
    Always,
    /// Only if the key is absent (Redis `NX`).
    IfAbsent,
    /// Only if the key is present (Redis `XX`).
    IfPresent,
}

/// Options of one put.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PutOptions {
    /// The value expires this long after the put.
    pub ttl: Option<Duration>,
    pub condition: Condition,
    /// The value expires at this time (milliseconds since the Unix epoch), exactly;
    /// overrides `ttl` (Redis's `PXAT`, and a rewrite keeping a key's expiry).
    pub expires_at_ms: Option<u64>,
}

impl PutOptions {
    pub fn ttl(ttl: Duration) -> Self {
        Self {
            ttl: Some(ttl),
            ..Self::default()
        }
    }

    /// Expiring at `ms` (since the Unix epoch), or never when `None`.
    pub fn expires_at(ms: Option<u64>) -> Self {
        Self {
            expires_at_ms: ms,
            ..Self::default()
        }
    }
}

/// A shard size for a region: the largest divisor of it that is a multiple of 4 KiB
/// and at most [`DEFAULT_SHARD`].
pub fn shard_size_for(region: u64) -> Option<u64> {
    if region <= DEFAULT_SHARD {
        return Some(region);
    }
    (region.div_ceil(DEFAULT_SHARD)..=region / 4096)
        .find(|k| region.is_multiple_of(*k) && (region / k).is_multiple_of(4096))
        .map(|k| region / k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_divide_regions() {
        assert_eq!(shard_size_for(1 << 20), Some(1 << 20));
        assert_eq!(shard_size_for(1 << 30), Some(16 << 20));
        let odd = 3 * (7 << 20);
        let s = shard_size_for(odd).expect("divisor");
        assert!(odd.is_multiple_of(s) && s.is_multiple_of(4096) && s <= DEFAULT_SHARD);
    }
}
