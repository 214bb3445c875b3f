//! `farcache bench sproc`: stored procedures against the same work done at the client
//! with plain reads, and against Redis Lua scripts.
//!
//! Rows (see docs/benchmarks.md):
//! 1. read one record and verify: the built-in `aggregate` over one record, batched,
//!    vs Redis `EVALSHA` of a GET-and-compare script at its best (the faster of our
//!    spinning driver and redis-benchmark);
//! 2. aggregate 2 / 3 records: `aggregate` vs reading the records and adding them at
//!    the client, and vs a Redis script that GETs and sums the keys;
//! 3. a 64-node pointer chase over 3 servers: one `chase` invocation (FFlow, DFlow) vs
//!    64 dependent reads, in time and in round trips (counted by the servers);
//! 4. k-hop counts on a power-law graph over 3 servers: `khop` (FFlow, DFlow with and
//!    without per-destination batching) vs a level-by-level BFS at the client.
//!
//! A procedure that needs bytes held by another server is shipped there (FFlow) or
//! pulls them (DFlow) server to server; rows 3 and 4 run both and count the client's
//! round trips and the servers' messages and frames.
//!
//! `records` runs rows 1–2, `spread` rows 3–4 (with `chase` and `khop`), `measure`
//! holds the timing loops they share.

mod chase;
mod khop;
mod lab;
mod measure;
mod records;
mod rtt_chart;
mod spread;
mod traversal;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

use farcache_client::{Cache, Ticket};

use crate::baseline::redis_eval::{
    EvalScript, RedisEvalBaseline, RedisEvalOpts, redis_eval_baselines,
};
use crate::error::{BenchError, Result};
use crate::io_suite::progress;
use crate::report::{BenchReport, BenchRow};
use crate::tools::{Tool, ensure_tools};
use chase::{CHASE_CAP, chase_rows};
use khop::{StoredGraph, khop_rows, khop_unbatched_rows};
use measure::RunOutcome;
use records::records_section;
pub use rtt_chart::{rtt_series, write_rtt_chart};
use spread::{SPREAD_SERVERS, SpreadCluster};
use traversal::{BenchGraph, traversal_rows};

/// Throughput needed vs Redis's best pipelined `EVALSHA` of the same logic.
pub const TARGET_EVAL_RATIO: f64 = 20.0;
/// The WebAssembly verify may take at most this many times the built-in's time.
pub const TARGET_WASM_SLOWDOWN: f64 = 2.0;
/// `aggregate` over 2 records vs reading both and adding at the client.
pub const TARGET_AGG2_CLIENT_RATIO: f64 = 1.8;
/// `aggregate` over 3 records vs reading all three and adding at the client.
pub const TARGET_AGG3_CLIENT_RATIO: f64 = 2.5;
/// 64-node chase over 3 servers: client-side time ÷ procedure time.
pub const TARGET_CHASE_TIME_RATIO: f64 = 5.0;
/// The one-way delay (µs) at which the lab rows carry their targets.
pub const TARGET_DELAY_US: f64 = 25.0;
/// Pointer chase (FFlow, three segments) over the client's reads at that delay.
pub const TARGET_CHASE_LAB_RATIO: f64 = 20.0;
/// Traversal k = 3 over the client-side search at that delay, in p50 and in bytes.
pub const TARGET_TRAVERSAL_LAB: f64 = 3.0;
/// Traversal over the client-side search on loopback (one source).
pub const TARGET_TRAVERSAL_LOOPBACK: f64 = 1.0;
/// 64-node chase over 3 servers: client-side round trips ÷ procedure round trips.
pub const TARGET_CHASE_RT_RATIO: f64 = 10.0;

/// Region size of both clusters: small, so the 3-server caches span every server.
const REGION: u64 = 1 << 20;
/// Nodes per chain.
pub const CHASE_LEN: u32 = 64;
/// Pre-drawn logical ops per batched run, replayed cyclically.
const TABLE: usize = 1 << 16;

