//! `farcache bench …`: thin layer over `farcache-bench`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use farcache_bench::drain::{
    DrainBenchOptions, format_drain_table, run_drain_bench, write_drain_json,
};
use farcache_bench::io::IoOp;
use farcache_bench::io_suite::{AUTO_BATCH, IoBenchOptions, run_io_bench};
use farcache_bench::migrate::{
    MigrateBenchOptions, MigrateReport, format_migrate_table, run_migrate_bench,
    write_migrate_chart, write_migrate_json,
};
use farcache_bench::replication::{
    ReplicationBenchOptions, format_replication_table, run_replication_bench,
    write_replication_json,
};
use farcache_bench::sproc_suite::{SprocBenchOptions, run_sproc_bench, write_rtt_chart};
use farcache_bench::store_suite::large::{
    StoreLargeOptions, format_store_large_table, run_store_large_bench, write_store_large_chart,
    write_store_large_json, write_store_large_json_to,
};
use farcache_bench::store_suite::{
    StoreBenchOptions, format_store_table, run_store_bench, write_store_json, write_store_json_to,
};
use farcache_bench::store_suite::{
    StoreEvictOptions, StoreHotOptions, format_store_evict_table, format_store_hot_table,
    run_store_evict_bench, run_store_hot_bench, write_store_evict_json, write_store_evict_json_to,
    write_store_hot_chart, write_store_hot_json, write_store_hot_json_to,
};
use farcache_bench::workload::KeyDistribution;
use farcache_bench::{BenchReport, DEFAULT_RESULTS_DIR, format_table, write_chart, write_json};

use crate::size::parse_size;

mod control;
mod elastic;
mod store;

pub use control::ControlArgs;
pub use elastic::{DrainArgs, MigrateArgs, ReplicationArgs};
use elastic::{drain, migrate, replication};
pub use store::{StoreArgs, StoreEvictArgs, StoreHotArgs, StoreLargeArgs};
use store::{store, store_evict, store_hot, store_large};

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Reads and writes of fixed-size records vs Redis GET/SET and raw TCP.
    Io(IoArgs),
    /// Stored procedures vs the same work at the client and vs Redis Lua scripts.
    Sproc(SprocArgs),
    /// The keyed store on small values (load, mget, mput, unbatched get and put) vs
    /// Redis on the same keys, and its unbatched GET vs an unbatched 8-byte read.
    Store(StoreArgs),
    /// Erasure-coded large objects (RS(4+2) on 6 servers) vs Redis SET/GET of the same
    /// objects, and GET latency with one server stopped (SIGSTOP): first-d reads vs
    /// reads waiting for all chunks.
    StoreLarge(StoreLargeArgs),
    /// Load balance under skew (DistCache): batched Zipf GETs on one store over several
    /// servers, without and with the hot-key layer; each server's lookups, max/mean
    /// load (the goal: <= 1.25 with the layer) and throughput.
    StoreHot(StoreHotArgs),
    /// The store's CLOCK eviction vs exact LRU: hit ratios of one Zipf GET-then-PUT
    /// trace against a store holding about 10 % of its keys, and through an LRU
    /// simulator of the same capacity (the goal: within 2 points).
    StoreEvict(StoreEvictArgs),
    /// Live migration under load in each mode (Redy's experiment): 1, 2, then 4 of 7
    /// regions move to a new server while a reader and a writer run.
    Migrate(MigrateArgs),
    /// What a backup copy costs: batched 8-byte writes and reads and unbatched write
    /// latency on a cache with one copy (replicas 1) and one with a backup (replicas 2),
    /// on one 3-server cluster.
    Replication(ReplicationArgs),
    /// Reclaim a server holding a full cache (default 4 GiB) and time how long its
    /// regions take to move to a second server, under a light load; then read every
    /// byte back. The target: a 4 GiB server drains within a 30 s grace.
    Drain(DrainArgs),
    /// Calibrates the traversal's cost model in the network lab (root): fitted on 2
    /// server hosts, checked against 4 and 8; writes the model `farcache simulate`
    /// reads.
    Model(ModelArgs),
    /// SLO configuration (Redy's evaluation): random SLOs drawn from a calibrated
    /// model, each searched, created as a cache and run at its offered load; how many
    /// runs meet their SLO, predicted vs measured CDFs, search times, cost vs an
    /// exhaustive oracle.
    Slo(super::bench_slo::SloArgs),
    /// The Redis-protocol front end (`farcache resp`) vs Redis, one redis-benchmark
    /// driving both: SET/GET unpipelined and pipelined, MGET of 10 and 100 keys.
    Resp(super::bench_resp::RespArgs),
    /// The control plane: cache create/delete latency with the catalogue in redb
    /// (one manager) and in etcd (three managers), and leader failover time on etcd.
    Control(ControlArgs),
}

