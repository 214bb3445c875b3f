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
use farcache_bench::sproc_suite::{SprocBenchOptions, run_sproc_bench};
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
    /// SLO configuration (Redy's evaluation): random SLOs drawn from a calibrated
    /// model, each searched, created as a cache and run at its offered load; how many
    /// runs meet their SLO, predicted vs measured CDFs, search times, cost vs an
    /// exhaustive oracle.
    Slo(super::bench_slo::SloArgs),
    /// The Redis-protocol front end (`farcache resp`) vs Redis, one redis-benchmark
    /// driving both: SET/GET unpipelined and pipelined, MGET of 10 and 100 keys.
    Resp(super::bench_resp::RespArgs),
}

#[derive(clap::Args)]
pub struct DrainArgs {
    /// The cache, all of it on the reclaimed server (also each server's memory).
    #[arg(long, default_value = "4GiB", value_parser = parse_size)]
    size: u64,
    /// Region size (a multiple of 1 MiB dividing --size).
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    region_size: u64,
    /// The reclamation notice, in seconds: the target is to drain within it.
    #[arg(long, default_value_t = 30.0)]
    grace: f64,
    /// Background load during the drain: `on` (a batch of 16 reads and 16 writes of
    /// 8 bytes every millisecond, checked) or `off`.
    #[arg(long, default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    load: bool,
    /// Server worker threads.
    #[arg(short = 's', long, default_value = "1", value_parser = parse_count)]
    server_threads: usize,
    /// Directory for the JSON results (`drain-<unix seconds>.json` and
    /// `drain-latest.json`).
    #[arg(long, default_value = DEFAULT_RESULTS_DIR)]
    out: PathBuf,
}

#[derive(clap::Args)]
pub struct ReplicationArgs {
    /// Capacity of each of the two caches (1 MiB regions).
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    cache_size: u64,
    /// Measured seconds per row (after a 100 ms warm-up).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Ops per batch of the batched rows.
    #[arg(short = 'b', long, default_value = "64", value_parser = parse_count)]
    batch: usize,
    /// Batches in flight of the batched rows.
    #[arg(short = 'q', long, alias = "queue-depth", default_value = "8", value_parser = parse_count)]
    depth: usize,
    /// Server worker threads.
    #[arg(short = 's', long, default_value = "1", value_parser = parse_count)]
    server_threads: usize,
    /// Directory for the JSON results (`replication-<unix seconds>.json` and
    /// `replication-latest.json`).
    #[arg(long, default_value = DEFAULT_RESULTS_DIR)]
    out: PathBuf,
}

#[derive(clap::Args)]
pub struct MigrateArgs {
    /// Migration modes to run, each on a fresh cluster.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "dirty_tracking,pause_region,pause_all"
    )]
    modes: Vec<farcache_client::MigrationMode>,
    /// Region size (default 64MiB, 4MiB with --quick); the cache has 7 regions.
    #[arg(long, value_parser = parse_size)]
    region_size: Option<u64>,
    /// Seconds of the schedule, scaled from Redy's 6 s: moves at 1/6, 2.5/6 and 4/6 of
    /// it (default 6, 2 with --quick).
    #[arg(long)]
    timeline: Option<f64>,
    /// Ops per batch of the reader and of the writer.
    #[arg(short = 'b', long, default_value = "1024", value_parser = parse_count)]
    batch: usize,
    /// Batches in flight of the reader and of the writer.
    #[arg(short = 'q', long, default_value = "4", value_parser = parse_count)]
    queue_depth: usize,
    /// Server worker threads.
    #[arg(short = 's', long, default_value = "1", value_parser = parse_count)]
    server_threads: usize,
    /// 4 MiB regions and a 2 s schedule.
    #[arg(long)]
    quick: bool,
    /// Directory for JSON and PNG results.
    #[arg(long, default_value = DEFAULT_RESULTS_DIR)]
    out: PathBuf,
    /// Also copy the chart here (skipped when its directory does not exist).
    #[arg(long, default_value = "docs/bench-migrate.png")]
    chart: PathBuf,
}

