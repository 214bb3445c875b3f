//! Rows 1 and 2 on a one-server cluster: one record read and verified, and 2 or 3
//! records aggregated, by procedures in batches next to the same work at the client
//! and Redis's scripts.

use std::time::Duration;

use farcache_client::{Batch, BatchResults, Cache, Client, ClientConfig};
use farcache_sproc::builtin::{AggFn, Aggregate};
use farcache_testkit::{ClusterOptions, ProcessCluster};
use indicatif::ProgressBar;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::measure::{Batched, RunOutcome, run_paired, run_serial};
use super::{
    REGION, SprocBenchOptions, TABLE, TARGET_AGG2_CLIENT_RATIO, TARGET_AGG3_CLIENT_RATIO,
    TARGET_EVAL_RATIO, TARGET_WASM_SLOWDOWN, cluster_err, eval_for, farcache_row, with_targets,
    write_all,
};
use crate::baseline::redis_eval::RedisEvalBaseline;
use crate::ceiling::{Call, CallProc, run_call_ceiling};
use crate::error::Result;
use crate::io_suite::progress;
use crate::report::{BenchReport, BenchRow};

/// The cache holding the records.
const CACHE: &str = "bench-sproc-records";

/// WebAssembly module used for the wasm variant (crates/sproc/procs/sum.wat).
const SUM_WAT: &str = include_str!("../../../sproc/procs/sum.wat");

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

/// Rows 1 and 2 on a one-server cluster (one worker thread, one client thread).
pub(super) fn records_section(opts: &SprocBenchOptions, report: &mut BenchReport) -> Result<()> {
    let records = opts.records();
    let pb = progress((opts.b.len() * opts.q.len() * 5 + 1) as u64);
    pb.set_prefix("farcache");
    pb.set_message("starting 1 server, s = 1");
    let (cluster, setup, cache) = start_records_cluster(opts, records)?;
    let verify = AggTable::new(records, 1, 1);
    let tables = [AggTable::new(records, 2, 2), AggTable::new(records, 3, 3)];

    for &b in &opts.b {
        pb.set_message(format!(
            "in-process ceiling of aggregate 1-3 records, b={b}"
        ));
        let ceilings = call_ceilings(records, &verify, &tables, b, opts.duration, report)?;
        for &q in &opts.q {
            // Room for the client-side variant's 3 reads per logical op in one frame.
            let client = cluster
                .client_with(ClientConfig::new("").batch_size(b * 3).queue_depth(q))
                .map_err(cluster_err)?;
            let cache = client.open(CACHE).map_err(cluster_err)?;
            let point = Point {
                cache: &cache,
                b,
                q,
                duration: opts.duration,
            };
            let first = report.rows.len();
            point_rows(&point, &verify, &tables, &pb, report);
            for row in &mut report.rows[first..] {
                if let Some(&(_, mops)) = ceilings.iter().find(|(name, _)| *name == row.name) {
                    row.fraction_of_ceiling = (mops > 0.0).then(|| row.mops / mops);
                }
            }
        }
    }

    pb.set_message("unbatched verify 1 record");
    let out = unbatched_verify(&cache, &verify, opts.duration);
    let row = unbatched_verify_row(&out, eval_for(report, "verify 1 key"));
    report.rows.push(row);
    pb.inc(1);
    pb.finish_and_clear();
    drop(cache);
    drop(setup);
    drop(cluster);
    Ok(())
}

/// The procedure rows' ceiling: the same calls, `b` to a batch, run by the server's
/// executor in this process with no sockets (`crate::ceiling`), one row per
/// procedure row. Returns the networked row each ceiling belongs to, with its M
/// calls/s.
fn call_ceilings(
    records: u64,
    verify: &AggTable,
    tables: &[AggTable],
    b: usize,
    duration: Duration,
    report: &mut BenchReport,
) -> Result<Vec<(String, f64)>> {
    let builtin = CallProc::Builtin(Aggregate::NAME);
    let wasm = CallProc::Wasm {
        name: "sum",
        code: SUM_WAT.as_bytes(),
    };
    let mut runs = vec![
        (
            "read one record and verify (built-in)".to_string(),
            builtin,
            table_calls(verify, false),
        ),
        (
            "read one record and verify (WebAssembly)".to_string(),
            wasm,
            table_calls(verify, true),
        ),
    ];
    for t in tables {
        runs.push((
            format!("aggregate {} records", t.k),
            builtin,
            table_calls(t, false),
        ));
    }
    let mut out = Vec::new();
    for (of, proc, calls) in runs {
        let c = match run_call_ceiling(records * 8, record_value, proc, &calls, b, duration) {
            Ok(c) => c,
            // As the networked row: a server without WebAssembly skips it.
            Err(e) if matches!(proc, CallProc::Wasm { .. }) => {
                tracing::warn!("WebAssembly ceiling skipped: {e}");
                continue;
            }
            Err(e) => return Err(e),
        };
        let op = match proc {
            CallProc::Builtin(name) | CallProc::Wasm { name, .. } => name,
        };
        report.rows.push(BenchRow {
            name: format!("ceiling {of}"),
            system: "in-process".into(),
            op: op.into(),
            record_size: 8,
            distribution: "uniform".into(),
            s: Some(1),
            b: Some(b),
            mops: c.mops,
            working_set_bytes: Some(records * 8),
            ..BenchRow::default()
        });
        out.push((of, c.mops));
    }
    Ok(out)
}

