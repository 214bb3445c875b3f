//! `farcache bench drain`: how long a server holding a full cache takes to drain when
//! it is reclaimed (the issue's target: 4 GiB within a 30 s grace).
//!
//! On a local process cluster: one server holds a cache of `size` bytes (every region
//! on it), filled with a pattern that differs at every word. A second server with the
//! same memory joins. Then the manager is told the first server will be taken back
//! within `grace` (`Client::reclaim`, dirty-tracking moves), and the bench polls the
//! manager's status every 20 ms until no region is left on it: that wall time is the
//! drain time. Meanwhile one thread runs a light load (a batch of 16 reads and 16
//! writes of 8 bytes at random words every millisecond). Afterwards the whole cache is
//! read back, chunk by chunk, and compared with the pattern and the load's writes.

mod data;
mod load;
mod output;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use farcache_client::{
    Cache, CacheId, Client, ClientConfig, ClusterStatus, MigrationMode, ServerId,
};
use farcache_testkit::{ClusterOptions, ProcessCluster, wait_for_alive};
use indicatif::ProgressBar;

use crate::error::{BenchError, Result};
use crate::io_suite::progress;
pub use data::CHUNK;
pub use output::{DrainReport, format_drain_table, write_drain_json};

/// The issue's grace: a reclaimed server must drain within it.
pub const ISSUE_GRACE: Duration = Duration::from_secs(30);
/// How often the manager's status is polled during the drain.
pub const POLL: Duration = Duration::from_millis(20);
/// How long past the grace the bench waits for the last regions to leave.
const WAIT_PAST_GRACE: Duration = Duration::from_secs(30);
/// The manager keeps this many migration records: more regions would drop some.
const MAX_REGIONS: u64 = 1024;
/// Longest grace the manager accepts.
const MAX_GRACE: Duration = Duration::from_secs(3600);
/// Ops (the fill's, the load's, the verify's) wait this long through pauses.
const OP_TIMEOUT: Duration = Duration::from_secs(120);
const CACHE: &str = "bench-drain";
const LOAD_SEED: u64 = 0x5EED_D4A1;

/// What `bench drain` runs.
#[derive(Debug, Clone)]
pub struct DrainBenchOptions {
    /// The `farcache` binary used to start the manager and servers.
    pub bin: PathBuf,
    /// The cache, and each server's memory.
    pub size: u64,
    pub region_size: u64,
    /// The reclamation notice.
    pub grace: Duration,
    /// Run the light background load during the drain.
    pub load: bool,
    pub server_threads: usize,
}

impl DrainBenchOptions {
    /// The issue's shape: 4 GiB in 256 MiB regions, a 30 s grace, load on.
    pub fn new(bin: impl Into<PathBuf>) -> Self {
        Self {
            bin: bin.into(),
            size: 4 << 30,
            region_size: 256 << 20,
            grace: ISSUE_GRACE,
            load: true,
            server_threads: 1,
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(BenchError::InvalidArgument(m));
        if self.region_size == 0 || !self.region_size.is_multiple_of(CHUNK) {
            return bad("the region size must be a positive multiple of 1 MiB".into());
        }
        if self.size == 0 || !self.size.is_multiple_of(self.region_size) {
            return bad("the size must be a positive multiple of the region size".into());
        }
        if self.size / self.region_size > MAX_REGIONS {
            return bad(format!(
                "at most {MAX_REGIONS} regions (the manager lists that many moves): use larger regions"
            ));
        }
        if self.grace < Duration::from_secs(1) || self.grace > MAX_GRACE {
            return bad("the grace must be within 1..=3600 s".into());
        }
        if self.server_threads == 0 {
            return bad("server threads must be ≥ 1".into());
        }
        // Both servers may hold the whole cache at once (the drained one frees each
        // region only after it moved), plus the client's 64 MiB in flight.
        let need = self.size.saturating_mul(2).saturating_add(128 << 20);
        if let Some(avail) = mem_available()
            && need > avail
        {
            return bad(format!(
                "two servers of {} MiB need about {} MiB of memory; {} MiB are available",
                self.size >> 20,
                need >> 20,
                avail >> 20
            ));
        }
        Ok(())
    }
}

/// `MemAvailable` from /proc/meminfo, in bytes.
fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

fn cluster_err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Cluster(format!("{what}: {e}"))
}

