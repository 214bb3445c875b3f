//! What `bench drain` reports: one run's figures, printed as a table and written as
//! JSON next to the other benches' results.

use std::path::{Path, PathBuf};

use farcache_client::MigrationRecord;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::report::Align::L;
use crate::report::{ReportHead, Table, mib, nan_as_null, num, push_notes};

/// A whole `bench drain` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrainReport {
    #[serde(flatten)]
    pub head: ReportHead,
    /// The cache, all of it on the drained server.
    pub size_bytes: u64,
    pub region_size: u64,
    pub regions: u32,
    pub server_threads: usize,
    /// The reclamation notice given to the manager.
    pub grace_s: f64,
    /// Whether the background load ran during the drain.
    pub load: bool,
    /// Seconds filling the cache with the pattern, before the drain.
    pub fill_s: f64,
    /// Every region left the drained server (moved, or lost and re-placed) before the
    /// bench stopped waiting (grace + 30 s).
    pub drained: bool,
    /// From the reclaim request to the manager's status listing no region on the
    /// drained server (polled every 20 ms).
    pub drain_s: f64,
    /// `size_bytes` ÷ `drain_s`, in GiB/s.
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub drain_gib_per_s: f64,
    /// Bytes the moves sent (dirty re-sends included) ÷ their copy time, summed over
    /// the regions: the rate of one region's copy.
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub copy_gib_per_s: f64,
    /// Region bytes moved ÷ the same copy time.
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub region_gib_per_s: f64,
    pub bytes_sent: u64,
    /// Sum of the moves' copy times and of their whole times (copy, hand-off, routes).
    pub copy_s: f64,
    pub moves_s: f64,
    /// Longest time writes to a moving region were refused (the servers' figure).
    pub max_write_pause_ms: f64,
    /// Moves out of the drained server the manager lists.
    pub regions_moved: u32,
    /// Regions of the drained server the manager reports lost.
    pub lost_regions: u32,
    /// The read-back after the drain.
    pub verify_s: f64,
    pub verified_bytes: u64,
    /// Bytes that differ from what was written (unreadable bytes included).
    pub mismatched_bytes: u64,
    pub unreadable_bytes: u64,
    /// Acknowledged load writes that read back as the old pattern.
    pub lost_writes: u64,
    pub first_mismatch: Option<u64>,
    pub first_verify_error: Option<String>,
    /// The background load during the drain.
    pub load_reads: u64,
    pub load_writes: u64,
    pub load_errors: u64,
    /// Load reads that did not return the pattern.
    pub load_wrong_reads: u64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub load_ops_per_s: f64,
    /// Longest load batch, submit to completion (what an application saw of pauses).
    pub load_max_batch_ms: f64,
    pub load_first_error: Option<String>,
    /// Drained within the grace, no region lost, every byte read back as written.
    pub target_met: bool,
    /// The manager's records of the moves out of the drained server.
    pub migrations: Vec<MigrationRecord>,
    /// Lines printed under the table.
    #[serde(default)]
    pub notes: Vec<String>,
}

