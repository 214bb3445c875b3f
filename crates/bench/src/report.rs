//! Benchmark reports: rows, plain-text table, JSON files and a PNG chart.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::baseline::peers::{PeerBaseline, PeerOp, RawTcpFloor};
use crate::baseline::redis::RedisBaseline;
use crate::baseline::redis_eval::RedisEvalBaseline;
use crate::baseline::sockperf::SockperfBaseline;
use crate::error::Result;
use crate::tools::{Tool, ensure_tools, find_font, is_root};

/// Conventional output directory for reports.
pub const DEFAULT_RESULTS_DIR: &str = "bench-results";

/// serde helper: `f64` fields serialize NaN as `null` (serde_json does this
/// by itself); this maps `null` back to NaN when deserializing.
pub(crate) mod nan_as_null {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }
}

/// One line of a benchmark report. Unknown numeric values are NaN
/// (serialized as `null`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchRow {
    pub name: String,
    /// "farcache" | "redis" | "sockperf"
    pub system: String,
    pub op: String,
    pub record_size: usize,
    pub distribution: String,
    pub c: Option<usize>,
    pub s: Option<usize>,
    pub b: Option<usize>,
    pub q: Option<usize>,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub mops: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p50_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p99_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p999_us: f64,
    /// e.g. "redis GET P=64 c=4"
    pub baseline: Option<String>,
    pub baseline_mops: Option<f64>,
    pub ratio_vs_redis: Option<f64>,
    pub baseline_latency_us: Option<f64>,
    pub latency_ratio_vs_raw_tcp: Option<f64>,
    pub bandwidth_gbps: Option<f64>,
    pub bandwidth_ratio_vs_sockperf: Option<f64>,
    /// `bandwidth_gbps` ÷ the spinning multi-message loopback stream's Gbit/s.
    #[serde(default)]
    pub bandwidth_ratio_vs_stream: Option<f64>,
    /// Speedup of a stored procedure over doing the same work at the client with
    /// plain reads (`bench sproc`): throughput ÷ client-side throughput, or
    /// client-side time ÷ procedure time. Above 1 = the procedure wins.
    #[serde(default)]
    pub ratio_vs_client_side: Option<f64>,
    /// Server round trips per logical op (`bench sproc`: EXECUTE messages,
    /// continuations included, counted from the servers' op counters).
    #[serde(default)]
    pub round_trips: Option<f64>,
    /// Server round trips per logical op of the client-side equivalent (reads).
    #[serde(default)]
    pub client_side_round_trips: Option<f64>,
    /// Server-to-server messages and frames per logical op (`bench sproc`: FFlow
    /// hand-offs, DFlow fetches and their answers, from the servers' counters).
    #[serde(default)]
    pub peer_msgs: Option<f64>,
    #[serde(default)]
    pub peer_frames: Option<f64>,
    /// The fastest peer measured for this row's op and size in the same run (Redis
    /// pipelined or MGET/MSET, redis-benchmark, memcached multi-get), e.g.
    /// `memcached multi-get b=1024 q=4 c=2`.
    #[serde(default)]
    pub best_peer: Option<String>,
    #[serde(default)]
    pub best_peer_mops: Option<f64>,
    /// `mops / best_peer_mops`.
    #[serde(default)]
    pub ratio_vs_best_peer: Option<f64>,
    /// `mops` ÷ the same batches run by the server's executor in-process (no sockets).
    #[serde(default)]
    pub fraction_of_ceiling: Option<f64>,
    /// Bytes the run's addresses span (records × record size): whether it fits the
    /// CPU's caches.
    #[serde(default)]
    pub working_set_bytes: Option<u64>,
    /// e.g. ">= 10x"
    pub target: Option<String>,
    pub meets_target: Option<bool>,
}

impl Default for BenchRow {
    fn default() -> Self {
        BenchRow {
            name: String::new(),
            system: String::new(),
            op: String::new(),
            record_size: 0,
            distribution: String::new(),
            c: None,
            s: None,
            b: None,
            q: None,
            mops: f64::NAN,
            p50_us: f64::NAN,
            p99_us: f64::NAN,
            p999_us: f64::NAN,
            baseline: None,
            baseline_mops: None,
            ratio_vs_redis: None,
            baseline_latency_us: None,
            latency_ratio_vs_raw_tcp: None,
            bandwidth_gbps: None,
            bandwidth_ratio_vs_sockperf: None,
            bandwidth_ratio_vs_stream: None,
            ratio_vs_client_side: None,
            round_trips: None,
            client_side_round_trips: None,
            peer_msgs: None,
            peer_frames: None,
            best_peer: None,
            best_peer_mops: None,
            ratio_vs_best_peer: None,
            fraction_of_ceiling: None,
            working_set_bytes: None,
            target: None,
            meets_target: None,
        }
    }
}

impl BenchRow {
    /// Sets `baseline`/`baseline_mops` and `ratio_vs_redis = mops / baseline_mops`.
    pub fn with_redis_baseline(mut self, label: impl Into<String>, baseline_mops: f64) -> Self {
        self.baseline = Some(label.into());
        self.baseline_mops = Some(baseline_mops);
        self.ratio_vs_redis = ratio(self.mops, baseline_mops);
        self
    }