#[derive(clap::Args)]
pub struct StoreLargeArgs {
    /// Object sizes, 1 MiB to 512 MiB (default 1MiB,10MiB,100MiB; 1MiB,10MiB with
    /// --quick).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<String>,
    /// Objects per size, put once each into the store and into Redis (default 16, 8
    /// with --quick).
    #[arg(long)]
    objects: Option<u64>,
    /// Seconds of each GET run, at least --min-gets calls (default 3, 1 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Fewest calls of each GET run (default 8, 4 with --quick).
    #[arg(long, value_parser = parse_count)]
    min_gets: Option<usize>,
    /// Op timeout (ms) of the client reading while a server is stopped: how long a
    /// read waiting for all chunks waits for the stopped server's chunk.
    #[arg(long, default_value_t = 500)]
    op_timeout_ms: u64,
    /// Ops per request frame of the store clients (the client's default: 64).
    #[arg(short = 'b', long, value_parser = parse_count)]
    batch: Option<usize>,
    /// Request frames in flight per connection of the store clients (default 4).
    #[arg(short = 'q', long, value_parser = parse_count)]
    queue_depth: Option<usize>,
    /// Smaller sizes, fewer objects, shorter runs.
    #[arg(long)]
    quick: bool,
    /// Skip Redis (no ratios).
    #[arg(long)]
    no_baselines: bool,
    /// Write the JSON results here, the chart beside it (default:
    /// `store-large-<unix seconds>.json`/`.png` and `store-large-latest.*` in
    /// bench-results/).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also copy the chart here (skipped when its directory does not exist).
    #[arg(long, default_value = "docs/bench-store-large.png")]
    chart: PathBuf,
}

#[derive(clap::Args)]
pub struct StoreHotArgs {
    /// Server processes (one worker thread each); a list runs one cluster per count.
    #[arg(long, value_delimiter = ',', default_value = "6", value_parser = parse_count)]
    servers: Vec<usize>,
    /// Keys loaded (default 1000000, 100000 with --quick).
    #[arg(long)]
    keys: Option<u64>,
    /// Zipf exponent of the keys read.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Value size (1 byte to 64 KiB).
    #[arg(long, default_value = "64", value_parser = parse_size)]
    value_size: u64,
    /// Keys per mget.
    #[arg(short = 'b', long, default_value = "64", value_parser = parse_count)]
    batch: usize,
    /// Mgets in flight per client thread.
    #[arg(short = 'q', long, default_value = "4", value_parser = parse_count)]
    queue_depth: usize,
    /// Client threads.
    #[arg(short = 'c', long, default_value = "2", value_parser = parse_count)]
    threads: usize,
    /// Measured seconds of each run (default 3, 1 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Seconds the hot-key controller runs before the window opens (default 1.5, 1
    /// with --quick).
    #[arg(long)]
    hot_warmup: Option<f64>,
    /// Most keys with a second copy at once (HotOptions::max_keys).
    #[arg(long, default_value = "64", value_parser = parse_count)]
    hot_keys: usize,
    /// Fewer keys, shorter runs.
    #[arg(long)]
    quick: bool,
    /// Write the JSON results here, the chart beside it (default:
    /// `store-hot-<unix seconds>.json`/`.png` in bench-results/).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also copy the chart here (skipped when its directory does not exist).
    #[arg(long, default_value = "docs/bench-store-hot.png")]
    chart: PathBuf,
}

