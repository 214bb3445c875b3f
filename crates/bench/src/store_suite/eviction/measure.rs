//! The store's side of `bench store-evict`: the shard size that fits the wanted
//! items, the CLOCK hands' steps, and the trace against a live store.

use std::time::Instant;

use farcache_kvformat::layout::HAND;
use farcache_store::{Store, StoreStats};

use super::trace::{HitCount, distinct_misses, replay};
use super::{STORE_WINDOW, StoreEvictOptions};
use crate::baseline::driver::value_bytes;
use crate::error::Result;
use crate::io_suite::progress;
use crate::store_suite::cluster_err;
use crate::store_suite::measure::{Key, key};

/// Shards (= regions) are powers of two between these, about [`SHARDS`] of them: the
/// store's size then follows the target in fine steps, and each shard's CLOCK still
/// has thousands of items to choose from.
const MIN_SHARD: u64 = 64 << 10;
const MAX_SHARD: u64 = 1 << 20;
const SHARDS: u64 = 12;

/// The largest power of two between [`MIN_SHARD`] and [`MAX_SHARD`] that cuts
/// `bytes` into at least [`SHARDS`] shards.
pub(super) fn shard_size(bytes: u64) -> u64 {
    let mut s = MAX_SHARD;
    while s > MIN_SHARD && bytes / s < SHARDS {
        s /= 2;
    }
    s
}

/// What the store did with the trace.
pub(super) struct StoreRun {
    pub(super) count: HitCount,
    pub(super) secs: f64,
    pub(super) errors: u64,
    pub(super) first_error: Option<String>,
    pub(super) after_warmup: StoreStats,
    pub(super) end: StoreStats,
    /// Steps of the shards' CLOCK hands while counting.
    pub(super) steps_counted: u64,
}

/// Steps every shard's CLOCK hand has taken (each claims [`STORE_WINDOW`] buckets).
fn hand_steps(store: &Store) -> Result<u64> {
    let d = store.descriptor();
    let mut b = store.cache().batch();
    for s in 0..d.shards {
        b.read(u64::from(s) * d.shard_size + HAND, 8);
    }
    let r = b.run();
    let mut steps = 0;
    for s in 0..d.shards as usize {
        let raw = r.data(s).map_err(cluster_err)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(
            raw.get(..8)
                .ok_or_else(|| cluster_err("short read of a hand"))?,
        );
        steps += u64::from_le_bytes(w) / STORE_WINDOW;
    }
    Ok(steps)
}
pub(super) fn run_store(store: &Store, o: &StoreEvictOptions) -> Result<StoreRun> {
    let value = value_bytes(o.value_size);
    let pb = progress(o.requests);
    pb.set_prefix("evict");
    pb.set_message(format!("store: {} requests", o.requests));
    let mut count = HitCount::default();
    let (mut errors, mut first_error) = (0u64, None::<String>);
    let mut fail = |e: String| {
        errors += 1;
        if first_error.is_none() {
            first_error = Some(e);
        }
    };
    let mut after_warmup = None;
    let mut hand_at_warmup = 0;
    let mut started = None;
    let mut hit = vec![false; o.batch];
    let stats = |s: &Store| s.stats().map_err(cluster_err);
    replay(o, |at, ids| {
        if at < o.warmup && at + ids.len() as u64 >= o.warmup {
            after_warmup = Some(stats(store)?);
            hand_at_warmup = hand_steps(store)?;
            started = Some(Instant::now());
        }
        let keys: Vec<Key> = ids.iter().map(|&i| key(i)).collect();
        match store.mget(&keys) {
            Ok(rs) => {
                for (j, r) in rs.into_iter().enumerate() {
                    hit[j] = match r {
                        Ok(Some(v)) if v[..] == value[..] => true,
                        Ok(Some(v)) => {
                            fail(format!("wrong value ({} bytes) returned", v.len()));
                            false
                        }
                        Ok(None) => false,
                        Err(e) => {
                            fail(e.to_string());
                            false
                        }
                    };
                }
            }
            Err(e) => {
                fail(e.to_string());
                hit[..ids.len()].fill(false);
            }
        }
        for (j, &h) in hit[..ids.len()].iter().enumerate() {
            if at + j as u64 >= o.warmup {
                count.count(h);
            }
        }
        let missed: Vec<Key> = distinct_misses(ids, &hit[..ids.len()])
            .into_iter()
            .map(key)
            .collect();
        let pairs: Vec<(&Key, &[u8])> = missed.iter().map(|k| (k, &value[..])).collect();
        for r in store.mput(&pairs) {
            if let Err(e) = r {
                fail(e.to_string());
            }
        }
        pb.inc(ids.len() as u64);
        Ok(())
    })?;
    let secs = started.map_or(0.0, |s| s.elapsed().as_secs_f64());
    pb.finish_and_clear();
    let end = stats(store)?;
    let steps_counted = hand_steps(store)?.saturating_sub(hand_at_warmup);
    Ok(StoreRun {
        steps_counted,
        count,
        secs,
        errors,
        first_error,
        after_warmup: after_warmup.unwrap_or_default(),
        end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_follow_the_store_size() {
        assert_eq!(shard_size(1 << 30), MAX_SHARD);
        assert_eq!(shard_size(12_800_000), MAX_SHARD);
        assert_eq!(shard_size(1_280_000), 64 << 10);
        assert_eq!(shard_size(2_000_000), 128 << 10);
        assert_eq!(shard_size(1000), MIN_SHARD);
    }
}
