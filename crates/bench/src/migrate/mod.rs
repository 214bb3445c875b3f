//! `farcache bench migrate`: Redy's live-migration experiment on a local cluster.
//!
//! Per migration mode, on a fresh cluster: one server holds a 7-region cache, filled;
//! a second server joins; a reader and a writer thread run batched 8-byte ops over the
//! whole cache while 1, then 2, then 4 regions move to the new server. Throughput is
//! counted per 10 ms, the manager reports each move's bytes, copy time and longest
//! write pause.

mod chart;
mod load;
mod output;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use farcache_client::{Cache, Client, ClientConfig, MigrationMode, ServerId};
use farcache_testkit::{ClusterOptions, ProcessCluster, wait_for_alive};
use indicatif::ProgressBar;

use crate::error::{BenchError, Result};
use crate::io::IoOp;
use crate::io_suite::{prefill, progress};
pub use chart::write_migrate_chart;
pub use load::{LoadTimeline, ops_in, rate_in};
pub use output::{
    MigrateConfig, MigrateReport, MigrateRow, MoveWindow, StepWindow, Timeline,
    format_migrate_table, write_migrate_json,
};

/// Every mode, in the order they run.
pub const MODES: [MigrationMode; 3] = [
    MigrationMode::DirtyTracking,
    MigrationMode::PauseRegion,
    MigrationMode::PauseAll,
];
/// Regions moved per step (Redy: 1, 2, 4 of 7).
pub const STEPS: [u32; 3] = [1, 2, 4];
/// Step starts and the end of the default timeline, in seconds.
const STEP_AT_S: [f64; 3] = [1.0, 2.5, 4.0];
const DEFAULT_TIMELINE_S: f64 = 6.0;
/// Throughput is counted per bucket of this length.
pub const BUCKET: Duration = Duration::from_millis(10);
const CACHE: &str = "bench-migrate";

/// What `bench migrate` runs.
#[derive(Debug, Clone)]
pub struct MigrateBenchOptions {
    /// The `farcache` binary used to start the manager and servers.
    pub bin: PathBuf,
    pub modes: Vec<MigrationMode>,
    pub region_size: u64,
    /// Length of the schedule: steps at 1/6, 2.5/6 and 4/6 of it.
    pub timeline: Duration,
    /// Ops per batch and batches in flight of each load thread.
    pub batch: usize,
    pub queue_depth: usize,
    pub server_threads: usize,
}

impl MigrateBenchOptions {
    /// Redy's shape: 64 MiB regions, a 6 s timeline; `quick`: 4 MiB regions, 2 s.
    pub fn new(bin: impl Into<PathBuf>, quick: bool) -> Self {
        Self {
            bin: bin.into(),
            modes: MODES.to_vec(),
            region_size: if quick { 4 << 20 } else { 64 << 20 },
            timeline: Duration::from_secs_f64(if quick { 2.0 } else { DEFAULT_TIMELINE_S }),
            batch: 1024,
            queue_depth: 4,
            server_threads: 1,
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(BenchError::InvalidArgument(m.into()));
        if self.modes.is_empty() {
            return bad("no migration mode given");
        }
        if self.region_size < 4096 || !self.region_size.is_multiple_of(4096) {
            return bad("the region size must be a positive multiple of 4 KiB");
        }
        if self
            .region_size
            .checked_mul(u64::from(regions()) + 1)
            .is_none()
        {
            return bad("the region size is too large");
        }
        if self.timeline < Duration::from_secs(1) {
            return bad("the timeline must last at least 1 s");
        }
        if self.batch == 0 || self.batch > usize::from(u16::MAX) {
            return bad("the batch size must be within 1..=65535");
        }
        if self.queue_depth == 0 || self.server_threads == 0 {
            return bad("queue depth and server threads must be ≥ 1");
        }
        Ok(())
    }

    fn scale(&self) -> f64 {
        self.timeline.as_secs_f64() / DEFAULT_TIMELINE_S
    }

    fn config(&self) -> MigrateConfig {
        MigrateConfig {
            region_size: self.region_size,
            regions: regions(),
            steps: STEPS.to_vec(),
            step_at_ms: STEP_AT_S.iter().map(|s| s * self.scale() * 1e3).collect(),
            end_ms: self.timeline.as_secs_f64() * 1e3,
            batch: self.batch,
            queue_depth: self.queue_depth,
            server_threads: self.server_threads,
            bucket_ms: BUCKET.as_secs_f64() * 1e3,
        }
    }
}

fn regions() -> u32 {
    STEPS.iter().sum()
}

fn cluster_err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Cluster(format!("{what}: {e}"))
}