/// Table `t`'s calls, with the arguments of `sum.wat` when `wasm`.
fn table_calls(t: &AggTable, wasm: bool) -> Vec<Call<'_>> {
    (0..t.ops.len())
        .map(|j| Call {
            addr: t.ops[j].0,
            args: if wasm { &t.wasm_args[j] } else { &t.args[j] },
        })
        .collect()
}

/// One server with one worker thread, and on it the records cache holding every
/// `record_value`, created by the returned client.
fn start_records_cluster(
    opts: &SprocBenchOptions,
    records: u64,
) -> Result<(ProcessCluster, Client, Cache)> {
    let capacity = (records * 8).div_ceil(REGION) * REGION;
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
        .create_with_region_size(CACHE, capacity, Some(REGION))
        .map_err(cluster_err)?;
    let mut bytes = Vec::with_capacity((records * 8) as usize);
    for i in 0..records {
        bytes.extend_from_slice(&record_value(i).to_le_bytes());
    }
    write_all(&cache, 0, &bytes)?;
    Ok((cluster, setup, cache))
}

/// One `(b, q)` point of the sweep: the cache opened by a client sized for it, and how
/// long each variant runs.
struct Point<'a> {
    cache: &'a Cache,
    b: usize,
    q: usize,
    duration: Duration,
}

impl Point<'_> {
    fn paired<FA, CA, FB, CB>(
        &self,
        a: &mut Batched<FA, CA>,
        bv: &mut Batched<FB, CB>,
    ) -> (RunOutcome, RunOutcome)
    where
        FA: FnMut(&mut Batch, usize),
        CA: FnMut(&BatchResults, usize, usize) -> u64,
        FB: FnMut(&mut Batch, usize),
        CB: FnMut(&BatchResults, usize, usize) -> u64,
    {
        run_paired(self.cache, self.b, self.q, self.duration, a, bv)
    }

    /// The built-in verify and, when `sum.wat` registers, the WebAssembly one, measured
    /// in alternating slices because the WebAssembly target is a ratio.
    fn verify(&self, t: &AggTable) -> (RunOutcome, Option<RunOutcome>) {
        let mut builtin = Batched::new(
            |bt: &mut Batch, j| t.execute(bt, j),
            |r: &BatchResults, f, n| t.check_execute(r, f, n),
        );
        match self.cache.register("sum", SUM_WAT.as_bytes()) {
            Ok(()) => {
                let mut wasm = Batched::new(
                    |bt: &mut Batch, j| t.execute_wasm(bt, j),
                    |r: &BatchResults, f, n| t.check_wasm(r, f, n),
                );
                let (a, w) = self.paired(&mut builtin, &mut wasm);
                (a, Some(w))
            }
            Err(e) => {
                tracing::warn!("wasm variant skipped: {e}");
                builtin.slice(self.cache, self.b, self.q, self.duration);
                (builtin.outcome(), None)
            }
        }
    }

    /// `aggregate` over `t.k` records and the same sums read and added at the client.
    fn aggregate(&self, t: &AggTable) -> (RunOutcome, RunOutcome) {
        self.paired(
            &mut Batched::new(|bt, j| t.execute(bt, j), |r, f, n| t.check_execute(r, f, n)),
            &mut Batched::new(|bt, j| t.reads(bt, j), |r, f, n| t.check_reads(r, f, n)),
        )
    }

    fn row(&self, name: String, op: &str, out: &RunOutcome) -> BenchRow {
        farcache_row(name, op, out, self.b, self.q)
    }
}