    /// Sets `baseline_latency_us` and `latency_ratio_vs_raw_tcp = p50_us / raw_rtt_us`.
    pub fn with_latency_baseline(mut self, raw_rtt_us: f64) -> Self {
        self.baseline_latency_us = Some(raw_rtt_us);
        self.latency_ratio_vs_raw_tcp = ratio(self.p50_us, raw_rtt_us);
        self
    }

    /// Sets `bandwidth_gbps` and `bandwidth_ratio_vs_sockperf = gbps / sockperf_gbps`.
    pub fn with_bandwidth(mut self, gbps: f64, sockperf_gbps: f64) -> Self {
        self.bandwidth_gbps = Some(gbps);
        self.bandwidth_ratio_vs_sockperf = ratio(gbps, sockperf_gbps);
        self
    }

    /// Sets `ratio_vs_client_side` (see the field) when `speedup` is a finite positive number.
    pub fn with_client_side_ratio(mut self, speedup: f64) -> Self {
        self.ratio_vs_client_side = (speedup.is_finite() && speedup > 0.0).then_some(speedup);
        self
    }

    /// Sets `round_trips` and `client_side_round_trips` (per logical op).
    pub fn with_round_trips(mut self, procedure: f64, client_side: Option<f64>) -> Self {
        self.round_trips = Some(procedure);
        self.client_side_round_trips = client_side;
        self
    }

    /// Sets the server-to-server messages and frames per logical op.
    pub fn with_peer(mut self, msgs: f64, frames: f64) -> Self {
        self.peer_msgs = Some(msgs);
        self.peer_frames = Some(frames);
        self
    }

    /// Sets `best_peer`, `best_peer_mops` and `ratio_vs_best_peer`.
    pub fn with_best_peer(mut self, peer: impl Into<String>, peer_mops: f64) -> Self {
        self.best_peer = Some(peer.into());
        self.best_peer_mops = Some(peer_mops);
        self.ratio_vs_best_peer = ratio(self.mops, peer_mops);
        self
    }

    /// Sets `fraction_of_ceiling = mops / ceiling_mops`.
    pub fn with_ceiling(mut self, ceiling_mops: f64) -> Self {
        self.fraction_of_ceiling = ratio(self.mops, ceiling_mops);
        self
    }

    /// Sets the target description and whether it was met.
    pub fn with_target(mut self, target: impl Into<String>, meets: bool) -> Self {
        self.target = Some(target.into());
        self.meets_target = Some(meets);
        self
    }

    /// `c/s/b/q` as printed in the table, `-` for unset parameters.
    pub fn params(&self) -> String {
        [self.c, self.s, self.b, self.q]
            .iter()
            .map(|v| v.map_or_else(|| "-".to_string(), |v| v.to_string()))
            .collect::<Vec<_>>()
            .join("/")
    }
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (a.is_finite() && b.is_finite() && b > 0.0).then(|| a / b)
}

/// The machine a report was produced on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineInfo {
    pub cores: usize,
    pub hostname: String,
    pub kernel: String,
    pub cpu_model: Option<String>,
}

impl MachineInfo {
    /// Reads core count, hostname, kernel release and CPU model (Linux `/proc`).
    pub fn detect() -> Self {
        let m = farcache_slo::Machine::detect();
        MachineInfo {
            cores: m.cores as usize,
            hostname: m.hostname,
            kernel: m.kernel,
            cpu_model: (!m.cpu_model.is_empty()).then_some(m.cpu_model),
        }
    }
}

/// Reference measurements included in a report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Baselines {
    /// One entry per value size measured.
    pub redis: Vec<RedisBaseline>,
    pub sockperf: Option<SockperfBaseline>,
    /// Lua-script baselines of `bench sproc`, one per script.
    #[serde(default)]
    pub redis_eval: Vec<RedisEvalBaseline>,
    /// Redis (MGET/MSET, pipelined GET/SET) and memcached (multi-get/set) driven by
    /// spinning clients with farcache's batch shape, per (value size, keys).
    #[serde(default)]
    pub peers: Vec<PeerBaseline>,
    /// Spinning loopback TCP: ping-pong RTT and a multi-message stream.
    #[serde(default)]
    pub raw_tcp: Option<RawTcpFloor>,
}

