//! `farcache bench store-hot`: how evenly a skewed read load spreads over the servers
//! of one store, without and with the store's hot-key layer (DistCache: hot keys get
//! a second copy in a shard of an independent hash, readers pick the less loaded of
//! the two homes).
//!
//! For every server count: a cluster of that many server processes (one worker thread
//! each), one store spread over all of them (the same number of shards on every
//! server), loaded with `keys` values. Then client threads keep batched GETs
//! (`mget_submit`) of Zipf-drawn keys in flight for a warm-up and a timed window,
//! twice: first without the hot-key layer, then with its controller running. A
//! server's load is how many kv lookups it served in the window (the count `kv_hot`
//! returns, read before and after), so copies read on the second home count there.
//!
//! This file holds the options and the runs; `placement` where the store's shards
//! and a key's two homes are and each server's lookup count; `reads` the load and
//! the timed windows of reads; `top_keys` the most drawn keys and their homes;
//! `report` the rows, notes, table and JSON; `chart` the PNG.

mod chart;
mod placement;
mod reads;
mod report;
mod top_keys;

use std::path::PathBuf;
use std::time::Duration;

use farcache_client::ClientConfig;
use farcache_store::{HotOptions, StoreExt, StoreOptions};
use indicatif::ProgressBar;

use super::measure::Key;
use super::{cluster_err, start_cluster};
use crate::error::{BenchError, Result};
use crate::io_suite::progress;
use crate::report::ReportHead;
use placement::{plan, probes};
use reads::{load, timed_reads, zipf_ring};
use report::row;

pub use chart::write_store_hot_chart;
pub use report::{
    HotOptionsView, StoreHotReport, StoreHotRow, format_store_hot_table, write_store_hot_json,
    write_store_hot_json_to,
};
pub use top_keys::TopKey;

/// The goal for the hot-key layer: max ÷ mean server load.
pub const TARGET_MAX_MEAN: f64 = 1.25;
/// Most servers per cluster (all are processes on this machine).
pub const MAX_SERVERS: usize = 32;
/// Seed of the keys drawn (`top_keys` finds the hottest ones by it).
const RING_SEED: u64 = 0x5eed;
/// Warm-up of the run without the layer (connections, reference bytes).
const PLAIN_WARMUP: Duration = Duration::from_millis(500);

/// What `bench store-hot` runs.
#[derive(Debug, Clone)]
pub struct StoreHotOptions {
    /// The `farcache` binary used to start the manager and servers.
    pub bin: PathBuf,
    /// Server counts, one cluster each.
    pub servers: Vec<usize>,
    pub keys: u64,
    pub value_size: usize,
    /// Zipf exponent of the key draws.
    pub theta: f64,
    /// Keys per `mget`.
    pub batch: usize,
    /// `mget`s in flight per client thread.
    pub depth: usize,
    /// Client threads (one store handle, one connection per server).
    pub threads: usize,
    /// Measured window of each run.
    pub duration: Duration,
    /// Time the hot-key controller runs before the window opens.
    pub hot_warmup: Duration,
    /// The controller's options.
    pub hot: HotOptions,
    pub quick: bool,
}