#[derive(clap::Args)]
pub struct SprocArgs {
    /// Logical ops per batch for the batched rows; a list sweeps.
    #[arg(short = 'b', long, value_delimiter = ',', default_value = "1024", value_parser = parse_count)]
    batch: Vec<usize>,
    /// Batches in flight for the batched rows; a list sweeps.
    #[arg(short = 'q', long, value_delimiter = ',', default_value = "4", value_parser = parse_count)]
    queue_depth: Vec<usize>,
    /// Seconds per measured run (default 3, 1 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Shorter runs, smaller graph (200k edges) and baselines.
    #[arg(long)]
    quick: bool,
    /// Skip the Redis EVALSHA baselines (no Redis ratios or targets).
    #[arg(long)]
    no_baselines: bool,
    /// Directory for JSON and PNG results.
    #[arg(long, default_value = DEFAULT_RESULTS_DIR)]
    out: PathBuf,
    /// 8-byte records for the verify/aggregate rows (default: the Redis keyspace).
    #[arg(long)]
    records: Option<u64>,
    /// Edges of the k-hop graph, vertices = edges / 10 (default 1M, 200k with --quick).
    #[arg(long)]
    edges: Option<u64>,
    /// Kronecker scale of the traversal graph: 2^scale vertices, 16 edges each
    /// (default 20, 16 with --quick).
    #[arg(long)]
    graph_scale: Option<u32>,
    /// A graph file (graph-tool `.gt` or a text edge list, gzipped or not) whose
    /// traversal rows run after the Kronecker graph's (on loopback, and in the lab
    /// with --lab-delays); e.g. email-Enron.gt.gz from Debian's python3-graph-tool.
    #[arg(long)]
    graph_file: Option<std::path::PathBuf>,
    /// Run the chase, k-hop and traversal rows again in the network lab (root) at
    /// these one-way delays in µs, 10 Gbit/s links, e.g. `0,10,25,50,100`; adds a
    /// chart of each procedure's speedup against the delay.
    #[arg(long, value_delimiter = ',')]
    lab_delays: Vec<u32>,
    /// Distinct 64-node chains per placement.
    #[arg(long, default_value_t = 256)]
    chains: usize,
    /// Requests per redis-benchmark run (default: as `bench io`).
    #[arg(long)]
    redis_requests: Option<u64>,
    /// Run only these sections (default: all).
    #[arg(long, value_delimiter = ',')]
    only: Vec<SprocSection>,
}

/// Sections of `bench sproc`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SprocSection {
    /// Verify and aggregate over records on one server (rows 1–2).
    Records,
    /// Pointer chase and k-hop over 3 servers (rows 3–4).
    Spread,
}