/// Runs the whole bench and returns the report (not yet printed or saved).
pub fn run_drain_bench(opts: &DrainBenchOptions) -> Result<DrainReport> {
    opts.validate()?;
    let mut report = DrainReport::new(
        opts.size,
        opts.region_size,
        opts.server_threads,
        opts.grace.as_secs_f64(),
        opts.load,
    );
    let (size_mib, regions) = (opts.size >> 20, report.regions);
    let pb = progress(1);
    pb.set_prefix("start");
    pb.set_message(format!("one server with {size_mib} MiB"));
    let mut cluster = ProcessCluster::start(
        &opts.bin,
        &ClusterOptions::default()
            .servers(1)
            .region_size(opts.region_size)
            .server_memory(opts.size)
            .server_threads(opts.server_threads),
    )
    .map_err(|e| cluster_err("start", e))?;
    let config = || ClientConfig::new("").op_timeout(OP_TIMEOUT);
    let control = cluster
        .client_with(config())
        .map_err(|e| cluster_err("client", e))?;
    let cache = control
        .create(CACHE, opts.size)
        .map_err(|e| cluster_err("create", e))?;
    let info = cache.info();
    let (cache_id, source) = (info.id, info.regions[0]);
    if info.region_size != opts.region_size || info.regions.iter().any(|&s| s != source) {
        return Err(BenchError::Cluster(format!(
            "expected {regions} regions of {} bytes on one server, got {} of {} on {:?}",
            opts.region_size,
            info.regions.len(),
            info.region_size,
            info.regions
        )));
    }

    phase(
        &pb,
        "fill",
        size_mib,
        format!("writing the pattern over {size_mib} MiB"),
    );
    let t = Instant::now();
    data::fill(&cache, opts.size, &pb)?;
    report.fill_s = t.elapsed().as_secs_f64();
    drop(cache);

    phase(
        &pb,
        "join",
        1,
        "a second server with the same memory".into(),
    );
    cluster
        .add_server(&[])
        .map_err(|e| cluster_err("add server", e))?;
    wait_for_alive(&control, 2, Duration::from_secs(20))
        .map_err(|e| cluster_err("second server", e))?;

    // The load's own client, connected before the clock starts.
    let load_cache = if opts.load {
        let c = cluster
            .client_with(config())
            .map_err(|e| cluster_err("load client", e))?;
        let cache = c.open(CACHE).map_err(|e| cluster_err("open", e))?;
        cache
            .read(0, 8)
            .map_err(|e| cluster_err("load warm-up read", e))?;
        Some((c, cache))
    } else {
        None
    };

    phase(
        &pb,
        "drain",
        u64::from(regions),
        format!(
            "reclaiming the first server, grace {:.0} s",
            opts.grace.as_secs_f64()
        ),
    );
    let stop = AtomicBool::new(false);
    let (drained, load) = std::thread::scope(|sc| {
        let stop = &stop;
        let h = load_cache
            .as_ref()
            .map(|(_, c)| sc.spawn(move || load::run(c, LOAD_SEED, stop)));
        let drained = drain(&control, cache_id, source, regions, opts.grace, &pb);
        stop.store(true, Ordering::Relaxed);
        let load = h.map(|h| h.join());
        (drained, load)
    });
    let (done, took) = drained?;
    report.drained = done;
    report.drain_s = took.as_secs_f64();
    if let Some(load) = load {
        let l = load.map_err(|_| BenchError::Cluster("load thread panicked".into()))?;
        report.load_reads = l.reads;
        report.load_writes = l.writes;
        report.load_errors = l.errors;
        report.load_wrong_reads = l.wrong_reads;
        report.load_ops_per_s = (l.reads + l.writes) as f64 / l.secs;
        report.load_max_batch_ms = l.max_batch.as_secs_f64() * 1e3;
        report.load_first_error = l.first_error.clone();
        verify_phase(&mut report, &control, &pb, &l.slots)?;
    } else {
        verify_phase(&mut report, &control, &pb, &[])?;
    }
    drop(load_cache);

    let status = control.status().map_err(|e| cluster_err("status", e))?;
    report.migrations = status
        .migrations
        .iter()
        .filter(|m| m.cache == cache_id && m.from == source)
        .cloned()
        .collect();
    report.lost_regions = status
        .lost
        .iter()
        .filter(|l| l.cache == cache_id && l.was_on == source)
        .count() as u32;
    pb.finish_and_clear();
    drop(control);
    drop(cluster);
    report.summarize();
    Ok(report)
}

/// Resets the bar for the next phase.
fn phase(pb: &ProgressBar, name: &'static str, len: u64, msg: String) {
    pb.reset();
    pb.set_length(len);
    pb.set_prefix(name);
    pb.set_message(msg);
}

/// Reads the whole cache back through a fresh handle and compares it.
fn verify_phase(
    report: &mut DrainReport,
    control: &Client,
    pb: &ProgressBar,
    slots: &[data::Slot],
) -> Result<()> {
    let size = report.size_bytes;
    phase(
        pb,
        "verify",
        size >> 20,
        format!("reading {} MiB back", size >> 20),
    );
    let cache: Cache = control.open(CACHE).map_err(|e| cluster_err("open", e))?;
    let t = Instant::now();
    let v = data::verify(&cache, size, slots, pb);
    report.verify_s = t.elapsed().as_secs_f64();
    report.verified_bytes = v.bytes;
    report.mismatched_bytes = v.mismatched_bytes;
    report.unreadable_bytes = v.unreadable_bytes;
    report.lost_writes = v.lost_writes;
    report.first_mismatch = v.first_mismatch;
    report.first_verify_error = v.first_error;
    Ok(())
}

/// Regions of `cache` the status places on `server`.
fn regions_on(st: &ClusterStatus, cache: CacheId, server: ServerId) -> usize {
    st.caches
        .iter()
        .filter(|c| c.id == cache)
        .flat_map(|c| c.regions.iter())
        .filter(|&&s| s == server)
        .count()
}

/// Reclaims `source` and polls until the status lists none of the cache's regions on
/// it; returns whether that happened (before grace + 30 s) and when.
fn drain(
    control: &Client,
    cache: CacheId,
    source: ServerId,
    regions: u32,
    grace: Duration,
    pb: &ProgressBar,
) -> Result<(bool, Duration)> {
    let t0 = Instant::now();
    control
        .reclaim(source, grace, MigrationMode::DirtyTracking)
        .map_err(|e| cluster_err("reclaim", e))?;
    let limit = grace + WAIT_PAST_GRACE;
    let mut failures = 0;
    loop {
        match control.status() {
            Ok(st) => {
                failures = 0;
                let left = regions_on(&st, cache, source);
                pb.set_position(u64::from(regions).saturating_sub(left as u64));
                if left == 0 {
                    return Ok((true, t0.elapsed()));
                }
            }
            Err(e) => {
                failures += 1;
                if failures >= 10 {
                    return Err(cluster_err("status during the drain", e));
                }
            }
        }
        if t0.elapsed() > limit {
            return Ok((false, t0.elapsed()));
        }
        std::thread::sleep(POLL);
    }
}
