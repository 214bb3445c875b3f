//! `farcache bench store-evict`: the store's CLOCK eviction against exact LRU on one
//! trace.
//!
//! A Zipf trace of GET-then-PUT-on-miss over `keys` distinct keys of fixed-size
//! values runs against a store whose heap holds about `cache_fraction` of those keys'
//! items, in batches (an `mget` of `batch` requests, then one `mput` of the keys it
//! missed). After the warm-up part of the trace the store's hit ratio is counted.
//! The same trace, with the same batch semantics, then runs through an exact LRU
//! simulator whose capacity is the number of items the store actually held at the
//! end (`store.stats().live`): both hold the same number of items, so the difference
//! is the eviction policy (and the store's implementation of CLOCK), not the sizing.
//! Further simulators of the same capacity take the store's CLOCK apart (one cache
//! per shard, textbook CLOCK, FIFO, a model of the store's index and sweep as it was
//! (clearing its whole window) and with the hand stopping at its last victim), so a
//! gap to LRU can be traced to its cause.
//!
//! This file holds the options and the run as a whole; `trace` the trace, its replay
//! and hit counts; `measure` the store's side (its size, the trace against it);
//! `simulators` the simulated policies (LRU, CLOCK, FIFO, per shard); `store_model`
//! the model of the store's index and sweep; `report` the report, notes, table and
//! JSON.

mod measure;
mod report;
mod simulators;
mod store_model;
mod trace;

use std::path::PathBuf;

use farcache_client::ClientConfig;
use farcache_kvformat::hash::locate;
use farcache_kvformat::{class, item};
use farcache_store::{StoreExt, StoreOptions};

use super::measure::key;
use super::{cluster_err, start_cluster};
use crate::baseline::driver::KEY_LEN;
use crate::error::{BenchError, Result};
use crate::report::{BenchRow, ReportHead};
use measure::{run_store, shard_size};
use report::notes;
use simulators::split;
use trace::simulate;

pub use report::{
    SimResult, StoreEvictReport, format_store_evict_table, write_store_evict_json,
    write_store_evict_json_to,
};
pub use simulators::{Clock, Fifo, Lru, Policy, Sharded};
pub use store_model::BucketClock;
pub use trace::HitCount;

/// The goal: the store's hit ratio within this many points of exact LRU's.
pub const TARGET_POINTS: f64 = 2.0;
/// The store's sweep (crates/store/src/evict.rs): buckets a step claims, and items
/// of the wanted class it evicts at most.
const STORE_WINDOW: u64 = 16;
const STORE_TAKE: usize = 4;

/// What `bench store-evict` runs.
#[derive(Debug, Clone)]
pub struct StoreEvictOptions {
    /// The `farcache` binary used to start the manager and server.
    pub bin: PathBuf,
    /// Distinct keys of the trace.
    pub keys: u64,
    pub value_size: usize,
    /// Zipf exponent of the trace.
    pub theta: f64,
    /// Share of the distinct keys' items the store's heap holds.
    pub cache_fraction: f64,
    /// Requests in the trace, warm-up included.
    pub requests: u64,
    /// Requests before the hit ratio is counted.
    pub warmup: u64,
    /// Requests per `mget` (their misses go in one `mput`).
    pub batch: usize,
    pub quick: bool,
}