/// What `bench sproc` runs.
#[derive(Debug, Clone)]
pub struct SprocBenchOptions {
    /// The `farcache` binary used to start the manager and servers.
    pub bin: PathBuf,
    /// Logical ops per batch (rows 1–2); a list sweeps.
    pub b: Vec<usize>,
    /// Batches in flight (rows 1–2); a list sweeps.
    pub q: Vec<usize>,
    /// Length of every measured run (batched or one at a time).
    pub duration: Duration,
    /// 8-byte records for rows 1–2; `None` = the Redis keyspace.
    pub records: Option<u64>,
    /// Distinct 64-node chains per placement.
    pub chains: usize,
    /// Edges of the k-hop graph (vertices = edges / 10).
    pub edges: u64,
    /// Distinct k-hop sources, queried cyclically.
    pub khop_sources: usize,
    /// Kronecker scale of the traversal graph (2^scale vertices, 16 edges each).
    pub graph_scale: u32,
    /// A graph file (graph-tool `.gt` or a text edge list, gzipped or not) whose
    /// traversal rows run after the Kronecker graph's, on loopback and in the lab.
    pub graph_file: Option<PathBuf>,
    /// One-way delays (µs) at which the traversal rows run again in the network lab
    /// (needs root); empty: loopback only.
    pub lab_delays: Vec<u32>,
    /// Run the Redis `EVALSHA` baselines.
    pub baselines: bool,
    /// Requests per redis-benchmark run (default: those of `bench io`).
    pub redis_requests: Option<u64>,
    pub quick: bool,
    /// Run rows 1–2 (records on one server).
    pub records_rows: bool,
    /// Run rows 3–4 (chase and k-hop over 3 servers).
    pub spread_rows: bool,
}

impl SprocBenchOptions {
    pub fn new(bin: impl Into<PathBuf>, quick: bool) -> Self {
        Self {
            bin: bin.into(),
            b: vec![1024],
            q: vec![4],
            duration: Duration::from_millis(if quick { 1000 } else { 3000 }),
            records: None,
            chains: 256,
            edges: if quick { 200_000 } else { 1_000_000 },
            khop_sources: 64,
            graph_scale: if quick { 16 } else { 20 },
            lab_delays: Vec::new(),
            graph_file: None,
            baselines: true,
            redis_requests: None,
            quick,
            records_rows: true,
            spread_rows: true,
        }
    }

    fn validate(&self) -> Result<()> {
        if !(4..=26).contains(&self.graph_scale) {
            return Err(BenchError::InvalidArgument(
                "the traversal graph's scale must be between 4 and 26".into(),
            ));
        }
        if let Some(p) = &self.graph_file
            && let Err(e) = std::fs::File::open(p)
        {
            return Err(BenchError::InvalidArgument(format!(
                "cannot read the graph file {}: {e}",
                p.display()
            )));
        }
        if !(self.records_rows || self.spread_rows) {
            return Err(BenchError::InvalidArgument("no section selected".into()));
        }
        if self.b.is_empty() || self.q.is_empty() {
            return Err(BenchError::InvalidArgument("no b or q given".into()));
        }
        if self.b.iter().chain(&self.q).any(|&v| v == 0) {
            return Err(BenchError::InvalidArgument("b and q must be ≥ 1".into()));
        }
        if self.b.iter().any(|&b| b * 3 > usize::from(u16::MAX)) {
            return Err(BenchError::InvalidArgument(format!(
                "b must be ≤ {} (3 reads per logical op in one frame)",
                u16::MAX / 3
            )));
        }
        if self.records.is_some_and(|r| !(16..=1 << 28).contains(&r)) {
            return Err(BenchError::InvalidArgument(
                "records must be between 16 and 2^28".into(),
            ));
        }
        if !(1..=1000).contains(&self.chains) || self.khop_sources == 0 {
            return Err(BenchError::InvalidArgument(
                "chains must be between 1 and 1000, k-hop sources ≥ 1".into(),
            ));
        }
        if !(100..=100_000_000).contains(&self.edges) {
            return Err(BenchError::InvalidArgument(
                "edges must be between 100 and 100 000 000".into(),
            ));
        }
        if self.redis_requests == Some(0) {
            return Err(BenchError::InvalidArgument(
                "redis requests must be ≥ 1".into(),
            ));
        }
        Ok(())
    }

