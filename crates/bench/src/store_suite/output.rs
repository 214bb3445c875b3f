//! What `bench store` reports: `BenchRow`s (with the unbatched GET's ratio to a byte
//! read beside them), the stores' census, the table and the JSON file.

use std::path::{Path, PathBuf};

use farcache_store::StoreStats;
use serde::Serialize;

use super::measure::{Phase, SizeOutcome};
use super::{StoreBenchOptions, TARGET_GET_SIZE, TARGET_GET_VS_READ, TARGET_GET_VS_REDIS};
use crate::baseline::peers::{PeerBaseline, PeerOp};
use crate::error::Result;
use crate::histogram::LatencySummary;
use crate::report::{
    Baselines, BenchReport, BenchRow, ReportHead, all_met, format_table, write_json_to,
};

/// A whole `bench store` run.
#[derive(Debug, Clone, Serialize)]
pub struct StoreReport {
    #[serde(flatten)]
    pub head: ReportHead,
    pub keys: u64,
    pub sizes: Vec<usize>,
    pub batch: usize,
    pub depth: usize,
    /// Measured seconds of every timed run.
    pub seconds: f64,
    pub latency_samples: u64,
    /// `peers`: the Redis runs per value size (no memcached).
    pub baselines: Baselines,
    /// Redis's unpipelined SET latency per value size.
    pub redis_set_latency: Vec<RedisSetLatency>,
    pub rows: Vec<StoreRow>,
    /// Each store's census after its runs.
    pub stores: Vec<SizeCensus>,
    /// Lines printed under the table.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RedisSetLatency {
    pub value_size: usize,
    pub latency: LatencySummary,
}

/// A report row: `BenchRow`'s fields, then the store's own.
#[derive(Debug, Clone, Serialize)]
pub struct StoreRow {
    #[serde(flatten)]
    pub row: BenchRow,
    /// Unbatched GET rows: `p50_us` ÷ the p50 of 8-byte `cache.read`s of a plain cache,
    /// measured in alternating slices with the GETs.
    pub ratio_vs_byte_read: Option<f64>,
    /// farcache rows: keys that failed (errors, wrong values), warm-up included.
    pub errors: Option<u64>,
    /// farcache GET rows: keys not found (all were loaded).
    pub misses: Option<u64>,
}

impl From<BenchRow> for StoreRow {
    fn from(row: BenchRow) -> Self {
        Self {
            row,
            ratio_vs_byte_read: None,
            errors: None,
            misses: None,
        }
    }
}

/// One store: its size and what `Store::stats` counted after the runs.
#[derive(Debug, Clone, Serialize)]
pub struct SizeCensus {
    pub value_size: usize,
    pub keys: u64,
    /// Bytes asked of `create_store`.
    pub capacity: u64,
    pub stats: Option<StoreStats>,
    pub stats_error: Option<String>,
}

