//! The model file `farcache calibrate` writes and the manager loads: measured
//! latency and throughput at power-of-two transport settings, per record size and
//! read fraction, with the machine and farcache version they were measured on.

use std::path::Path;

use farcache_proto::slo::Transport;
use serde::{Deserialize, Serialize};

use crate::error::SloError;
use crate::grid::Grid;
use crate::machine::Machine;
pub use crate::point::{Perf, Point};

/// `format` of a model file.
pub const FORMAT: &str = "farcache-slo-model";
/// Bumped when the file's meaning changes.
pub const FORMAT_VERSION: u32 = 1;
/// The farcache release writing or reading a model.
pub const FARCACHE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// All points measured for one record size and read fraction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Section {
    pub record_size: u32,
    pub read_fraction: f64,
    pub points: Vec<Point>,
}

/// How calibration went: what it measured, and the model's error on configurations
/// it measured but kept out of the model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CalibrationSummary {
    /// Configurations measured (over all sections), held-out ones included.
    pub measured: u64,
    /// Configurations in the full power-of-two grid (over all sections).
    pub grid: u64,
    /// Every integer configuration the model answers (interpolated ones included).
    pub configurations: u64,
    pub seconds: f64,
    /// Seconds each configuration ran.
    pub seconds_per_point: f64,
    pub held_out: u64,
    /// Median relative error |predicted - measured| / measured on held-out points.
    pub latency_error_median: Option<f64>,
    pub throughput_error_median: Option<f64>,
    pub latency_error_max: Option<f64>,
    pub throughput_error_max: Option<f64>,
}

/// The file as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    pub format: String,
    pub format_version: u32,
    pub farcache_version: String,
    /// Seconds since the Unix epoch when calibration finished.
    pub created_unix: u64,
    pub machine: Machine,
    pub sections: Vec<Section>,
    #[serde(default)]
    pub calibration: CalibrationSummary,
}

impl ModelFile {
    /// An empty model for this machine and version.
    pub fn new(machine: Machine, created_unix: u64) -> Self {
        Self {
            format: FORMAT.into(),
            format_version: FORMAT_VERSION,
            farcache_version: FARCACHE_VERSION.into(),
            created_unix,
            machine,
            sections: Vec::new(),
            calibration: CalibrationSummary::default(),
        }
    }

    pub fn save(&self, path: &Path) -> Result<(), SloError> {
        let io = |source| SloError::Io {
            path: path.display().to_string(),
            source,
        };
        let json = serde_json::to_vec_pretty(self).map_err(|source| SloError::Parse {
            path: path.display().to_string(),
            source,
        })?;
        // Write then rename: a manager never reads half a model.
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, json).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Reads a model file without judging where it came from.
    pub fn read(path: &Path) -> Result<Self, SloError> {
        let p = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| SloError::Io {
            path: p.clone(),
            source,
        })?;
        let v: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|source| SloError::Parse {
                path: p.clone(),
                source,
            })?;
        // Check the format before the shape, so a wrong file gets the clear message.
        let format = v.get("format").and_then(|f| f.as_str()).unwrap_or("");
        if format != FORMAT {
            return Err(SloError::WrongFormat {
                path: p,
                found: format.into(),
            });
        }
        let version = v.get("format_version").and_then(|f| f.as_u64());
        let release = v.get("farcache_version").and_then(|f| f.as_str());
        if version != Some(u64::from(FORMAT_VERSION)) || release != Some(FARCACHE_VERSION) {
            return Err(SloError::WrongVersion {
                path: p,
                found: format!(
                    "farcache {} (model format {})",
                    release.unwrap_or("?"),
                    version.map_or("?".into(), |v| v.to_string())
                ),
                expected: format!("farcache {FARCACHE_VERSION} (model format {FORMAT_VERSION})"),
            });
        }
        serde_json::from_value(v).map_err(|source| SloError::Parse { path: p, source })
    }
}

/// A loaded model: one interpolating grid per section.
#[derive(Debug, Clone)]
pub struct Model {
    pub file: ModelFile,
    pub(crate) grids: Vec<(u32, f64, Grid)>,
}