    fn redis_opts(&self) -> RedisEvalOpts {
        let mut o = RedisEvalOpts::new(self.quick);
        if let Some(n) = self.redis_requests {
            o.pipelined_requests = n;
            o.unpipelined_requests = (n / 4).max(100);
        }
        if let Some(r) = self.records {
            o.keyspace = r;
        }
        o
    }

    fn records(&self) -> u64 {
        self.records.unwrap_or_else(|| self.redis_opts().keyspace)
    }
}

fn cluster_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Cluster(e.to_string())
}

/// Runs the whole benchmark and returns the report (not yet printed or saved).
pub fn run_sproc_bench(opts: &SprocBenchOptions) -> Result<BenchReport> {
    opts.validate()?;
    let mut report = BenchReport::new("sproc");
    if opts.baselines && opts.records_rows {
        ensure_tools(&[Tool::RedisServer, Tool::RedisBenchmark])?;
        if let Err(e) = ensure_tools(&[Tool::DejaVuFont]) {
            tracing::debug!("chart font unavailable: {e}");
        }
        let pb = progress(1);
        pb.set_prefix("baselines");
        pb.set_message("redis EVALSHA, spinning driver and redis-benchmark (verify, sum 2, sum 3)");
        let scripts = [EvalScript::verify(), EvalScript::sum(2), EvalScript::sum(3)];
        report.baselines.redis_eval = redis_eval_baselines(&opts.redis_opts(), &scripts)?;
        pb.finish_and_clear();
        report.rows.extend(report.baselines.rows());
        report.notes.push(
            "Redis runs each script with EVALSHA after one SCRIPT LOAD (its fastest form), \
             driven by bench io's spinning driver (b calls pipelined per batch, q in flight, \
             c connections) and by redis-benchmark; rows are compared with the faster \
             (best_peer names the run); every key holds the same 8-byte value"
                .into(),
        );
    }
    if opts.records_rows {
        records_section(opts, &mut report)?;
    }
    if opts.spread_rows {
        spread_section(opts, &mut report)?;
    }
    Ok(report)
}

fn farcache_row(name: String, op: &str, out: &RunOutcome, b: usize, q: usize) -> BenchRow {
    let mut row = BenchRow {
        name,
        system: "farcache".into(),
        op: op.into(),
        record_size: 8,
        distribution: "uniform".into(),
        c: Some(1),
        s: Some(1),
        b: Some(b),
        q: Some(q),
        mops: out.mops,
        p50_us: out.latency.p50_us,
        p99_us: out.latency.p99_us,
        p999_us: out.latency.p999_us,
        ..BenchRow::default()
    };
    if out.errors > 0 {
        row.name.push_str(&format!(" ({} errors)", out.errors));
    }
    row
}

/// Attaches the listed `(description, met)` targets as one; a run with errors misses.
fn with_targets(row: BenchRow, errors: u64, targets: &[(String, bool)]) -> BenchRow {
    if targets.is_empty() {
        return row;
    }
    let text = targets
        .iter()
        .map(|(t, _)| t.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let met = errors == 0 && targets.iter().all(|(_, m)| *m);
    row.with_target(text, met)
}

fn eval_for<'a>(report: &'a BenchReport, label: &str) -> Option<&'a RedisEvalBaseline> {
    report
        .baselines
        .redis_eval
        .iter()
        .find(|e| e.script.label == label)
}

