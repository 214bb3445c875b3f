//! The trace `bench store-evict` replays: Zipf-drawn key ids in batches, each batch's
//! misses put once, and the hits counted after the warm-up (for the store and for
//! every simulated policy alike).

use serde::Serialize;

use super::StoreEvictOptions;
use super::simulators::Policy;
use crate::error::Result;
use crate::workload::KeyGen;

/// Seed of the trace (the store and the simulators replay the same one).
const SEED: u64 = 0xc10c;

/// Hits and misses of the counted part of a trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HitCount {
    pub hits: u64,
    pub misses: u64,
}

impl HitCount {
    pub fn ratio(&self) -> f64 {
        let n = self.hits + self.misses;
        if n == 0 {
            f64::NAN
        } else {
            self.hits as f64 / n as f64
        }
    }

    pub(super) fn count(&mut self, hit: bool) {
        if hit {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
    }
}

/// Replays the trace's `requests` requests: `batch` gets each batch's key ids and
/// the index of its first request in the trace.
pub(super) fn replay(
    o: &StoreEvictOptions,
    mut batch: impl FnMut(u64, &[u64]) -> Result<()>,
) -> Result<()> {
    let mut g = KeyGen::zipf(o.keys, o.value_size, o.theta, SEED)?;
    let mut ids = vec![0u64; o.batch];
    let mut at = 0u64;
    while at < o.requests {
        let n = (o.requests - at).min(o.batch as u64) as usize;
        g.fill(&mut ids[..n]);
        batch(at, &ids[..n])?;
        at += n as u64;
    }
    Ok(())
}

/// The batch's missed keys, each once, in order of first miss.
pub(super) fn distinct_misses(ids: &[u64], hit: &[bool]) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    for (&id, &h) in ids.iter().zip(hit) {
        if !h && !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

/// The trace through `p`: hits of the counted part, and evictions in it.
pub(super) fn simulate(o: &StoreEvictOptions, p: &mut impl Policy) -> Result<(HitCount, u64)> {
    let mut count = HitCount::default();
    let mut hit = vec![false; o.batch];
    let mut evicted_before = 0;
    replay(o, |at, ids| {
        if at < o.warmup && at + ids.len() as u64 >= o.warmup {
            evicted_before = p.evictions();
        }
        for (j, &id) in ids.iter().enumerate() {
            hit[j] = p.get(id);
            if at + j as u64 >= o.warmup {
                count.count(hit[j]);
            }
        }
        for id in distinct_misses(ids, &hit[..ids.len()]) {
            p.insert(id);
        }
        Ok(())
    })?;
    Ok((count, p.evictions() - evicted_before))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store_suite::eviction::simulators::{Clock, Fifo, Lru, Sharded};

    #[test]
    fn one_shard_is_the_whole_cache() {
        let o = StoreEvictOptions {
            keys: 5000,
            requests: 50_000,
            warmup: 10_000,
            ..StoreEvictOptions::new("farcache", true)
        };
        let clock = simulate(&o, &mut Clock::new(300)).expect("trace");
        let one = Sharded::new(vec![0; 5000], vec![Clock::new(300)]);
        assert_eq!(simulate(&o, &mut { one }).expect("trace"), clock);
        // FIFO never does better than CLOCK on a skewed trace.
        let fifo = simulate(&o, &mut Fifo::new(300)).expect("trace");
        assert!(fifo.0.ratio() < clock.0.ratio(), "{fifo:?} {clock:?}");
    }

    #[test]
    fn lru_beats_nothing_on_a_skewed_trace() {
        let o = StoreEvictOptions {
            keys: 10_000,
            requests: 200_000,
            warmup: 50_000,
            ..StoreEvictOptions::new("farcache", true)
        };
        let mut lru = Lru::new(1000);
        let (n, evicted) = simulate(&o, &mut lru).expect("trace");
        assert_eq!(n.hits + n.misses, 150_000);
        assert!(evicted > 0 && evicted <= lru.evictions);
        // 10 % of the keys catch most of a Zipf(0.99) trace.
        assert!(n.ratio() > 0.5 && n.ratio() < 0.95, "{n:?}");
    }
}
