//! `farcache bench sproc`: stored procedures against the same work done at the client
//! with plain reads, and against Redis Lua scripts.
//!
//! Rows (see docs/benchmarks.md):
//! 1. read one record and verify: the built-in `aggregate` over one record, batched,
//!    vs Redis `EVALSHA` of a GET-and-compare script at its best pipelining;
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

use std::collections::{HashSet, VecDeque};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use farcache_client::{Batch, BatchResults, Cache, ClientConfig, Ticket};
use farcache_proto::Role;
use farcache_proto::blocking::{control_call, handshake};
use farcache_proto::control::{ControlRequest, ControlResponse, PeerStats};
use farcache_sproc::builtin::{AggFn, Aggregate, Chase, Flow, KHop, NULL};
use farcache_testkit::{ClusterOptions, ProcessCluster};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::baseline::redis_eval::{
    EvalScript, RedisEvalBaseline, RedisEvalOpts, redis_eval_baselines,
};
use crate::error::{BenchError, Result};
use crate::histogram::{LatencyHistogram, LatencySummary};
use crate::io_suite::progress;
use crate::report::{BenchReport, BenchRow};
use crate::tools::{Tool, ensure_tools};
use crate::workload::{DEFAULT_ZIPF_THETA, KeyGen};

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
/// 64-node chase over 3 servers: client-side round trips ÷ procedure round trips.
pub const TARGET_CHASE_RT_RATIO: f64 = 10.0;

