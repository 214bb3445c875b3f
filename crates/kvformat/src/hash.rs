//! Where a key lives: its shard, bucket and 16-bit tag come from one 128-bit hash;
//! the hot-key layer's second home comes from an independently seeded hash.

use xxhash_rust::xxh3::{xxh3_64_with_seed, xxh3_128};

/// Seed of the second, independent hash (DistCache's second layer).
const SECOND_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHash {
    pub shard: u32,
    pub bucket: u32,
    pub tag: u16,
}

/// `x` mapped onto `[0, n)` by multiply-shift (no division, uniform for uniform `x`).
#[inline]
fn range(x: u32, n: u32) -> u32 {
    ((u64::from(x) * u64::from(n)) >> 32) as u32
}

/// Prefix of the store's own keys that name their shard (erasure-coded pieces and
/// manifest copies): `PLACED ++ shard (u32 LE) ++ …`. User keys may not start so.
pub const PLACED: [u8; 4] = [0xff, 0xfe, b'F', b'C'];

/// The shard a placed key names.
#[inline]
pub fn placed_shard(key: &[u8]) -> Option<u32> {
    if key.len() >= 8 && key[..4] == PLACED {
        Some(u32::from_le_bytes([key[4], key[5], key[6], key[7]]))
    } else {
        None
    }
}

/// The home of `key` in a store of `shards` shards of `buckets` buckets each.
#[inline]
pub fn locate(key: &[u8], shards: u32, buckets: u32) -> KeyHash {
    let h = xxh3_128(key);
    let lo = h as u64;
    let hi = (h >> 64) as u64;
    let shard = match placed_shard(key) {
        Some(s) => s % shards.max(1),
        None => range((lo >> 32) as u32, shards),
    };
    KeyHash {
        shard,
        bucket: range(lo as u32, buckets),
        tag: (hi >> 48) as u16,
    }
}

/// The shard of `key`'s second copy under the hot-key layer: an independent hash,
/// moved off `first` when it lands on it (so the two copies differ when they can).
pub fn second_shard(key: &[u8], shards: u32, first: u32) -> u32 {
    let s = range((xxh3_64_with_seed(key, SECOND_SEED) >> 32) as u32, shards);
    if s == first && shards > 1 {
        (s + 1) % shards
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn homes_are_in_range_and_spread() {
        let mut per_shard = [0u32; 8];
        for i in 0..80_000u32 {
            let h = locate(&i.to_le_bytes(), 8, 1000);
            assert!(h.shard < 8 && h.bucket < 1000);
            per_shard[h.shard as usize] += 1;
            let s2 = second_shard(&i.to_le_bytes(), 8, h.shard);
            assert!(s2 < 8 && s2 != h.shard);
        }
        for n in per_shard {
            assert!((9_000..11_000).contains(&n), "{per_shard:?}");
        }
        assert_eq!(second_shard(b"k", 1, 0), 0);
        let mut placed = PLACED.to_vec();
        placed.extend_from_slice(&5u32.to_le_bytes());
        placed.extend_from_slice(b"rest");
        assert_eq!(placed_shard(&placed), Some(5));
        assert_eq!(locate(&placed, 8, 100).shard, 5);
        assert_eq!(locate(&placed, 4, 100).shard, 1);
        assert_eq!(placed_shard(b"\xff\xfeFC"), None);
    }
}