impl Baselines {
    /// The fastest peer run for `op` on `value_size`-byte values over `keys` keys:
    /// the spinning drivers' runs and the redis-benchmark sweep (when it ran on the
    /// same keyspace). Returns (label, Mops).
    pub fn best_peer(&self, op: PeerOp, value_size: usize, keys: u64) -> Option<(String, f64)> {
        let drivers = self
            .peers
            .iter()
            .filter(|p| p.value_size == value_size && p.keys == keys)
            .filter_map(|p| p.best(op))
            .map(|r| (r.peer.clone(), r.mops));
        let sweep = self
            .redis
            .iter()
            .filter(|r| r.value_size == value_size && r.keyspace == keys)
            .map(|r| match op {
                PeerOp::Get => (
                    format!("redis-benchmark {}", r.best_get.label()),
                    r.best_get_mops(),
                ),
                PeerOp::Set => (
                    format!("redis-benchmark {}", r.best_set.label()),
                    r.best_set_mops(),
                ),
            });
        drivers
            .chain(sweep)
            .filter(|(_, m)| m.is_finite() && *m > 0.0)
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Redis's unpipelined GET p50 from a spinning client, µs.
    pub fn redis_spin_get_p50_us(&self, value_size: usize) -> Option<f64> {
        self.peers
            .iter()
            .filter(|p| p.value_size == value_size)
            .find_map(|p| p.redis_unpipelined_spin.as_ref().map(|l| l.p50_us))
    }

    /// Spinning loopback TCP round-trip p50, µs, if it ran.
    pub fn spin_rtt_p50_us(&self) -> Option<f64> {
        self.raw_tcp.as_ref().map(RawTcpFloor::rtt_p50_us)
    }

    /// Redis baseline for `value_size`, if measured.
    pub fn redis_for(&self, value_size: usize) -> Option<&RedisBaseline> {
        self.redis.iter().find(|r| r.value_size == value_size)
    }

    /// Loopback TCP round-trip p50 in µs: the spinning ping-pong if it ran, else
    /// sockperf's (blocking) figure.
    pub fn raw_rtt_p50_us(&self) -> Option<f64> {
        self.spin_rtt_p50_us()
            .or_else(|| self.sockperf.as_ref().map(SockperfBaseline::rtt_p50_us))
    }

    /// Rows describing every baseline (redis, redis EVAL, then sockperf).
    pub fn rows(&self) -> Vec<BenchRow> {
        let mut rows: Vec<BenchRow> = self.redis.iter().flat_map(RedisBaseline::rows).collect();
        rows.extend(self.redis_eval.iter().flat_map(RedisEvalBaseline::rows));
        rows.extend(self.peers.iter().flat_map(PeerBaseline::rows));
        if let Some(s) = &self.sockperf {
            rows.extend(s.rows());
        }
        if let Some(t) = &self.raw_tcp {
            rows.extend(t.rows());
        }
        rows
    }
}

/// A complete benchmark report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub bench: String,
    pub timestamp_unix: u64,
    pub machine: MachineInfo,
    pub baselines: Baselines,
    pub rows: Vec<BenchRow>,
    /// How to read the rows (method choices, data set shape); printed under the table.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Seconds since the Unix epoch (0 if the clock is before it): reports' timestamps.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `"dev"` or `"release"`: how this binary (and so the servers it starts) was built.
pub fn build_kind() -> String {
    if cfg!(debug_assertions) {
        "dev"
    } else {
        "release"
    }
    .into()
}

impl BenchReport {
    /// Empty report stamped with the current time and machine info.
    pub fn new(bench: impl Into<String>) -> Self {
        BenchReport {
            bench: bench.into(),
            timestamp_unix: unix_now(),
            machine: MachineInfo::detect(),
            baselines: Baselines::default(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Whether every row with a target met it (`None` if no row has a target).
    pub fn all_targets_met(&self) -> Option<bool> {
        let mut any = false;
        for r in &self.rows {
            if let Some(m) = r.meets_target {
                any = true;
                if !m {
                    return Some(false);
                }
            }
        }
        any.then_some(true)
    }
}

fn fmt_f(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "-".into()
    }
}

fn fmt_lat(v: f64) -> String {
    match v {
        v if !v.is_finite() => "-".into(),
        v if v < 10.0 => format!("{v:.2}"),
        v if v < 1000.0 => format!("{v:.1}"),
        v => format!("{v:.0}"),
    }
}

/// `64B`, `4K`, `1M`, `1500B`.
pub fn fmt_size(bytes: usize) -> String {
    const K: usize = 1024;
    match bytes {
        0 => "-".into(),
        b if b >= K * K && b % (K * K) == 0 => format!("{}M", b / (K * K)),
        b if b >= K && b % K == 0 => format!("{}K", b / K),
        b => format!("{b}B"),
    }
}

/// Round trips per op: whole numbers without decimals.
fn fmt_rt(v: f64) -> String {
    if (v - v.round()).abs() < 0.005 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn fmt_ratios(r: &BenchRow) -> String {
    let mut parts = Vec::new();
    if let (Some(x), Some(p)) = (r.ratio_vs_best_peer, &r.best_peer) {
        parts.push(format!("{x:.2}x best ({p})"));
    }
    if let Some(x) = r.fraction_of_ceiling {
        parts.push(format!("{:.0}% of ceiling", x * 100.0));
    }
    // The Redis ratio is shown unless the best peer is that same Redis run.
    if let Some(x) = r.ratio_vs_redis.filter(|_| r.best_peer != r.baseline) {
        parts.push(format!("{x:.2}x redis"));
    }
    if let Some(x) = r.latency_ratio_vs_raw_tcp {
        parts.push(format!("{x:.2}x tcp-lat"));
    }
    if let Some(x) = r.bandwidth_ratio_vs_stream {
        parts.push(format!("{x:.2}x tcp-stream"));
    } else if let Some(x) = r.bandwidth_ratio_vs_sockperf {
        parts.push(format!("{x:.2}x tcp-bw"));
    }
    if let Some(x) = r.ratio_vs_client_side {
        parts.push(format!("{x:.2}x client"));
    }
    match (r.round_trips, r.client_side_round_trips) {
        (Some(p), Some(c)) => parts.push(format!("{} vs {} RT", fmt_rt(p), fmt_rt(c))),
        (Some(p), None) => parts.push(format!("{} RT", fmt_rt(p))),
        _ => {}
    }
    if let (Some(m), Some(f)) = (r.peer_msgs, r.peer_frames) {
        parts.push(format!("{} srv msgs in {} frames", fmt_rt(m), fmt_rt(f)));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// The report as an aligned plain-text table (with a header line).
pub fn format_table(report: &BenchReport) -> String {
    const HEADER: [&str; 13] = [
        "name",
        "system",
        "op",
        "size",
        "dist",
        "c/s/b/q",
        "Mops/s",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "ratio",
        "target",
        "ok?",
    ];
    // Numeric columns are right-aligned.
    const RIGHT: [bool; 13] = [
        false, false, false, true, false, false, true, true, true, true, false, false, false,
    ];
    let mut cells: Vec<Vec<String>> = vec![HEADER.iter().map(|s| s.to_string()).collect()];
    for r in &report.rows {
        cells.push(vec![
            r.name.clone(),
            r.system.clone(),
            r.op.clone(),
            fmt_size(r.record_size),
            if r.distribution.is_empty() {
                "-".into()
            } else {
                r.distribution.clone()
            },
            r.params(),
            fmt_f(r.mops, 3),
            fmt_lat(r.p50_us),
            fmt_lat(r.p99_us),
            fmt_lat(r.p999_us),
            fmt_ratios(r),
            r.target.clone().unwrap_or_else(|| "-".into()),
            match r.meets_target {
                Some(true) => "yes".into(),
                Some(false) => "NO".into(),
                None => "-".into(),
            },
        ]);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "== {} @ {} ({} cores, {}, kernel {}) ==",
        report.bench,
        report.timestamp_unix,
        report.machine.cores,
        report.machine.hostname,
        report.machine.kernel
    );
    out.push_str(&align_cells(&cells, &RIGHT));
    for n in &report.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// `cells` (header first) as aligned columns with a rule under the header; a column
/// whose `right` flag is set is right-aligned.
pub(crate) fn align_cells(cells: &[Vec<String>], right: &[bool]) -> String {
    let cols = cells.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; cols];
    for row in cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for (i, row) in cells.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(col, (c, &w))| {
                if right.get(col).copied().unwrap_or(false) {
                    format!("{c:>w$}")
                } else {
                    format!("{c:<w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
        if i == 0 {
            let total: usize = widths.iter().sum::<usize>() + 2 * cols.saturating_sub(1);
            let _ = writeln!(out, "{}", "-".repeat(total));
        }
    }
    out
}

/// Prints [`format_table`] to stdout.
pub fn print_table(report: &BenchReport) {
    print!("{}", format_table(report));
}

fn file_stem(bench: &str) -> String {
    let name: String = bench
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "bench".into()
    } else {
        name
    }
}

/// Writes `<dir>/<bench>-<timestamp>.json` and `<dir>/<bench>-latest.json`
/// (creating `dir`); returns the timestamped path.
pub fn write_json(report: &BenchReport, dir: impl AsRef<Path>) -> Result<PathBuf> {
    write_json_as(report, &report.bench, report.timestamp_unix, dir.as_ref())
}

/// [`write_json`] for any report shape: `<dir>/<bench>-<timestamp>.json` and
/// `<dir>/<bench>-latest.json`.
pub(crate) fn write_json_as<T: Serialize>(
    value: &T,
    bench: &str,
    timestamp_unix: u64,
    dir: &Path,
) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let stem = file_stem(bench);
    let json = serde_json::to_string_pretty(value)?;
    let path = dir.join(format!("{stem}-{timestamp_unix}.json"));
    std::fs::write(&path, &json)?;
    std::fs::write(dir.join(format!("{stem}-latest.json")), &json)?;
    Ok(path)
}

// ---------------------------------------------------------------- chart ---

mod chart {
    use plotters::coord::Shift;
    use plotters::coord::types::RangedCoordf64;
    use plotters::prelude::*;

    use super::{BenchReport, BenchRow};
    use crate::error::BenchError;

    const FARCACHE: RGBColor = RGBColor(31, 119, 180);
    const REDIS: RGBColor = RGBColor(214, 39, 40);
    const RAW_TCP: RGBColor = RGBColor(120, 120, 120);
    const OTHER: RGBColor = RGBColor(44, 160, 44);

    fn color(system: &str) -> RGBColor {
        match system {
            "farcache" => FARCACHE,
            "redis" => REDIS,
            "sockperf" => RAW_TCP,
            _ => OTHER,
        }
    }

    fn err(e: impl std::fmt::Display) -> BenchError {
        BenchError::Chart(e.to_string())
    }

    /// One horizontal bar: (row index, value, color, optional text).
    struct Bar {
        slot: usize,
        offset: f64,
        height: f64,
        value: f64,
        color: RGBColor,
        text: String,
    }

    struct Panel<'a> {
        title: &'a str,
        unit: &'a str,
        names: Vec<String>,
        bars: Vec<Bar>,
        /// Vertical reference line (value, label).
        reference: Option<(f64, String)>,
        legend: Vec<(&'static str, RGBColor)>,
    }

    fn throughput_panel(report: &BenchReport) -> Panel<'static> {
        let rows: Vec<&BenchRow> = report
            .rows
            .iter()
            .filter(|r| r.mops.is_finite() && r.mops > 0.0)
            .collect();
        let mut bars = Vec::new();
        let mut legend = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            let c = color(&r.system);
            let ratio = [
                r.ratio_vs_best_peer
                    .map(|x| format!("{x:.2}x best peer"))
                    .or_else(|| r.ratio_vs_redis.map(|x| format!("{x:.2}x redis"))),
                r.ratio_vs_client_side.map(|x| format!("{x:.2}x client")),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(", ");
            let ratio = if ratio.is_empty() {
                ratio
            } else {
                format!("  ({ratio})")
            };
            // The best peer when one was measured, else the Redis sweep.
            let base = match (r.best_peer_mops, &r.best_peer) {
                (Some(m), Some(p)) => Some((m, p.as_str())),
                _ => r
                    .baseline_mops
                    .map(|m| (m, r.baseline.as_deref().unwrap_or("redis"))),
            };
            match base.filter(|(b, _)| b.is_finite() && *b > 0.0) {
                Some((base, label)) => {
                    bars.push(Bar {
                        slot: i,
                        offset: 0.17,
                        height: 0.32,
                        value: r.mops,
                        color: c,
                        text: format!("{:.3}{ratio}", r.mops),
                    });
                    bars.push(Bar {
                        slot: i,
                        offset: -0.17,
                        height: 0.32,
                        value: base,
                        color: REDIS,
                        text: format!("{base:.3} {label}"),
                    });
                    push_legend(&mut legend, "best peer", REDIS);
                }
                None => bars.push(Bar {
                    slot: i,
                    offset: 0.0,
                    height: 0.6,
                    value: r.mops,
                    color: c,
                    text: format!("{:.3}{ratio}", r.mops),
                }),
            }
            push_legend(&mut legend, system_label(&r.system), c);
        }
        Panel {
            title: "Throughput (Mops/s)",
            unit: "Mops/s",
            names: rows.iter().map(|r| r.name.clone()).collect(),
            bars,
            reference: None,
            legend,
        }
    }

    fn latency_panel(report: &BenchReport) -> Panel<'static> {
        let rows: Vec<&BenchRow> = report
            .rows
            .iter()
            .filter(|r| r.p50_us.is_finite() && r.p50_us > 0.0)
            .collect();
        let mut bars = Vec::new();
        let mut legend = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            let c = color(&r.system);
            let ratio = r
                .latency_ratio_vs_raw_tcp
                .map(|x| format!("  ({x:.2}x raw TCP)"))
                .unwrap_or_default();
            match r.baseline_latency_us.filter(|b| b.is_finite() && *b > 0.0) {
                Some(base) => {
                    bars.push(Bar {
                        slot: i,
                        offset: 0.17,
                        height: 0.32,
                        value: r.p50_us,
                        color: c,
                        text: format!("{:.1}{ratio}", r.p50_us),
                    });
                    bars.push(Bar {
                        slot: i,
                        offset: -0.17,
                        height: 0.32,
                        value: base,
                        color: RAW_TCP,
                        text: format!("{base:.1} raw TCP RTT (spin)"),
                    });
                    push_legend(&mut legend, "raw TCP RTT", RAW_TCP);
                }
                None => bars.push(Bar {
                    slot: i,
                    offset: 0.0,
                    height: 0.6,
                    value: r.p50_us,
                    color: c,
                    text: format!("{:.1}{ratio}", r.p50_us),
                }),
            }
            push_legend(&mut legend, system_label(&r.system), c);
        }
        let reference = report
            .baselines
            .raw_rtt_p50_us()
            .filter(|v| v.is_finite() && *v > 0.0)
            .map(|v| (v, format!("raw TCP RTT p50 {v:.1} µs")));
        Panel {
            title: "p50 latency (µs) vs raw TCP round trip",
            unit: "µs",
            names: rows.iter().map(|r| r.name.clone()).collect(),
            bars,
            reference,
            legend,
        }
    }

    fn system_label(system: &str) -> &'static str {
        match system {
            "farcache" => "farcache",
            "redis" => "redis",
            "sockperf" => "raw TCP (sockperf)",
            _ => "other",
        }
    }

    fn push_legend(legend: &mut Vec<(&'static str, RGBColor)>, name: &'static str, c: RGBColor) {
        if !legend.iter().any(|(n, _)| *n == name) {
            legend.push((name, c));
        }
    }

    pub(super) fn render(
        report: &BenchReport,
        path: &std::path::Path,
        text: bool,
    ) -> Result<(), BenchError> {
        let tp = throughput_panel(report);
        let lat = latency_panel(report);
        let panel_h = |p: &Panel| 110 + 34 * p.names.len().max(2) as u32;
        let (h1, h2) = (panel_h(&tp), panel_h(&lat));
        let width = 1500u32;
        let root = BitMapBackend::new(path, (width, h1 + h2 + 40)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (title, rest) = root.split_vertically(40);
        if text {
            let caption = format!(
                "{} — {} cores, {} (unix time {})",
                report.bench, report.machine.cores, report.machine.hostname, report.timestamp_unix
            );
            title
                .draw(&Text::new(
                    caption,
                    (10, 10),
                    ("sans-serif", 20).into_font().color(&BLACK),
                ))
                .map_err(err)?;
        }
        let (top, bottom) = rest.split_vertically(h1);
        draw_panel(&top, &tp, text)?;
        draw_panel(&bottom, &lat, text)?;
        root.present().map_err(err)?;
        Ok(())
    }

    type Chart<'a, 'b> =
        ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

    fn draw_panel(
        area: &DrawingArea<BitMapBackend<'_>, Shift>,
        panel: &Panel<'_>,
        text: bool,
    ) -> Result<(), BenchError> {
        let n = panel.names.len().max(1);
        let max_bar = panel.bars.iter().map(|b| b.value).fold(0.0f64, f64::max);
        let max_ref = panel.reference.as_ref().map_or(0.0, |r| r.0);
        let x_max = (max_bar.max(max_ref) * if text { 1.45 } else { 1.1 }).max(1e-6);
        let y_range = -0.6f64..(n as f64 - 0.4);
        let mut builder = ChartBuilder::on(area);
        builder.margin(12);
        if text {
            builder
                .caption(panel.title, ("sans-serif", 18))
                .x_label_area_size(40)
                .y_label_area_size(280);
        }
        let mut chart = builder
            .build_cartesian_2d(0f64..x_max, y_range)
            .map_err(err)?;
        if text {
            draw_mesh(&mut chart, panel, n)?;
        } else {
            draw_gridlines(&mut chart, x_max, n)?;
        }
        chart
            .draw_series(panel.bars.iter().map(|b| {
                let y = y_of(n, b);
                Rectangle::new(
                    [(0.0, y - b.height / 2.0), (b.value, y + b.height / 2.0)],
                    b.color.filled(),
                )
            }))
            .map_err(err)?;
        if let Some(reference) = &panel.reference {
            draw_reference(&mut chart, reference, n, text)?;
        }
        if text {
            draw_bar_texts(&mut chart, panel, n)?;
            draw_legend(&mut chart, panel)?;
        }
        Ok(())
    }

    /// Where a bar sits on the y axis: row 0 at the top.
    fn y_of(n: usize, b: &Bar) -> f64 {
        (n - 1 - b.slot) as f64 + b.offset
    }

    /// Axes with the row names on y and the unit on x.
    fn draw_mesh(chart: &mut Chart<'_, '_>, panel: &Panel<'_>, n: usize) -> Result<(), BenchError> {
        let names = panel.names.clone();
        let fmt = move |y: &f64| -> String {
            let r = y.round();
            if (y - r).abs() > 1e-6 || r < 0.0 || r as usize >= n {
                return String::new();
            }
            names.get(n - 1 - r as usize).cloned().unwrap_or_default()
        };
        chart
            .configure_mesh()
            .y_labels(n)
            .y_label_formatter(&fmt)
            .disable_y_mesh()
            .x_desc(panel.unit)
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(err)
    }

    /// Plain gridlines without any text.
    fn draw_gridlines(chart: &mut Chart<'_, '_>, x_max: f64, n: usize) -> Result<(), BenchError> {
        let grid = RGBColor(225, 225, 225);
        for k in 1..=5 {
            let x = x_max * f64::from(k) / 5.0;
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x, -0.6), (x, n as f64 - 0.4)],
                    grid,
                )))
                .map_err(err)?;
        }
        Ok(())
    }

    /// The dashed vertical reference line, labelled when `text`.
    fn draw_reference(
        chart: &mut Chart<'_, '_>,
        (v, label): &(f64, String),
        n: usize,
        text: bool,
    ) -> Result<(), BenchError> {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(*v, -0.6), (*v, n as f64 - 0.4)],
                6,
                4,
                RAW_TCP.stroke_width(2),
            ))
            .map_err(err)?;
        if text {
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at((*v, n as f64 - 0.4))
                        + Text::new(
                            label.clone(),
                            (6, 2),
                            ("sans-serif", 13).into_font().color(&RAW_TCP),
                        ),
                ))
                .map_err(err)?;
        }
        Ok(())
    }

    /// Each bar's value text at its end.
    fn draw_bar_texts(
        chart: &mut Chart<'_, '_>,
        panel: &Panel<'_>,
        n: usize,
    ) -> Result<(), BenchError> {
        let style = ("sans-serif", 13).into_font().color(&BLACK);
        chart
            .draw_series(panel.bars.iter().map(|b| {
                EmptyElement::at((b.value, y_of(n, b)))
                    + Text::new(b.text.clone(), (5, -7), style.clone())
            }))
            .map_err(err)?;
        Ok(())
    }

    // The legend box needs the backend to outlive the chart.
    fn draw_legend<'a, 'b: 'a>(
        chart: &mut Chart<'a, 'b>,
        panel: &Panel<'_>,
    ) -> Result<(), BenchError> {
        for (name, c) in &panel.legend {
            let c = *c;
            chart
                .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
                .map_err(err)?
                .label(*name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
        }
        if !panel.legend.is_empty() {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 14))
                .draw()
                .map_err(err)?;
        }
        Ok(())
    }
}

