//! Benchmark reports: rows, plain-text table, JSON files and a PNG chart, and the
//! pieces every suite's report shares (number formatting, aligned tables, JSON
//! writers, chart set-up).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::baseline::peers::{PeerBaseline, PeerOp, RawTcpFloor};
use crate::baseline::redis::RedisBaseline;
use crate::baseline::redis_eval::RedisEvalBaseline;
use crate::baseline::sockperf::SockperfBaseline;
use crate::error::Result;

/// Conventional output directory for reports.
pub const DEFAULT_RESULTS_DIR: &str = "bench-results";

pub(crate) mod canvas;
mod chart;
mod format;
mod output;
mod table;
#[cfg(test)]
pub(crate) mod tests;

pub use crate::row::BenchRow;
pub(crate) use crate::row::nan_as_null;
pub use canvas::register_chart_font;
pub use chart::{write_chart, write_chart_with_font};
pub(crate) use format::{fmt_bytes, fmt_lat, mib, num, pct, verdict};
pub use format::{fmt_size, format_table, print_table};
pub use output::write_json;
pub(crate) use output::{write_json_as, write_json_to};
use table::heading as table_heading;
pub(crate) use table::{Align, Table, push_notes};

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

/// What every suite's report opens with (flattened into its JSON, so the fields
/// stay at the top level): the bench, when and where it ran, the build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportHead {
    pub bench: String,
    pub timestamp_unix: u64,
    pub machine: MachineInfo,
    /// `"dev"` or `"release"`: the binary's build (servers run the same binary).
    pub build: String,
}

impl ReportHead {
    /// `bench`, stamped now, on this machine, with this binary's build.
    pub fn new(bench: &str) -> Self {
        Self {
            bench: bench.into(),
            timestamp_unix: unix_now(),
            machine: MachineInfo::detect(),
            build: build_kind(),
        }
    }

    /// The table's first line: `== <bench> @ <timestamp> (<cores> cores, <host>,
    /// <rest>) ==`.
    pub(crate) fn heading(&self, rest: &str) -> String {
        table_heading(&self.bench, self.timestamp_unix, &self.machine, rest)
    }

    /// Writes `report` to `<dir>/<bench>-<timestamp>.json` and
    /// `<dir>/<bench>-latest.json`; returns the first.
    pub(crate) fn write_json<T: Serialize>(&self, report: &T, dir: &Path) -> Result<PathBuf> {
        write_json_as(report, &self.bench, self.timestamp_unix, dir)
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

/// Whether every row with a target met it (`None` if no row has one).
pub(crate) fn all_met<'a>(rows: impl IntoIterator<Item = &'a BenchRow>) -> Option<bool> {
    rows.into_iter()
        .filter_map(|r| r.meets_target)
        .reduce(|a, b| a && b)
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
        all_met(self.rows.iter())
    }
}
