//! `farcache bench migrate`, `replication`, `drain`: moving and copying regions
//! under load.

use super::*;

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

pub(super) fn migrate(a: MigrateArgs) -> Result<()> {
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
pub(super) fn finish_migrate(report: &MigrateReport, out: &Path, chart: &Path) -> Result<()> {
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

pub(super) fn replication(a: ReplicationArgs) -> Result<()> {
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

pub(super) fn drain(a: DrainArgs) -> Result<()> {
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