/// Every batched row of one `(b, q)` point: verify, then aggregate 2 and 3 records.
fn point_rows(
    p: &Point<'_>,
    verify: &AggTable,
    tables: &[AggTable],
    pb: &ProgressBar,
    report: &mut BenchReport,
) {
    let (b, q) = (p.b, p.q);
    pb.set_message(format!(
        "verify 1 record, built-in and WebAssembly, b={b} q={q}"
    ));
    let (builtin, wasm) = p.verify(verify);
    let rows = verify_rows(p, &builtin, wasm.as_ref(), eval_for(report, "verify 1 key"));
    report.rows.extend(rows);
    pb.inc(1);

    for t in tables {
        let k = t.k;
        pb.set_message(format!(
            "aggregate {k} records vs client read+add, b={b} q={q}"
        ));
        let (exec, local) = p.aggregate(t);
        pb.inc(2);
        let redis = eval_for(report, &format!("sum {k} keys"));
        let rows = aggregate_rows(p, k, &exec, &local, redis);
        report.rows.extend(rows);
    }
}

/// Compares `row` with Redis's best pipelined `EVALSHA` of the same logic (the faster
/// of the spinning driver and redis-benchmark, whose run `best_peer` names) and adds
/// the target `>= TARGET_EVAL_RATIO x {what}`.
fn vs_redis_best(
    row: BenchRow,
    e: &RedisEvalBaseline,
    what: &str,
    targets: &mut Vec<(String, bool)>,
) -> BenchRow {
    // Redis EVALSHA is the only peer that runs logic next to the data (memcached
    // has no server-side procedures), so it is also the best peer.
    let row = row
        .with_redis_baseline(e.best_peer.clone(), e.best_mops())
        .with_best_peer(e.best_peer.clone(), e.best_mops());
    targets.push((
        format!(">= {TARGET_EVAL_RATIO}x {what}"),
        row.ratio_vs_redis.is_some_and(|r| r >= TARGET_EVAL_RATIO),
    ));
    row
}

/// Row 1 batched: the built-in verify, then the WebAssembly one when it ran.
fn verify_rows(
    p: &Point<'_>,
    builtin: &RunOutcome,
    wasm: Option<&RunOutcome>,
    redis: Option<&RedisEvalBaseline>,
) -> Vec<BenchRow> {
    let mut row = p.row(
        "read one record and verify (built-in)".into(),
        Aggregate::NAME,
        builtin,
    );
    let mut targets = Vec::new();
    if let Some(e) = redis {
        row = vs_redis_best(row, e, "redis EVALSHA best", &mut targets);
    }
    let mut rows = vec![with_targets(row, builtin.errors, &targets)];
    rows.extend(wasm.map(|w| wasm_row(w, (p.b, p.q), redis, builtin.mops)));
    rows
}

/// Row 2 for `k` records: `aggregate` against the client-side read+add (and Redis when
/// measured), then the client-side row.
fn aggregate_rows(
    p: &Point<'_>,
    k: u32,
    exec: &RunOutcome,
    local: &RunOutcome,
    redis: Option<&RedisEvalBaseline>,
) -> [BenchRow; 2] {
    let client_target = if k == 2 {
        TARGET_AGG2_CLIENT_RATIO
    } else {
        TARGET_AGG3_CLIENT_RATIO
    };
    let mut row = p
        .row(format!("aggregate {k} records"), Aggregate::NAME, exec)
        .with_client_side_ratio(exec.mops / local.mops);
    let mut targets = vec![(
        format!(">= {client_target}x client"),
        row.ratio_vs_client_side
            .is_some_and(|r| r >= client_target && local.errors == 0),
    )];
    if let Some(e) = redis {
        row = vs_redis_best(row, e, "redis", &mut targets);
    } else {
        row.baseline = Some(format!("client-side {k} reads + add"));
    }
    [
        with_targets(row, exec.errors, &targets),
        p.row(
            format!("aggregate {k} records, client read+add"),
            "read",
            local,
        ),
    ]
}

/// Row 1 one call at a time, cycling through the verify table.
fn unbatched_verify(cache: &Cache, verify: &AggTable, duration: Duration) -> RunOutcome {
    let mut i = 0usize;
    run_serial(duration, |_| {
        let j = i % TABLE;
        i += 1;
        let (base, _) = verify.ops[j];
        cache
            .execute(Aggregate::NAME, base, verify.args(j))
            .ok()
            .and_then(|d| Aggregate::result(&d).ok())
            == Some(verify.expected[j])
    })
}

fn unbatched_verify_row(out: &RunOutcome, redis: Option<&RedisEvalBaseline>) -> BenchRow {
    let mut row = farcache_row(
        "read one record and verify, unbatched".into(),
        Aggregate::NAME,
        out,
        1,
        1,
    );
    if let Some(e) = redis {
        row = row.with_redis_baseline(
            format!(
                "redis unpipelined EVALSHA p50 {:.1}us",
                e.unpipelined.p50_us
            ),
            e.unpipelined.mops(),
        );
    }
    row
}

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
        row = vs_redis_best(row, e, "redis EVALSHA best", &mut targets);
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
}