impl StoreHotOptions {
    /// 6 servers, 1 M keys of 64 B (100 k with `quick`), Zipf 0.99, 2 threads each
    /// keeping 4 mgets of 64 keys in flight, 3 s windows (1 s with `quick`), and a
    /// controller polling every 40 ms for at most 64 hot keys.
    pub fn new(bin: impl Into<PathBuf>, quick: bool) -> Self {
        Self {
            bin: bin.into(),
            servers: vec![6],
            keys: if quick { 100_000 } else { 1_000_000 },
            value_size: 64,
            theta: 0.99,
            batch: 64,
            depth: 4,
            threads: 2,
            duration: Duration::from_millis(if quick { 1000 } else { 3000 }),
            hot_warmup: Duration::from_millis(if quick { 1000 } else { 1500 }),
            // 40 ms (the default) leaves a round 60 ms before the 100 ms copy lease
            // runs out; 64 keys: under Zipf 0.99 rank 64 draws 0.1 % of the reads, far
            // below a server's share, and 64 refreshes a round stay well inside 40 ms.
            hot: HotOptions {
                every: Duration::from_millis(40),
                max_keys: 64,
                min_count: 16,
            },
            quick,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(BenchError::InvalidArgument(m));
        if self.servers.is_empty() {
            return bad("no server counts given".into());
        }
        if let Some(n) = self
            .servers
            .iter()
            .find(|&&n| !(2..=MAX_SERVERS).contains(&n))
        {
            return bad(format!(
                "servers must be between 2 and {MAX_SERVERS} (a hot key needs two homes), got {n}"
            ));
        }
        super::check_trace(self.keys, self.value_size, self.theta)?;
        if !(1..=4096).contains(&self.batch) {
            return bad("batch must be between 1 and 4096".into());
        }
        if !(1..=64).contains(&self.depth) || !(1..=64).contains(&self.threads) {
            return bad("queue depth and threads must be between 1 and 64".into());
        }
        if self.duration.is_zero() {
            return bad("seconds must be positive".into());
        }
        if !(1..=4096).contains(&self.hot.max_keys) {
            return bad(format!(
                "hot keys must be between 1 and 4096, got {}",
                self.hot.max_keys
            ));
        }
        Ok(())
    }
}

/// Runs the whole benchmark and returns the report (not yet printed or saved).
pub fn run_store_hot_bench(o: &StoreHotOptions) -> Result<StoreHotReport> {
    o.validate()?;
    let mut report = StoreHotReport {
        head: ReportHead::new("store-hot"),
        keys: o.keys,
        value_size: o.value_size,
        zipf_theta: o.theta,
        batch: o.batch,
        depth: o.depth,
        threads: o.threads,
        seconds: o.duration.as_secs_f64(),
        hot_warmup_seconds: o.hot_warmup.as_secs_f64(),
        hot_options: HotOptionsView {
            every_ms: o.hot.every.as_millis() as u64,
            max_keys: o.hot.max_keys,
            min_count: o.hot.min_count,
        },
        rows: Vec::new(),
        notes: Vec::new(),
    };
    let ring = zipf_ring(o, RING_SEED)?;
    let pb = progress(o.servers.len() as u64 * 3);
    pb.set_prefix("store-hot");
    for &n in &o.servers {
        let rows = run_servers(o, n, &ring, &pb)?;
        report.rows.extend(rows);
    }
    pb.finish_and_clear();
    report.finish_notes(o);
    Ok(report)
}

/// One cluster of `n` servers: load, a run without the layer, a run with it.
fn run_servers(
    o: &StoreHotOptions,
    n: usize,
    ring: &[Key],
    pb: &ProgressBar,
) -> Result<Vec<StoreHotRow>> {
    let p = plan(o.keys, o.value_size, n);
    let (cluster, client) = start_cluster(
        &o.bin,
        n,
        p.per_server * p.region + (64 << 20),
        p.region,
        ClientConfig::new("")
            .connections(1)
            .batch_size(o.batch)
            .queue_depth(o.depth),
    )?;
    let name = "bench-store-hot";
    let store = client
        .create_store(
            name,
            p.per_server * n as u64 * p.region,
            &StoreOptions {
                avg_value_size: o.value_size as u64,
                region_size: Some(p.region),
                ..StoreOptions::default()
            },
        )
        .map_err(cluster_err)?;
    let probes = probes(store.cache(), &cluster, &store);
    pb.set_message(format!("{n} servers: load {} keys", o.keys));
    let loaded = load(&store, o)?;
    // A put into a bucket with no free slot evicts even in a roomy store: the census
    // tells how many keys the reads can miss.
    let census = store.stats().map_err(cluster_err)?;
    pb.inc(1);

    pb.set_message(format!("{n} servers: zipf reads, hot-key layer off"));
    let plain = timed_reads(&store, o, ring, &probes, PLAIN_WARMUP)?;
    pb.inc(1);
    pb.set_message(format!("{n} servers: zipf reads, hot-key layer on"));
    // The controller runs on its own handle, as it would in its own process: the
    // readers' handle learns hot keys only from their homes' replies.
    let ctl_store = client.open_store(name).map_err(cluster_err)?;
    let ctl = ctl_store.spawn_hot_keys(o.hot.clone());
    let with = timed_reads(&store, o, ring, &probes, o.hot_warmup);
    drop(ctl);
    let with = with?;
    let ctl_copy_reads = ctl_store.copy_reads();
    pb.inc(1);
    let mut rows = vec![
        row(o, n, false, &probes, plain, &store)?,
        row(o, n, true, &probes, with, &store)?,
    ];
    for r in &mut rows {
        (r.live_after_load, r.evicted_by_load) = (census.live, census.evictions);
        r.controller_copy_reads = r.hot_key_layer.then_some(ctl_copy_reads);
    }
    drop((store, ctl_store));
    client.delete(name).map_err(cluster_err)?;
    drop(cluster);
    if loaded.errors > 0 {
        return Err(BenchError::Cluster(format!(
            "{} of {} puts of the load failed, first: {}",
            loaded.errors,
            o.keys,
            loaded.first_error.unwrap_or_default()
        )));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        let ok = StoreHotOptions::new("farcache", true);
        assert!(ok.validate().is_ok());
        for bad in [
            StoreHotOptions {
                servers: vec![],
                ..ok.clone()
            },
            StoreHotOptions {
                servers: vec![1],
                ..ok.clone()
            },
            StoreHotOptions {
                keys: 10,
                ..ok.clone()
            },
            StoreHotOptions {
                theta: 0.0,
                ..ok.clone()
            },
            StoreHotOptions {
                theta: f64::NAN,
                ..ok.clone()
            },
            StoreHotOptions {
                duration: Duration::ZERO,
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
