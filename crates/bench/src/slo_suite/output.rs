//! The `bench slo` report: one row per SLO, the summary the issue asks for, the
//! table and the JSON file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use farcache_proto::slo::{Slo, Transport};
use farcache_slo::CalibrationSummary;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::report::{MachineInfo, pct, write_json_to};

/// Targets from the issue.
pub const TARGET_MET: usize = 95;
pub const TARGET_SEARCH_MS_MEAN: f64 = 1.0;
pub const TARGET_COST_EQUAL: usize = 95;
pub const TARGET_MODEL_ERROR: f64 = 0.10;

/// One SLO: what was asked, chosen, predicted and measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloRun {
    pub slo: Slo,
    pub transport: Transport,
    pub predicted_latency_us: f64,
    pub predicted_throughput: f64,
    /// Measured at the SLO's percentile.
    pub measured_latency_us: f64,
    pub measured_p50_us: f64,
    pub measured_p99_us: f64,
    pub measured_throughput: f64,
    pub errors: u64,
    pub met_latency: bool,
    pub met_throughput: bool,
    pub met: bool,
    /// The manager's search time for this SLO (create path).
    pub search_us: f64,
    /// The same search run in this process (no manager, no network).
    pub search_us_local: f64,
    /// Settings interpolated by the search and by the exhaustive oracle.
    pub visited: u64,
    pub oracle_visited: u64,
    /// $/hour of the cores: search's choice and the oracle's.
    pub core_cost: f64,
    pub oracle_core_cost: f64,
    pub cost_equal_oracle: bool,
    /// The manager chose what the search in this process chose.
    pub manager_agrees: bool,
    /// $/hour the manager reports (memory and cores).
    pub dollars_per_hour: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloReport {
    pub bench: String,
    pub created_unix: u64,
    pub machine: MachineInfo,
    pub build: String,
    pub model_path: String,
    pub model_id: String,
    pub model_calibration: CalibrationSummary,
    pub headroom: f64,
    pub seconds_per_run: f64,
    /// Measured throughput counts as meeting the SLO down to this share below it
    /// (the pacing's own jitter).
    pub throughput_tolerance: f64,
    pub slos: usize,
    pub met: usize,
    pub met_latency: usize,
    pub met_throughput: usize,
    /// Draws the model could not meet, drawn again (Redy's method draws the two
    /// figures independently).
    pub redrawn: u64,
    pub search_ms_min: f64,
    pub search_ms_median: f64,
    pub search_ms_mean: f64,
    pub search_ms_max: f64,
    pub search_ms_mean_local: f64,
    pub cost_equal_oracle: usize,
    /// Distinct costs among the oracle's choices: with one (a model measured at
    /// `s = c = 1` only, say) every search trivially matches the oracle, so the
    /// cost check was not exercised and is not counted as met.
    #[serde(default)]
    pub oracle_cost_levels: usize,
    pub manager_agrees: usize,
    /// Median relative error on the model's held-out configurations (calibration).
    pub model_error_latency_median: Option<f64>,
    pub model_error_throughput_median: Option<f64>,
    /// Median |predicted − measured| / measured over the SLO runs. Predictions are
    /// closed-loop at full speed; runs are paced at the SLO's load, so latency is
    /// expected to come out lower than predicted.
    pub run_error_latency_median: Option<f64>,
    pub run_error_throughput_median: Option<f64>,
    pub runs: Vec<SloRun>,
}

pub(crate) fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

impl SloReport {
    /// Fills the summary fields from `runs`.
    pub fn summarize(&mut self) {
        let r = &self.runs;
        self.slos = r.len();
        self.met = r.iter().filter(|x| x.met).count();
        self.met_latency = r.iter().filter(|x| x.met_latency).count();
        self.met_throughput = r.iter().filter(|x| x.met_throughput).count();
        self.cost_equal_oracle = r.iter().filter(|x| x.cost_equal_oracle).count();
        let mut costs: Vec<u64> = r
            .iter()
            .map(|x| (x.oracle_core_cost * 1e9).round() as u64)
            .collect();
        costs.sort_unstable();
        costs.dedup();
        self.oracle_cost_levels = costs.len();
        self.manager_agrees = r.iter().filter(|x| x.manager_agrees).count();
        let ms: Vec<f64> = r.iter().map(|x| x.search_us / 1e3).collect();
        let n = ms.len().max(1) as f64;
        self.search_ms_min = ms.iter().copied().fold(f64::INFINITY, f64::min);
        self.search_ms_max = ms.iter().copied().fold(0.0, f64::max);
        self.search_ms_mean = ms.iter().sum::<f64>() / n;
        self.search_ms_median = median(ms).unwrap_or(0.0);
        self.search_ms_mean_local = r.iter().map(|x| x.search_us_local / 1e3).sum::<f64>() / n;
        if !self.search_ms_min.is_finite() {
            self.search_ms_min = 0.0;
        }
        let rel = |p: f64, m: f64| (p - m).abs() / m;
        self.run_error_latency_median = median(
            r.iter()
                .map(|x| rel(x.predicted_latency_us, x.measured_latency_us))
                .collect(),
        );
        self.run_error_throughput_median = median(
            r.iter()
                .map(|x| rel(x.slo.throughput, x.measured_throughput))
                .collect(),
        );
        self.model_error_latency_median = self.model_calibration.latency_error_median;
        self.model_error_throughput_median = self.model_calibration.throughput_error_median;
    }