#[derive(clap::Args)]
pub struct StoreEvictArgs {
    /// Distinct keys of the trace (default 1000000, 100000 with --quick).
    #[arg(long)]
    keys: Option<u64>,
    /// Requests of the trace, warm-up included (default 6 x keys).
    #[arg(long)]
    requests: Option<u64>,
    /// Requests before hits are counted (default 2 x keys).
    #[arg(long)]
    warmup: Option<u64>,
    /// Zipf exponent of the trace.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Value size (1 byte to 64 KiB).
    #[arg(long, default_value = "64", value_parser = parse_size)]
    value_size: u64,
    /// Share of the distinct keys' items the store holds.
    #[arg(long, default_value_t = 0.10)]
    cache_fraction: f64,
    /// Requests per mget (its misses go in one mput).
    #[arg(short = 'b', long, default_value = "64", value_parser = parse_count)]
    batch: usize,
    /// 100000 keys.
    #[arg(long)]
    quick: bool,
    /// Write the JSON results here (default: `store-evict-<unix seconds>.json` and
    /// `store-evict-latest.json` in bench-results/).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct StoreArgs {
    /// Value sizes (16, 64, 1KiB …), 1 byte to 64 KiB.
    #[arg(long, value_delimiter = ',', default_value = "16,64,256,1024")]
    sizes: Vec<String>,
    /// Keys per size (default 1000000, 100000 with --quick).
    #[arg(long)]
    keys: Option<u64>,
    /// Keys per mget/mput and per Redis batch.
    #[arg(short = 'b', long, default_value = "64", value_parser = parse_count)]
    batch: usize,
    /// Batches in flight: farcache threads sharing one connection, Redis batches per
    /// connection.
    #[arg(short = 'q', long, default_value = "4", value_parser = parse_count)]
    queue_depth: usize,
    /// Seconds per timed run (default 3, 1 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Fewer keys, shorter runs, fewer latency samples.
    #[arg(long)]
    quick: bool,
    /// Skip Redis (no ratios).
    #[arg(long)]
    no_baselines: bool,
    /// Write the JSON results here (default: `store-<unix seconds>.json` and
    /// `store-latest.json` in bench-results/, as `bench io`).
    #[arg(long)]
    json: Option<PathBuf>,
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
    o.chains = a.chains;
    o.redis_requests = a.redis_requests;
    if !a.only.is_empty() {
        o.records_rows = a.only.contains(&SprocSection::Records);
        o.spread_rows = a.only.contains(&SprocSection::Spread);
    }
    let report = run_sproc_bench(&o)?;
    finish(&report, &a.out)
}

fn store(a: StoreArgs) -> Result<()> {
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut o = StoreBenchOptions::new(bin, a.quick);
    o.sizes = a
        .sizes
        .iter()
        .map(|s| {
            parse_size(s)
                .map(|v| v as usize)
                .map_err(anyhow::Error::msg)
        })
        .collect::<Result<_>>()?;
    if let Some(k) = a.keys {
        o.keys = k;
    }
    o.batch = a.batch;
    o.depth = a.queue_depth;
    if let Some(d) = seconds(a.seconds)? {
        o.duration = d;
    }
    o.baselines = !a.no_baselines;
    let report = run_store_bench(&o)?;
    out!("{}", format_store_table(&report))?;
    let path = match &a.json {
        Some(p) => {
            write_store_json_to(&report, p)?;
            p.clone()
        }
        None => write_store_json(&report, Path::new(DEFAULT_RESULTS_DIR))?,
    };
    outln!("results: {}", path.display())?;
    match report.all_targets_met() {
        Some(true) => outln!("all targets met")?,
        Some(false) => outln!("some targets NOT met (see the target column)")?,
        None => {}
    }
    Ok(())
}

