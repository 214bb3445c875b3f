//! `farcache bench store`: the keyed store (crates/store) on small values, next to
//! Redis holding the same keys and values, measured in the same run.
//!
//! For every value size, back to back: Redis, preloaded from a snapshot and driven by
//! the spinning driver of `bench io` (MGET, pipelined GET, MSET, pipelined SET of `b` keys
//! with `q` batches in flight, on 1 and 2 connections; unpipelined GET and SET); then,
//! on one farcache server, a store of the same keys: the load (`mput` of `b` keys),
//! `mget` and `mput` of `b` random keys for `--seconds`, unbatched `get` interleaved
//! with unbatched 8-byte reads of a plain cache (the yardstick), and unbatched
//! `put`. Keys are `key:%012d` and values `value_bytes(size)` on both systems.
//!
//! `measure` holds the farcache loops, `redis` the baseline, `output` rows and files.
//! `hot` is `bench store-hot`, `eviction` `bench store-evict`, `large` `bench
//! store-large`; `start_cluster` here starts the cluster of every store bench but
//! `large`.

mod eviction;
mod hot;
pub mod large;
mod measure;
mod output;
mod redis;

use std::path::{Path, PathBuf};
use std::time::Duration;

use farcache_client::{Client, ClientConfig};
use farcache_testkit::{ClusterOptions, ProcessCluster};

use crate::baseline::driver::KEY_LEN;
use crate::error::{BenchError, Result};
use crate::io_suite::{prefill, progress};
use crate::tools::{Tool, ensure_tools};

pub use eviction::{
    BucketClock, Clock, Fifo, HitCount, Lru, Policy, Sharded, SimResult, StoreEvictOptions,
    StoreEvictReport, TARGET_POINTS, format_store_evict_table, run_store_evict_bench,
    write_store_evict_json, write_store_evict_json_to,
};
pub use hot::{
    HotOptionsView, StoreHotOptions, StoreHotReport, StoreHotRow, TARGET_MAX_MEAN, TopKey,
    format_store_hot_table, run_store_hot_bench, write_store_hot_chart, write_store_hot_json,
    write_store_hot_json_to,
};
pub use output::{
    RedisSetLatency, SizeCensus, StoreReport, StoreRow, format_store_table, write_store_json,
    write_store_json_to,
};

/// Unbatched GET p50 allowed vs an unbatched 8-byte read p50 on the same cluster.
pub const TARGET_GET_VS_READ: f64 = 1.3;
/// Batched GET throughput needed vs the best Redis row, for values of
/// [`TARGET_GET_SIZE`] bytes.
pub const TARGET_GET_VS_REDIS: f64 = 5.0;
pub const TARGET_GET_SIZE: usize = 64;
/// Largest value size accepted: this bench is about small values.
pub const MAX_VALUE: usize = 64 << 10;
/// Most keys: the keys and their random rings are held in memory by every client
/// thread and by Redis.
pub const MAX_KEYS: u64 = 1 << 28;
/// Region size of the cluster (as `bench io`); the store's shards are 16 MiB.
const REGION: u64 = 64 << 20;
/// The plain cache read 8 bytes at a time: one region, every page written first.
const BYTE_CACHE: u64 = REGION;

/// What `bench store` runs.
#[derive(Debug, Clone)]
pub struct StoreBenchOptions {
    /// The `farcache` binary used to start the manager and server.
    pub bin: PathBuf,
    /// Value sizes in bytes.
    pub sizes: Vec<usize>,
    /// Keys stored (and preloaded into Redis) per size.
    pub keys: u64,
    /// Keys per `mget`/`mput` and per Redis batch (`b`).
    pub batch: usize,
    /// Batches in flight (`q`): farcache runs `q` threads sharing one connection (a
    /// store call waits for its batch), Redis `q` batches per connection.
    pub depth: usize,
    /// Measured window of every timed run (after a 100 ms warm-up).
    pub duration: Duration,
    /// Samples per unbatched latency run.
    pub latency_samples: u64,
    /// Measure Redis in the same run.
    pub baselines: bool,
    pub quick: bool,
}