static FONT_REGISTERED: OnceLock<bool> = OnceLock::new();

/// Registers the TTF at `path` as plotters' "sans-serif" font (once per
/// process; later calls return the first outcome).
pub fn register_chart_font(path: &Path) -> bool {
    *FONT_REGISTERED.get_or_init(|| match std::fs::read(path) {
        Ok(bytes) => {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            match plotters::style::register_font(
                "sans-serif",
                plotters::style::FontStyle::Normal,
                bytes,
            ) {
                Ok(()) => true,
                Err(_) => {
                    eprintln!(
                        "[farcache-bench] {} is not a usable font; chart without text",
                        path.display()
                    );
                    false
                }
            }
        }
        Err(e) => {
            eprintln!(
                "[farcache-bench] cannot read font {}: {e}; chart without text",
                path.display()
            );
            false
        }
    })
}

/// Renders the report chart to `<dir>/<bench>-<timestamp>.png` (and copies it
/// to `<bench>-latest.png`): throughput bars (farcache vs Redis baseline) and
/// p50 latency bars vs the raw TCP RTT.
///
/// Text needs DejaVu Sans (installed with apt when missing and running as
/// root); without a font the bars are drawn without labels.
pub fn write_chart(report: &BenchReport, dir: impl AsRef<Path>) -> Result<PathBuf> {
    write_chart_with_font(report, dir, locate_chart_font().as_deref())
}