impl DrainReport {
    /// A report with the run's shape and nothing measured yet.
    pub fn new(
        size_bytes: u64,
        region_size: u64,
        server_threads: usize,
        grace_s: f64,
        load: bool,
    ) -> Self {
        Self {
            head: ReportHead::new("drain"),
            size_bytes,
            region_size,
            regions: size_bytes.div_ceil(region_size.max(1)) as u32,
            server_threads,
            grace_s,
            load,
            fill_s: 0.0,
            drained: false,
            drain_s: f64::NAN,
            drain_gib_per_s: f64::NAN,
            copy_gib_per_s: f64::NAN,
            region_gib_per_s: f64::NAN,
            bytes_sent: 0,
            copy_s: 0.0,
            moves_s: 0.0,
            max_write_pause_ms: 0.0,
            regions_moved: 0,
            lost_regions: 0,
            verify_s: 0.0,
            verified_bytes: 0,
            mismatched_bytes: 0,
            unreadable_bytes: 0,
            lost_writes: 0,
            first_mismatch: None,
            first_verify_error: None,
            load_reads: 0,
            load_writes: 0,
            load_errors: 0,
            load_wrong_reads: 0,
            load_ops_per_s: f64::NAN,
            load_max_batch_ms: 0.0,
            load_first_error: None,
            target_met: false,
            migrations: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Fills the rates from the moves and decides the target.
    pub fn summarize(&mut self) {
        const GIB: f64 = (1u64 << 30) as f64;
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        let m = &self.migrations;
        self.bytes_sent = m.iter().map(|m| m.bytes).sum();
        let copy_us: u64 = m.iter().map(|m| m.copy_us).sum();
        self.copy_s = copy_us as f64 / 1e6;
        self.moves_s = m.iter().map(|m| m.total_us).sum::<u64>() as f64 / 1e6;
        self.copy_gib_per_s = ratio(self.bytes_sent as f64 / GIB, self.copy_s);
        let region_bytes = m.len() as f64 * self.region_size as f64;
        self.region_gib_per_s = ratio(region_bytes / GIB, self.copy_s);
        self.max_write_pause_ms = m.iter().map(|m| m.max_pause_us).max().unwrap_or(0) as f64 / 1e3;
        self.regions_moved = m.len() as u32;
        self.drain_gib_per_s = ratio(self.size_bytes as f64 / GIB, self.drain_s);
        self.target_met = self.drained
            && self.drain_s <= self.grace_s
            && self.lost_regions == 0
            && self.mismatched_bytes == 0;

        if !self.drained {
            self.notes.push(format!(
                "the server still held regions {:.0} s after the reclaim request",
                self.drain_s
            ));
        }
        if self.lost_regions > 0 {
            self.notes.push(format!(
                "{} region(s) did not move before the grace ended and were lost",
                self.lost_regions
            ));
        }
        if self.regions_moved + self.lost_regions != self.regions {
            self.notes.push(format!(
                "the manager lists {} moves and {} losses for {} regions",
                self.regions_moved, self.lost_regions, self.regions
            ));
        }
        if self.mismatched_bytes > 0 {
            self.notes.push(format!(
                "verify: {} bytes differ (first at byte {}; {} unreadable, {} acknowledged load writes lost){}",
                self.mismatched_bytes,
                self.first_mismatch.unwrap_or(0),
                self.unreadable_bytes,
                self.lost_writes,
                self.first_verify_error
                    .as_deref()
                    .map_or(String::new(), |e| format!("; {e}")),
            ));
        }
        if self.load_errors > 0 || self.load_wrong_reads > 0 {
            self.notes.push(format!(
                "load: {} failed ops, {} wrong reads{}",
                self.load_errors,
                self.load_wrong_reads,
                self.load_first_error
                    .as_deref()
                    .map_or(String::new(), |e| format!(" (first error: {e})")),
            ));
        }
    }
}

/// The report as an aligned two-column table.
pub fn format_drain_table(r: &DrainReport) -> String {
    let load = if r.load {
        format!(
            "{} reads + {} writes ({} ops/s), {} errors, {} wrong reads, slowest batch {} ms",
            r.load_reads,
            r.load_writes,
            num(r.load_ops_per_s, 0),
            r.load_errors,
            r.load_wrong_reads,
            num(r.load_max_batch_ms, 1),
        )
    } else {
        "off (--load off)".into()
    };
    let drain = if r.drained {
        format!("{} s", num(r.drain_s, 2))
    } else {
        format!("not drained after {} s", num(r.drain_s, 1))
    };
    let rows: Vec<(&str, String)> = vec![
        (
            "cache",
            format!(
                "{} in {} regions of {}",
                mib(r.size_bytes),
                r.regions,
                mib(r.region_size)
            ),
        ),
        ("fill", format!("{} s", num(r.fill_s, 2))),
        ("drain (reclaim → no region left)", drain),
        ("drain rate", format!("{} GiB/s", num(r.drain_gib_per_s, 2))),
        (
            "copy rate per region",
            format!(
                "{} GiB/s ({} sent in {} s of copies)",
                num(r.copy_gib_per_s, 2),
                mib(r.bytes_sent & !((1 << 20) - 1)),
                num(r.copy_s, 2)
            ),
        ),
        (
            "longest write pause",
            format!("{} ms", num(r.max_write_pause_ms, 1)),
        ),
        (
            "regions moved / lost",
            format!("{} / {}", r.regions_moved, r.lost_regions),
        ),
        (
            "verify",
            format!(
                "{} read back in {} s, {} bytes differ",
                mib(r.verified_bytes),
                num(r.verify_s, 2),
                r.mismatched_bytes
            ),
        ),
        ("load during the drain", load),
        (
            "target: drain ≤ grace",
            format!(
                "{} (drain {} s, grace {} s, {} regions lost, {} bytes differ)",
                if r.target_met { "met" } else { "NOT met" },
                num(r.drain_s, 2),
                num(r.grace_s, 1),
                r.lost_regions,
                r.mismatched_bytes
            ),
        ),
    ];
    let mut t = Table::new(&[("", L), ("", L)]);
    for (k, v) in rows {
        t.row(vec![k.to_string(), v]);
    }
    let rest = format!(
        "{} build; {} server thread(s), grace {} s",
        r.head.build,
        r.server_threads,
        num(r.grace_s, 1),
    );
    let mut out = r.head.heading(&rest);
    out.push_str(&t.render_body());
    push_notes(&mut out, &r.notes);
    out
}

/// Writes `<dir>/drain-<timestamp>.json` and `<dir>/drain-latest.json`.
pub fn write_drain_json(report: &DrainReport, dir: impl AsRef<Path>) -> Result<PathBuf> {
    report.head.write_json(report, dir.as_ref())
}
