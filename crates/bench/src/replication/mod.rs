//! `farcache bench replication`: what a backup copy costs, measured in one run.
//!
//! On one local cluster of three servers, two caches of the same size: one with a
//! single copy of every region (`replicas = 1`), one whose regions each have a backup
//! on another server (`replicas = 2`: every write is applied on the owner, forwarded to
//! the backup, and acknowledged once the backup has it). For each cache, in turn:
//! batched 8-byte writes at uniform random 8-aligned addresses (the `bench io` closed
//! loop, `depth` batches of `batch` ops in flight), then batched 8-byte reads the same
//! way, then unbatched writes one at a time for their latency. The servers' own
//! replication counters confirm that the second cache's writes reached a backup and
//! the first cache's did not.

mod output;

use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use farcache_client::{Cache, Client, ClientConfig, CreateOptions};
use farcache_proto::Role;
use farcache_proto::blocking::{control_call, handshake};
use farcache_proto::control::{ControlRequest, ControlResponse};
use farcache_testkit::{ClusterOptions, ProcessCluster};

use crate::error::{BenchError, Result};
use crate::histogram::LatencyHistogram;
use crate::io::{IoOp, IoOutcome, IoSpec, run_throughput};
use crate::io_suite::{prefill, progress};
use crate::workload::{KeyDistribution, KeyGen};
pub use output::{
    Placement, ReplicationReport, ReplicationRow, format_replication_table, write_replication_json,
};

/// Servers of the cluster: an owner, a backup, and a third so placements vary.
pub const SERVERS: usize = 3;
/// Region size of both caches.
pub const REGION: u64 = 1 << 20;
/// Bytes per op.
pub const RECORD: usize = 8;
/// The target: 8-byte write throughput with two copies ≥ half of one copy's.
pub const TARGET_WRITE_RATIO: f64 = 0.5;
/// Not measured: connections, first-touch faults and branch predictors settle first.
const WARM_UP: Duration = Duration::from_millis(100);
const CACHES: [(&str, u32); 2] = [("bench-repl-r1", 1), ("bench-repl-r2", 2)];

/// What `bench replication` runs.
#[derive(Debug, Clone)]
pub struct ReplicationBenchOptions {
    /// The `farcache` binary used to start the manager and servers.
    pub bin: PathBuf,
    /// Capacity of each of the two caches (a multiple of [`REGION`]).
    pub cache_size: u64,
    /// Measured time of every row.
    pub seconds: Duration,
    /// Ops per batch and batches in flight of the batched rows.
    pub batch: usize,
    pub depth: usize,
    pub server_threads: usize,
}

impl ReplicationBenchOptions {
    /// 64 MiB caches, 3 s per row, 64 ops per batch, 8 batches in flight, 1 thread per
    /// server.
    pub fn new(bin: impl Into<PathBuf>) -> Self {
        Self {
            bin: bin.into(),
            cache_size: 64 << 20,
            seconds: Duration::from_secs(3),
            batch: 64,
            depth: 8,
            server_threads: 1,
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(BenchError::InvalidArgument(m.into()));
        if self.cache_size == 0 || !self.cache_size.is_multiple_of(REGION) {
            return bad("the cache size must be a positive multiple of 1 MiB (the region size)");
        }
        if self.cache_size > 64 << 30 {
            return bad("the cache size must be at most 64 GiB");
        }
        if self.seconds.is_zero() {
            return bad("--seconds must be positive");
        }
        if self.batch == 0 || self.batch > usize::from(u16::MAX) {
            return bad("the batch size must be within 1..=65535");
        }
        if self.depth == 0 || self.server_threads == 0 {
            return bad("depth and server threads must be ≥ 1");
        }
        Ok(())
    }

    /// Memory per server: its share of both caches' copies (1 + 2 per cache region,
    /// over three servers), doubled so an uneven placement fits too.
    fn server_memory(&self) -> u64 {
        let copies: u64 = CACHES.iter().map(|&(_, r)| u64::from(r)).sum();
        let regions = self.cache_size / REGION;
        let share = (regions * copies).div_ceil(SERVERS as u64);
        (2 * share + 4) * REGION
    }
}

fn cluster_err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Cluster(format!("{what}: {e}"))
}