/// Writes `bytes` at `base` in 1 MiB writes, 16 per batch, at most 4 batches pending.
fn write_all(cache: &Cache, base: u64, bytes: &[u8]) -> Result<()> {
    const CHUNK: usize = 1 << 20;
    let mut pending: VecDeque<Ticket> = VecDeque::new();
    let mut batch = cache.batch();
    let chunks = bytes.chunks(CHUNK).count();
    for (i, c) in bytes.chunks(CHUNK).enumerate() {
        batch.write(base + (i * CHUNK) as u64, c);
        if batch.len() == 16 || i + 1 == chunks {
            pending.push_back(std::mem::replace(&mut batch, cache.batch()).submit());
        }
        if pending.len() >= 4
            && let Some(t) = pending.pop_front()
        {
            check_writes(t)?;
        }
    }
    pending.into_iter().try_for_each(check_writes)
}

fn check_writes(t: Ticket) -> Result<()> {
    match t.wait().first_error() {
        Some(e) => Err(BenchError::Cluster(format!("writing the data set: {e}"))),
        None => Ok(()),
    }
}

/// Rows 3 and 4 on a three-server cluster.
fn spread_section(opts: &SprocBenchOptions, report: &mut BenchReport) -> Result<()> {
    let pb = progress(26);
    pb.set_prefix("farcache");
    pb.set_message(format!("building a {}-edge graph", opts.edges));
    let graph = StoredGraph::build(opts.edges)?;
    let per_server = (CHASE_CAP + graph.cap).div_ceil(SPREAD_SERVERS as u64);
    let server_memory = per_server.div_ceil(REGION) * REGION + 4 * REGION;

    pb.set_message(format!("starting {SPREAD_SERVERS} servers, s = 1"));
    let mut spread = SpreadCluster::start(opts, server_memory, true)?;
    chase_rows(opts, &mut spread, &pb, report, None)?;
    let khop = khop_rows(opts, &mut spread, &graph, &pb, report)?;
    drop(spread);

    // The DFlow k-hop again on servers that send one frame per message.
    pb.set_message("k-hop without per-destination batching: new cluster");
    let mut spread = SpreadCluster::start(opts, server_memory, false)?;
    khop_unbatched_rows(opts, &mut spread, &graph, &khop, &pb, report)?;
    drop(spread);

    pb.set_message(format!(
        "generating a Kronecker scale-{} graph",
        opts.graph_scale
    ));
    let mut graphs = vec![BenchGraph::kronecker(opts.graph_scale)?];
    if let Some(path) = &opts.graph_file {
        pb.set_message(format!("reading {}", path.display()));
        graphs.push(BenchGraph::from_file(path)?);
    }
    pb.inc_length(4 * (graphs.len() as u64 - 1));
    for g in &graphs {
        pb.set_message(format!("traversal on {}: new cluster", g.label()));
        let spread = SpreadCluster::start(opts, g.server_memory(), true)?;
        traversal_rows(opts, &spread, g, &pb, report)?;
    }
    if !opts.lab_delays.is_empty() {
        lab::lab_rows(opts, graph, graphs, server_memory, &pb, report)?;
    }
    pb.finish_and_clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_targets() {
        let row = with_targets(
            BenchRow::default(),
            0,
            &[("a".into(), true), ("b".into(), false)],
        );
        assert_eq!(row.target.as_deref(), Some("a, b"));
        assert_eq!(row.meets_target, Some(false));
        let row = with_targets(BenchRow::default(), 1, &[("a".into(), true)]);
        assert_eq!(row.meets_target, Some(false), "errors miss the target");
        assert!(with_targets(BenchRow::default(), 0, &[]).target.is_none());
    }

    #[test]
    fn options_are_checked() {
        let ok = SprocBenchOptions::new("farcache", true);
        assert!(ok.validate().is_ok());
        assert_eq!(ok.edges, 200_000);
        for bad in [
            SprocBenchOptions {
                b: vec![0],
                ..ok.clone()
            },
            SprocBenchOptions {
                q: vec![],
                ..ok.clone()
            },
            SprocBenchOptions {
                records: Some(3),
                ..ok.clone()
            },
            SprocBenchOptions {
                edges: 5,
                ..ok.clone()
            },
            SprocBenchOptions {
                chains: 0,
                ..ok.clone()
            },
            SprocBenchOptions {
                b: vec![30_000],
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
