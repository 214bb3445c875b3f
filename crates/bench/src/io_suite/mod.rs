//! `farcache bench io`: baselines, a process cluster, every (op, size,
//! distribution, c, s, b, q) combination, rows with ratios and targets.

use std::path::PathBuf;
use std::time::Duration;

use farcache_client::ClientConfig;
use farcache_testkit::{ClusterOptions, ProcessCluster};
use indicatif::{ProgressBar, ProgressStyle};

use crate::baseline::peers::{PeerOpts, RawTcpOpts, peer_baseline, raw_tcp_floor};
use crate::baseline::redis::{RedisBaselineOpts, redis_baseline};
use crate::baseline::sockperf::{SockperfOpts, sockperf_baseline};
use crate::ceiling::{CeilingSpec, run_ceiling};
use crate::error::{BenchError, Result};
use crate::io::{IoOp, IoSpec, run_latency, run_throughput_threads};
use crate::report::{BenchReport, BenchRow, fmt_bytes};
use crate::tools::{Tool, ensure_tools};
use crate::workload::KeyDistribution;

mod rows;
use rows::{Shape, latency_row, throughput_row};

/// Region size of the benchmark cluster: small enough to spread a cache over
/// several servers, large enough that few ops straddle regions.
const BENCH_REGION: u64 = 64 << 20;

/// `b` value meaning "pick per record size" (see [`batch_for`]).
pub const AUTO_BATCH: usize = 0;

/// The batch size used for `size`-byte records: `b` itself, or for [`AUTO_BATCH`] about
/// 1 MiB of payload per batch, between 16 and 1024 ops (Redy sizes batches by bytes, not
/// ops: a 4 MiB frame of 4 KiB reads only adds queueing).
pub fn batch_for(b: usize, size: usize) -> usize {
    if b == AUTO_BATCH {
        ((1usize << 20) / size.max(1)).clamp(16, 1024)
    } else {
        b
    }
}

/// Throughput needed vs the best peer row (8 B records, c = s = 1).
pub const TARGET_THROUGHPUT_RATIO: f64 = 5.0;
/// Share of the in-process ceiling networked 8 B reads must reach.
pub const TARGET_CEILING_FRACTION: f64 = 0.5;
/// Unbatched read p50 allowed vs the spinning raw TCP round trip.
pub const TARGET_LATENCY_RATIO: f64 = 1.2;
/// 4 KiB read bandwidth needed vs the multi-message loopback stream.
pub const TARGET_BANDWIDTH_RATIO: f64 = 0.7;

/// A working set that fits the CPU caches (L2 here is 1 MiB per core).
pub const CACHE_RESIDENT_BYTES: u64 = 1 << 20;
/// A working set well beyond them (L3 is 32 MiB on the development VM).
pub const BEYOND_CACHE_BYTES: u64 = 1 << 30;
/// The same with `--quick`.
pub const BEYOND_CACHE_BYTES_QUICK: u64 = 256 << 20;
/// Records per working set at most: peers hold every key in memory (Redis needs
/// about 100 B per 8 B key).
pub const MAX_RECORDS: u64 = 16 << 20;
/// The same with `--quick`.
pub const MAX_RECORDS_QUICK: u64 = 8 << 20;

/// What `bench io` runs.
#[derive(Debug, Clone)]
pub struct IoBenchOptions {
    /// The `farcache` binary used to start the manager and servers.
    pub bin: PathBuf,
    pub ops: Vec<IoOp>,
    pub sizes: Vec<usize>,
    pub dists: Vec<KeyDistribution>,
    /// Client connections per server (= application threads driving load).
    pub c: Vec<usize>,
    /// Server worker threads.
    pub s: Vec<usize>,
    /// Ops per batch ([`AUTO_BATCH`] = by record size).
    pub b: Vec<usize>,
    /// Batches in flight per connection.
    pub q: Vec<usize>,
    /// Server processes in the cluster.
    pub servers: usize,
    /// Records per run, overriding `working_sets` (one set of this many records).
    pub records: Option<u64>,
    /// Working sets in bytes: each size runs over `bytes / size` records (at most
    /// [`MAX_RECORDS`]), and the peers hold the same number of keys.
    pub working_sets: Vec<u64>,
    /// Run the same batches in-process through the server's executor (the ceiling).
    pub ceiling: bool,
    pub duration: Duration,
    /// Samples per unbatched latency run.
    pub latency_samples: u64,
    /// Measure Redis and sockperf in the same run.
    pub baselines: bool,
    pub quick: bool,
    /// Clients talk to the cluster over TLS (rows are named `farcache+TLS …`).
    pub tls: bool,
}