/// Runs every row on one cluster and returns the report (not yet printed or saved).
pub fn run_replication_bench(opts: &ReplicationBenchOptions) -> Result<ReplicationReport> {
    opts.validate()?;
    let mut report = ReplicationReport::new(opts, SERVERS, REGION, RECORD, TARGET_WRITE_RATIO);
    // Start, create and fill, then the six rows.
    let pb = progress(8);
    pb.set_prefix("replication");
    pb.set_message(format!("starting {SERVERS} servers"));
    let cluster = ProcessCluster::start(
        &opts.bin,
        &ClusterOptions::default()
            .servers(SERVERS)
            .region_size(REGION)
            .server_memory(opts.server_memory())
            .server_threads(opts.server_threads),
    )
    .map_err(|e| cluster_err("start", e))?;
    let client = cluster
        .client_with(
            ClientConfig::new("")
                .batch_size(opts.batch)
                .queue_depth(opts.depth)
                .op_timeout(Duration::from_secs(30)),
        )
        .map_err(|e| cluster_err("client", e))?;
    let mut counters = BackupCounters::connect(&cluster)?;
    pb.inc(1);

    let mut caches = Vec::new();
    for &(name, replicas) in &CACHES {
        pb.set_message(format!(
            "creating and filling {name} ({} MiB, replicas {replicas})",
            opts.cache_size >> 20
        ));
        let cache = create(&client, name, opts.cache_size, replicas)?;
        report
            .placement
            .extend(placement(&client, &cache, replicas)?);
        prefill(&cache, opts.cache_size)?;
        caches.push((replicas, cache));
    }
    pb.inc(1);

    let records = opts.cache_size / RECORD as u64;
    for op in [IoOp::Write, IoOp::Read] {
        for (replicas, cache) in &caches {
            let name = format!("{}s r={replicas}", op.name());
            pb.set_message(format!(
                "{name}: batches of {} × {RECORD} B, {} in flight",
                opts.batch, opts.depth
            ));
            let spec = IoSpec {
                op,
                record_size: RECORD,
                dist: KeyDistribution::Uniform,
                records,
                batch: opts.batch,
                depth: opts.depth,
                duration: opts.seconds,
                read_fraction: None,
            };
            let before = counters.backup_bytes()?;
            let out = run_throughput(cache, &spec)?;
            let backup_bytes = counters.backup_bytes()?.saturating_sub(before);
            report
                .rows
                .push(batched_row(name, *replicas, op, &out, backup_bytes));
            pb.inc(1);
        }
    }
    for (replicas, cache) in &caches {
        let name = format!("write p50/p99 r={replicas}");
        pb.set_message(format!("{name}: one {RECORD} B write at a time"));
        let before = counters.backup_bytes()?;
        let lat = unbatched_writes(cache, records, opts.seconds)?;
        let backup_bytes = counters.backup_bytes()?.saturating_sub(before);
        report.rows.push(lat.row(name, *replicas, backup_bytes));
        pb.inc(1);
    }
    pb.finish_and_clear();
    drop((caches, counters, client));
    drop(cluster);
    report.summarize();
    Ok(report)
}

fn create(client: &Client, name: &str, capacity: u64, replicas: u32) -> Result<Cache> {
    let opts = CreateOptions {
        region_size: Some(REGION),
        replicas,
        ..CreateOptions::default()
    };
    client
        .create_with(name, capacity, &opts)
        .map_err(|e| cluster_err(&format!("create {name} (replicas {replicas})"), e))
}

/// Regions and backups per server; fails unless every region of a replicated cache
/// has a backup on another server and an unreplicated one has none.
fn placement(client: &Client, cache: &Cache, replicas: u32) -> Result<Vec<Placement>> {
    let info = cache.info();
    let copies_ok = (0..info.regions.len()).all(|r| {
        let backups = info.backups.get(r).map_or(&[][..], Vec::as_slice);
        let want = replicas.saturating_sub(1) as usize;
        backups.len() == want && !backups.contains(&info.regions[r])
    });
    if !copies_ok {
        return Err(BenchError::Cluster(format!(
            "cache {} (replicas {replicas}) does not have {} backup(s) per region on other servers: owners {:?}, backups {:?}",
            info.name,
            replicas.saturating_sub(1),
            info.regions,
            info.backups
        )));
    }
    let status = client.status().map_err(|e| cluster_err("status", e))?;
    Ok(status
        .servers
        .iter()
        .map(|s| Placement {
            replicas,
            server: s.id,
            addr: s.addr.clone(),
            regions: info.regions.iter().filter(|&&o| o == s.id).count() as u32,
            backups: info.backups.iter().filter(|b| b.contains(&s.id)).count() as u32,
        })
        .collect())
}