impl Model {
    /// Loads `path`, refusing a model measured on another machine unless `any_machine`.
    pub fn load(path: &Path, any_machine: bool) -> Result<Self, SloError> {
        let file = ModelFile::read(path)?;
        let here = Machine::detect();
        if !any_machine && !file.machine.same_machine(&here) {
            return Err(SloError::WrongMachine {
                path: path.display().to_string(),
                model: file.machine.to_string(),
                here: here.to_string(),
            });
        }
        Self::from_file(file)
    }

    pub fn from_file(file: ModelFile) -> Result<Self, SloError> {
        if file.sections.is_empty() {
            return Err(SloError::Malformed("no sections".into()));
        }
        let mut grids = Vec::with_capacity(file.sections.len());
        for s in &file.sections {
            if s.record_size == 0 || !(0.0..=1.0).contains(&s.read_fraction) {
                return Err(SloError::Malformed(format!(
                    "section with record size {} and read fraction {}",
                    s.record_size, s.read_fraction
                )));
            }
            if grids
                .iter()
                .any(|(r, f, _)| *r == s.record_size && *f == s.read_fraction)
            {
                return Err(SloError::Malformed(format!(
                    "two sections for {} B records at read fraction {}",
                    s.record_size, s.read_fraction
                )));
            }
            grids.push((s.record_size, s.read_fraction, Grid::build(&s.points)?));
        }
        Ok(Self { file, grids })
    }

    /// A short name for status lines: host and date of calibration.
    pub fn id(&self) -> String {
        format!("{}@{}", self.file.machine.hostname, self.file.created_unix)
    }

    /// Record sizes the model covers.
    pub fn record_sizes(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.grids.iter().map(|g| g.0).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The grids answering `record_size` at `read_fraction`: the smallest measured
    /// record size not below it, and the measured read fractions on either side
    /// (both are consulted and the worse figure wins).
    pub(crate) fn view(&self, record_size: u32, read_fraction: f64) -> Result<View<'_>, SloError> {
        let size = self
            .grids
            .iter()
            .map(|g| g.0)
            .filter(|&r| r >= record_size)
            .min()
            .ok_or_else(|| {
                SloError::NotCovered(format!(
                    "records of {record_size} B; the model measured up to {} B",
                    self.grids.iter().map(|g| g.0).max().unwrap_or(0)
                ))
            })?;
        let at: Vec<&(u32, f64, Grid)> = self.grids.iter().filter(|g| g.0 == size).collect();
        let below = at
            .iter()
            .filter(|g| g.1 <= read_fraction)
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let above = at
            .iter()
            .filter(|g| g.1 >= read_fraction)
            .min_by(|a, b| a.1.total_cmp(&b.1));
        match (below, above) {
            (Some(a), Some(b)) if a.1 == b.1 => Ok(View::one(&a.2)),
            (Some(a), Some(b)) => Ok(View::two(&a.2, &b.2)),
            _ => {
                let mut fr: Vec<f64> = at.iter().map(|g| g.1).collect();
                fr.sort_by(f64::total_cmp);
                Err(SloError::NotCovered(format!(
                    "read fraction {read_fraction}; for {size} B records the model measured \
                     read fractions {fr:?}"
                )))
            }
        }
    }

    /// The model's prediction for `t` on `record_size` records at `read_fraction`.
    pub fn predict(&self, record_size: u32, read_fraction: f64, t: Transport) -> Option<Perf> {
        self.view(record_size, read_fraction).ok()?.predict(t)
    }
}

/// One grid, or two whose worse figure counts (a read fraction between two measured).
#[derive(Debug, Clone, Copy)]
pub(crate) struct View<'a> {
    pub grids: [&'a Grid; 2],
}

impl<'a> View<'a> {
    fn one(g: &'a Grid) -> Self {
        Self { grids: [g, g] }
    }

    fn two(a: &'a Grid, b: &'a Grid) -> Self {
        Self { grids: [a, b] }
    }

    pub fn predict(&self, t: Transport) -> Option<Perf> {
        let a = self.grids[0].predict(t)?;
        if std::ptr::eq(self.grids[0], self.grids[1]) {
            return Some(a);
        }
        let b = self.grids[1].predict(t)?;
        Some(Perf {
            p50_us: a.p50_us.max(b.p50_us),
            p99_us: a.p99_us.max(b.p99_us),
            throughput: a.throughput.min(b.throughput),
        })
    }
}