impl IoBenchOptions {
    /// The grid: 8 B–4 KiB, uniform and Zipf(0.99), reads and writes,
    /// c = s = 1, b = 1024, q = 4.
    pub fn new(bin: impl Into<PathBuf>, quick: bool) -> Self {
        Self {
            bin: bin.into(),
            ops: vec![IoOp::Read, IoOp::Write],
            sizes: vec![8, 64, 1024, 4096],
            dists: vec![KeyDistribution::Uniform, KeyDistribution::ZIPF],
            c: vec![1],
            s: vec![1],
            b: vec![AUTO_BATCH],
            q: vec![4],
            servers: 1,
            records: None,
            working_sets: vec![
                CACHE_RESIDENT_BYTES,
                if quick {
                    BEYOND_CACHE_BYTES_QUICK
                } else {
                    BEYOND_CACHE_BYTES
                },
            ],
            ceiling: true,
            duration: Duration::from_millis(if quick { 1000 } else { 3000 }),
            latency_samples: if quick { 20_000 } else { 100_000 },
            baselines: true,
            quick,
            tls: false,
        }
    }

    fn validate(&self) -> Result<()> {
        let empty = [
            ("ops", self.ops.is_empty()),
            ("sizes", self.sizes.is_empty()),
            ("distributions", self.dists.is_empty()),
            ("c", self.c.is_empty()),
            ("s", self.s.is_empty()),
            ("b", self.b.is_empty()),
            ("q", self.q.is_empty()),
        ];
        if let Some((what, _)) = empty.iter().find(|(_, e)| *e) {
            return Err(BenchError::InvalidArgument(format!("no {what} given")));
        }
        let zero = [&self.sizes, &self.c, &self.s, &self.q];
        if zero.iter().any(|v| v.contains(&0))
            || self.servers == 0
            || self.records == Some(0)
            || self.working_sets.contains(&0)
            || (self.records.is_none() && self.working_sets.is_empty())
        {
            return Err(BenchError::InvalidArgument(
                "sizes, c, s, q, servers, records and working sets must be ≥ 1".into(),
            ));
        }
        if self
            .sizes
            .iter()
            .any(|&s| s as u64 > u64::from(farcache_proto::MAX_OP_BYTES))
        {
            return Err(BenchError::InvalidArgument(format!(
                "record size above the per-op limit of {} bytes",
                farcache_proto::MAX_OP_BYTES
            )));
        }
        Ok(())
    }

    fn redis_opts(&self, size: usize, keys: u64) -> RedisBaselineOpts {
        let mut o = RedisBaselineOpts::new(size, self.quick);
        o.keyspace = keys;
        o
    }

    /// How many working sets run (`--records` makes it one).
    fn set_count(&self) -> usize {
        if self.records.is_some() {
            1
        } else {
            self.working_sets.len()
        }
    }

    /// Records of `size` bytes in working set `ws`.
    fn records(&self, ws: usize, size: usize) -> u64 {
        if let Some(r) = self.records {
            return r.max(1);
        }
        let cap = if self.quick {
            MAX_RECORDS_QUICK
        } else {
            MAX_RECORDS
        };
        let bytes = self
            .working_sets
            .get(ws)
            .copied()
            .unwrap_or(CACHE_RESIDENT_BYTES);
        (bytes / size.max(1) as u64).clamp(1, cap)
    }