impl StoreReport {
    pub(super) fn new(o: &StoreBenchOptions) -> Self {
        Self {
            head: ReportHead::new("store"),
            keys: o.keys,
            sizes: o.sizes.clone(),
            batch: o.batch,
            depth: o.depth,
            seconds: o.duration.as_secs_f64(),
            latency_samples: o.latency_samples,
            baselines: Baselines::default(),
            redis_set_latency: Vec::new(),
            rows: Vec::new(),
            stores: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn redis(&self, size: usize) -> Option<&PeerBaseline> {
        self.baselines
            .peers
            .iter()
            .find(|p| p.value_size == size && p.keys == self.keys)
    }

    /// The Redis rows of `size`, then the farcache rows, the census and the notes.
    pub(super) fn push_size(&mut self, o: &StoreBenchOptions, out: &SizeOutcome) {
        self.push_redis_rows(out.size);
        self.push_farcache_rows(o, out);
        let (stats, stats_error) = match &out.stats {
            Ok(s) => (Some(*s), None),
            Err(e) => (None, Some(e.clone())),
        };
        self.stores.push(SizeCensus {
            value_size: out.size,
            keys: o.keys,
            capacity: out.capacity,
            stats,
            stats_error,
        });
        self.note_size(out);
    }

    fn redis_set_latency(&self, size: usize) -> Option<LatencySummary> {
        self.redis_set_latency
            .iter()
            .find(|l| l.value_size == size)
            .map(|l| l.latency)
    }

    fn push_redis_rows(&mut self, size: usize) {
        if let Some(p) = self.redis(size) {
            let rows = p.rows();
            self.rows.extend(rows.into_iter().map(StoreRow::from));
        }
        if let Some(l) = self.redis_set_latency(size) {
            self.rows.push(StoreRow::from(BenchRow {
                name: format!("redis unpipelined spin SET {size}B"),
                system: "redis".into(),
                op: "SET".into(),
                record_size: size,
                distribution: "uniform".into(),
                c: Some(1),
                b: Some(1),
                q: Some(1),
                mops: 1.0 / l.mean_us,
                p50_us: l.p50_us,
                p99_us: l.p99_us,
                p999_us: l.p999_us,
                ..BenchRow::default()
            }));
        }
    }

    fn push_farcache_rows(&mut self, o: &StoreBenchOptions, out: &SizeOutcome) {
        let size = out.size;
        let best = |op| {
            self.redis(size)
                .and_then(|p| p.best(op))
                .map(|r| (r.peer.clone(), r.mops))
        };
        let (best_get, best_set) = (best(PeerOp::Get), best(PeerOp::Set));
        let batched = [
            // The load puts every key once, in order; so does the first read.
            (
                "load (mput)",
                "PUT",
                "sequential",
                &out.load,
                best_set.clone(),
            ),
            (
                "first GET (mget)",
                "GET",
                "sequential",
                &out.first_get,
                None,
            ),
            ("GET (mget)", "GET", "uniform", &out.get, best_get),
            ("PUT (mput)", "PUT", "uniform", &out.put, best_set),
        ];
        for (what, op, dist, phase, best) in batched {
            let name = format!("farcache store {what} {size}B");
            let mut r = row(name, op, size, (o.batch, o.depth), phase);
            r.row.distribution = dist.into();
            if let Some((peer, mops)) = best {
                r.row = r
                    .row
                    .with_redis_baseline(&peer, mops)
                    .with_best_peer(peer, mops);
                // The throughput target: batched GETs of 64 B values.
                if what == "GET (mget)" && size == TARGET_GET_SIZE {
                    let clean = phase.tally.errors + phase.tally.misses == 0;
                    let met = clean
                        && r.row
                            .ratio_vs_best_peer
                            .is_some_and(|x| x >= TARGET_GET_VS_REDIS);
                    r.row = r
                        .row
                        .with_target(format!(">= {TARGET_GET_VS_REDIS}x best peer"), met);
                }
            }
            self.rows.push(r);
        }

        let name = format!("farcache store unbatched GET {size}B");
        let mut get = row(name, "GET", size, (1, 1), &out.get_one);
        let redis_get = self.redis(size).and_then(|p| p.redis_unpipelined_spin);
        if let Some(l) = redis_get {
            let mops = 1.0 / l.mean_us;
            get.row = get
                .row
                .with_redis_baseline("redis unpipelined spin GET", mops);
        }
        let vs_read = out.get_one.latency.p50_us / out.read_one.latency.p50_us;
        if vs_read.is_finite() {
            get.ratio_vs_byte_read = Some(vs_read);
            let clean = out.get_one.tally.errors + out.get_one.tally.misses == 0
                && out.read_one.tally.errors == 0;
            get.row = get.row.with_target(
                format!("p50 <= {TARGET_GET_VS_READ}x 8B read"),
                clean && vs_read <= TARGET_GET_VS_READ,
            );
        }
        self.rows.push(get);
        let name = format!("farcache unbatched read 8B (beside {size}B GET)");
        self.rows.push(row(name, "read", 8, (1, 1), &out.read_one));

        let name = format!("farcache store unbatched PUT {size}B");
        let mut put = row(name, "PUT", size, (1, 1), &out.put_one);
        if let Some(l) = self.redis_set_latency(size) {
            let mops = 1.0 / l.mean_us;
            put.row = put
                .row
                .with_redis_baseline("redis unpipelined spin SET", mops);
        }
        self.rows.push(put);
    }

    fn note_size(&mut self, out: &SizeOutcome) {
        let size = out.size;
        let (get, read) = (out.get_one.latency.p50_us, out.read_one.latency.p50_us);
        self.notes.push(format!(
            "{size}B: ratio_vs_byte_read {:.2} (store GET p50 {get:.1} µs ÷ 8 B read p50 {read:.1} µs)",
            get / read
        ));
        match &out.stats {
            Ok(s) => {
                let mut line = format!(
                    "{size}B: store of {} MiB holds {} live of {} keys, {} evictions",
                    out.capacity >> 20,
                    s.live,
                    self.keys,
                    s.evictions
                );
                if s.live != self.keys {
                    line.push_str(" — MISMATCH");
                }
                self.notes.push(line);
            }
            Err(e) => self.notes.push(format!("{size}B: store stats failed: {e}")),
        }
        let phases = [
            ("load", &out.load),
            ("first mget", &out.first_get),
            ("mget", &out.get),
            ("mput", &out.put),
            ("get", &out.get_one),
            ("read", &out.read_one),
            ("put", &out.put_one),
        ];
        for (what, p) in phases {
            if let Some(e) = &p.tally.first_error {
                self.notes.push(format!(
                    "{size}B {what}: {} errors, first: {e}",
                    p.tally.errors
                ));
            }
        }
    }

    pub(super) fn finish_notes(&mut self, o: &StoreBenchOptions) {
        self.notes.insert(
            0,
            format!(
                "farcache: one server (s = 1), one connection; GET: one thread keeps {q} \
                 mgets of {b} keys in flight (mget_submit); PUT: {q} threads share the \
                 connection, each waiting for its own mput of {b} keys (c/s/b/q = \
                 1/1/{b}/{q}); batched latency is per call. Redis: one redis-server preloaded \
                 from a snapshot, the spinning driver with {b} keys per batch and {q} in \
                 flight per connection. Redis SET runs overwrite keys; the store's load \
                 inserts them into an empty store",
                q = o.depth,
                b = o.batch
            ),
        );
    }

    /// Whether every row with a target met it (`None` if no row has one).
    pub fn all_targets_met(&self) -> Option<bool> {
        all_met(self.rows.iter().map(|r| &r.row))
    }

    /// The rows as a plain `BenchReport` (for the shared table code).
    fn view(&self) -> BenchReport {
        let mut r = BenchReport::new(self.head.bench.clone());
        r.timestamp_unix = self.head.timestamp_unix;
        r.machine = self.head.machine.clone();
        r.rows = self.rows.iter().map(|r| r.row.clone()).collect();
        r.notes = self.notes.clone();
        r
    }
}

/// A farcache row of `(b, q)`; errors and misses are appended to the name, as
/// `bench io` does.
fn row(name: String, op: &str, size: usize, (b, q): (usize, usize), p: &Phase) -> StoreRow {
    let mut row = BenchRow {
        name,
        system: "farcache".into(),
        op: op.into(),
        record_size: size,
        distribution: "uniform".into(),
        c: Some(1),
        s: Some(1),
        b: Some(b),
        q: Some(q),
        mops: p.mops,
        p50_us: p.latency.p50_us,
        p99_us: p.latency.p99_us,
        p999_us: p.latency.p999_us,
        ..BenchRow::default()
    };
    if p.tally.errors > 0 {
        row.name.push_str(&format!(" ({} errors)", p.tally.errors));
    }
    if p.tally.misses > 0 {
        row.name.push_str(&format!(" ({} misses)", p.tally.misses));
    }
    StoreRow {
        row,
        ratio_vs_byte_read: None,
        errors: Some(p.tally.errors),
        misses: (op == "GET").then_some(p.tally.misses),
    }
}

/// The report as an aligned table, the notes under it.
pub fn format_store_table(report: &StoreReport) -> String {
    format_table(&report.view())
}

/// Writes `<dir>/store-<timestamp>.json` and `<dir>/store-latest.json` (as `bench io`).
pub fn write_store_json(report: &StoreReport, dir: &Path) -> Result<PathBuf> {
    report.head.write_json(report, dir)
}

/// Writes the report to `path` exactly (creating its directory).
pub fn write_store_json_to(report: &StoreReport, path: &Path) -> Result<()> {
    write_json_to(report, path)
}