    /// `(target, value, met)` lines for the table.
    pub fn targets(&self) -> Vec<(String, String, bool)> {
        let pct1 = |v: Option<f64>| v.map_or("-".into(), |v| pct(v, 1));
        let within = |v: Option<f64>| v.is_some_and(|v| v <= TARGET_MODEL_ERROR);
        vec![
            (
                format!("SLOs met by the real runs >= {TARGET_MET} of 100"),
                format!("{} of {}", self.met, self.slos),
                self.met * 100 >= TARGET_MET * self.slos.max(1),
            ),
            (
                format!("mean search time <= {TARGET_SEARCH_MS_MEAN} ms"),
                format!("{:.3} ms", self.search_ms_mean),
                self.search_ms_mean <= TARGET_SEARCH_MS_MEAN,
            ),
            (
                format!("cost equal to the oracle's >= {TARGET_COST_EQUAL} of 100"),
                if self.oracle_cost_levels > 1 {
                    format!(
                        "{} of {} ({} distinct costs)",
                        self.cost_equal_oracle, self.slos, self.oracle_cost_levels
                    )
                } else {
                    format!(
                        "{} of {}, NOT EXERCISED: every cheapest setting costs the same \
                         (calibrate with more servers and threads)",
                        self.cost_equal_oracle, self.slos
                    )
                },
                self.oracle_cost_levels > 1
                    && self.cost_equal_oracle * 100 >= TARGET_COST_EQUAL * self.slos.max(1),
            ),
            (
                "held-out model error, latency, median <= 10 %".into(),
                pct1(self.model_error_latency_median),
                within(self.model_error_latency_median),
            ),
            (
                "held-out model error, throughput, median <= 10 %".into(),
                pct1(self.model_error_throughput_median),
                within(self.model_error_throughput_median),
            ),
        ]
    }
}

pub fn format_slo_table(r: &SloReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "bench slo: {} random SLOs on model {} ({}), headroom {:.0} %, {:.2} s per run",
        r.slos,
        r.model_id,
        r.model_path,
        r.headroom * 100.0,
        r.seconds_per_run
    );
    let _ = writeln!(
        s,
        "{:>4} {:>6} {:>5} {:>4} {:>10} {:>9} {:>20} {:>9} {:>9} {:>10} {:>10} {:>4}",
        "#",
        "record",
        "reads",
        "pct",
        "SLO Mops",
        "SLO us",
        "chosen",
        "pred us",
        "meas us",
        "pred Mops",
        "meas Mops",
        "met"
    );
    for (i, x) in r.runs.iter().enumerate() {
        let _ = writeln!(
            s,
            "{:>4} {:>6} {:>5.2} {:>4} {:>10.3} {:>9.1} {:>20} {:>9.1} {:>9.1} {:>10.3} {:>10.3} {:>4}",
            i + 1,
            x.slo.record_size,
            x.slo.read_fraction,
            x.slo.percentile.to_string(),
            x.slo.throughput / 1e6,
            x.slo.latency_us,
            x.transport.to_string(),
            x.predicted_latency_us,
            x.measured_latency_us,
            x.predicted_throughput / 1e6,
            x.measured_throughput / 1e6,
            if x.met {
                "yes"
            } else if x.met_latency {
                "TPUT"
            } else {
                "LAT"
            }
        );
    }
    let _ = writeln!(
        s,
        "met {} of {} (latency {}, throughput {}; throughput tolerance {:.0} %), {} draws \
         redrawn as infeasible",
        r.met,
        r.slos,
        r.met_latency,
        r.met_throughput,
        r.throughput_tolerance * 100.0,
        r.redrawn
    );
    let _ = writeln!(
        s,
        "search (manager): min {:.3} / median {:.3} / mean {:.3} / max {:.3} ms; in-process mean \
         {:.3} ms; cost equal to the exhaustive oracle {} of {}; manager chose the same as the \
         in-process search {} of {}",
        r.search_ms_min,
        r.search_ms_median,
        r.search_ms_mean,
        r.search_ms_max,
        r.search_ms_mean_local,
        r.cost_equal_oracle,
        r.slos,
        r.manager_agrees,
        r.slos
    );
    let pct1 = |v: Option<f64>| v.map_or("-".into(), |v| pct(v, 1));
    let _ = writeln!(
        s,
        "prediction vs run (median): latency {} (runs are paced below saturation), throughput \
         vs SLO {}",
        pct1(r.run_error_latency_median),
        pct1(r.run_error_throughput_median)
    );
    for (t, v, ok) in r.targets() {
        let _ = writeln!(s, "target {t}: {v} {}", if ok { "met" } else { "NOT MET" });
    }
    s
}

/// Writes `bench-slo-<unix>.json` in `dir`; returns its path.
pub fn write_slo_json(r: &SloReport, dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let p = dir.join(format!("bench-slo-{}.json", r.created_unix));
    write_slo_json_to(r, &p)?;
    Ok(p)
}

/// Writes the report to `p` exactly (creating its directory).
pub fn write_slo_json_to(r: &SloReport, p: &Path) -> Result<()> {
    write_json_to(r, p)
}