#[derive(clap::Args)]
pub struct IoArgs {
    /// Operations: read, write.
    #[arg(long, value_delimiter = ',', default_value = "read,write")]
    ops: Vec<String>,
    /// Record sizes (8, 64, 1KiB, 4KiB …).
    #[arg(long, value_delimiter = ',', default_value = "8,64,1KiB,4KiB")]
    sizes: Vec<String>,
    /// Address distributions: uniform, zipf (θ = 0.99) or zipf:THETA.
    #[arg(long, value_delimiter = ',', default_value = "uniform,zipf")]
    dist: Vec<String>,
    /// Client connections per server (each driven by its own thread); a list sweeps.
    #[arg(short = 'c', long, value_delimiter = ',', default_value = "1")]
    connections: Vec<usize>,
    /// Server worker threads; a list sweeps (one cluster per value).
    #[arg(short = 's', long, value_delimiter = ',', default_value = "1")]
    server_threads: Vec<usize>,
    /// Ops per batch; `auto` = about 1 MiB of records per batch (16..=1024 ops); a list sweeps.
    #[arg(short = 'b', long, value_delimiter = ',', default_value = "auto", value_parser = parse_batch)]
    batch: Vec<usize>,
    /// Batches in flight per connection; a list sweeps.
    #[arg(short = 'q', long, value_delimiter = ',', default_value = "4")]
    queue_depth: Vec<usize>,
    /// Server processes.
    #[arg(long, default_value_t = 1)]
    servers: usize,
    /// Records addressed per run; overrides --working-sets (one set of this many
    /// records).
    #[arg(long)]
    records: Option<u64>,
    /// Working sets in bytes: each size runs over bytes/size records (at most 16 M,
    /// 8 M with --quick), peers on as many keys. Default: 1MiB (fits the CPU caches)
    /// and 1GiB (256MiB with --quick).
    #[arg(long, value_delimiter = ',')]
    working_sets: Vec<String>,
    /// Skip the in-process ceiling rows.
    #[arg(long)]
    no_ceiling: bool,
    /// Seconds per throughput run (default 3, 1 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Shorter runs and baselines.
    #[arg(long)]
    quick: bool,
    /// Skip Redis, memcached, raw TCP and sockperf (no peer ratios).
    #[arg(long)]
    no_baselines: bool,
    /// Clients talk to the cluster over TLS (a self-signed certificate), to measure
    /// what TLS costs.
    #[arg(long)]
    tls: bool,
    /// Directory for JSON and PNG results.
    #[arg(long, default_value = DEFAULT_RESULTS_DIR)]
    out: PathBuf,
}

pub fn run(b: BenchCommand) -> Result<()> {
    match b {
        BenchCommand::Io(a) => io(a),
        BenchCommand::Sproc(a) => sproc(a),
        BenchCommand::Store(a) => store(a),
        BenchCommand::StoreLarge(a) => store_large(a),
        BenchCommand::StoreHot(a) => store_hot(a),
        BenchCommand::StoreEvict(a) => store_evict(a),
        BenchCommand::Migrate(a) => migrate(a),
        BenchCommand::Replication(a) => replication(a),
        BenchCommand::Drain(a) => drain(a),
        BenchCommand::Slo(a) => super::bench_slo::run(a),
        BenchCommand::Resp(a) => super::bench_resp::run(a),
        BenchCommand::Control(a) => control::control(a),
        BenchCommand::Model(a) => model(a),
    }
}

fn seconds(s: Option<f64>) -> Result<Option<Duration>> {
    match s {
        Some(s) if !(s.is_finite() && s > 0.0) => bail!("--seconds must be positive"),
        Some(s) => Ok(Some(Duration::from_secs_f64(s))),
        None => Ok(None),
    }
}

fn sproc(a: SprocArgs) -> Result<()> {
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut o = SprocBenchOptions::new(bin, a.quick);
    o.b = a.batch;
    o.q = a.queue_depth;
    if let Some(d) = seconds(a.seconds)? {
        o.duration = d;
    }
    o.baselines = !a.no_baselines;
    o.records = a.records;
    if let Some(e) = a.edges {
        o.edges = e;
    }
    if let Some(s) = a.graph_scale {
        o.graph_scale = s;
    }
    o.lab_delays = a.lab_delays;
    o.graph_file = a.graph_file;
    o.chains = a.chains;
    o.redis_requests = a.redis_requests;
    if !a.only.is_empty() {
        o.records_rows = a.only.contains(&SprocSection::Records);
        o.spread_rows = a.only.contains(&SprocSection::Spread);
    }
    let report = run_sproc_bench(&o)?;
    finish(&report, &a.out)?;
    match write_rtt_chart(&report, &a.out) {
        Ok(Some(png)) => outln!("speedup vs delay chart: {}", png.display())?,
        Ok(None) => {}
        Err(e) => eprintln!("speedup vs delay chart not written: {e}"),
    }
    Ok(())
}

/// Prints the table, writes JSON and the chart, and sums up the targets.
fn finish(report: &BenchReport, out: &std::path::Path) -> Result<()> {
    out!("{}", format_table(report))?;
    let json = write_json(report, out)?;
    outln!("results: {}", json.display())?;
    match write_chart(report, out) {
        Ok(png) => outln!("chart:   {}", png.display())?,
        Err(e) => eprintln!("chart not written: {e}"),
    }
    match report.all_targets_met() {
        Some(true) => outln!("all targets met")?,
        Some(false) => outln!("some targets NOT met (see the target column)")?,
        None => {}
    }
    Ok(())
}