/// The chart font, installed first when missing and running as root.
pub(crate) fn locate_chart_font() -> Option<PathBuf> {
    let font = find_font();
    if font.is_some() || !is_root() {
        return font;
    }
    if let Err(e) = ensure_tools(&[Tool::DejaVuFont]) {
        eprintln!("[farcache-bench] could not install a font ({e}); chart without text");
    }
    find_font()
}

/// Like [`write_chart`] with an explicit font file (`None`: no text at all).
pub fn write_chart_with_font(
    report: &BenchReport,
    dir: impl AsRef<Path>,
    font: Option<&Path>,
) -> Result<PathBuf> {
    let dir = dir.as_ref();
    std::fs::create_dir_all(dir)?;
    let text = font.is_some_and(register_chart_font);
    let stem = file_stem(&report.bench);
    let path = dir.join(format!("{stem}-{}.png", report.timestamp_unix));
    chart::render(report, &path, text)?;
    std::fs::copy(&path, dir.join(format!("{stem}-latest.png")))?;
    Ok(path)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample_report() -> BenchReport {
        let mut report = BenchReport::new("unit test");
        report.rows.push(
            BenchRow {
                name: "farcache GET 64B zipf".into(),
                system: "farcache".into(),
                op: "GET".into(),
                record_size: 64,
                distribution: "zipf0.99".into(),
                c: Some(2),
                s: Some(1),
                b: Some(16),
                q: Some(64),
                mops: 9.5,
                p50_us: 30.0,
                p99_us: 80.0,
                p999_us: 120.0,
                ..BenchRow::default()
            }
            .with_redis_baseline("redis GET P=64 c=4", 0.95)
            .with_latency_baseline(20.0)
            .with_target(">= 10x", false),
        );
        report.rows.push(BenchRow {
            name: "redis best GET 64B".into(),
            system: "redis".into(),
            op: "GET".into(),
            record_size: 64,
            distribution: "uniform".into(),
            c: Some(4),
            q: Some(64),
            mops: 0.95,
            p50_us: 250.0,
            p99_us: 400.0,
            ..BenchRow::default()
        });
        report
    }

    #[test]
    fn row_helpers() {
        let r = &sample_report().rows[0];
        assert!((r.ratio_vs_redis.expect("ratio") - 10.0).abs() < 1e-9);
        assert!((r.latency_ratio_vs_raw_tcp.expect("lat") - 1.5).abs() < 1e-9);
        assert_eq!(r.params(), "2/1/16/64");
        assert_eq!(sample_report().all_targets_met(), Some(false));
        let r = BenchRow::default().with_bandwidth(10.0, 20.0);
        assert_eq!(r.bandwidth_ratio_vs_sockperf, Some(0.5));
        assert_eq!(
            BenchRow::default()
                .with_redis_baseline("x", 0.0)
                .ratio_vs_redis,
            None
        );
    }

    #[test]
    fn json_roundtrip() {
        let report = sample_report();
        let v = serde_json::to_value(&report).expect("serialize");
        assert_eq!(v["bench"], "unit test");
        assert!(v["machine"]["cores"].as_u64().expect("cores") >= 1);
        let row = &v["rows"][0];
        assert_eq!(row["system"], "farcache");
        assert_eq!(row["record_size"], 64);
        assert_eq!(row["q"], 64);
        assert_eq!(row["baseline"], "redis GET P=64 c=4");
        assert_eq!(row["target"], ">= 10x");
        assert_eq!(row["meets_target"], false);
        assert!((row["ratio_vs_redis"].as_f64().expect("ratio") - 10.0).abs() < 1e-9);
        // NaN p99.9 of the redis row serializes as null and comes back as NaN.
        assert!(v["rows"][1]["p999_us"].is_null());
        assert!(v["rows"][1]["s"].is_null());
        let back: BenchReport = serde_json::from_value(v).expect("deserialize");
        assert_eq!(back.rows[0], report.rows[0]);
        assert!(back.rows[1].p999_us.is_nan());
        assert_eq!(back.machine, report.machine);
    }

    #[test]
    fn table_is_aligned() {
        let t = format_table(&sample_report());
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("== unit test @"));
        assert!(lines[1].starts_with("name"));
        assert!(lines[1].contains("p99.9 µs") && lines[1].contains("ok?"));
        assert!(lines[3].contains("10.00x redis") && lines[3].contains("NO"));
        assert!(lines[3].contains("1.50x tcp-lat"));
        // "Mops/s" column is right-aligned at the same character position.
        let pos = |l: &str, s: &str| l.find(s).map(|b| l[..b].chars().count());
        let hdr_end = pos(lines[1], "Mops/s").expect("hdr") + "Mops/s".len();
        assert_eq!(pos(lines[3], "9.500").expect("v") + 5, hdr_end);
        assert_eq!(pos(lines[4], "0.950").expect("v") + 5, hdr_end);
    }

    #[test]
    fn writes_json_and_chart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let report = sample_report();
        let p = write_json(&report, dir.path()).expect("json");
        assert!(p.ends_with(format!("unit_test-{}.json", report.timestamp_unix)));
        let latest = dir.path().join("unit_test-latest.json");
        let back: BenchReport =
            serde_json::from_str(&std::fs::read_to_string(latest).expect("read")).expect("parse");
        assert_eq!(back.bench, "unit test");
        let png = write_chart(&report, dir.path()).expect("chart");
        let bytes = std::fs::read(&png).expect("png");
        assert_eq!(&bytes[1..4], b"PNG");
        assert!(dir.path().join("unit_test-latest.png").exists());
    }

    #[test]
    fn client_side_ratio_and_round_trips_in_table() {
        let mut report = BenchReport::new("t");
        report.rows.push(
            BenchRow {
                name: "chase".into(),
                ..BenchRow::default()
            }
            .with_client_side_ratio(12.5)
            .with_round_trips(3.0, Some(64.0)),
        );
        report.rows.push(
            BenchRow {
                name: "khop".into(),
                ..BenchRow::default()
            }
            .with_client_side_ratio(f64::NAN)
            .with_round_trips(14.25, None),
        );
        report.notes.push("hello".into());
        let t = format_table(&report);
        assert!(t.contains("12.50x client, 3 vs 64 RT"), "{t}");
        assert!(t.contains("14.25 RT") && !t.contains("NaN"), "{t}");
        assert!(t.ends_with("note: hello\n"), "{t}");
        // Reports written before these fields existed still load.
        let mut v = serde_json::to_value(&report).expect("json");
        for r in v["rows"].as_array_mut().expect("rows") {
            let o = r.as_object_mut().expect("row");
            o.remove("ratio_vs_client_side");
            o.remove("round_trips");
            o.remove("client_side_round_trips");
        }
        v.as_object_mut().expect("report").remove("notes");
        let back: BenchReport = serde_json::from_value(v).expect("old format");
        assert!(back.rows[0].ratio_vs_client_side.is_none() && back.notes.is_empty());
    }

    #[test]
    fn sizes() {
        assert_eq!(fmt_size(64), "64B");
        assert_eq!(fmt_size(4096), "4K");
        assert_eq!(fmt_size(1 << 20), "1M");
        assert_eq!(fmt_size(1500), "1500B");
    }
}

#[cfg(test)]
mod chart_preview {
    #[test]
    #[ignore = "writes preview PNGs to /tmp/farcache-chart-preview"]
    fn preview() {
        let mut r = super::tests::sample_report();
        r.baselines = super::Baselines::default();
        super::write_chart(&r, "/tmp/farcache-chart-preview").expect("chart");
        super::write_chart_with_font(&r, "/tmp/farcache-chart-preview/nofont", None).expect("c");
    }
}
