//! What `bench migrate` reports: one row per migration mode, printed as a table and
//! written as JSON next to the other benches' results.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use farcache_client::MigrationRecord;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::report::Align::{L, R};
use crate::report::{ReportHead, Table, nan_as_null, num, push_notes};

/// A whole `bench migrate` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigrateReport {
    #[serde(flatten)]
    pub head: ReportHead,
    pub config: MigrateConfig,
    pub rows: Vec<MigrateRow>,
    /// Lines printed under the table.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The run's shape, so a result file says what it measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigrateConfig {
    pub region_size: u64,
    pub regions: u32,
    /// Regions moved per step.
    pub steps: Vec<u32>,
    /// Planned step starts, ms after the load starts.
    pub step_at_ms: Vec<f64>,
    /// Planned end of the load, ms.
    pub end_ms: f64,
    pub batch: usize,
    pub queue_depth: usize,
    pub server_threads: usize,
    pub bucket_ms: f64,
}

/// One migration mode on its own fresh cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigrateRow {
    /// `dirty_tracking`, `pause_region` or `pause_all`.
    pub mode: String,
    /// Bytes sent by every move (re-sent dirty chunks included) ÷ their copy time.
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub migration_gib_per_s: f64,
    /// Region bytes (each moved region once) ÷ the same copy time: below
    /// `migration_gib_per_s` by what dirty tracking re-sent.
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub region_gib_per_s: f64,
    /// Mean reads/s inside the step windows ÷ mean reads/s in the second before the
    /// first step.
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub read_ratio_during: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub write_ratio_during: f64,
    /// Seconds inside the step windows (what the ratios average over).
    pub moving_s: f64,
    /// Longest time writes to a moving region were refused (the servers' figure).
    pub max_write_pause_ms: f64,
    /// Writes the sources answered `PAUSED` while copying, because they dirtied a
    /// region faster than it copied (sent again by the client).
    #[serde(default)]
    pub throttled_writes: u64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub reads_per_s_before: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub writes_per_s_before: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub reads_per_s_during: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub writes_per_s_during: f64,
    pub bytes_moved: u64,
    pub copy_us: u64,
    pub read_errors: u64,
    pub write_errors: u64,
    /// `read_errors + write_errors`.
    pub errors: u64,
    pub first_error: Option<String>,
    /// When each step ran (ms after the load started).
    pub steps: Vec<StepWindow>,
    pub timeline: Timeline,
    /// The manager's records of this run's moves.
    pub migrations: Vec<MigrationRecord>,
}

/// Ops completed per bucket since the load started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub bucket_ms: f64,
    pub reads: Vec<u64>,
    pub writes: Vec<u64>,
}

/// One step of the schedule: its moves one after the other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepWindow {
    pub regions: u32,
    pub start_ms: f64,
    pub end_ms: f64,
    pub moves: Vec<MoveWindow>,
}

/// One `move_region` call, from request to its return.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoveWindow {
    pub region: u32,
    pub start_ms: f64,
    pub end_ms: f64,
}

impl MigrateReport {
    pub fn new(config: MigrateConfig) -> Self {
        Self {
            head: ReportHead::new("migrate"),
            config,
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Op errors over every mode.
    pub fn errors(&self) -> u64 {
        self.rows.iter().map(|r| r.errors).sum()
    }
}

/// The report as an aligned table, one row per mode.
pub fn format_migrate_table(report: &MigrateReport) -> String {
    let mut t = Table::new(&[
        ("mode", L),
        ("sent", R),
        ("migration MiB/s", R),
        ("regions MiB/s", R),
        ("reads Mops/s", R),
        ("writes Mops/s", R),
        ("read ratio", R),
        ("write ratio", R),
        ("longest write pause ms", R),
        ("throttled writes", R),
        ("errors", R),
    ]);
    for r in &report.rows {
        t.row(vec![
            r.mode.clone(),
            format!("{} MiB", r.bytes_moved >> 20),
            num(r.migration_gib_per_s * 1024.0, 0),
            num(r.region_gib_per_s * 1024.0, 0),
            num(r.reads_per_s_before / 1e6, 2),
            num(r.writes_per_s_before / 1e6, 2),
            num(r.read_ratio_during, 2),
            num(r.write_ratio_during, 2),
            num(r.max_write_pause_ms, 1),
            r.throttled_writes.to_string(),
            r.errors.to_string(),
        ]);
    }
    let c = &report.config;
    let rest = format!(
        "{} build; {} regions of {} MiB, steps {:?}",
        report.head.build,
        c.regions,
        c.region_size >> 20,
        c.steps,
    );
    let mut out = report.head.heading(&rest);
    out.push_str(&t.render());
    let _ = writeln!(
        out,
        "sent: bytes copied, re-sends included; regions MiB/s: region bytes ÷ copy time;\n\
         Mops/s: before the first move; ratios: mean throughput while regions move ÷ before"
    );
    push_notes(&mut out, &report.notes);
    out
}

/// Writes `<dir>/migrate-<timestamp>.json` and `<dir>/migrate-latest.json`.
pub fn write_migrate_json(report: &MigrateReport, dir: impl AsRef<Path>) -> Result<PathBuf> {
    report.head.write_json(report, dir.as_ref())
}