fn io(a: IoArgs) -> Result<()> {
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut o = IoBenchOptions::new(bin, a.quick);
    o.ops = a.ops.iter().map(|s| parse_op(s)).collect::<Result<_>>()?;
    o.sizes = a
        .sizes
        .iter()
        .map(|s| {
            parse_size(s)
                .map(|v| v as usize)
                .map_err(anyhow::Error::msg)
        })
        .collect::<Result<_>>()?;
    o.dists = a
        .dist
        .iter()
        .map(|s| parse_dist(s))
        .collect::<Result<_>>()?;
    o.c = a.connections;
    o.s = a.server_threads;
    o.b = a.batch;
    o.q = a.queue_depth;
    o.servers = a.servers;
    o.records = a.records;
    if !a.working_sets.is_empty() {
        o.working_sets = a
            .working_sets
            .iter()
            .map(|s| parse_size(s).map_err(anyhow::Error::msg))
            .collect::<Result<_>>()?;
    }
    o.ceiling = !a.no_ceiling;
    if let Some(d) = seconds(a.seconds)? {
        o.duration = d;
    }
    o.baselines = !a.no_baselines;
    o.tls = a.tls;

    let report = run_io_bench(&o)?;
    finish(&report, &a.out)
}

fn parse_batch(s: &str) -> Result<usize, String> {
    match s.trim() {
        "auto" => Ok(AUTO_BATCH),
        n => match n.parse::<usize>() {
            Ok(0) | Err(_) => Err(format!(
                "`{n}` is not a batch size (a positive number or `auto`)"
            )),
            Ok(v) => Ok(v),
        },
    }
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        _ => Err(format!("`{s}` is neither on nor off")),
    }
}

fn parse_count(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) | Err(_) => Err(format!("`{s}` is not a positive number")),
        Ok(v) => Ok(v),
    }
}

fn parse_op(s: &str) -> Result<IoOp> {
    match s.trim().to_ascii_lowercase().as_str() {
        "read" | "get" => Ok(IoOp::Read),
        "write" | "set" => Ok(IoOp::Write),
        other => bail!("unknown op `{other}` (read, write)"),
    }
}

fn parse_dist(s: &str) -> Result<KeyDistribution> {
    let s = s.trim().to_ascii_lowercase();
    match s.as_str() {
        "uniform" => Ok(KeyDistribution::Uniform),
        "zipf" => Ok(KeyDistribution::ZIPF),
        _ => match s.strip_prefix("zipf:") {
            Some(t) => {
                let theta: f64 = t.parse().with_context(|| format!("bad zipf theta `{t}`"))?;
                if !(theta.is_finite() && theta > 0.0) {
                    bail!("zipf theta must be positive");
                }
                Ok(KeyDistribution::Zipf { theta })
            }
            None => bail!("unknown distribution `{s}` (uniform, zipf, zipf:THETA)"),
        },
    }
}

#[derive(clap::Args)]
pub struct ModelArgs {
    /// Smaller graph (scale 14), 8 sources, 3 runs each.
    #[arg(long)]
    quick: bool,
    /// Kronecker scale of the graph traversed (default 16, 14 with --quick).
    #[arg(long)]
    scale: Option<u32>,
    /// Server hosts the costs are fitted on.
    #[arg(long, default_value_t = 2)]
    calibrate_on: usize,
    /// Server hosts whose runs check the fitted model.
    #[arg(long, value_delimiter = ',', default_value = "4,8")]
    validate_on: Vec<usize>,
    /// One-way delay between lab hosts, in µs.
    #[arg(long, default_value_t = 25)]
    delay_us: u32,
    /// Directory for the JSON (the model) and the table's figures.
    #[arg(long, default_value = DEFAULT_RESULTS_DIR)]
    out: PathBuf,
}

fn model(a: ModelArgs) -> Result<()> {
    use farcache_bench::model_suite::{ModelBenchOptions, format_model_table, run_model_bench};
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut o = ModelBenchOptions::new(bin, a.quick);
    if let Some(s) = a.scale {
        o.scale = s;
    }
    o.calibrate_on = a.calibrate_on;
    o.validate_on = a.validate_on;
    o.delay_us = a.delay_us;
    let report = run_model_bench(&o)?;
    out!("{}", format_model_table(&report))?;
    let json = report.write_json(&a.out)?;
    outln!("model:   {}", json.display())?;
    Ok(())
}