fn batched_row(
    name: String,
    replicas: u32,
    op: IoOp,
    out: &IoOutcome,
    backup_bytes: u64,
) -> ReplicationRow {
    ReplicationRow {
        name,
        replicas,
        op: op.name().into(),
        batched: true,
        ops: out.ops,
        errors: out.errors,
        secs: out.secs,
        mops: out.mops,
        p50_us: out.latency.p50_us,
        p99_us: out.latency.p99_us,
        backup_bytes,
        backup_writes_per_write: f64::NAN,
    }
}

/// One unbatched write run: its latencies (after the warm-up) and every write sent.
struct Unbatched {
    hist: LatencyHistogram,
    measured: u64,
    /// Writes sent, warm-up included: what the servers' counters saw.
    sent: u64,
    errors: u64,
    secs: f64,
}

impl Unbatched {
    fn row(&self, name: String, replicas: u32, backup_bytes: u64) -> ReplicationRow {
        let s = self.hist.summary();
        ReplicationRow {
            name,
            replicas,
            op: IoOp::Write.name().into(),
            batched: false,
            ops: self.measured,
            errors: self.errors,
            secs: self.secs,
            mops: self.measured as f64 / self.secs / 1e6,
            p50_us: s.p50_us,
            p99_us: s.p99_us,
            backup_bytes,
            backup_writes_per_write: backup_bytes as f64 / RECORD as f64 / self.sent as f64,
        }
    }
}

/// One 8-byte write at a time at uniform addresses (drawn before the clock starts),
/// each timed from call to acknowledgement.
fn unbatched_writes(cache: &Cache, records: u64, seconds: Duration) -> Result<Unbatched> {
    let mut keys = KeyGen::uniform(records, RECORD, 7)?;
    let addrs: Vec<u64> = (0..records.clamp(1024, 1 << 20))
        .map(|_| keys.next_offset())
        .collect();
    let payload = [0x5Au8; RECORD];
    let mut out = Unbatched {
        hist: LatencyHistogram::new(),
        measured: 0,
        sent: 0,
        errors: 0,
        secs: 0.0,
    };
    let warm = Instant::now() + WARM_UP;
    let mut start: Option<Instant> = None;
    let mut i = 0usize;
    loop {
        let now = Instant::now();
        match start {
            None if now >= warm => start = Some(now),
            Some(s) if now.duration_since(s) >= seconds => break,
            _ => {}
        }
        let a = addrs[i];
        i = if i + 1 == addrs.len() { 0 } else { i + 1 };
        let t = Instant::now();
        let r = cache.write(a, &payload);
        let ns = t.elapsed().as_nanos() as u64;
        out.sent += 1;
        if r.is_err() {
            out.errors += 1;
        } else if start.is_some() {
            out.hist.record(ns);
            out.measured += 1;
        }
    }
    out.secs = start.map_or(0.0, |s| s.elapsed().as_secs_f64());
    Ok(out)
}

/// The servers' replication counters, read over each server's control API.
struct BackupCounters {
    conns: Vec<TcpStream>,
}

impl BackupCounters {
    fn connect(cluster: &ProcessCluster) -> Result<Self> {
        let cred = farcache_proto::Credential::Cluster(cluster.secret().clone());
        let mut conns = Vec::new();
        for i in 0..SERVERS {
            let mut s = TcpStream::connect(cluster.server_addr(i))?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.set_nodelay(true)?;
            handshake(&mut s, Role::Client, 0x6000 + i as u64, "", &cred)
                .map_err(|e| cluster_err("stats connection", e))?;
            conns.push(s);
        }
        Ok(Self { conns })
    }

    /// Bytes of written ranges the servers, as owners, have sent to backups so far.
    fn backup_bytes(&mut self) -> Result<u64> {
        let mut total = 0;
        for s in &mut self.conns {
            match control_call(s, &ControlRequest::ServerStats)
                .map_err(|e| cluster_err("server stats", e))?
            {
                ControlResponse::Stats(st) => total += st.replication.bytes,
                other => {
                    return Err(cluster_err("server stats", format!("unexpected {other:?}")));
                }
            }
        }
        Ok(total)
    }
}
