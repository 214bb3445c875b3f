//! What `bench replication` reports: the six rows, the r=2 / r=1 ratios against the
//! target, printed as a table and written as JSON next to the other benches' results.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ReplicationBenchOptions;
use crate::error::Result;
use crate::report::Align::{L, R};
use crate::report::{ReportHead, Table, nan_as_null, num, pct, push_notes};

/// A whole `bench replication` run. The flat fields are the headline figures (from
/// `rows`); ratios are r=2 ÷ r=1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicationReport {
    #[serde(flatten)]
    pub head: ReportHead,
    pub servers: usize,
    pub server_threads: usize,
    /// Capacity of each cache.
    pub cache_size: u64,
    pub region_size: u64,
    pub record_size: usize,
    /// Ops per batch and batches in flight of the batched rows.
    pub batch: usize,
    pub depth: usize,
    /// Measured seconds per row (each after a 100 ms warm-up).
    pub seconds: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub write_mops_r1: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub write_mops_r2: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub write_ratio: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub read_mops_r1: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub read_mops_r2: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub read_ratio: f64,
    /// Unbatched writes, one at a time.
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub write_p50_us_r1: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub write_p50_us_r2: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub write_p99_us_r1: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub write_p99_us_r2: f64,
    /// `write_ratio` must reach this.
    pub target_write_ratio: f64,
    pub target_met: bool,
    /// Writes the servers forwarded to backups per unbatched write (their replication
    /// counters ÷ 8 B ÷ writes sent): 1 with one backup per region, 0 without.
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub backup_writes_per_write_r1: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub backup_writes_per_write_r2: f64,
    /// Failed ops over every row (should be 0).
    pub errors: u64,
    pub rows: Vec<ReplicationRow>,
    /// Where each cache's regions and backups are, per server.
    pub placement: Vec<Placement>,
    /// Lines printed under the table.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// One measured row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicationRow {
    /// `writes r=1`, `reads r=2`, `write p50/p99 r=1` …
    pub name: String,
    pub replicas: u32,
    /// `read` or `write`.
    pub op: String,
    /// Batches in flight (`bench io`'s closed loop) or one op at a time.
    pub batched: bool,
    /// Ops completed in the measured window.
    pub ops: u64,
    /// Failed ops, warm-up included.
    pub errors: u64,
    pub secs: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub mops: f64,
    /// Per op: submit of its batch to completion of its batch (batched rows), or call
    /// to return (unbatched).
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p50_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p99_us: f64,
    /// Bytes the servers forwarded to backups during the row, warm-up included.
    pub backup_bytes: u64,
    /// Unbatched rows: `backup_bytes` ÷ 8 ÷ writes sent.
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub backup_writes_per_write: f64,
}

/// Regions of one cache owned by, and backed up on, one server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub replicas: u32,
    pub server: u32,
    pub addr: String,
    pub regions: u32,
    pub backups: u32,
}

