//! What `bench store-large` reports: `BenchRow`s with the erasure code, the stopped
//! servers and the rates in objects and MiB beside them, the memory each system took,
//! the table and the JSON file.

use std::path::{Path, PathBuf};

use farcache_store::StoreStats;
use serde::Serialize;

use super::measure::SizeOutcome;
use super::redis::RedisSize;
use super::{Call, EC_DATA, EC_PARITY, Objects, REGION, Run, SERVERS, StoreLargeOptions};
use crate::error::Result;
use crate::report::Align::{L, R};
use crate::report::{BenchRow, ReportHead, Table, fmt_lat, fmt_size, push_notes, write_json_to};

/// A whole `bench store-large` run.
#[derive(Debug, Clone, Serialize)]
pub struct StoreLargeReport {
    #[serde(flatten)]
    pub head: ReportHead,
    pub servers: usize,
    pub server_threads: usize,
    pub region_size: u64,
    pub d: u8,
    pub p: u8,
    /// Objects per size.
    pub objects: u64,
    pub sizes: Vec<u64>,
    /// Length of each GET run (at least `min_gets` calls).
    pub seconds: f64,
    pub min_gets: u64,
    /// Op timeout of the client reading while a server is stopped.
    pub op_timeout_ms: u64,
    /// Ops per request frame and frames in flight per connection of the store clients.
    pub client_batch: usize,
    pub client_depth: usize,
    pub rows: Vec<LargeRow>,
    /// Bytes each system took per size.
    pub memory: Vec<MemoryRow>,
    /// Which server was stopped per size, and for which objects.
    pub stopped: Vec<StoppedInfo>,
    /// Lines printed under the table.
    pub notes: Vec<String>,
}

/// A report row: `BenchRow`'s fields (`mops` is millions of objects per second),
/// then this bench's own.
#[derive(Debug, Clone, Serialize)]
pub struct LargeRow {
    #[serde(flatten)]
    pub row: BenchRow,
    /// The store's erasure code (`None` on Redis rows).
    pub d: Option<u8>,
    pub p: Option<u8>,
    /// Server processes stopped (SIGSTOP) while the row ran: 0 or 1.
    pub stopped_servers: u32,
    /// Successful calls per second of the time they took (one call at a time).
    pub objects_per_s: f64,
    pub mib_per_s: f64,
    /// The slowest call, µs: a stall or two in hundreds of calls stays under p99.
    pub max_us: f64,
    /// Calls made, and those that failed (errors, timeouts, misses, wrong bytes).
    pub attempts: u64,
    pub failures: u64,
    pub first_failure: Option<String>,
    /// `p50_us` ÷ Redis's p50 of the same op and size (above 1: slower than Redis).
    pub p50_ratio_vs_redis: Option<f64>,
    /// Rows with a stopped server: every call as `[start ms, latency ms, ok]`, to see
    /// when during the stop the slow ones came.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<Vec<Call>>,
}

/// The store's bytes per size against the objects' (`raw_bytes`).
#[derive(Debug, Clone, Serialize)]
pub struct MemoryRow {
    pub value_size: u64,
    pub objects: u64,
    pub raw_bytes: u64,
    /// Bytes asked of `create_store`.
    pub capacity: u64,
    /// Objects whose manifest says RS(d+p).
    pub coded_objects: u64,
    /// (d + p) / d: the code's own cost.
    pub ec_overhead: f64,
    /// Two full copies, for comparison.
    pub replication_overhead: f64,
    /// Bytes live items need (pieces, manifests and their copies) ÷ `raw_bytes`.
    pub requested_over_raw: Option<f64>,
    /// Size-class bytes live items occupy ÷ `raw_bytes`.
    pub reserved_over_raw: Option<f64>,
    /// Heap carved so far ÷ `raw_bytes`.
    pub carved_over_raw: Option<f64>,
    /// Redis `used_memory` grown by the SETs ÷ `raw_bytes`.
    pub redis_used_over_raw: Option<f64>,
    pub stats: Option<StoreStats>,
    pub stats_error: Option<String>,
}