    /// Suffix naming working set `ws` in row names, empty when only one runs.
    fn ws_suffix(&self, ws: usize, size: usize) -> String {
        if self.set_count() <= 1 {
            String::new()
        } else {
            format!(" ws={}", fmt_bytes(self.records(ws, size) * size as u64))
        }
    }
}

pub(crate) fn progress(len: u64) -> ProgressBar {
    let pb = if std::env::var_os("CI").is_some() {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(len)
    };
    if let Ok(style) = ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} {msg}") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

/// Runs the whole benchmark and returns the report (not yet printed or saved).
pub fn run_io_bench(opts: &IoBenchOptions) -> Result<BenchReport> {
    opts.validate()?;
    let mut report = BenchReport::new("io");
    if opts.baselines {
        run_baselines(opts, &mut report)?;
    }
    let ceilings = if opts.ceiling {
        run_ceilings(opts, &mut report)?
    } else {
        Vec::new()
    };
    let sizing = Sizing::new(opts);
    let grid = opts.ops.len()
        * opts.sizes.len()
        * opts.dists.len()
        * opts.set_count()
        * opts.c.len()
        * opts.b.len()
        * opts.q.len();
    let per_s = grid + opts.sizes.len() * opts.c.len();
    let pb = progress((per_s * opts.s.len()) as u64);
    pb.set_prefix("farcache");
    for &s in &opts.s {
        run_cluster(opts, &sizing, s, &ceilings, &pb, &mut report)?;
    }
    pb.finish_and_clear();
    Ok(report)
}

