//! `farcache bench io`: baselines, a process cluster, every (op, size,
//! distribution, c, s, b, q) combination, rows with ratios and targets.

use std::path::PathBuf;
use std::time::Duration;

use farcache_client::ClientConfig;
use farcache_testkit::{ClusterOptions, ProcessCluster};
use indicatif::{ProgressBar, ProgressStyle};

use crate::baseline::redis::{RedisBaselineOpts, redis_baseline};
use crate::baseline::sockperf::{SockperfOpts, sockperf_baseline};
use crate::error::{BenchError, Result};
use crate::io::{IoOp, IoOutcome, IoSpec, run_latency, run_throughput_threads};
use crate::report::{BenchReport, BenchRow};
use crate::tools::{Tool, ensure_tools};
use crate::workload::KeyDistribution;

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

/// Throughput needed vs Redis's best pipelined figure (8 B records).
pub const TARGET_THROUGHPUT_RATIO: f64 = 10.0;
/// Unbatched read p50 allowed vs the raw TCP round trip.
pub const TARGET_LATENCY_RATIO: f64 = 1.2;
/// 4 KiB read bandwidth needed vs sockperf's loopback stream.
pub const TARGET_BANDWIDTH_RATIO: f64 = 0.7;

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
    /// Records per run; `None` = the Redis keyspace, so both systems address
    /// the same number of keys.
    pub records: Option<u64>,
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
    /// The issue's grid: 8 B–4 KiB, uniform and Zipf(0.99), reads and writes,
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
        if zero.iter().any(|v| v.contains(&0)) || self.servers == 0 {
            return Err(BenchError::InvalidArgument(
                "sizes, c, s, q and servers must be ≥ 1".into(),
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

    fn redis_opts(&self, size: usize) -> RedisBaselineOpts {
        RedisBaselineOpts::new(size, self.quick)
    }

    fn records(&self) -> u64 {
        self.records
            .unwrap_or_else(|| self.redis_opts(8).keyspace)
            .max(1)
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
    let sizing = Sizing::new(opts);
    let grid = opts.ops.len()
        * opts.sizes.len()
        * opts.dists.len()
        * opts.c.len()
        * opts.b.len()
        * opts.q.len();
    let per_s = grid + opts.sizes.len() * opts.c.len();
    let pb = progress((per_s * opts.s.len()) as u64);
    pb.set_prefix("farcache");
    for &s in &opts.s {
        run_cluster(opts, &sizing, s, &pb, &mut report)?;
    }
    pb.finish_and_clear();
    Ok(report)
}

/// sockperf, then redis-benchmark for every record size.
fn run_baselines(opts: &IoBenchOptions, report: &mut BenchReport) -> Result<()> {
    ensure_tools(&[Tool::RedisServer, Tool::RedisBenchmark, Tool::Sockperf])?;
    // The chart falls back to a built-in font; a missing one is not worth failing for.
    if let Err(e) = ensure_tools(&[Tool::DejaVuFont]) {
        tracing::debug!("chart font unavailable: {e}");
    }
    let pb = progress(opts.sizes.len() as u64 + 1);
    pb.set_prefix("baselines");
    pb.set_message("sockperf ping-pong + stream");
    report.baselines.sockperf = Some(sockperf_baseline(&SockperfOpts::new(opts.quick))?);
    pb.inc(1);
    for &size in &opts.sizes {
        pb.set_message(format!("redis-benchmark GET/SET {size} B"));
        report
            .baselines
            .redis
            .push(redis_baseline(&opts.redis_opts(size))?);
        pb.inc(1);
    }
    pb.finish_and_clear();
    report.rows.extend(report.baselines.rows());
    Ok(())
}

/// Records per run, the cache that holds them at the largest size, and the memory
/// each server needs for its share.
struct Sizing {
    records: u64,
    capacity: u64,
    server_memory: u64,
}

impl Sizing {
    fn new(opts: &IoBenchOptions) -> Self {
        let records = opts.records();
        let capacity = records * opts.sizes.iter().copied().max().unwrap_or(8) as u64;
        let capacity = capacity.div_ceil(BENCH_REGION).max(1) * BENCH_REGION;
        let regions_per_server = (capacity / BENCH_REGION).div_ceil(opts.servers as u64);
        let server_memory = (regions_per_server + 1) * BENCH_REGION;
        Self {
            records,
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
                    records: sizing.records,
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
    records: u64,
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
        for &op in &self.opts.ops {
            for &size in &self.opts.sizes {
                for &dist in &self.opts.dists {
                    pb.set_message(format!(
                        "{} {size} B {dist} c={c} s={s} b={} q={q}",
                        op.name(),
                        batch_for(b, size)
                    ));
                    let spec = IoSpec {
                        op,
                        record_size: size,
                        dist,
                        records: self.records,
                        batch: batch_for(b, size),
                        depth: q,
                        duration: self.opts.duration,
                    };
                    let out = run_throughput_threads(self.cache, &spec, c)?;
                    report.rows.push(throughput_row(report, &spec, &out, c, s));
                    pb.inc(1);
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
                self.records,
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

fn base_row(name: String, op: &str, size: usize, dist: String, c: usize, s: usize) -> BenchRow {
    BenchRow {
        name,
        system: "farcache".into(),
        op: op.into(),
        record_size: size,
        distribution: dist,
        c: Some(c),
        s: Some(s),
        ..BenchRow::default()
    }
}

fn throughput_row(
    report: &BenchReport,
    spec: &IoSpec,
    out: &IoOutcome,
    c: usize,
    s: usize,
) -> BenchRow {
    let size = spec.record_size;
    let mut row = BenchRow {
        b: Some(spec.batch),
        q: Some(spec.depth),
        mops: out.mops,
        p50_us: out.latency.p50_us,
        p99_us: out.latency.p99_us,
        p999_us: out.latency.p999_us,
        ..base_row(
            format!("farcache {} {size}B {}", spec.op.name(), spec.dist),
            spec.op.name(),
            size,
            spec.dist.to_string(),
            c,
            s,
        )
    };
    if out.errors > 0 {
        row.name.push_str(&format!(" ({} errors)", out.errors));
    }
    // Runs with op errors still get their target, marked as missed.
    let issue_shape = c == 1 && s == 1;
    let clean = out.errors == 0;
    if let Some(redis) = report.baselines.redis_for(size) {
        let (label, mops) = match spec.op {
            IoOp::Read => (redis.best_get.label(), redis.best_get_mops()),
            IoOp::Write => (redis.best_set.label(), redis.best_set_mops()),
        };
        row = row.with_redis_baseline(label, mops);
        if size == 8 && issue_shape && spec.dist == KeyDistribution::Uniform {
            let met = clean
                && row
                    .ratio_vs_redis
                    .is_some_and(|r| r >= TARGET_THROUGHPUT_RATIO);
            row = row.with_target(format!(">= {TARGET_THROUGHPUT_RATIO}x redis best"), met);
        }
    }
    if let Some(sp) = &report.baselines.sockperf {
        let gbps = out.bytes_per_sec * 8.0 / 1e9;
        row = row.with_bandwidth(gbps, sp.throughput.gbps);
        if size == 4096
            && spec.op == IoOp::Read
            && issue_shape
            && spec.dist == KeyDistribution::Uniform
        {
            let met = clean
                && row
                    .bandwidth_ratio_vs_sockperf
                    .is_some_and(|r| r >= TARGET_BANDWIDTH_RATIO);
            row = row.with_target(
                format!(">= {:.0}% sockperf bw", TARGET_BANDWIDTH_RATIO * 100.0),
                met,
            );
        }
    }
    row
}

fn latency_row(report: &BenchReport, size: usize, out: &IoOutcome, c: usize, s: usize) -> BenchRow {
    let mut row = BenchRow {
        b: Some(1),
        q: Some(1),
        mops: out.mops,
        p50_us: out.latency.p50_us,
        p99_us: out.latency.p99_us,
        p999_us: out.latency.p999_us,
        ..base_row(
            format!("farcache unbatched read {size}B"),
            "read",
            size,
            "uniform".into(),
            c,
            s,
        )
    };
    if let Some(rtt) = report.baselines.raw_rtt_p50_us() {
        row = row.with_latency_baseline(rtt);
    }
    if let Some(redis) = report.baselines.redis_for(size) {
        row.baseline = Some(format!(
            "redis unpipelined GET p50 {:.1}us",
            redis.unpipelined_get_p50_us()
        ));
        if size == 8 && s == 1 {
            let met = out.errors == 0
                && row
                    .latency_ratio_vs_raw_tcp
                    .is_some_and(|r| r <= TARGET_LATENCY_RATIO)
                && out.latency.p50_us < redis.unpipelined_get_p50_us();
            row = row.with_target(format!("p50 <= {TARGET_LATENCY_RATIO}x RTT, < redis"), met);
        }
    }
    row
}