/// The stopped server of one size.
#[derive(Debug, Clone, Serialize)]
pub struct StoppedInfo {
    pub value_size: u64,
    /// Server id, and its index among the cluster's processes.
    pub server: Option<u32>,
    pub process: Option<usize>,
    /// Objects read while it was stopped: a data chunk on it, their home elsewhere.
    pub readable_objects: usize,
    /// Why the stopped runs did not happen.
    pub error: Option<String>,
    /// Every object read once more after SIGCONT: failures.
    pub failures_after_resume: u64,
    /// The home-stopped run: the server stopped, and how many objects it is home of.
    pub home_server: Option<u32>,
    pub homed_objects: usize,
    pub home_error: Option<String>,
}

impl StoreLargeReport {
    pub(super) fn new(o: &StoreLargeOptions) -> Self {
        Self {
            head: ReportHead::new("store-large"),
            servers: SERVERS,
            server_threads: 1,
            region_size: REGION,
            d: EC_DATA,
            p: EC_PARITY,
            objects: o.objects,
            sizes: o.sizes.clone(),
            seconds: o.duration.as_secs_f64(),
            min_gets: o.min_gets,
            op_timeout_ms: o.op_timeout.as_millis() as u64,
            client_batch: o.client_batch,
            client_depth: o.client_depth,
            rows: Vec::new(),
            memory: Vec::new(),
            stopped: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Redis's rows of one size, the store's, the memory and stopped-server entries.
    pub(super) fn push_size(
        &mut self,
        o: &StoreLargeOptions,
        objects: &Objects,
        out: &SizeOutcome,
        redis: Option<&RedisSize>,
    ) {
        let size = objects.size;
        let sz = fmt_size(size);
        if let Some(b) = redis {
            for (op, run) in [("SET", &b.set), ("GET", &b.get)] {
                let name = format!("redis {op} {sz}");
                self.rows.push(row(name, "redis", op, size, run, None, 0));
            }
        }
        let ec = Some((EC_DATA, EC_PARITY));
        // Ratios of rows where both sides read something; a row of failures has none.
        let vs = |r: &mut LargeRow, base: Option<&Run>, label: &str| {
            if let Some(b) = base.filter(|b| b.ok > 0 && r.failures < r.attempts) {
                r.row = r
                    .row
                    .clone()
                    .with_redis_baseline(label, b.objects_per_s / 1e6);
                r.p50_ratio_vs_redis = ratio(r.row.p50_us, b.latency.p50_us);
            }
        };
        let (rset, rget) = (redis.map(|b| &b.set), redis.map(|b| &b.get));
        let mut put = row(
            format!("farcache PUT {sz}"),
            "farcache",
            "PUT",
            size,
            &out.put,
            ec,
            0,
        );
        vs(&mut put, rset, &format!("redis SET {sz}"));
        self.rows.push(put);
        for (what, run) in [("first-d", &out.get), ("wait-all", &out.get_all)] {
            let name = format!("farcache GET {what} {sz}");
            let mut r = row(name, "farcache", "GET", size, run, ec, 0);
            vs(&mut r, rget, &format!("redis GET {sz}"));
            self.rows.push(r);
        }
        let mut info = StoppedInfo {
            value_size: size as u64,
            server: None,
            process: None,
            readable_objects: 0,
            error: None,
            failures_after_resume: out.after.failures,
            home_server: None,
            homed_objects: 0,
            home_error: None,
        };
        match &out.stopped {
            Ok(s) => {
                for (what, run) in [("first-d", &s.get), ("wait-all", &s.get_all)] {
                    let name = format!("farcache GET {what} {sz}, 1 server stopped");
                    self.rows
                        .push(row(name, "farcache", "GET", size, run, ec, 1));
                }
                info.server = Some(s.server);
                info.process = Some(s.process);
                info.readable_objects = s.readable.len();
                self.notes.push(format!(
                    "{sz}: stopped server {} (process {}): a data chunk of {} of {} objects, \
                     their home elsewhere; those were read",
                    s.server,
                    s.process,
                    s.readable.len(),
                    objects.count
                ));
            }
            Err(e) => {
                info.error = Some(e.clone());
                self.notes
                    .push(format!("{sz}: no stopped-server runs: {e}"));
            }
        }
        match &out.home_stopped {
            Ok(h) => {
                let name = format!("farcache GET first-d {sz}, home server stopped");
                self.rows
                    .push(row(name, "farcache", "GET", size, &h.get, ec, 1));
                info.home_server = Some(h.server);
                info.homed_objects = h.homed.len();
                self.notes.push(format!(
                    "{sz}: home server stopped: server {} (process {}) holds the manifests \
                     of {} of {} objects; Store::get read them through manifest copies \
                     after its {} ms hedge",
                    h.server,
                    h.process,
                    h.homed.len(),
                    objects.count,
                    farcache_store::HEDGE_AFTER.as_millis()
                ));
            }
            Err(e) => {
                info.home_error = Some(e.clone());
                self.notes.push(format!("{sz}: no home-stopped run: {e}"));
            }
        }
        if out.after.failures > 0 {
            self.notes.push(format!(
                "{sz}: after SIGCONT {} of {} objects failed to read, first: {}",
                out.after.failures,
                out.after.attempts,
                out.after.first_failure.as_deref().unwrap_or("?")
            ));
        }
        self.stopped.push(info);
        self.push_memory(o, objects, out, redis);
    }

    fn push_memory(
        &mut self,
        o: &StoreLargeOptions,
        objects: &Objects,
        out: &SizeOutcome,
        redis: Option<&RedisSize>,
    ) {
        let size = objects.size as u64;
        let sz = fmt_size(objects.size);
        let raw = size * o.objects;
        let over = |b: u64| ratio(b as f64, raw as f64);
        let stats = out.stats.as_ref().ok().copied();
        let m = MemoryRow {
            value_size: size,
            objects: o.objects,
            raw_bytes: raw,
            capacity: out.capacity,
            coded_objects: out.coded,
            ec_overhead: f64::from(EC_DATA + EC_PARITY) / f64::from(EC_DATA),
            replication_overhead: 2.0,
            requested_over_raw: stats.and_then(|s| over(s.requested)),
            reserved_over_raw: stats.and_then(|s| over(s.reserved)),
            carved_over_raw: stats.and_then(|s| over(s.carved)),
            redis_used_over_raw: redis.and_then(|r| r.used_memory).and_then(over),
            stats,
            stats_error: out.stats.as_ref().err().cloned(),
        };
        let x = |v: Option<f64>| v.map_or_else(|| "?".into(), |v| format!("{v:.2}x"));
        self.notes.push(format!(
            "{sz} memory: store items need {} of the objects' bytes, {} in size classes \
             ({} carved); RS({}+{}) alone is {:.2}x, two replicas 2.00x; Redis used {}",
            x(m.requested_over_raw),
            x(m.reserved_over_raw),
            x(m.carved_over_raw),
            EC_DATA,
            EC_PARITY,
            m.ec_overhead,
            x(m.redis_used_over_raw)
        ));
        if out.coded != o.objects {
            self.notes.push(format!(
                "{sz}: only {} of {} objects have an RS({EC_DATA}+{EC_PARITY}) manifest",
                out.coded, o.objects
            ));
        }
        match stats {
            Some(s) if s.evictions > 0 => self.notes.push(format!(
                "{sz}: the store evicted {} items (objects may be lost)",
                s.evictions
            )),
            Some(_) => {}
            None => self.notes.push(format!(
                "{sz}: store stats failed: {}",
                m.stats_error.as_deref().unwrap_or("?")
            )),
        }
        self.memory.push(m);
    }

    pub(super) fn finish_notes(&mut self, o: &StoreLargeOptions) {
        self.notes.insert(
            0,
            format!(
                "farcache: {SERVERS} server processes (1 thread each), {} MiB regions, one \
                 client thread (b = {} ops per frame, q = {} frames in flight), \
                 put_large/get one object at a time; first-d = Store::get (decodes from \
                 the first {EC_DATA} chunks), wait-all = get_waiting_for_all_chunks. \
                 Stopped: one server SIGSTOPped, read with a fresh client whose op timeout \
                 is {} ms. Redis: one redis-server, SET/GET on one blocking connection. \
                 Rates are successful calls over the time they took; latency counts every \
                 call, failed ones included",
                REGION >> 20,
                o.client_batch,
                o.client_depth,
                o.op_timeout.as_millis()
            ),
        );
        let unreadable = self.rows.iter().any(|r| {
            r.first_failure
                .as_deref()
                .is_some_and(|e| e.contains("unreadable"))
        });
        if unreadable {
            // A known store issue, explained in the docs rather than here.
            self.notes.push(
                "reads failed as unreadable: see docs/benchmarks.md, `farcache bench \
                 store-large`, known issues (kv_get's 2 MiB output limit counts the \
                 connection's unsent replies; -b 1 -q 3 avoids it)"
                    .into(),
            );
        }
        for r in &self.rows {
            if let Some(e) = &r.first_failure {
                self.notes.push(format!(
                    "{}: {} of {} calls failed, first: {e}",
                    r.row.name, r.failures, r.attempts
                ));
            }
        }
    }
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (a.is_finite() && b.is_finite() && b > 0.0).then(|| a / b)
}

fn row(
    name: String,
    system: &str,
    op: &str,
    size: usize,
    run: &Run,
    ec: Option<(u8, u8)>,
    stopped: u32,
) -> LargeRow {
    LargeRow {
        row: BenchRow {
            name,
            system: system.into(),
            op: op.into(),
            record_size: size,
            distribution: "round-robin".into(),
            c: Some(1),
            s: (system == "farcache").then_some(1),
            b: Some(1),
            q: Some(1),
            mops: run.objects_per_s / 1e6,
            p50_us: run.latency.p50_us,
            p99_us: run.latency.p99_us,
            p999_us: run.latency.p999_us,
            ..BenchRow::default()
        },
        d: ec.map(|e| e.0),
        p: ec.map(|e| e.1),
        stopped_servers: stopped,
        objects_per_s: run.objects_per_s,
        mib_per_s: run.mib_per_s,
        max_us: run.latency.max_us,
        attempts: run.attempts,
        failures: run.failures,
        first_failure: run.first_failure.clone(),
        p50_ratio_vs_redis: None,
        calls: (stopped > 0).then(|| run.calls.clone()),
    }
}

/// Milliseconds from µs, as the latency columns of `bench io` (`-` when not finite).
fn ms(us: f64) -> String {
    fmt_lat(us / 1e3)
}

/// The report as an aligned table, the notes under it.
pub fn format_store_large_table(report: &StoreLargeReport) -> String {
    let mut t = Table::new(&[
        ("name", L),
        ("op", L),
        ("size", R),
        ("stopped", R),
        ("calls", R),
        ("failed", R),
        ("obj/s", R),
        ("MiB/s", R),
        ("p50 ms", R),
        ("p99 ms", R),
        ("max ms", R),
        ("vs redis (obj/s, p50)", L),
    ]);
    for r in &report.rows {
        let vs = match (r.row.ratio_vs_redis, r.p50_ratio_vs_redis) {
            (Some(t), Some(l)) => format!("{t:.2}x, {l:.2}x"),
            _ => "-".into(),
        };
        t.row(vec![
            r.row.name.clone(),
            r.row.op.clone(),
            fmt_size(r.row.record_size),
            r.stopped_servers.to_string(),
            r.attempts.to_string(),
            r.failures.to_string(),
            format!("{:.1}", r.objects_per_s),
            format!("{:.0}", r.mib_per_s),
            ms(r.row.p50_us),
            ms(r.row.p99_us),
            ms(r.max_us),
            vs,
        ]);
    }
    let m = &report.head.machine;
    let rest = format!("kernel {}, {} build", m.kernel, report.head.build);
    let mut out = report.head.heading(&rest);
    out.push_str(&t.render());
    push_notes(&mut out, &report.notes);
    out
}

/// Writes `<dir>/store-large-<timestamp>.json` and `<dir>/store-large-latest.json`.
pub fn write_store_large_json(report: &StoreLargeReport, dir: &Path) -> Result<PathBuf> {
    report.head.write_json(report, dir)
}

/// Writes the report to `path` exactly (creating its directory).
pub fn write_store_large_json_to(report: &StoreLargeReport, path: &Path) -> Result<()> {
    write_json_to(report, path)
}
