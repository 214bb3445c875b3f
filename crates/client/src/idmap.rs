//! A map keyed by server id without SipHash: ids are small manager-assigned integers
//! and the map is consulted once per op on the hot path.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use farcache_proto::ServerId;

#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        // Spread the id over the high bits hashbrown uses for control bytes.
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) ^ u64::from(b) ^ (self.0 >> 56);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n);
    }
}

pub(crate) type IdMap<V> = HashMap<ServerId, V, BuildHasherDefault<IdHasher>>;