/// Runs every mode, each on a fresh cluster, and returns the report (not yet saved).
pub fn run_migrate_bench(opts: &MigrateBenchOptions) -> Result<MigrateReport> {
    opts.validate()?;
    let mut report = MigrateReport::new(opts.config());
    // Per mode: start, fill, add the target, then one tick per step and the tail.
    let pb = progress((opts.modes.len() * (STEPS.len() + 4)) as u64);
    for &mode in &opts.modes {
        pb.set_prefix(mode.to_string());
        let row = run_mode(opts, mode, &pb)?;
        // A step waits for the one before it: say when that moved the schedule.
        for (s, planned) in row.steps.iter().zip(&report.config.step_at_ms) {
            if s.start_ms > planned + 50.0 {
                report.notes.push(format!(
                    "{mode}: the {}-region step started at {:.2} s, not {:.2} s (the step before ran over)",
                    s.regions,
                    s.start_ms / 1e3,
                    planned / 1e3
                ));
            }
        }
        if row.migrations.len() != regions() as usize {
            report.notes.push(format!(
                "{mode}: the manager lists {} of {} moves",
                row.migrations.len(),
                regions()
            ));
        }
        report.rows.push(row);
    }
    pb.finish_and_clear();
    if report.errors() > 0 {
        report
            .notes
            .push("op errors during the run: see the errors column and first_error".into());
    }
    Ok(report)
}

/// A cluster whose first server holds the filled cache and whose second joined empty.
struct Setup {
    cluster: ProcessCluster,
    control: Client,
    source: ServerId,
    target: ServerId,
}

fn set_up(opts: &MigrateBenchOptions, pb: &ProgressBar) -> Result<Setup> {
    let r = opts.region_size;
    let n = u64::from(regions());
    pb.set_message("starting a 1-server cluster");
    // One spare region of memory on each server: the target takes all 7.
    let mut cluster = ProcessCluster::start(
        &opts.bin,
        &ClusterOptions::default()
            .servers(1)
            .region_size(r)
            .server_memory((n + 1) * r)
            .server_threads(opts.server_threads),
    )
    .map_err(|e| cluster_err("start", e))?;
    let control = cluster.client().map_err(|e| cluster_err("client", e))?;
    let cache = control
        .create(CACHE, n * r)
        .map_err(|e| cluster_err("create", e))?;
    let info = cache.info();
    let source = info.regions[0];
    if info.regions.iter().any(|&s| s != source) {
        return Err(BenchError::Cluster(format!(
            "the cache's regions are not all on one server: {:?}",
            info.regions
        )));
    }
    pb.inc(1);
    pb.set_message(format!("filling {} MiB", (n * r) >> 20));
    prefill(&cache, n * r)?;
    pb.inc(1);
    pb.set_message("adding the target server");
    cluster
        .add_server(&["--price", "0.01"])
        .map_err(|e| cluster_err("add server", e))?;
    wait_for_alive(&control, 2, Duration::from_secs(20))
        .map_err(|e| cluster_err("target server", e))?;
    let status = control.status().map_err(|e| cluster_err("status", e))?;
    let target = status
        .servers
        .iter()
        .map(|s| s.id)
        .find(|&id| id != source)
        .ok_or_else(|| BenchError::Cluster("the added server is not listed".into()))?;
    pb.inc(1);
    Ok(Setup {
        cluster,
        control,
        source,
        target,
    })
}

fn run_mode(
    opts: &MigrateBenchOptions,
    mode: MigrationMode,
    pb: &ProgressBar,
) -> Result<MigrateRow> {
    let setup = set_up(opts, pb)?;
    // Reader and writer on clients of their own: one connection each, no shared lane.
    // Paused writes are retried until `op_timeout`: long enough for a slow copy.
    let cfg = || {
        ClientConfig::new("")
            .batch_size(opts.batch)
            .queue_depth(opts.queue_depth)
            .op_timeout(Duration::from_secs(120))
    };
    let open = || -> Result<Cache> {
        let c = setup
            .cluster
            .client_with(cfg())
            .map_err(|e| cluster_err("client", e))?;
        c.open(CACHE).map_err(|e| cluster_err("open", e))
    };
    let (reads, writes) = (open()?, open()?);
    // Connect both clients before the clock starts: the first second is the baseline.
    for c in [&reads, &writes] {
        warm_up(c, opts.batch)?;
    }
    let (read_addrs, write_addrs) = (load::addresses(&reads, 1)?, load::addresses(&writes, 2)?);
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let (steps, r, w) = std::thread::scope(|sc| {
        let shape = (opts.batch, opts.queue_depth);
        let clock = (t0, BUCKET);
        let stop = &stop;
        let r = (&reads, (IoOp::Read, read_addrs.as_slice()));
        let w = (&writes, (IoOp::Write, write_addrs.as_slice()));
        let rh = sc.spawn(move || load::run_load(r.0, r.1, shape, clock, stop));
        let wh = sc.spawn(move || load::run_load(w.0, w.1, shape, clock, stop));
        let steps = schedule(opts, &setup, mode, t0, pb);
        // Stop the load even when a move failed, then report the failure.
        stop.store(true, Ordering::Relaxed);
        let join = |h: std::thread::ScopedJoinHandle<'_, Result<LoadTimeline>>| {
            h.join()
                .unwrap_or_else(|_| Err(BenchError::Cluster("load thread panicked".into())))
        };
        (steps, join(rh), join(wh))
    });
    let (steps, r, w) = (steps?, r?, w?);
    pb.inc(1);
    let status = setup
        .control
        .status()
        .map_err(|e| cluster_err("status", e))?;
    let migrations: Vec<_> = status
        .migrations
        .into_iter()
        .filter(|m| m.from == setup.source && m.to == setup.target)
        .collect();
    Ok(row(opts.region_size, mode, steps, &r, &w, migrations))
}