/// Region size of both clusters: small, so the 3-server caches span every server.
const REGION: u64 = 1 << 20;
/// Chain nodes: 32-byte slots with the next pointer at offset 16.
const NODE: u64 = 32;
const NEXT_OFF: u32 = 16;
/// Nodes per chain.
pub const CHASE_LEN: u32 = 64;
/// Servers of the chase / k-hop cluster.
const SPREAD_SERVERS: usize = 3;
/// Pre-drawn logical ops per batched run, replayed cyclically.
const TABLE: usize = 1 << 16;
/// Warm-up of every batched run (discarded).
const WARMUP: Duration = Duration::from_millis(100);
/// Fewest samples of a one-at-a-time run, whatever `duration`.
const MIN_SAMPLES: u64 = 20;
/// Vertices per edge in the k-hop graph (100k vertices for 1M edges).
const EDGES_PER_VERTEX: u64 = 10;
/// k-hop sources whose 3-hop neighbourhood is larger than this many vertices are not
/// queried: the BFS carries its visited set in every continuation, and a state near
/// the 1 MiB per-op limit fails.
const MAX_REACH: usize = 1 << 15;

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
            baselines: true,
            redis_requests: None,
            quick,
            records_rows: true,
            spread_rows: true,
        }
    }

    fn validate(&self) -> Result<()> {
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
        pb.set_message("redis-benchmark EVALSHA (verify, sum 2, sum 3)");
        let scripts = [EvalScript::verify(), EvalScript::sum(2), EvalScript::sum(3)];
        report.baselines.redis_eval = redis_eval_baselines(&opts.redis_opts(), &scripts)?;
        pb.finish_and_clear();
        report.rows.extend(report.baselines.rows());
        report.notes.push(
            "Redis runs each script with EVALSHA after one SCRIPT LOAD (its fastest form); \
             every key holds the same 8-byte value"
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

// ------------------------------------------------------------ rows 1 and 2 ---

/// The value of 8-byte record `i` (distinct per record, so a wrong address shows).
fn record_value(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `TABLE` logical ops over `records` records: `k` records `stride` bytes apart from
/// a random first record, with the expected sum and the procedure's arguments.
struct AggTable {
    k: u32,
    ops: Vec<(u64, u32)>,
    expected: Vec<u64>,
    /// Every op's arguments in one flat table read in order, like `ops` (a table of
    /// separately allocated arguments costs a cache miss per op, and arguments built
    /// just before the call are read back before their stores retire).
    args: Vec<[u8; 9]>,
    /// The same calls as `sum.wat` arguments: base u64, n u32, then a zero index and
    /// partial sum.
    wasm_args: Vec<[u8; 24]>,
}

impl AggTable {
    fn new(records: u64, k: u32, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut t = AggTable {
            k,
            ops: Vec::with_capacity(TABLE),
            expected: Vec::with_capacity(TABLE),
            args: Vec::with_capacity(TABLE),
            wasm_args: Vec::with_capacity(TABLE),
        };
        for _ in 0..TABLE {
            let (first, step) = if k == 1 {
                (rng.gen_range(0..records), 1)
            } else {
                let step = rng.gen_range(1..=(records - 1) / u64::from(k - 1));
                (rng.gen_range(0..records - step * u64::from(k - 1)), step)
            };
            let base = first * 8;
            let stride = (step * 8) as u32;
            let sum =
                (0..u64::from(k)).fold(0u64, |a, j| a.wrapping_add(record_value(first + j * step)));
            t.ops.push((base, stride));
            t.expected.push(sum);
            t.args.push(Aggregate::call(AggFn::Sum, k, stride));
            let mut w = [0u8; 24];
            w[..8].copy_from_slice(&base.to_le_bytes());
            w[8..12].copy_from_slice(&k.to_le_bytes());
            t.wasm_args.push(w);
        }
        t
    }

    /// Op `j`'s arguments.
    fn args(&self, j: usize) -> &[u8; 9] {
        &self.args[j]
    }

    fn execute(&self, b: &mut Batch, j: usize) {
        let (base, _) = self.ops[j];
        b.execute(Aggregate::NAME, base, self.args(j));
    }

    /// Errors among the `n` logical ops starting at table index `first`.
    fn check_execute(&self, r: &BatchResults, first: usize, n: usize) -> u64 {
        (0..n)
            .filter(|&i| {
                let want = self.expected[(first + i) % TABLE];
                r.data(i)
                    .ok()
                    .and_then(|d| Aggregate::result(d).ok())
                    .is_none_or(|v| v != want)
            })
            .count() as u64
    }

    /// Op `j` as a call of `sum.wat`, which adds records 8 bytes apart (`k` = 1 only).
    fn execute_wasm(&self, b: &mut Batch, j: usize) {
        b.execute("sum", self.ops[j].0, &self.wasm_args[j]);
    }

    fn check_wasm(&self, r: &BatchResults, first: usize, n: usize) -> u64 {
        (0..n)
            .filter(|&i| {
                let want = self.expected[(first + i) % TABLE];
                r.data(i)
                    .ok()
                    .and_then(|d| d.get(..8).and_then(|s| s.try_into().ok()))
                    .map(u64::from_le_bytes)
                    != Some(want)
            })
            .count() as u64
    }

    fn reads(&self, b: &mut Batch, j: usize) {
        let (base, stride) = self.ops[j];
        for m in 0..u64::from(self.k) {
            b.read(base + m * u64::from(stride), 8);
        }
    }

    fn check_reads(&self, r: &BatchResults, first: usize, n: usize) -> u64 {
        let k = self.k as usize;
        (0..n)
            .filter(|&i| {
                let want = self.expected[(first + i) % TABLE];
                let got = (0..k).try_fold(0u64, |acc, m| {
                    let d = r.data(i * k + m).ok()?;
                    let v = u64::from_le_bytes(d.get(..8)?.try_into().ok()?);
                    Some(acc.wrapping_add(v))
                });
                got != Some(want)
            })
            .count() as u64
    }
}

/// Outcome of a measured run (batched or one at a time).
#[derive(Debug, Clone)]
struct RunOutcome {
    /// Logical ops run, warm-up included (what the servers' counters saw).
    total: u64,
    /// Logical ops that failed or returned a wrong answer (warm-up included).
    errors: u64,
    mops: f64,
    latency: LatencySummary,
}

/// Slices per variant of [`run_paired`]; each variant is measured for `duration` in all.
const PAIRED_SLICES: u32 = 6;

/// Two variants of the same logical work measured in alternating slices (A B B A A B …)
/// of `duration / PAIRED_SLICES` each (`duration` per variant), so their ratio is not skewed by the shared
/// machine speeding up or slowing down between two long runs.
fn run_paired<FA, CA, FB, CB>(
    cache: &Cache,
    b: usize,
    q: usize,
    duration: Duration,
    a: &mut Batched<FA, CA>,
    bv: &mut Batched<FB, CB>,
) -> (RunOutcome, RunOutcome)
where
    FA: FnMut(&mut Batch, usize),
    CA: FnMut(&BatchResults, usize, usize) -> u64,
    FB: FnMut(&mut Batch, usize),
    CB: FnMut(&BatchResults, usize, usize) -> u64,
{
    let slice = duration / PAIRED_SLICES;
    for i in 0..PAIRED_SLICES {
        if i % 2 == 0 {
            a.slice(cache, b, q, slice);
            bv.slice(cache, b, q, slice);
        } else {
            bv.slice(cache, b, q, slice);
            a.slice(cache, b, q, slice);
        }
    }
    (a.outcome(), bv.outcome())
}

/// A batched run measured in one or more slices: `q` batches of `b` logical ops kept in
/// flight, `fill` adds logical op `j` (a table index) to a batch, `check` counts the
/// wrong answers among a completed batch's `n` logical ops starting at table index
/// `first`.
struct Batched<F, C> {
    fill: F,
    check: C,
    hist: LatencyHistogram,
    /// Next table index.
    next: usize,
    /// Logical ops submitted (warm-ups included), measured, and wrong.
    submitted: u64,
    ops: u64,
    errors: u64,
    /// Measured time over all slices.
    secs: f64,
}

impl<F, C> Batched<F, C>
where
    F: FnMut(&mut Batch, usize),
    C: FnMut(&BatchResults, usize, usize) -> u64,
{
    fn new(fill: F, check: C) -> Self {
        Self {
            fill,
            check,
            hist: LatencyHistogram::new(),
            next: 0,
            submitted: 0,
            ops: 0,
            errors: 0,
            secs: 0.0,
        }
    }

    /// A warm-up, then `duration` measured.
    fn slice(&mut self, cache: &Cache, b: usize, q: usize, duration: Duration) {
        let mut inflight: VecDeque<(Instant, usize, Ticket)> = VecDeque::with_capacity(q + 1);
        let mut measuring = false;
        let mut start = Instant::now();
        let mut end = start + WARMUP;
        loop {
            let now = Instant::now();
            if now >= end {
                if measuring {
                    break;
                }
                // Warm-up over: finish its batches, then start the clock.
                while let Some((_, first, t)) = inflight.pop_front() {
                    self.errors += (self.check)(&t.wait(), first, b);
                }
                measuring = true;
                start = Instant::now();
                end = start + duration;
            }
            let mut batch = cache.batch();
            let first = self.next;
            for _ in 0..b {
                (self.fill)(&mut batch, self.next);
                self.next = (self.next + 1) % TABLE;
            }
            inflight.push_back((Instant::now(), first, batch.submit()));
            self.submitted += b as u64;
            if inflight.len() >= q
                && let Some((t0, first, t)) = inflight.pop_front()
            {
                let r = t.wait();
                self.errors += (self.check)(&r, first, b);
                // Batches finished during the warm-up are checked but not counted.
                if measuring {
                    self.hist.record_n(t0.elapsed().as_nanos() as u64, b as u64);
                    self.ops += b as u64;
                }
            }
        }
        while let Some((t0, first, t)) = inflight.pop_front() {
            let r = t.wait();
            self.hist.record_n(t0.elapsed().as_nanos() as u64, b as u64);
            self.errors += (self.check)(&r, first, b);
            self.ops += b as u64;
        }
        self.secs += start.elapsed().as_secs_f64();
    }

    fn outcome(&self) -> RunOutcome {
        RunOutcome {
            total: self.submitted,
            errors: self.errors,
            mops: self.ops as f64 / self.secs.max(1e-9) / 1e6,
            latency: self.hist.summary(),
        }
    }
}

/// One logical op at a time: `one(i)` runs op `i` and says whether its answer was
/// right. A tenth of `duration` (at least 2 ops) warms up, then ops run until
/// `duration` has passed and at least [`MIN_SAMPLES`] were timed.
fn run_serial(duration: Duration, mut one: impl FnMut(u64) -> bool) -> RunOutcome {
    let mut errors = 0u64;
    let mut i = 0u64;
    let warm_until = Instant::now() + duration / 10;
    while i < 2 || Instant::now() < warm_until {
        errors += u64::from(!one(i));
        i += 1;
    }
    let mut hist = LatencyHistogram::new();
    let start = Instant::now();
    let mut n = 0u64;
    while n < MIN_SAMPLES || start.elapsed() < duration {
        let t0 = Instant::now();
        let ok = one(i);
        hist.record(t0.elapsed().as_nanos() as u64);
        errors += u64::from(!ok);
        i += 1;
        n += 1;
    }
    let latency = hist.summary();
    RunOutcome {
        total: i,
        errors,
        mops: 1.0 / latency.mean_us,
        latency,
    }
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

/// Rows 1 and 2 on a one-server cluster (one worker thread, one client thread).
fn records_section(opts: &SprocBenchOptions, report: &mut BenchReport) -> Result<()> {
    let records = opts.records();
    let capacity = (records * 8).div_ceil(REGION) * REGION;
    let pb = progress((opts.b.len() * opts.q.len() * 5 + 1) as u64);
    pb.set_prefix("farcache");
    pb.set_message("starting 1 server, s = 1");
    let cluster = ProcessCluster::start(
        &opts.bin,
        &ClusterOptions::default()
            .servers(1)
            .server_threads(1)
            .server_memory(capacity + 2 * REGION)
            .region_size(REGION),
    )
    .map_err(cluster_err)?;
    let setup = cluster.client().map_err(cluster_err)?;
    let cache = setup
        .create_with_region_size("bench-sproc-records", capacity, Some(REGION))
        .map_err(cluster_err)?;
    let mut bytes = Vec::with_capacity((records * 8) as usize);
    for i in 0..records {
        bytes.extend_from_slice(&record_value(i).to_le_bytes());
    }
    write_all(&cache, 0, &bytes)?;
    drop(bytes);
    let verify = AggTable::new(records, 1, 1);
    let tables = [AggTable::new(records, 2, 2), AggTable::new(records, 3, 3)];

    for &b in &opts.b {
        for &q in &opts.q {
            // Room for the client-side variant's 3 reads per logical op in one frame.
            let client = cluster
                .client_with(ClientConfig::new("").batch_size(b * 3).queue_depth(q))
                .map_err(cluster_err)?;
            let cache = client.open("bench-sproc-records").map_err(cluster_err)?;

            pb.set_message(format!(
                "verify 1 record, built-in and WebAssembly, b={b} q={q}"
            ));
            let mut builtin = Batched::new(
                |bt: &mut Batch, j| verify.execute(bt, j),
                |r: &BatchResults, f, n| verify.check_execute(r, f, n),
            );
            let (out, wasm_out) = match cache.register("sum", SUM_WAT.as_bytes()) {
                Ok(()) => {
                    // Measured in alternating slices: the WebAssembly target is a ratio.
                    let mut wasm = Batched::new(
                        |bt: &mut Batch, j| verify.execute_wasm(bt, j),
                        |r: &BatchResults, f, n| verify.check_wasm(r, f, n),
                    );
                    let (a, w) = run_paired(&cache, b, q, opts.duration, &mut builtin, &mut wasm);
                    (a, Some(w))
                }
                Err(e) => {
                    tracing::warn!("wasm variant skipped: {e}");
                    builtin.slice(&cache, b, q, opts.duration);
                    (builtin.outcome(), None)
                }
            };
            let mut row = farcache_row(
                "read one record and verify (built-in)".into(),
                Aggregate::NAME,
                &out,
                b,
                q,
            );
            let mut targets = Vec::new();
            if let Some(e) = eval_for(report, "verify 1 key") {
                row = row.with_redis_baseline(e.best.label(), e.best_mops());
                targets.push((
                    format!(">= {TARGET_EVAL_RATIO}x redis EVALSHA best"),
                    row.ratio_vs_redis.is_some_and(|r| r >= TARGET_EVAL_RATIO),
                ));
            }
            report.rows.push(with_targets(row, out.errors, &targets));
            let redis = eval_for(report, "verify 1 key").cloned();
            let wasm = wasm_out.map(|w| wasm_row(&w, (b, q), redis.as_ref(), out.mops));
            report.rows.extend(wasm);
            pb.inc(1);

            for t in &tables {
                let k = t.k;
                pb.set_message(format!(
                    "aggregate {k} records vs client read+add, b={b} q={q}"
                ));
                let (exec, local) = run_paired(
                    &cache,
                    b,
                    q,
                    opts.duration,
                    &mut Batched::new(|bt, j| t.execute(bt, j), |r, f, n| t.check_execute(r, f, n)),
                    &mut Batched::new(|bt, j| t.reads(bt, j), |r, f, n| t.check_reads(r, f, n)),
                );
                pb.inc(2);
                let client_target = if k == 2 {
                    TARGET_AGG2_CLIENT_RATIO
                } else {
                    TARGET_AGG3_CLIENT_RATIO
                };
                let mut row = farcache_row(
                    format!("aggregate {k} records"),
                    Aggregate::NAME,
                    &exec,
                    b,
                    q,
                )
                .with_client_side_ratio(exec.mops / local.mops);
                let mut targets = vec![(
                    format!(">= {client_target}x client"),
                    row.ratio_vs_client_side
                        .is_some_and(|r| r >= client_target && local.errors == 0),
                )];
                if let Some(e) = eval_for(report, &format!("sum {k} keys")) {
                    row = row.with_redis_baseline(e.best.label(), e.best_mops());
                    targets.push((
                        format!(">= {TARGET_EVAL_RATIO}x redis"),
                        row.ratio_vs_redis.is_some_and(|r| r >= TARGET_EVAL_RATIO),
                    ));
                } else {
                    row.baseline = Some(format!("client-side {k} reads + add"));
                }
                report.rows.push(with_targets(row, exec.errors, &targets));
                report.rows.push(farcache_row(
                    format!("aggregate {k} records, client read+add"),
                    "read",
                    &local,
                    b,
                    q,
                ));
            }
        }
    }

    pb.set_message("unbatched verify 1 record");
    let mut i = 0usize;
    let out = run_serial(opts.duration, |_| {
        let j = i % TABLE;
        i += 1;
        let (base, _) = verify.ops[j];
        cache
            .execute(Aggregate::NAME, base, verify.args(j))
            .ok()
            .and_then(|d| Aggregate::result(&d).ok())
            == Some(verify.expected[j])
    });
    let mut row = farcache_row(
        "read one record and verify, unbatched".into(),
        Aggregate::NAME,
        &out,
        1,
        1,
    );
    if let Some(e) = eval_for(report, "verify 1 key") {
        row = row.with_redis_baseline(
            format!(
                "redis unpipelined EVALSHA p50 {:.1}us",
                e.unpipelined.p50_us
            ),
            e.unpipelined.mops(),
        );
    }
    report.rows.push(row);
    pb.inc(1);
    pb.finish_and_clear();
    drop(cache);
    drop(setup);
    drop(cluster);
    Ok(())
}

/// WebAssembly module used for the wasm variant (crates/sproc/procs/sum.wat).
const SUM_WAT: &str = include_str!("../../sproc/procs/sum.wat");

/// The row of the WebAssembly variant of "read one record and verify": `sum.wat` run over
/// one record, measured alongside the built-in row with the same records, expected
/// values, `b`, `q` and `duration`, against the same Redis script.
fn wasm_row(
    out: &RunOutcome,
    (b, q): (usize, usize),
    redis: Option<&RedisEvalBaseline>,
    builtin_mops: f64,
) -> BenchRow {
    let mut row = farcache_row(
        "read one record and verify (WebAssembly)".into(),
        "sum.wat",
        out,
        b,
        q,
    );
    let slowdown = builtin_mops / out.mops;
    let mut targets = vec![(
        format!("<= {TARGET_WASM_SLOWDOWN}x built-in time"),
        slowdown.is_finite() && slowdown <= TARGET_WASM_SLOWDOWN,
    )];
    if let Some(e) = redis {
        row = row.with_redis_baseline(e.best.label(), e.best_mops());
        targets.push((
            format!(">= {TARGET_EVAL_RATIO}x redis EVALSHA best"),
            row.ratio_vs_redis.is_some_and(|r| r >= TARGET_EVAL_RATIO),
        ));
    }
    let mut row = with_targets(row, out.errors, &targets);
    row.baseline = Some(format!(
        "{}built-in {builtin_mops:.3} Mops/s ({slowdown:.2}x the WebAssembly time)",
        row.baseline
            .as_deref()
            .map(|b| format!("{b}; "))
            .unwrap_or_default()
    ));
    row
}

// ------------------------------------------------------------ rows 3 and 4 ---

/// Per-server op counters read over each server's control API (`ServerStats`).
struct OpCounters {
    conns: Vec<TcpStream>,
}

impl OpCounters {
    fn connect(addrs: &[String]) -> Result<Self> {
        let mut conns = Vec::new();
        for (i, a) in addrs.iter().enumerate() {
            let mut s = TcpStream::connect(a.as_str())?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.set_nodelay(true)?;
            handshake(&mut s, Role::Client, 0x5000 + i as u64).map_err(cluster_err)?;
            conns.push(s);
        }
        Ok(Self { conns })
    }

    /// `op`s executed so far and the server-to-server traffic, summed over the
    /// servers (counts are published before a batch's reply is sent, so they are exact
    /// once the replies are in).
    fn count(&mut self, op: &str) -> Result<(u64, PeerStats)> {
        let mut total = 0;
        let mut peer = PeerStats::default();
        for s in &mut self.conns {
            match control_call(s, &ControlRequest::ServerStats).map_err(cluster_err)? {
                ControlResponse::Stats(st) => {
                    total += st.ops.iter().find(|o| o.op == op).map_or(0, |o| o.count);
                    peer.msgs_sent += st.peer.msgs_sent;
                    peer.frames_sent += st.peer.frames_sent;
                }
                other => return Err(cluster_err(format!("unexpected stats reply {other:?}"))),
            }
        }
        Ok((total, peer))
    }
}

/// What the servers counted while a run went on.
struct Counted {
    ops: f64,
    peer_msgs: f64,
    peer_frames: f64,
}

impl Counted {
    /// Per logical op of `out`: (round trips, peer messages, peer frames).
    fn per_op(&self, out: &RunOutcome) -> (f64, f64, f64) {
        let n = out.total.max(1) as f64;
        (self.ops / n, self.peer_msgs / n, self.peer_frames / n)
    }
}

/// Runs `run` and returns it with what the servers executed meanwhile.
fn counted(
    counters: &mut OpCounters,
    op: &str,
    run: impl FnOnce() -> RunOutcome,
) -> Result<(RunOutcome, Counted)> {
    let (before, p0) = counters.count(op)?;
    let out = run();
    let (after, p1) = counters.count(op)?;
    Ok((
        out,
        Counted {
            ops: (after - before) as f64,
            peer_msgs: (p1.msgs_sent - p0.msgs_sent) as f64,
            peer_frames: (p1.frames_sent - p0.frames_sent) as f64,
        },
    ))
}

/// How a chain's nodes are spread over the servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Three contiguous runs of nodes, one per server: the chain crosses servers twice.
    Segments,
    /// Node `i` on server `i mod 3`: every pointer leads to another server.
    Interleaved,
}

/// Lays out `chains` chains of `CHASE_LEN` nodes at random free slots of the servers'
/// regions and returns their heads with the server crossings per chain.
fn build_chains(
    cache: &Cache,
    free: &mut [Vec<u64>],
    chains: usize,
    placement: Placement,
) -> Result<(Vec<u64>, u32)> {
    let info = cache.info();
    let servers = free.len();
    let mut heads = Vec::with_capacity(chains);
    let mut batch = cache.batch();
    let mut pending = Vec::new();
    let mut crossings = 0;
    for c in 0..chains {
        let mut nodes = Vec::with_capacity(CHASE_LEN as usize);
        for i in 0..CHASE_LEN as usize {
            let part = match placement {
                Placement::Segments => i * servers / CHASE_LEN as usize,
                Placement::Interleaved => i,
            };
            let s = (c + part) % servers;
            let slot = free[s].pop().ok_or_else(|| {
                BenchError::InvalidArgument("too many chains for the chase cache".into())
            })?;
            nodes.push(slot);
        }
        let owner = |a: u64| info.regions[info.region_of(a)];
        crossings = nodes
            .windows(2)
            .filter(|w| owner(w[0]) != owner(w[1]))
            .count() as u32;
        for (i, &n) in nodes.iter().enumerate() {
            let next = nodes.get(i + 1).copied().unwrap_or(NULL);
            batch.write(n + u64::from(NEXT_OFF), &next.to_le_bytes());
        }
        heads.push(nodes[0]);
        if batch.len() >= 1024 {
            pending.push(std::mem::replace(&mut batch, cache.batch()).submit());
        }
    }
    pending.push(batch.submit());
    pending.into_iter().try_for_each(check_writes)?;
    Ok((heads, crossings))
}

/// A graph in CSR form (out-edges).
struct Graph {
    vertices: u32,
    /// `offsets[v]..offsets[v + 1]` index `targets`.
    offsets: Vec<u64>,
    targets: Vec<u32>,
}

impl Graph {
    /// `edges` edges over `edges / 10` vertices: sources Zipf(0.99) (ranks scrambled
    /// over the ids), so out-degrees follow a power law; targets uniform.
    fn power_law(edges: u64, seed: u64) -> Result<Self> {
        let vertices = (edges / EDGES_PER_VERTEX).max(2);
        let mut src = KeyGen::zipf(vertices, 1, DEFAULT_ZIPF_THETA, seed)?;
        let mut rng = StdRng::seed_from_u64(seed ^ 0xD1CE);
        let pairs: Vec<(u32, u32)> = (0..edges)
            .map(|_| (src.next_index() as u32, rng.gen_range(0..vertices) as u32))
            .collect();
        let mut offsets = vec![0u64; vertices as usize + 1];
        for &(s, _) in &pairs {
            offsets[s as usize + 1] += 1;
        }
        for v in 0..vertices as usize {
            offsets[v + 1] += offsets[v];
        }
        let mut at = offsets.clone();
        let mut targets = vec![0u32; edges as usize];
        for &(s, t) in &pairs {
            targets[at[s as usize] as usize] = t;
            at[s as usize] += 1;
        }
        Ok(Self {
            vertices: vertices as u32,
            offsets,
            targets,
        })
    }

    fn degree(&self, v: u32) -> u64 {
        self.offsets[v as usize + 1] - self.offsets[v as usize]
    }

    fn out(&self, v: u32) -> &[u32] {
        &self.targets[self.offsets[v as usize] as usize..self.offsets[v as usize + 1] as usize]
    }

    /// Vertices within `k` hops of `src`, the source excluded (what `khop` returns).
    fn reach(&self, src: u32, k: u8) -> usize {
        let mut seen = HashSet::from([src]);
        let mut frontier = vec![src];
        for _ in 0..k {
            let mut next = Vec::new();
            for v in frontier {
                for &u in self.out(v) {
                    if seen.insert(u) {
                        next.push(u);
                    }
                }
            }
            frontier = next;
        }
        seen.len() - 1
    }

    /// The vertex entries (`first edge` u64, `degree` u32, pad u32) then the edges.
    fn layout(&self) -> (Vec<u8>, Vec<u8>) {
        let mut v = Vec::with_capacity(self.vertices as usize * 16);
        for i in 0..self.vertices {
            v.extend_from_slice(&self.offsets[i as usize].to_le_bytes());
            v.extend_from_slice(&(self.degree(i) as u32).to_le_bytes());
            v.extend_from_slice(&0u32.to_le_bytes());
        }
        let e = self.targets.iter().flat_map(|t| t.to_le_bytes()).collect();
        (v, e)
    }
}

/// The k-hop count done at the client: per level, one batch reading every frontier
/// vertex's entry, then one batch reading their edge lists. Returns the count and the
/// batches waited for (dependent round trips).
fn client_khop(cache: &Cache, vbase: u64, ebase: u64, src: u32, k: u8) -> Option<(u64, u32)> {
    let mut seen = HashSet::from([src]);
    let mut frontier = vec![src];
    let mut trips = 0;
    for _ in 0..k {
        if frontier.is_empty() {
            break;
        }
        let mut b = cache.batch().with_capacity(frontier.len());
        for &v in &frontier {
            b.read(vbase + 16 * u64::from(v), 12);
        }
        let r = b.run();
        trips += 1;
        let mut lists = cache.batch();
        for i in 0..frontier.len() {
            let e = r.data(i).ok()?;
            let first = u64::from_le_bytes(e.get(..8)?.try_into().ok()?);
            let degree = u32::from_le_bytes(e.get(8..12)?.try_into().ok()?);
            if degree > 0 {
                lists.read(ebase + 4 * first, 4 * u64::from(degree));
            }
        }
        let mut next = Vec::new();
        if !lists.is_empty() {
            let n = lists.len();
            let r = lists.run();
            trips += 1;
            for i in 0..n {
                for t in r.data(i).ok()?.chunks_exact(4) {
                    let u = u32::from_le_bytes(t.try_into().ok()?);
                    if seen.insert(u) {
                        next.push(u);
                    }
                }
            }
        }
        frontier = next;
    }
    Some((seen.len() as u64 - 1, trips))
}

/// k-hop queries over one graph and the answers they must give.
struct KhopQueries<'a> {
    sources: &'a [u32],
    expected: &'a [u64],
    vbase: u64,
    ebase: u64,
    vertices: u32,
    k: u8,
}

impl KhopQueries<'_> {
    fn run(&self, cache: &Cache, duration: Duration, flow: Flow) -> RunOutcome {
        run_serial(duration, |i| {
            let j = i as usize % self.sources.len();
            let s = self.sources[j];
            cache
                .execute(
                    KHop::NAME,
                    self.vbase + 16 * u64::from(s),
                    &KHop::args_with(self.vbase, self.ebase, self.vertices, s, self.k, flow),
                )
                .ok()
                .and_then(|r| KHop::result(&r).ok())
                == Some(self.expected[j])
        })
    }
}

#[allow(clippy::too_many_arguments)]
fn khop_row(
    q: &KhopQueries<'_>,
    flow: Flow,
    batching: &str,
    exec: &RunOutcome,
    c: &Counted,
    local: &RunOutcome,
    local_rt: f64,
    dist: &str,
) -> BenchRow {
    let (rt, msgs, frames) = c.per_op(exec);
    let how = match flow {
        Flow::Ship => "FFlow: the search moves to the server holding the next bytes",
        _ => "DFlow: the first server pulls each level's vertex entries, then edge lists",
    };
    let tag = if flow == Flow::Ship { "FFlow" } else { "DFlow" };
    let mut row = spread_row(
        format!("k-hop count k={} ({tag}, {batching})", q.k),
        KHop::NAME,
        exec,
        16,
        dist,
    )
    .with_client_side_ratio(local.latency.p50_us / exec.latency.p50_us)
    .with_round_trips(rt, Some(local_rt))
    .with_peer(msgs, frames);
    row.baseline = Some(format!(
        "client-side level-by-level BFS p50 {:.1}us; {how}; peer messages {batching}",
        local.latency.p50_us
    ));
    row
}

fn spread_row(name: String, op: &str, out: &RunOutcome, size: usize, dist: &str) -> BenchRow {
    let mut row = farcache_row(name, op, out, 1, 1);
    row.record_size = size;
    row.distribution = dist.into();
    row
}

/// Three single-threaded servers, a client, and counters on every server.
fn spread_cluster(
    opts: &SprocBenchOptions,
    server_memory: u64,
    peer_batching: bool,
) -> Result<(ProcessCluster, farcache_client::Client, OpCounters)> {
    let cluster = ProcessCluster::start(
        &opts.bin,
        &ClusterOptions::default()
            .servers(SPREAD_SERVERS)
            .server_threads(1)
            .server_memory(server_memory)
            .region_size(REGION)
            .peer_batching(peer_batching),
    )
    .map_err(cluster_err)?;
    let client = cluster.client().map_err(cluster_err)?;
    let addrs: Vec<String> = (0..SPREAD_SERVERS)
        .map(|i| cluster.server_addr(i).to_string())
        .collect();
    let counters = OpCounters::connect(&addrs)?;
    Ok((cluster, client, counters))
}

/// Rows 3 and 4 on a three-server cluster.
fn spread_section(opts: &SprocBenchOptions, report: &mut BenchReport) -> Result<()> {
    let pb = progress(18);
    pb.set_prefix("farcache");
    pb.set_message(format!("building a {}-edge graph", opts.edges));
    let t0 = Instant::now();
    let graph = Graph::power_law(opts.edges, 99)?;
    let (vbytes, ebytes) = graph.layout();
    let build_secs = t0.elapsed().as_secs_f64();
    let graph_bytes = (vbytes.len() + ebytes.len()) as u64;
    // At least six regions, so the graph spans all three servers even when small.
    let graph_region = (graph_bytes / 6).div_ceil(4096).clamp(1, REGION / 4096) * 4096;
    let graph_cap = graph_bytes.div_ceil(graph_region).max(6) * graph_region;
    // Two regions per server hold the chains.
    let chase_cap = 2 * SPREAD_SERVERS as u64 * REGION;
    let per_server = (chase_cap + graph_cap).div_ceil(SPREAD_SERVERS as u64);
    let server_memory = per_server.div_ceil(REGION) * REGION + 4 * REGION;

    pb.set_message(format!("starting {SPREAD_SERVERS} servers, s = 1"));
    let (cluster, client, mut counters) = spread_cluster(opts, server_memory, true)?;

    // ---- pointer chase
    let cache = client
        .create_with_region_size("bench-sproc-chase", chase_cap, Some(REGION))
        .map_err(cluster_err)?;
    let info = cache.info();
    let mut owners: Vec<u32> = info.regions.clone();
    owners.sort_unstable();
    owners.dedup();
    if owners.len() != SPREAD_SERVERS {
        return Err(cluster_err(format!(
            "the chase cache spans {} servers, not {SPREAD_SERVERS}",
            owners.len()
        )));
    }
    let mut rng = StdRng::seed_from_u64(5);
    let mut free: Vec<Vec<u64>> = owners
        .iter()
        .map(|&s| {
            let mut slots: Vec<u64> = (0..info.regions.len())
                .filter(|&r| info.regions[r] == s)
                .flat_map(|r| (0..REGION / NODE).map(move |j| r as u64 * REGION + j * NODE))
                .collect();
            slots.shuffle(&mut rng);
            slots
        })
        .collect();
    for placement in [Placement::Segments, Placement::Interleaved] {
        let (heads, crossings) = build_chains(&cache, &mut free, opts.chains, placement)?;
        let label = match placement {
            Placement::Segments => format!("pointer chase {CHASE_LEN} across 3 servers"),
            Placement::Interleaved => format!("pointer chase {CHASE_LEN}, every hop crosses"),
        };
        let mut flows = Vec::new();
        for flow in [Flow::Ship, Flow::Pull] {
            pb.set_message(format!("{label}: chase procedure, {flow:?}"));
            let (exec, c) = counted(&mut counters, "execute", || {
                run_serial(opts.duration, |i| {
                    let head = heads[i as usize % heads.len()];
                    cache
                        .execute(
                            Chase::NAME,
                            head,
                            &Chase::args_with(head, NEXT_OFF, CHASE_LEN, flow),
                        )
                        .ok()
                        .and_then(|r| Chase::result(&r).ok())
                        == Some((NULL, CHASE_LEN))
                })
            })?;
            pb.inc(1);
            flows.push((flow, exec, c));
        }
        pb.set_message(format!("{label}: client-side reads"));
        let (local, reads) = counted(&mut counters, "read", || {
            run_serial(opts.duration, |i| {
                let mut cur = heads[i as usize % heads.len()];
                for _ in 0..CHASE_LEN {
                    // A chain that ends early (NULL) fails here rather than wrapping.
                    let Some(at) = cur.checked_add(u64::from(NEXT_OFF)) else {
                        return false;
                    };
                    match cache.read(at, 8) {
                        Ok(d) if d.len() == 8 => {
                            cur = u64::from_le_bytes(d[..8].try_into().unwrap_or([0; 8]));
                        }
                        _ => return false,
                    }
                }
                cur == NULL
            })
        })?;
        pb.inc(1);
        // Every sample, warm-up included, went through the counters.
        let (local_rt, _, _) = reads.per_op(&local);
        for (flow, exec, c) in flows {
            let (rt, msgs, frames) = c.per_op(&exec);
            let speedup = local.latency.p50_us / exec.latency.p50_us;
            let how = match flow {
                Flow::Ship => "FFlow: servers hand the invocation to each other",
                _ => "DFlow: the first server pulls every remote node",
            };
            let mut row = spread_row(
                format!(
                    "{label} ({})",
                    if flow == Flow::Ship { "FFlow" } else { "DFlow" }
                ),
                Chase::NAME,
                &exec,
                NODE as usize,
                &format!("{crossings} crossings"),
            )
            .with_client_side_ratio(speedup)
            .with_round_trips(rt, Some(local_rt))
            .with_peer(msgs, frames);
            row.baseline = Some(format!(
                "client-side {CHASE_LEN} dependent reads p50 {:.1}us; {how}",
                local.latency.p50_us
            ));
            if placement == Placement::Segments && flow == Flow::Ship {
                let rt_ratio = local_rt / rt;
                row = with_targets(
                    row,
                    exec.errors + local.errors,
                    &[
                        (
                            format!(">= {TARGET_CHASE_TIME_RATIO}x client time"),
                            speedup >= TARGET_CHASE_TIME_RATIO,
                        ),
                        (
                            format!(">= {TARGET_CHASE_RT_RATIO}x fewer RT"),
                            rt_ratio >= TARGET_CHASE_RT_RATIO,
                        ),
                    ],
                );
            }
            report.rows.push(row);
        }
        report.rows.push(
            spread_row(
                format!("{label}, client reads"),
                "read",
                &local,
                NODE as usize,
                &format!("{crossings} crossings"),
            )
            .with_round_trips(local_rt, None),
        );
    }
    drop(cache);
    client.delete("bench-sproc-chase").map_err(cluster_err)?;

    // ---- k-hop
    pb.set_message("writing the graph");
    let cache = client
        .create_with_region_size("bench-sproc-khop", graph_cap, Some(graph_region))
        .map_err(cluster_err)?;
    let vbase = 0u64;
    let ebase = vbytes.len() as u64;
    let t0 = Instant::now();
    write_all(&cache, vbase, &vbytes)?;
    write_all(&cache, ebase, &ebytes)?;
    let write_secs = t0.elapsed().as_secs_f64();
    let info = cache.info();
    let spread: HashSet<u32> = info.regions.iter().copied().collect();
    // Sources: random vertices with at least one out-edge and a bounded neighbourhood.
    let mut rng = StdRng::seed_from_u64(17);
    let (mut sources, mut skipped) = (Vec::new(), 0usize);
    let mut tries = 0;
    while sources.len() < opts.khop_sources && tries < opts.khop_sources * 100 {
        tries += 1;
        let v = rng.gen_range(0..graph.vertices);
        if graph.degree(v) == 0 {
            continue;
        }
        if graph.reach(v, 3) > MAX_REACH {
            skipped += 1;
            continue;
        }
        sources.push(v);
    }
    if sources.is_empty() {
        return Err(BenchError::InvalidArgument(
            "the graph has no usable k-hop source".into(),
        ));
    }
    let max_degree = (0..graph.vertices)
        .map(|v| graph.degree(v))
        .max()
        .unwrap_or(0);
    let mut khop_local = Vec::new();
    for k in [2u8, 3] {
        let expected: Vec<u64> = sources.iter().map(|&s| graph.reach(s, k) as u64).collect();
        let mean_reach = expected.iter().sum::<u64>() as f64 / expected.len() as f64;
        let q = KhopQueries {
            sources: &sources,
            expected: &expected,
            vbase,
            ebase,
            vertices: graph.vertices,
            k,
        };
        let dist = format!("power-law, {} srv", spread.len());
        pb.set_message(format!("k-hop k={k}: client-side BFS"));
        let mut trips = 0u64;
        let local = run_serial(opts.duration, |i| {
            let j = i as usize % sources.len();
            match client_khop(&cache, vbase, ebase, sources[j], k) {
                Some((n, t)) => {
                    trips += u64::from(t);
                    n == expected[j]
                }
                None => false,
            }
        });
        pb.inc(1);
        let local_rt = trips as f64 / local.total as f64;
        for flow in [Flow::Ship, Flow::Pull] {
            pb.set_message(format!("k-hop k={k}: khop procedure, {flow:?}"));
            let (exec, c) = counted(&mut counters, "execute", || {
                q.run(&cache, opts.duration, flow)
            })?;
            pb.inc(1);
            report.rows.push(khop_row(
                &q, flow, "batched", &exec, &c, &local, local_rt, &dist,
            ));
        }
        report.rows.push(
            spread_row(
                format!("k-hop count k={k}, client BFS"),
                "read",
                &local,
                16,
                &dist,
            )
            .with_round_trips(local_rt, None),
        );
        khop_local.push((k, local, local_rt, expected));
        report.notes.push(format!(
            "k-hop k={k}: mean {mean_reach:.0} vertices reached per query"
        ));
    }
    report.notes.push(format!(
        "k-hop graph: {} vertices, {} edges (Zipf {DEFAULT_ZIPF_THETA} sources, uniform \
         targets, max out-degree {max_degree}), {} B vertex entries + {} B edges in {} \
         regions of {} B over {} servers, generated in {build_secs:.2} s and written in \
         {write_secs:.2} s; {} \
         sources with out-degree >= 1 queried in turn ({skipped} skipped: 3-hop reach > \
         {MAX_REACH})",
        graph.vertices,
        opts.edges,
        ebase,
        graph_bytes - ebase,
        info.regions.len(),
        graph_region,
        spread.len(),
        sources.len()
    ));
    report.notes.push(
        "chase/k-hop round trips (RT) per query are the client's EXECUTE (or read) ops the \
         servers counted; procedures cross servers themselves (FFlow hand-offs, DFlow \
         fetches), counted as server messages and frames per query. Client-side k-hop RT \
         are dependent batches (2 per level)"
            .into(),
    );
    drop(cache);
    drop(client);
    drop(cluster);

    // The DFlow k-hop again on servers that send one frame per message.
    pb.set_message("k-hop without per-destination batching: new cluster");
    let (cluster, client, mut counters) = spread_cluster(opts, server_memory, false)?;
    let cache = client
        .create_with_region_size("bench-sproc-khop", graph_cap, Some(graph_region))
        .map_err(cluster_err)?;
    write_all(&cache, vbase, &vbytes)?;
    write_all(&cache, ebase, &ebytes)?;
    let dist = format!("power-law, {} srv", spread.len());
    for (k, local, local_rt, expected) in &khop_local {
        let q = KhopQueries {
            sources: &sources,
            expected,
            vbase,
            ebase,
            vertices: graph.vertices,
            k: *k,
        };
        pb.set_message(format!("k-hop k={k}: DFlow, unbatched"));
        let (exec, c) = counted(&mut counters, "execute", || {
            q.run(&cache, opts.duration, Flow::Pull)
        })?;
        pb.inc(1);
        report.rows.push(khop_row(
            &q,
            Flow::Pull,
            "one frame per message",
            &exec,
            &c,
            local,
            *local_rt,
            &dist,
        ));
    }
    pb.finish_and_clear();
    drop(cache);
    drop(client);
    drop(cluster);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agg_table_stays_inside_and_sums() {
        let records = 100;
        for k in 1..=3u32 {
            let t = AggTable::new(records, k, 9);
            assert_eq!(t.ops.len(), TABLE);
            for (j, &(base, stride)) in t.ops.iter().enumerate().step_by(97) {
                assert_eq!(base % 8, 0);
                let last = base + u64::from(k - 1) * u64::from(stride);
                assert!(last < records * 8, "k {k}: {base} + {stride}");
                let want = (0..u64::from(k)).fold(0u64, |a, m| {
                    a.wrapping_add(record_value((base + m * u64::from(stride)) / 8))
                });
                assert_eq!(t.expected[j], want);
                assert_eq!(*t.args(j), Aggregate::call(AggFn::Sum, k, stride));
            }
        }
    }

    #[test]
    fn power_law_graph_is_csr() {
        let g = Graph::power_law(20_000, 3).expect("graph");
        assert_eq!(g.vertices, 2000);
        assert_eq!(g.offsets[g.vertices as usize], 20_000);
        assert!(g.targets.iter().all(|&t| t < g.vertices));
        // Skewed: the busiest vertex has far more than the mean of 10 out-edges.
        let max = (0..g.vertices).map(|v| g.degree(v)).max().unwrap_or(0);
        assert!(max > 200, "max out-degree {max}");
        let (v, e) = g.layout();
        assert_eq!((v.len(), e.len()), (2000 * 16, 20_000 * 4));
        let src = (0..g.vertices).find(|&v| g.degree(v) > 0).unwrap_or(0);
        let entry = &v[16 * src as usize..][..12];
        assert_eq!(
            u64::from_le_bytes(entry[..8].try_into().unwrap_or_default()),
            g.offsets[src as usize]
        );
        assert_eq!(
            u32::from_le_bytes(entry[8..].try_into().unwrap_or_default()) as u64,
            g.degree(src)
        );
        assert!(g.reach(src, 1) <= g.degree(src) as usize);
        assert!(g.reach(src, 2) >= g.reach(src, 1));
    }

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