impl StoreBenchOptions {
    /// The grid: 16, 64, 256 and 1024 B values, 1 M keys (100 k with `quick`),
    /// b = 64 (`bench io`'s client default), q = 4.
    pub fn new(bin: impl Into<PathBuf>, quick: bool) -> Self {
        Self {
            bin: bin.into(),
            sizes: vec![16, 64, 256, 1024],
            keys: if quick { 100_000 } else { 1_000_000 },
            batch: 64,
            depth: 4,
            duration: Duration::from_millis(if quick { 1000 } else { 3000 }),
            latency_samples: if quick { 20_000 } else { 100_000 },
            baselines: true,
            quick,
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(BenchError::InvalidArgument(m));
        if self.sizes.is_empty() {
            return bad("no value sizes given".into());
        }
        if let Some(s) = self.sizes.iter().find(|&&s| s == 0 || s > MAX_VALUE) {
            return bad(format!(
                "value size {s}: sizes must be between 1 and {MAX_VALUE} bytes"
            ));
        }
        if !(1..=MAX_KEYS).contains(&self.keys) {
            return bad(format!(
                "keys must be between 1 and {MAX_KEYS}, got {}",
                self.keys
            ));
        }
        if self.batch == 0 || self.batch > usize::from(u16::MAX) {
            return bad(format!("batch must be between 1 and {}", u16::MAX));
        }
        if !(1..=64).contains(&self.depth) {
            return bad("queue depth must be between 1 and 64".into());
        }
        if self.duration.is_zero() || self.latency_samples == 0 {
            return bad("durations and latency samples must be positive".into());
        }
        Ok(())
    }
}

/// Cache bytes for `keys` values of `size` bytes: twice what the items take (a 24-byte
/// header, the key and the value, rounded up to a size class ≤ 25 % larger) plus the
/// index. The slack keeps bucket pairs far from full: a put into a full pair evicts.
pub fn store_capacity(keys: u64, size: usize) -> u64 {
    let item = (24 + KEY_LEN + size) as u64;
    let per_key = (item * 5 / 4 + 24) * 2;
    keys.saturating_mul(per_key).div_ceil(REGION).max(1) * REGION
}

/// The checks every Zipf-trace bench (store-hot, store-evict) makes of its keys,
/// value size and exponent.
pub(crate) fn check_trace(keys: u64, value_size: usize, theta: f64) -> Result<()> {
    let bad = |m: String| Err(BenchError::InvalidArgument(m));
    if !(1000..=MAX_KEYS).contains(&keys) {
        return bad(format!(
            "keys must be between 1000 and {MAX_KEYS}, got {keys}"
        ));
    }
    if value_size == 0 || value_size > MAX_VALUE {
        return bad(format!(
            "value size must be between 1 and {MAX_VALUE} bytes, got {value_size}"
        ));
    }
    if !(theta.is_finite() && theta > 0.0 && theta <= 10.0) {
        return bad(format!(
            "zipf exponent must be above 0 and at most 10, got {theta}"
        ));
    }
    Ok(())
}

pub(crate) fn cluster_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Cluster(e.to_string())
}

/// A manager and `servers` server processes of `bin` (one worker thread each,
/// `memory` bytes each in regions of `region` bytes), and a client of them with
/// `config`. The cluster stops when the returned handle is dropped.
fn start_cluster(
    bin: &Path,
    servers: usize,
    memory: u64,
    region: u64,
    config: ClientConfig,
) -> Result<(ProcessCluster, Client)> {
    let cluster = ProcessCluster::start(
        bin,
        &ClusterOptions::default()
            .servers(servers)
            .server_threads(1)
            .server_memory(memory)
            .region_size(region),
    )
    .map_err(cluster_err)?;
    let client = cluster.client_with(config).map_err(cluster_err)?;
    Ok((cluster, client))
}

/// Runs the whole benchmark and returns the report (not yet printed or saved).
pub fn run_store_bench(opts: &StoreBenchOptions) -> Result<StoreReport> {
    opts.validate()?;
    let mut report = StoreReport::new(opts);
    if opts.baselines {
        ensure_tools(&[Tool::RedisServer, Tool::RedisBenchmark])?;
    }
    let largest = opts
        .sizes
        .iter()
        .map(|&s| store_capacity(opts.keys, s))
        .max()
        .unwrap_or(REGION);
    // One connection: GETs keep `q` batches in flight from one thread, PUTs from `q`
    // threads sharing it.
    let (_cluster, client) = start_cluster(
        &opts.bin,
        1,
        largest + BYTE_CACHE + REGION,
        REGION,
        ClientConfig::new("")
            .connections(1)
            .batch_size(opts.batch)
            .queue_depth(opts.depth),
    )?;
    let bytes = client
        .create("bench-store-bytes", BYTE_CACHE)
        .map_err(cluster_err)?;
    prefill(&bytes, BYTE_CACHE)?;
    let steps = measure::PHASES + usize::from(opts.baselines);
    let pb = progress((opts.sizes.len() * steps) as u64);
    pb.set_prefix("store");
    for &size in &opts.sizes {
        // Redis and the store of one size run back to back, so a shared machine's
        // drift shifts both sides of a ratio alike; the idle farcache server sleeps in
        // poll(2) while Redis runs, and Redis is stopped before the store runs.
        if opts.baselines {
            pb.set_message(format!("{size} B: redis, {} keys", opts.keys));
            let b = redis::baseline(opts, size)?;
            report.redis_set_latency.push(b.set_latency);
            report.baselines.peers.push(b.peers);
            pb.inc(1);
        }
        let out = measure::run_size(&client, &bytes, opts, size, &pb)?;
        report.push_size(opts, &out);
    }
    pb.finish_and_clear();
    client.delete("bench-store-bytes").map_err(cluster_err)?;
    report.finish_notes(opts);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        let ok = StoreBenchOptions::new("farcache", true);
        assert!(ok.validate().is_ok());
        assert_eq!(ok.keys, 100_000);
        for bad in [
            StoreBenchOptions {
                sizes: vec![0],
                ..ok.clone()
            },
            StoreBenchOptions {
                sizes: vec![],
                ..ok.clone()
            },
            StoreBenchOptions {
                sizes: vec![MAX_VALUE + 1],
                ..ok.clone()
            },
            StoreBenchOptions {
                keys: 0,
                ..ok.clone()
            },
            StoreBenchOptions {
                batch: 0,
                ..ok.clone()
            },
            StoreBenchOptions {
                depth: 0,
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn capacity_has_slack() {
        // 1 M 16-byte values: items of 56 B, about 90 B a key with the index.
        let c = store_capacity(1_000_000, 16);
        assert!(c >= 150_000_000 && c.is_multiple_of(REGION), "{c}");
        assert_eq!(store_capacity(1, 16), REGION);
    }
}