/// One batch of reads over the whole cache: connects the client's lane to the server.
fn warm_up(cache: &Cache, batch: usize) -> Result<()> {
    let mut b = cache.batch().with_capacity(batch);
    let stride = (cache.capacity() / batch as u64).max(8) & !7;
    for i in 0..batch as u64 {
        b.read((i * stride) % cache.capacity(), 8);
    }
    match b.submit().wait().first_error() {
        Some(e) => Err(cluster_err("warm-up read", e)),
        None => Ok(()),
    }
}

/// Moves the regions at their planned times (a step starts late if the previous one
/// ran over) and keeps the load going until the end plus a tail.
fn schedule(
    opts: &MigrateBenchOptions,
    setup: &Setup,
    mode: MigrationMode,
    t0: Instant,
    pb: &ProgressBar,
) -> Result<Vec<StepWindow>> {
    let ms = |t: Instant| t.duration_since(t0).as_secs_f64() * 1e3;
    let at = |s: f64| t0 + Duration::from_secs_f64(s * opts.scale());
    let mut steps = Vec::new();
    let mut region = 0u32;
    for (&n, &when) in STEPS.iter().zip(&STEP_AT_S) {
        std::thread::sleep(at(when).saturating_duration_since(Instant::now()));
        pb.set_message(format!("moving {n} region(s)"));
        let start = Instant::now();
        let mut moves = Vec::new();
        for _ in 0..n {
            let s = Instant::now();
            setup
                .control
                .move_region(CACHE, region, Some(setup.target), mode)
                .map_err(|e| cluster_err(&format!("{mode}: move of region {region}"), e))?;
            moves.push(MoveWindow {
                region,
                start_ms: ms(s),
                end_ms: ms(Instant::now()),
            });
            region += 1;
        }
        steps.push(StepWindow {
            regions: n,
            start_ms: ms(start),
            end_ms: ms(Instant::now()),
            moves,
        });
        pb.inc(1);
    }
    pb.set_message("after the last move");
    // At least a sixth of the timeline after the last move, to see the recovery.
    let tail = opts.timeline / 6;
    let end = (t0 + opts.timeline).max(Instant::now() + tail);
    std::thread::sleep(end.saturating_duration_since(Instant::now()));
    Ok(steps)
}

const GIB: f64 = (1u64 << 30) as f64;

fn row(
    region_size: u64,
    mode: MigrationMode,
    steps: Vec<StepWindow>,
    r: &LoadTimeline,
    w: &LoadTimeline,
    migrations: Vec<farcache_client::MigrationRecord>,
) -> MigrateRow {
    let windows: Vec<(f64, f64)> = steps
        .iter()
        .map(|s| (s.start_ms / 1e3, s.end_ms / 1e3))
        .collect();
    // The second (or what there is of it) before the first move.
    let first = windows.first().map_or(0.0, |w| w.0);
    let before = [((first - 1.0).max(0.0), first)];
    let rate = |t: &LoadTimeline, w: &[(f64, f64)]| rate_in(&t.counts, BUCKET, w);
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let (rb, wb) = (rate(r, &before), rate(w, &before));
    let (rd, wd) = (rate(r, &windows), rate(w, &windows));
    let bytes: u64 = migrations.iter().map(|m| m.bytes).sum();
    let region_bytes = migrations.len() as f64 * region_size as f64;
    let copy_us: u64 = migrations.iter().map(|m| m.copy_us).sum();
    let pause = migrations.iter().map(|m| m.max_pause_us).max().unwrap_or(0);
    MigrateRow {
        mode: mode.to_string(),
        migration_gib_per_s: ratio(bytes as f64 / GIB, copy_us as f64 / 1e6),
        region_gib_per_s: ratio(region_bytes / GIB, copy_us as f64 / 1e6),
        read_ratio_during: ratio(rd, rb),
        write_ratio_during: ratio(wd, wb),
        moving_s: windows.iter().map(|(s, e)| e - s).sum(),
        max_write_pause_ms: pause as f64 / 1e3,
        throttled_writes: migrations.iter().map(|m| m.throttled_writes).sum(),
        reads_per_s_before: rb,
        writes_per_s_before: wb,
        reads_per_s_during: rd,
        writes_per_s_during: wd,
        bytes_moved: bytes,
        copy_us,
        read_errors: r.errors,
        write_errors: w.errors,
        errors: r.errors + w.errors,
        first_error: r.first_error.clone().or_else(|| w.first_error.clone()),
        steps,
        timeline: Timeline {
            bucket_ms: BUCKET.as_secs_f64() * 1e3,
            reads: r.counts.clone(),
            writes: w.counts.clone(),
        },
        migrations,
    }
}
