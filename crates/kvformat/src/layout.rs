//! The store descriptor and the addresses it implies.

use xxhash_rust::xxh3::xxh3_64;

use crate::FormatError;

pub const MAGIC: u64 = u64::from_le_bytes(*b"FCKVST01");
/// 3: slot words carry a rewrite stamp and 32 bits of offset (`slot::SlotWord`); a
/// version-2 client would read the stamp as offset. 2: a full bucket spills into its
/// pair bucket (`b ^ 1`); 1 had no pairs, and a version-1 client would miss (and
/// could duplicate) keys that spilled.
pub const VERSION: u32 = 3;

/// Offsets inside a shard.
pub const DESCRIPTOR: u64 = 0;
pub const DESCRIPTOR_LEN: usize = 64;
pub const BUMP: u64 = 64;
pub const HAND: u64 = 72;
pub const EVICTIONS: u64 = 80;
/// Changes whenever a shard is reset after its bytes were lost, so that clients drop
/// the items of the shard's past they kept for reuse (low 32 bits).
pub const GENERATION: u64 = 88;
/// Shard 0 only: the lease of the store's hot-key controller (a bucket-lock word).
pub const CONTROLLER: u64 = 96;
pub const FREE_HEADS: u64 = 128;
pub const INDEX: u64 = 1024;
/// Words per bucket: [`SLOTS`] item slots, then the bucket lock.
pub const BUCKET_WORDS: u64 = 8;
pub const SLOTS: usize = 7;
pub const BUCKET_BYTES: u64 = BUCKET_WORDS * 8;
/// Index slots aimed at per live item (the rest absorb tombstones and skew).
const SLOTS_PER_ITEM: u64 = 2;

/// A store's parameters, written at the start of every shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    pub shards: u32,
    pub shard_size: u64,
    pub buckets: u32,
    /// Values longer than this are stored erasure coded.
    pub large_threshold: u64,
    pub ec_data: u8,
    pub ec_parity: u8,
}

impl Descriptor {
    /// Plans a store of `shards` shards of `shard_size` bytes whose items average
    /// `avg_item` bytes.
    pub fn plan(
        shards: u32,
        shard_size: u64,
        avg_item: u64,
        large_threshold: u64,
        ec: (u8, u8),
    ) -> Result<Self, FormatError> {
        let bad = |r: String| Err(FormatError::Descriptor(r));
        if shards == 0 || !shard_size.is_multiple_of(4096) || shard_size < 64 << 10 {
            return bad(format!(
                "{shards} shards of {shard_size} bytes (need ≥ 1 shard, ≥ 64 KiB, a multiple of 4 KiB)"
            ));
        }
        if shard_size >> 3 > 1 << crate::slot::ITEM_OFFSET_BITS {
            return bad(format!("shard of {shard_size} bytes is too large"));
        }
        let avg = avg_item.max(crate::class::MIN_CLASS.into());
        let want = (shard_size / avg * SLOTS_PER_ITEM)
            .div_ceil(SLOTS as u64)
            .max(1);
        // Even, so every bucket has its pair.
        let buckets = u32::try_from(want.div_ceil(2) * 2).unwrap_or(u32::MAX - 1);
        let d = Self {
            shards,
            shard_size,
            buckets,
            large_threshold,
            ec_data: ec.0,
            ec_parity: ec.1,
        };
        let l = Layout(d);
        if l.heap_start() + (shard_size / 4) > shard_size {
            return bad(format!(
                "an index for {avg}-byte items leaves under 3/4 of a {shard_size}-byte shard for items"
            ));
        }
        Ok(d)
    }

    pub fn encode(&self) -> [u8; DESCRIPTOR_LEN] {
        let mut b = [0u8; DESCRIPTOR_LEN];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.shards.to_le_bytes());
        b[16..24].copy_from_slice(&self.shard_size.to_le_bytes());
        b[24..28].copy_from_slice(&self.buckets.to_le_bytes());
        b[28] = self.ec_data;
        b[29] = self.ec_parity;
        b[32..40].copy_from_slice(&self.large_threshold.to_le_bytes());
        let sum = xxh3_64(&b[..56]);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        if b.len() < DESCRIPTOR_LEN || b[0..8] != MAGIC.to_le_bytes() {
            return Err(FormatError::NotAStore);
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let version = u32_at(8);
        if version != VERSION {
            return Err(FormatError::Version {
                found: version,
                supported: VERSION,
            });
        }
        if u64_at(56) != xxh3_64(&b[..56]) {
            return Err(FormatError::Descriptor("checksum mismatch".into()));
        }
        let d = Self {
            shards: u32_at(12),
            shard_size: u64_at(16),
            buckets: u32_at(24),
            ec_data: b[28],
            ec_parity: b[29],
            large_threshold: u64_at(32),
        };
        if d.shards == 0
            || d.buckets == 0
            || !d.buckets.is_multiple_of(2)
            || Layout(d).heap_start() >= d.shard_size
        {
            return Err(FormatError::Descriptor(format!("inconsistent: {d:?}")));
        }
        Ok(d)
    }
}

/// The pair of the bucket at `bucket_addr`, from the address alone (what a
/// server-side lookup is given): shard bases are multiples of 4 KiB, the index starts
/// at [`INDEX`] and buckets are [`BUCKET_BYTES`] long, so flipping that bit flips the
/// bucket number's lowest bit.
#[inline]
pub fn pair_bucket_addr(bucket_addr: u64) -> u64 {
    bucket_addr ^ BUCKET_BYTES
}