fn store_large(a: StoreLargeArgs) -> Result<()> {
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut o = StoreLargeOptions::new(bin, a.quick);
    if !a.sizes.is_empty() {
        o.sizes = a
            .sizes
            .iter()
            .map(|s| parse_size(s).map_err(anyhow::Error::msg))
            .collect::<Result<_>>()?;
    }
    if let Some(n) = a.objects {
        o.objects = n;
    }
    if let Some(d) = seconds(a.seconds)? {
        o.duration = d;
    }
    if let Some(n) = a.min_gets {
        o.min_gets = n as u64;
    }
    o.op_timeout = Duration::from_millis(a.op_timeout_ms);
    if let Some(b) = a.batch {
        o.client_batch = b;
    }
    if let Some(q) = a.queue_depth {
        o.client_depth = q;
    }
    o.baselines = !a.no_baselines;
    let report = run_store_large_bench(&o)?;
    out!("{}", format_store_large_table(&report))?;
    let (json, png) = match &a.json {
        Some(p) => {
            write_store_large_json_to(&report, p)?;
            (p.clone(), p.with_extension("png"))
        }
        None => {
            let dir = Path::new(DEFAULT_RESULTS_DIR);
            let json = write_store_large_json(&report, dir)?;
            (json.clone(), json.with_extension("png"))
        }
    };
    outln!("results: {}", json.display())?;
    if let Err(e) = write_store_large_chart(&report, &png) {
        eprintln!("chart not written: {e}");
        return Ok(());
    }
    outln!("chart:   {}", png.display())?;
    if a.json.is_none() {
        let latest = png.with_file_name("store-large-latest.png");
        std::fs::copy(&png, &latest)
            .with_context(|| format!("copying the chart to {}", latest.display()))?;
    }
    let dir = a.chart.parent().filter(|d| !d.as_os_str().is_empty());
    if dir.is_some_and(|d| !d.is_dir()) {
        eprintln!(
            "chart not copied to {}: no such directory",
            a.chart.display()
        );
    } else {
        std::fs::copy(&png, &a.chart)
            .with_context(|| format!("copying the chart to {}", a.chart.display()))?;
        outln!("chart:   {}", a.chart.display())?;
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

fn migrate(a: MigrateArgs) -> Result<()> {
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut o = MigrateBenchOptions::new(bin, a.quick);
    o.modes = a.modes;
    if let Some(r) = a.region_size {
        o.region_size = r;
    }
    if let Some(t) = a.timeline {
        o.timeline = Duration::try_from_secs_f64(t)
            .ok()
            .filter(|d| !d.is_zero())
            .context("--timeline must be a positive number of seconds")?;
    }
    o.batch = a.batch;
    o.queue_depth = a.queue_depth;
    o.server_threads = a.server_threads;
    let report = run_migrate_bench(&o)?;
    finish_migrate(&report, &a.out, &a.chart)
}

/// Prints the table, writes JSON and the chart (copied to `chart`).
fn finish_migrate(report: &MigrateReport, out: &Path, chart: &Path) -> Result<()> {
    out!("{}", format_migrate_table(report))?;
    let json = write_migrate_json(report, out)?;
    outln!("results: {}", json.display())?;
    let png = match write_migrate_chart(report, out) {
        Ok(png) => png,
        Err(e) => {
            eprintln!("chart not written: {e}");
            return Ok(());
        }
    };
    outln!("chart:   {}", png.display())?;
    let dir = chart.parent().filter(|d| !d.as_os_str().is_empty());
    if dir.is_some_and(|d| !d.is_dir()) {
        eprintln!("chart not copied to {}: no such directory", chart.display());
    } else {
        std::fs::copy(&png, chart)
            .with_context(|| format!("copying the chart to {}", chart.display()))?;
        outln!("chart:   {}", chart.display())?;
    }
    Ok(())
}

fn replication(a: ReplicationArgs) -> Result<()> {
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut o = ReplicationBenchOptions::new(bin);
    o.cache_size = a.cache_size;
    if let Some(d) = seconds(Some(a.seconds))? {
        o.seconds = d;
    }
    o.batch = a.batch;
    o.depth = a.depth;
    o.server_threads = a.server_threads;
    let report = run_replication_bench(&o)?;
    out!("{}", format_replication_table(&report))?;
    let json = write_replication_json(&report, &a.out)?;
    outln!("results: {}", json.display())?;
    Ok(())
}

fn drain(a: DrainArgs) -> Result<()> {
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut o = DrainBenchOptions::new(bin);
    o.size = a.size;
    o.region_size = a.region_size;
    o.grace = Duration::try_from_secs_f64(a.grace)
        .ok()
        .filter(|d| !d.is_zero())
        .context("--grace must be a positive number of seconds")?;
    o.load = a.load;
    o.server_threads = a.server_threads;
    let report = run_drain_bench(&o)?;
    out!("{}", format_drain_table(&report))?;
    let json = write_drain_json(&report, &a.out)?;
    outln!("results: {}", json.display())?;
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

fn store_hot(a: StoreHotArgs) -> Result<()> {
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut o = StoreHotOptions::new(bin, a.quick);
    o.servers = a.servers;
    if let Some(k) = a.keys {
        o.keys = k;
    }
    o.theta = a.zipf;
    o.value_size = usize::try_from(a.value_size).unwrap_or(usize::MAX);
    o.batch = a.batch;
    o.depth = a.queue_depth;
    o.threads = a.threads;
    if let Some(d) = seconds(a.seconds)? {
        o.duration = d;
    }
    if let Some(w) = a.hot_warmup {
        o.hot_warmup = Duration::try_from_secs_f64(w)
            .ok()
            .filter(|d| !d.is_zero())
            .context("--hot-warmup must be a positive number of seconds")?;
    }
    o.hot.max_keys = a.hot_keys;
    let report = run_store_hot_bench(&o)?;
    out!("{}", format_store_hot_table(&report))?;
    let json = match &a.json {
        Some(p) => {
            write_store_hot_json_to(&report, p)?;
            p.clone()
        }
        None => write_store_hot_json(&report, Path::new(DEFAULT_RESULTS_DIR))?,
    };
    outln!("results: {}", json.display())?;
    let png = json.with_extension("png");
    match write_store_hot_chart(&report, &png) {
        Ok(()) => {
            outln!("chart:   {}", png.display())?;
            let dir = a.chart.parent().filter(|d| !d.as_os_str().is_empty());
            if dir.is_some_and(|d| !d.is_dir()) {
                eprintln!(
                    "chart not copied to {}: no such directory",
                    a.chart.display()
                );
            } else {
                std::fs::copy(&png, &a.chart)
                    .with_context(|| format!("copying the chart to {}", a.chart.display()))?;
                outln!("chart:   {}", a.chart.display())?;
            }
        }
        Err(e) => eprintln!("chart not written: {e}"),
    }
    match report.all_targets_met() {
        Some(true) => outln!("all targets met")?,
        Some(false) => outln!("some targets NOT met (see the target column)")?,
        None => {}
    }
    Ok(())
}

fn store_evict(a: StoreEvictArgs) -> Result<()> {
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut o = StoreEvictOptions::new(bin, a.quick);
    if let Some(k) = a.keys {
        o.keys = k;
        o.requests = k.saturating_mul(6);
        o.warmup = k.saturating_mul(2);
    }
    if let Some(r) = a.requests {
        o.requests = r;
    }
    if let Some(w) = a.warmup {
        o.warmup = w;
    }
    o.theta = a.zipf;
    o.value_size = usize::try_from(a.value_size).unwrap_or(usize::MAX);
    o.cache_fraction = a.cache_fraction;
    o.batch = a.batch;
    let report = run_store_evict_bench(&o)?;
    out!("{}", format_store_evict_table(&report))?;
    let json = match &a.json {
        Some(p) => {
            write_store_evict_json_to(&report, p)?;
            p.clone()
        }
        None => write_store_evict_json(&report, Path::new(DEFAULT_RESULTS_DIR))?,
    };
    outln!("results: {}", json.display())?;
    Ok(())
}
