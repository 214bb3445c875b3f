//! A model of the store's index and CLOCK sweep (crates/store/src/evict.rs, put/locked.rs)
//! for `bench store-evict`: buckets of fixed slots in pairs, a hand per shard claiming
//! windows of buckets, and puts into full buckets evicting there.

use std::collections::HashMap;

use super::simulators::Policy;
use super::{STORE_TAKE, STORE_WINDOW};

/// Slots per bucket of the store's index.
pub(super) const SLOTS: usize = 7;
/// A slot never used (the store's `EMPTY`).
const NO_KEY: u64 = u64::MAX;
/// A slot whose key left (the store's `TOMB`).
const GONE: u64 = u64::MAX - 1;

/// A model of one shard of the store as it is laid out: every key has a fixed home
/// bucket of [`SLOTS`] slots and may spill into its pair (`b ^ 1`) once home has no
/// never-used slot, at most `cap` items fit the heap, and memory comes from the
/// store's sweep (the hand claims the next [`STORE_WINDOW`] buckets, up to the end of
/// the index, clears the reference bit of every referenced item in them and evicts
/// the first [`STORE_TAKE`] unreferenced ones; the extras' memory serves the next
/// puts). A put finding no never-used slot in either bucket reuses a freed one (home
/// first), else evicts the two buckets' least referenced item instead (the first with
/// its bit clear, else the first), as the store does.
/// With `stop_at_victim` (not what the store does) the hand stops after the bucket of
/// its last victim instead of skipping the rest of the window.
pub struct BucketClock {
    cap: usize,
    buckets: u64,
    /// `keys[b * SLOTS + s]`, [`NO_KEY`] or [`GONE`] when free.
    keys: Vec<u64>,
    referenced: Vec<bool>,
    map: HashMap<u64, usize>,
    bucket_of: std::sync::Arc<Vec<u32>>,
    hand: u64,
    stop_at_victim: bool,
    pub evictions: u64,
    /// Of those, evictions from full buckets (not by the hand).
    pub bucket_evictions: u64,
    pub steps: u64,
}

impl BucketClock {
    /// `bucket_of[key]` is each key's bucket (below `buckets`).
    pub fn new(
        cap: usize,
        buckets: u32,
        bucket_of: std::sync::Arc<Vec<u32>>,
        stop_at_victim: bool,
    ) -> Self {
        let n = buckets.max(1) as usize * SLOTS;
        Self {
            cap: cap.max(1),
            buckets: u64::from(buckets.max(1)),
            keys: vec![NO_KEY; n],
            referenced: vec![false; n],
            map: HashMap::with_capacity(cap.max(1)),
            bucket_of,
            hand: 0,
            stop_at_victim,
            evictions: 0,
            bucket_evictions: 0,
            steps: 0,
        }
    }

    fn evict_at(&mut self, i: usize) {
        let k = std::mem::replace(&mut self.keys[i], GONE);
        self.map.remove(&k);
        self.evictions += 1;
    }

    /// Sweep steps until one evicts (within two turns of the hand: the first clears
    /// every bit).
    fn sweep(&mut self) {
        for _ in 0..2 * self.buckets.div_ceil(STORE_WINDOW) + 1 {
            let start = self.hand % self.buckets;
            let n = STORE_WINDOW.min(self.buckets - start);
            self.hand += STORE_WINDOW;
            self.steps += 1;
            let mut won = 0;
            for i in start as usize * SLOTS..(start + n) as usize * SLOTS {
                if self.keys[i] >= GONE {
                    continue;
                }
                if self.referenced[i] {
                    self.referenced[i] = false;
                } else if won < STORE_TAKE {
                    self.evict_at(i);
                    won += 1;
                    if won == STORE_TAKE && self.stop_at_victim {
                        // The next step starts at the bucket after this one.
                        let bucket = (i / SLOTS) as u64;
                        self.hand = self.hand - STORE_WINDOW + (bucket + 1 - start);
                        break;
                    }
                }
            }
            if won > 0 {
                return;
            }
        }
    }
}

impl Policy for BucketClock {
    fn get(&mut self, key: u64) -> bool {
        match self.map.get(&key) {
            Some(&i) => {
                self.referenced[i] = true;
                true
            }
            None => false,
        }
    }

    fn insert(&mut self, key: u64) {
        if self.map.contains_key(&key) {
            return;
        }
        let Some(&b) = self.bucket_of.get(key as usize) else {
            return;
        };
        let slots = b as usize * SLOTS..(b as usize + 1) * SLOTS;
        let pair = (b ^ 1) as usize * SLOTS..((b ^ 1) as usize + 1) * SLOTS;
        if slots.end > self.keys.len() || pair.end > self.keys.len() {
            return;
        }
        let both = slots.clone().chain(pair);
        let free = |k: u64| both.clone().find(|&i| self.keys[i] == k);
        let at = match free(NO_KEY).or_else(|| free(GONE)) {
            Some(i) => {
                if self.map.len() >= self.cap {
                    self.sweep();
                }
                i
            }
            None => {
                // The pair's least referenced item makes room (its memory too).
                let i = both
                    .clone()
                    .find(|&i| !self.referenced[i])
                    .unwrap_or(slots.start);
                self.evict_at(i);
                self.bucket_evictions += 1;
                i
            }
        };
        if self.keys[at] < GONE || self.map.len() >= self.cap {
            // Nothing was freed: the put fails, as the store's would.
            return;
        }
        self.keys[at] = key;
        self.referenced[at] = false;
        self.map.insert(key, at);
    }

    fn evictions(&self) -> u64 {
        self.evictions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store_suite::eviction::StoreEvictOptions;
    use crate::store_suite::eviction::trace::simulate;

    #[test]
    fn the_store_model_keeps_its_books() {
        let o = StoreEvictOptions {
            keys: 5000,
            requests: 50_000,
            warmup: 10_000,
            ..StoreEvictOptions::new("farcache", true)
        };
        let buckets = 60u32;
        let bucket_of = std::sync::Arc::new((0..5000u32).map(|k| k * 7919 % buckets).collect());
        for stop in [false, true] {
            let mut m = BucketClock::new(150, buckets, std::sync::Arc::clone(&bucket_of), stop);
            let (n, evicted) = simulate(&o, &mut m).expect("trace");
            assert!(n.ratio() > 0.2 && n.ratio() < 0.95, "{n:?}");
            assert!(evicted > 0 && m.steps > 0);
            assert!(m.map.len() <= 150 && m.bucket_evictions <= m.evictions);
            for (&k, &i) in &m.map {
                assert_eq!(m.keys[i], k);
                assert_eq!((i / SLOTS) | 1, bucket_of[k as usize] as usize | 1);
            }
        }
    }
}