impl ReplicationReport {
    pub fn new(
        opts: &ReplicationBenchOptions,
        servers: usize,
        region_size: u64,
        record_size: usize,
        target_write_ratio: f64,
    ) -> Self {
        Self {
            head: ReportHead::new("replication"),
            servers,
            server_threads: opts.server_threads,
            cache_size: opts.cache_size,
            region_size,
            record_size,
            batch: opts.batch,
            depth: opts.depth,
            seconds: opts.seconds.as_secs_f64(),
            write_mops_r1: f64::NAN,
            write_mops_r2: f64::NAN,
            write_ratio: f64::NAN,
            read_mops_r1: f64::NAN,
            read_mops_r2: f64::NAN,
            read_ratio: f64::NAN,
            write_p50_us_r1: f64::NAN,
            write_p50_us_r2: f64::NAN,
            write_p99_us_r1: f64::NAN,
            write_p99_us_r2: f64::NAN,
            target_write_ratio,
            target_met: false,
            backup_writes_per_write_r1: f64::NAN,
            backup_writes_per_write_r2: f64::NAN,
            errors: 0,
            rows: Vec::new(),
            placement: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn row(&self, op: &str, batched: bool, replicas: u32) -> Option<&ReplicationRow> {
        self.rows
            .iter()
            .find(|r| r.op == op && r.batched == batched && r.replicas == replicas)
    }

    /// Fills the headline fields from the rows, and notes what looks wrong.
    pub fn summarize(&mut self) {
        let f = |r: Option<&ReplicationRow>, v: fn(&ReplicationRow) -> f64| r.map_or(f64::NAN, v);
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        self.write_mops_r1 = f(self.row("write", true, 1), |r| r.mops);
        self.write_mops_r2 = f(self.row("write", true, 2), |r| r.mops);
        self.read_mops_r1 = f(self.row("read", true, 1), |r| r.mops);
        self.read_mops_r2 = f(self.row("read", true, 2), |r| r.mops);
        self.write_ratio = ratio(self.write_mops_r2, self.write_mops_r1);
        self.read_ratio = ratio(self.read_mops_r2, self.read_mops_r1);
        let (l1, l2) = (
            self.row("write", false, 1).cloned(),
            self.row("write", false, 2).cloned(),
        );
        let (l1, l2) = (l1.as_ref(), l2.as_ref());
        self.write_p50_us_r1 = f(l1, |r| r.p50_us);
        self.write_p50_us_r2 = f(l2, |r| r.p50_us);
        self.write_p99_us_r1 = f(l1, |r| r.p99_us);
        self.write_p99_us_r2 = f(l2, |r| r.p99_us);
        self.backup_writes_per_write_r1 = f(l1, |r| r.backup_writes_per_write);
        self.backup_writes_per_write_r2 = f(l2, |r| r.backup_writes_per_write);
        self.target_met = self.write_ratio >= self.target_write_ratio;
        self.errors = self.rows.iter().map(|r| r.errors).sum();

        if self.errors > 0 {
            self.notes.push(format!(
                "{} ops failed (see the errors column): their rows' figures count them",
                self.errors
            ));
        }
        let fwd = self.backup_writes_per_write_r2;
        if fwd.is_finite() && !(fwd > 0.99 && fwd < 1.01) {
            self.notes.push(format!(
                "r=2: the servers forwarded {fwd:.3} writes to backups per write, not 1"
            ));
        }
        if self.backup_writes_per_write_r1.is_finite() && self.backup_writes_per_write_r1 != 0.0 {
            self.notes.push(format!(
                "r=1: the servers forwarded {:.3} writes to backups per write, not 0",
                self.backup_writes_per_write_r1
            ));
        }
    }
}

/// The report as an aligned table: the six rows, then the ratios and the target.
pub fn format_replication_table(report: &ReplicationReport) -> String {
    let mut t = Table::new(&[
        ("row", L),
        ("result", R),
        ("ops", R),
        ("errors", R),
        ("backup writes", R),
    ]);
    let mut order: Vec<&ReplicationRow> = report.rows.iter().filter(|r| r.batched).collect();
    order.extend(report.rows.iter().filter(|r| !r.batched));
    for r in order {
        let result = if r.batched {
            format!("{} Mops/s", num(r.mops, 3))
        } else {
            format!("{} / {} µs", num(r.p50_us, 1), num(r.p99_us, 1))
        };
        t.row(vec![
            r.name.clone(),
            result,
            r.ops.to_string(),
            r.errors.to_string(),
            (r.backup_bytes / report.record_size.max(1) as u64).to_string(),
        ]);
    }
    for (name, v) in [
        ("writes r=2 / r=1", report.write_ratio),
        ("reads r=2 / r=1", report.read_ratio),
    ] {
        t.row(vec![
            name.into(),
            format!("{} ({})", num(v, 2), pct(v, 0)),
            String::new(),
            String::new(),
            String::new(),
        ]);
    }
    let rest = format!(
        "{} build; {} servers, s={}; two {} MiB caches of {} MiB regions; {} B ops, b={} q={}; {} s per row",
        report.head.build,
        report.servers,
        report.server_threads,
        report.cache_size >> 20,
        report.region_size >> 20,
        report.record_size,
        report.batch,
        report.depth,
        report.seconds,
    );
    let mut out = report.head.heading(&rest);
    out.push_str(&t.render());
    let _ = writeln!(
        out,
        "target: r=2 writes ≥ {:.0} % of r=1: {} ({} of r=1)",
        report.target_write_ratio * 100.0,
        if report.target_met { "met" } else { "NOT met" },
        pct(report.write_ratio, 0),
    );
    let _ = writeln!(
        out,
        "Mops/s: batched, uniform 8-aligned addresses; p50/p99: one write at a time, call to return;\n\
         ops: completed in the measured window; backup writes: forwarded by the servers during the row\n\
         (warm-up included); per unbatched write: r=1 {}, r=2 {}",
        num(report.backup_writes_per_write_r1, 3),
        num(report.backup_writes_per_write_r2, 3),
    );
    push_notes(&mut out, &report.notes);
    out
}

/// Writes `<dir>/replication-<timestamp>.json` and `<dir>/replication-latest.json`.
pub fn write_replication_json(
    report: &ReplicationReport,
    dir: impl AsRef<Path>,
) -> Result<PathBuf> {
    report.head.write_json(report, dir.as_ref())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn row(name: &str, replicas: u32, op: &str, batched: bool, mops: f64) -> ReplicationRow {
        ReplicationRow {
            name: name.into(),
            replicas,
            op: op.into(),
            batched,
            ops: 1000,
            errors: 0,
            secs: 1.0,
            mops,
            p50_us: 10.0 * f64::from(replicas),
            p99_us: 30.0 * f64::from(replicas),
            backup_bytes: if op == "write" && replicas == 2 {
                8000
            } else {
                0
            },
            backup_writes_per_write: if batched {
                f64::NAN
            } else {
                f64::from(replicas - 1)
            },
        }
    }

    fn report(write_r2: f64) -> ReplicationReport {
        let mut opts = ReplicationBenchOptions::new("farcache");
        opts.seconds = Duration::from_millis(500);
        let mut r = ReplicationReport::new(&opts, 3, 1 << 20, 8, 0.5);
        r.rows = vec![
            row("writes r=1", 1, "write", true, 2.0),
            row("writes r=2", 2, "write", true, write_r2),
            row("reads r=1", 1, "read", true, 3.0),
            row("reads r=2", 2, "read", true, 2.4),
            row("write p50/p99 r=1", 1, "write", false, 0.05),
            row("write p50/p99 r=2", 2, "write", false, 0.02),
        ];
        r.summarize();
        r
    }

    #[test]
    fn ratios_target_and_table() {
        let r = report(0.9);
        assert!((r.write_ratio - 0.45).abs() < 1e-12);
        assert!((r.read_ratio - 0.8).abs() < 1e-12);
        assert_eq!((r.write_p50_us_r1, r.write_p99_us_r2), (10.0, 60.0));
        assert!(!r.target_met);
        assert!(r.notes.is_empty(), "{:?}", r.notes);
        let t = format_replication_table(&r);
        for s in [
            "0.900 Mops/s",
            "write p50/p99 r=2",
            "20.0 / 60.0 µs",
            "0.45 (45 %)",
            "target: r=2 writes ≥ 50 % of r=1: NOT met (45 % of r=1)",
        ] {
            assert!(t.contains(s), "no {s:?} in\n{t}");
        }
        assert!(report(1.0).target_met);

        // A replicated cache whose writes did not all reach a backup says so.
        let mut r = report(1.0);
        r.rows[5].backup_writes_per_write = 0.5;
        r.notes.clear();
        r.summarize();
        assert!(
            r.notes.iter().any(|n| n.contains("forwarded 0.500")),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn json_round_trip_keeps_missing_figures_as_nan() {
        let mut r = report(1.2);
        r.rows.retain(|x| x.batched);
        r.summarize();
        assert!(r.write_p50_us_r2.is_nan());
        assert!(r.notes.is_empty(), "{:?}", r.notes);
        let json = serde_json::to_string(&r).expect("json");
        let back: ReplicationReport = serde_json::from_str(&json).expect("parse");
        assert!(back.write_p50_us_r2.is_nan());
        assert_eq!(back.write_mops_r2, 1.2);
        assert_eq!(back.rows.len(), 4);
    }
}