impl StoreEvictOptions {
    /// 1 M keys of 64 B (100 k with `quick`), Zipf 0.99, a store of 10 % of them, a
    /// trace of 6 × keys requests whose first 2 × keys warm up (the store turns over
    /// several times before counting starts), 64 requests a batch.
    pub fn new(bin: impl Into<PathBuf>, quick: bool) -> Self {
        let keys = if quick { 100_000 } else { 1_000_000 };
        Self {
            bin: bin.into(),
            keys,
            value_size: 64,
            theta: 0.99,
            cache_fraction: 0.10,
            requests: 6 * keys,
            warmup: 2 * keys,
            batch: 64,
            quick,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(BenchError::InvalidArgument(m));
        super::check_trace(self.keys, self.value_size, self.theta)?;
        if !(self.cache_fraction > 0.0 && self.cache_fraction < 1.0) {
            return bad(format!(
                "cache fraction must be between 0 and 1 (exclusive), got {}",
                self.cache_fraction
            ));
        }
        if self.warmup >= self.requests {
            return bad(format!(
                "requests ({}) must exceed the warm-up ({})",
                self.requests, self.warmup
            ));
        }
        if !(1..=4096).contains(&self.batch) {
            return bad("batch must be between 1 and 4096".into());
        }
        Ok(())
    }
}

/// Runs the whole benchmark and returns the report (not yet printed or saved).
pub fn run_store_evict_bench(o: &StoreEvictOptions) -> Result<StoreEvictReport> {
    o.validate()?;
    let item_bytes = item::len(KEY_LEN, o.value_size);
    let item_bytes = class::for_len(item_bytes)
        .and_then(class::size)
        .map(u64::from)
        .ok_or_else(|| BenchError::InvalidArgument("no size class holds the item".into()))?;
    let want_items = (o.keys as f64 * o.cache_fraction).ceil() as u64;
    let shard = shard_size(want_items * item_bytes);
    // Generous: the server holds the store, and the probe store before it.
    let memory = (want_items * item_bytes * 3).div_ceil(shard) * shard + (64 << 20);
    let (cluster, client) = start_cluster(
        &o.bin,
        1,
        memory,
        shard,
        ClientConfig::new("").connections(1),
    )?;
    let sopts = StoreOptions {
        avg_value_size: o.value_size as u64,
        shard_size: Some(shard),
        region_size: Some(shard),
        ..StoreOptions::default()
    };
    // A one-shard store tells how many items a shard's heap holds (the rest of the
    // shard is its index and reference bytes).
    let heap_per_shard = {
        let probe = client
            .create_store("bench-evict-probe", shard, &sopts)
            .map_err(cluster_err)?;
        let heap = probe.stats().map_err(cluster_err)?.heap;
        drop(probe);
        client.delete("bench-evict-probe").map_err(cluster_err)?;
        heap
    };
    let items_per_shard = (heap_per_shard / item_bytes).max(1);
    let shards = want_items.div_ceil(items_per_shard).max(1);
    let name = "bench-store-evict";
    let store = client
        .create_store(name, shards * shard, &sopts)
        .map_err(cluster_err)?;
    let heap_bytes = store.stats().map_err(cluster_err)?.heap;
    let d = store.descriptor();
    // Each key's shard and bucket, for the simulators laid out as the store is.
    let (shard_of, bucket_of): (Vec<u32>, Vec<u32>) = (0..o.keys)
        .map(|i| {
            let h = locate(&key(i), d.shards, d.buckets);
            (h.shard, h.bucket)
        })
        .unzip();
    let bucket_of = std::sync::Arc::new(bucket_of);
    let run = run_store(&store, o)?;
    drop(store);
    client.delete(name).map_err(cluster_err)?;
    drop(cluster);

    let cap = run.end.live;
    let n = u64::from(d.shards);
    let model = |stop: bool| {
        Sharded::new(
            shard_of.clone(),
            split(cap, n)
                .map(|c| BucketClock::new(c, d.buckets, bucket_of.clone(), stop))
                .collect(),
        )
    };
    let sims: Vec<(String, Result<(HitCount, u64)>)> = vec![
        ("exact LRU".into(), simulate(o, &mut Lru::new(cap as usize))),
        (
            format!("exact LRU per shard ({n})"),
            simulate(
                o,
                &mut Sharded::new(shard_of.clone(), split(cap, n).map(Lru::new).collect()),
            ),
        ),
        (
            "textbook CLOCK".into(),
            simulate(o, &mut Clock::new(cap as usize)),
        ),
        (
            "FIFO (no reference bits)".into(),
            simulate(o, &mut Fifo::new(cap as usize)),
        ),
        (
            format!("store model, old sweep clearing its whole window ({n} hands)"),
            simulate(o, &mut model(false)),
        ),
        (
            "store model, the hand stopping at its 4th victim".into(),
            simulate(o, &mut model(true)),
        ),
    ];
    let mut simulations = Vec::new();
    for (policy, r) in sims {
        let (count, evictions_counted) = r?;
        simulations.push(SimResult {
            policy,
            capacity: cap,
            hit_ratio: count.ratio(),
            points_vs_lru: 0.0,
            count,
            evictions_counted,
        });
    }
    let lru_ratio = simulations.first().map_or(f64::NAN, |x| x.hit_ratio);
    for x in &mut simulations {
        x.points_vs_lru = (x.hit_ratio - lru_ratio) * 100.0;
    }
    let clock_ratio = simulations.get(2).map_or(f64::NAN, |x| x.hit_ratio);
    let store_ratio = run.count.ratio();
    let evictions_counted = run.end.evictions - run.after_warmup.evictions.min(run.end.evictions);
    let points = (lru_ratio - store_ratio) * 100.0;
    let counted = o.requests - o.warmup;
    let mut row = BenchRow {
        name: format!("store GET, PUT on miss, zipf{} {}B", o.theta, o.value_size),
        system: "farcache".into(),
        op: "GET+PUT".into(),
        record_size: o.value_size,
        distribution: format!("zipf{}", o.theta),
        c: Some(1),
        s: Some(1),
        b: Some(o.batch),
        q: Some(1),
        mops: counted as f64 / run.secs.max(1e-9) / 1e6,
        ..BenchRow::default()
    };
    row = row.with_target(
        format!("hit ratio within {TARGET_POINTS} points of LRU"),
        run.errors == 0 && points <= TARGET_POINTS,
    );
    let mut r = StoreEvictReport {
        head: ReportHead::new("store-evict"),
        keys: o.keys,
        value_size: o.value_size,
        zipf_theta: o.theta,
        requests: o.requests,
        warmup: o.warmup,
        batch: o.batch,
        cache_fraction: o.cache_fraction,
        item_bytes,
        store_bytes: shards * shard,
        shard_bytes: shard,
        heap_bytes,
        heap_items: heap_bytes / item_bytes,
        live_after_warmup: run.after_warmup.live,
        live_at_end: run.end.live,
        sim_capacity: cap,
        store_hit_ratio: store_ratio,
        lru_hit_ratio: lru_ratio,
        clock_sim_hit_ratio: clock_ratio,
        points_below_lru: points,
        store: run.count,
        simulations,
        evictions: run.end.evictions,
        evictions_counted,
        sweep_steps_counted: run.steps_counted,
        evictions_outside_sweep_min: evictions_counted
            .saturating_sub(STORE_TAKE as u64 * run.steps_counted),
        errors: run.errors,
        first_error: run.first_error,
        stats_at_end: run.end,
        rows: vec![row],
        notes: Vec::new(),
    };
    r.notes = notes(&r, shards);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        let ok = StoreEvictOptions::new("farcache", true);
        assert!(ok.validate().is_ok());
        for bad in [
            StoreEvictOptions {
                keys: 0,
                ..ok.clone()
            },
            StoreEvictOptions {
                cache_fraction: 1.0,
                ..ok.clone()
            },
            StoreEvictOptions {
                warmup: ok.requests,
                ..ok.clone()
            },
            StoreEvictOptions {
                value_size: 0,
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