/// Raw TCP (spinning and sockperf), then per working set and record size: the
/// peers' spinning drivers (Redis, memcached) on exactly the records farcache
/// addresses, and the redis-benchmark sweep on the first working set.
fn run_baselines(opts: &IoBenchOptions, report: &mut BenchReport) -> Result<()> {
    ensure_tools(&[
        Tool::RedisServer,
        Tool::RedisBenchmark,
        Tool::Sockperf,
        Tool::Memcached,
    ])?;
    // The chart falls back to a built-in font; a missing one is not worth failing for.
    if let Err(e) = ensure_tools(&[Tool::DejaVuFont]) {
        tracing::debug!("chart font unavailable: {e}");
    }
    let runs = opts.sizes.len() * (opts.set_count() + 1) + 2;
    let pb = progress(runs as u64);
    pb.set_prefix("baselines");
    pb.set_message("raw TCP: spinning ping-pong + multi-message stream");
    report.baselines.raw_tcp = Some(raw_tcp_floor(&RawTcpOpts::new(opts.quick))?);
    pb.inc(1);
    pb.set_message("sockperf ping-pong + stream (blocking)");
    report.baselines.sockperf = Some(sockperf_baseline(&SockperfOpts::new(opts.quick))?);
    pb.inc(1);
    for &size in &opts.sizes {
        let keys = opts.records(0, size);
        pb.set_message(format!("redis-benchmark GET/SET {size} B, {keys} keys"));
        report
            .baselines
            .redis
            .push(redis_baseline(&opts.redis_opts(size, keys))?);
        pb.inc(1);
    }
    for ws in 0..opts.set_count() {
        for &size in &opts.sizes {
            let keys = opts.records(ws, size);
            pb.set_message(format!("redis + memcached batched {size} B, {keys} keys"));
            let mut p = PeerOpts::new(size, keys, opts.quick);
            p.batch = batch_for(opts.b[0], size);
            p.depth = opts.q[0];
            report.baselines.peers.push(peer_baseline(&p)?);
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    report.rows.extend(report.baselines.rows());
    Ok(())
}

/// One in-process ceiling: the server's executor on the same batches.
struct Ceiling {
    op: IoOp,
    size: usize,
    dist: KeyDistribution,
    records: u64,
    batch: usize,
    mops: f64,
}

/// The ceiling of every (working set, op, size, distribution, b), as rows.
fn run_ceilings(opts: &IoBenchOptions, report: &mut BenchReport) -> Result<Vec<Ceiling>> {
    let n = opts.set_count() * opts.ops.len() * opts.sizes.len() * opts.dists.len() * opts.b.len();
    let pb = progress(n as u64);
    pb.set_prefix("ceiling");
    let mut out = Vec::new();
    for ws in 0..opts.set_count() {
        for &op in &opts.ops {
            for &size in &opts.sizes {
                for &dist in &opts.dists {
                    for &b in &opts.b {
                        let records = opts.records(ws, size);
                        let batch = batch_for(b, size);
                        pb.set_message(format!("{} {size} B {dist} b={batch}", op.name()));
                        let spec = CeilingSpec {
                            op,
                            record_size: size,
                            dist,
                            records,
                            batch,
                            duration: opts.duration,
                        };
                        let c = run_ceiling(&spec)?;
                        report.rows.push(BenchRow {
                            name: format!(
                                "ceiling {} {size}B {dist}{}",
                                op.name(),
                                opts.ws_suffix(ws, size)
                            ),
                            system: "in-process".into(),
                            op: op.name().into(),
                            record_size: size,
                            distribution: dist.to_string(),
                            s: Some(1),
                            b: Some(batch),
                            mops: c.mops,
                            working_set_bytes: Some(records * size as u64),
                            ..BenchRow::default()
                        });
                        out.push(Ceiling {
                            op,
                            size,
                            dist,
                            records,
                            batch,
                            mops: c.mops,
                        });
                        pb.inc(1);
                    }
                }
            }
        }
    }
    pb.finish_and_clear();
    Ok(out)
}

/// The cache that holds the largest working set, and the memory each server needs
/// for its share.
struct Sizing {
    capacity: u64,
    server_memory: u64,
}

impl Sizing {
    fn new(opts: &IoBenchOptions) -> Self {
        let capacity = (0..opts.set_count())
            .flat_map(|ws| {
                opts.sizes
                    .iter()
                    .map(move |&s| opts.records(ws, s) * s as u64)
            })
            .max()
            .unwrap_or(BENCH_REGION);
        let capacity = capacity.div_ceil(BENCH_REGION).max(1) * BENCH_REGION;
        let regions_per_server = (capacity / BENCH_REGION).div_ceil(opts.servers as u64);
        let server_memory = (regions_per_server + 1) * BENCH_REGION;
        Self {
            capacity,
            server_memory,
        }
    }
}

/// One cluster with `s` worker threads per server: every (c, b, q) on a fresh cache.
fn run_cluster(
    opts: &IoBenchOptions,
    sizing: &Sizing,
    s: usize,
    ceilings: &[Ceiling],
    pb: &ProgressBar,
    report: &mut BenchReport,
) -> Result<()> {
    pb.set_message(format!("starting {} server(s), s = {s}", opts.servers));
    let cluster = ProcessCluster::start(
        &opts.bin,
        &ClusterOptions::default()
            .servers(opts.servers)
            .server_threads(s)
            .server_memory(sizing.server_memory)
            .region_size(BENCH_REGION)
            .tls(opts.tls),
    )
    .map_err(|e| BenchError::Cluster(e.to_string()))?;
    let first_row = report.rows.len();
    for &c in &opts.c {
        for &b in &opts.b {
            for &q in &opts.q {
                let client = cluster
                    .client_with(
                        ClientConfig::new("")
                            .connections(c)
                            .batch_size(if b == AUTO_BATCH { 1024 } else { b })
                            .queue_depth(q),
                    )
                    .map_err(|e| BenchError::Cluster(e.to_string()))?;
                let cache = client
                    .create("bench-io", sizing.capacity)
                    .map_err(|e| BenchError::Cluster(e.to_string()))?;
                prefill(&cache, sizing.capacity)?;
                let run = Run {
                    opts,
                    cache: &cache,
                    ceilings,
                    c,
                    s,
                };
                run.throughput_rows(b, q, pb, report)?;
                // Unbatched latency depends on neither b nor q: run it once per (c, s).
                if b == opts.b[0] && q == opts.q[0] && c == opts.c[0] {
                    run.latency_rows(pb, report)?;
                }
                client
                    .delete("bench-io")
                    .map_err(|e| BenchError::Cluster(e.to_string()))?;
            }
        }
    }
    drop(cluster);
    if opts.tls {
        for r in &mut report.rows[first_row..] {
            r.name = r.name.replacen("farcache", "farcache+TLS", 1);
            r.system = "farcache+tls".into();
        }
    }
    Ok(())
}

/// A cache of `records` records on a cluster of `s` threads per server, with `c`
/// connections per server.
struct Run<'a> {
    opts: &'a IoBenchOptions,
    cache: &'a farcache_client::Cache,
    ceilings: &'a [Ceiling],
    c: usize,
    s: usize,
}

impl Run<'_> {
    /// Every (op, size, distribution) with `b` ops per batch and `q` batches in flight.
    fn throughput_rows(
        &self,
        b: usize,
        q: usize,
        pb: &ProgressBar,
        report: &mut BenchReport,
    ) -> Result<()> {
        let (c, s) = (self.c, self.s);
        for ws in 0..self.opts.set_count() {
            for &op in &self.opts.ops {
                for &size in &self.opts.sizes {
                    for &dist in &self.opts.dists {
                        let records = self.opts.records(ws, size);
                        pb.set_message(format!(
                            "{} {size} B {dist} {records} records c={c} s={s} b={} q={q}",
                            op.name(),
                            batch_for(b, size)
                        ));
                        let spec = IoSpec {
                            op,
                            record_size: size,
                            dist,
                            records,
                            batch: batch_for(b, size),
                            depth: q,
                            duration: self.opts.duration,
                            read_fraction: None,
                        };
                        let out = run_throughput_threads(self.cache, &spec, c)?;
                        let ceiling = self
                            .ceilings
                            .iter()
                            .find(|x| {
                                (x.op, x.size, x.dist, x.records, x.batch)
                                    == (op, size, dist, records, spec.batch)
                            })
                            .map(|x| x.mops);
                        let shape = Shape {
                            c,
                            s,
                            suffix: self.opts.ws_suffix(ws, size),
                            ceiling,
                        };
                        report
                            .rows
                            .push(throughput_row(report, &spec, &out, &shape));
                        pb.inc(1);
                    }
                }
            }
        }
        Ok(())
    }

    /// Unbatched reads of every size, one at a time.
    fn latency_rows(&self, pb: &ProgressBar, report: &mut BenchReport) -> Result<()> {
        let (c, s) = (self.c, self.s);
        for &size in &self.opts.sizes {
            pb.set_message(format!("unbatched read {size} B c={c} s={s}"));
            let out = run_latency(
                self.cache,
                IoOp::Read,
                size,
                self.opts.records(0, size),
                self.opts.latency_samples,
            )?;
            // One thread, one op at a time: whatever `c`, one connection is used.
            report.rows.push(latency_row(report, size, &out, 1, s));
            pb.inc(1);
        }
        Ok(())
    }
}

/// Touches every page once so first-touch page faults are not measured.
pub(crate) fn prefill(cache: &farcache_client::Cache, capacity: u64) -> Result<()> {
    const CHUNK: u64 = 1 << 20;
    let buf = vec![0x11u8; CHUNK as usize];
    let mut batch = cache.batch();
    let mut pending = Vec::new();
    let mut addr = 0;
    while addr < capacity {
        let n = CHUNK.min(capacity - addr);
        batch.write(addr, &buf[..n as usize]);
        addr += n;
        if batch.len() == 16 || addr == capacity {
            pending.push(std::mem::replace(&mut batch, cache.batch()).submit());
        }
        if pending.len() >= 4 {
            check_prefill(pending.remove(0))?;
        }
    }
    for t in pending {
        check_prefill(t)?;
    }
    Ok(())
}

fn check_prefill(t: farcache_client::Ticket) -> Result<()> {
    match t.wait().first_error() {
        Some(e) => Err(BenchError::Cluster(format!("prefill failed: {e}"))),
        None => Ok(()),
    }
}