/// Where a fetch-and-add of `size` on a shard's bump pointer that returned `old`
/// landed: the item's offset in the shard, or `None` past the heap's end.
#[inline]
pub fn carve(heap_start: u64, shard_size: u64, old: u64, size: u32) -> Option<u64> {
    let end = old.checked_add(u64::from(size))?.checked_add(heap_start)?;
    (end <= shard_size).then_some(heap_start + old)
}

/// The CLOCK bytes of the pair of the bucket whose CLOCK bytes are at `refs_addr`
/// (they start at a multiple of 64 within the shard, [`BUCKET_WORDS`] per bucket).
#[inline]
pub fn pair_refs_addr(refs_addr: u64) -> u64 {
    refs_addr ^ BUCKET_WORDS
}

/// Addresses in a store's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout(pub Descriptor);

impl Layout {
    #[inline]
    pub fn shard_base(&self, shard: u32) -> u64 {
        u64::from(shard) * self.0.shard_size
    }

    /// Offset of the reference bytes within a shard.
    #[inline]
    pub fn refs_offset(&self) -> u64 {
        INDEX + u64::from(self.0.buckets) * BUCKET_BYTES
    }

    /// Offset of the first item within a shard.
    #[inline]
    pub fn heap_start(&self) -> u64 {
        (self.refs_offset() + u64::from(self.0.buckets) * BUCKET_WORDS).div_ceil(64) * 64
    }

    #[inline]
    pub fn bucket_addr(&self, shard: u32, bucket: u32) -> u64 {
        self.shard_base(shard) + INDEX + u64::from(bucket) * BUCKET_BYTES
    }

    #[inline]
    pub fn slot_addr(&self, shard: u32, bucket: u32, slot: usize) -> u64 {
        self.bucket_addr(shard, bucket) + slot as u64 * 8
    }

    #[inline]
    pub fn lock_addr(&self, shard: u32, bucket: u32) -> u64 {
        self.slot_addr(shard, bucket, SLOTS)
    }

    #[inline]
    pub fn refs_addr(&self, shard: u32, bucket: u32) -> u64 {
        self.shard_base(shard) + self.refs_offset() + u64::from(bucket) * BUCKET_WORDS
    }

    /// The CLOCK byte of a key's slot numbered home-then-pair (`wire::REACH`), for a
    /// key whose home is `bucket`.
    #[inline]
    pub fn reach_ref_addr(&self, shard: u32, bucket: u32, slot: usize) -> u64 {
        if slot < SLOTS {
            self.refs_addr(shard, bucket) + slot as u64
        } else {
            self.refs_addr(shard, Self::pair(bucket)) + (slot - SLOTS) as u64
        }
    }

    #[inline]
    pub fn free_head_addr(&self, shard: u32, class: u8) -> u64 {
        self.shard_base(shard) + FREE_HEADS + u64::from(class) * 8
    }

    /// The bucket a full `bucket` spills into.
    #[inline]
    pub fn pair(bucket: u32) -> u32 {
        bucket ^ 1
    }

    /// Cache bytes the store spans.
    pub fn capacity(&self) -> u64 {
        u64::from(self.0.shards) * self.0.shard_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_round_trip_and_are_checked() {
        let d = Descriptor::plan(4, 1 << 20, 128, 1 << 20, (4, 2)).expect("plan");
        let l = Layout(d);
        assert!(l.heap_start() < d.shard_size / 4);
        assert!(l.refs_offset() >= INDEX + u64::from(d.buckets) * 64);
        assert_eq!(Descriptor::decode(&d.encode()), Ok(d));
        let mut b = d.encode();
        b[20] ^= 1;
        assert!(matches!(
            Descriptor::decode(&b),
            Err(FormatError::Descriptor(_))
        ));
        b = d.encode();
        b[8] = 9;
        assert!(matches!(
            Descriptor::decode(&b),
            Err(FormatError::Version { .. })
        ));
        assert_eq!(Descriptor::decode(&[0u8; 64]), Err(FormatError::NotAStore));
        assert!(Descriptor::plan(0, 1 << 20, 128, 0, (4, 2)).is_err());
        assert!(Descriptor::plan(1, 1000, 128, 0, (4, 2)).is_err());
        assert_eq!(l.bucket_addr(2, 3), 2 * (1 << 20) + INDEX + 3 * 64);
        assert_eq!(l.lock_addr(0, 0), INDEX + 56);
        assert!(d.buckets.is_multiple_of(2));
        let mut odd = d;
        odd.buckets += 1;
        assert!(
            Descriptor::decode(&odd.encode()).is_err(),
            "odd bucket count"
        );
        for (shard, bucket) in [(0, 0), (1, 5), (3, d.buckets - 1), (2, d.buckets - 2)] {
            let p = Layout::pair(bucket);
            assert!(p < d.buckets && Layout::pair(p) == bucket);
            assert_eq!(
                pair_bucket_addr(l.bucket_addr(shard, bucket)),
                l.bucket_addr(shard, p)
            );
            assert_eq!(
                pair_refs_addr(l.refs_addr(shard, bucket)),
                l.refs_addr(shard, p)
            );
            assert_eq!(
                l.reach_ref_addr(shard, bucket, 3),
                l.refs_addr(shard, bucket) + 3
            );
            assert_eq!(
                l.reach_ref_addr(shard, bucket, SLOTS + 3),
                l.refs_addr(shard, p) + 3
            );
        }
    }
}
