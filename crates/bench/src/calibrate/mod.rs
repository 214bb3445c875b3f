//! `farcache calibrate`: measures the SLO performance model (Redy's offline
//! modeling) on this machine. For each record size and read fraction, power-of-two
//! settings of `s, c, b, q` are measured on a local one-server cluster with early
//! termination ([`grid`]); then a seeded sample of settings the model interpolates is
//! measured too, to report the model's error ([`held_out`]).

mod runner;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use farcache_proto::slo::Transport;
use farcache_slo::{
    CalibrationSummary, Machine, Model, ModelFile, Perf, SearchLimits, Section, settings,
};

use crate::error::{BenchError, Result};
use crate::io_suite::progress;
use farcache_slo::calibration::held_out;
use farcache_slo::calibration::plan::{Plan, Walk, powers};
use runner::Runner;

pub use farcache_slo::calibration::format_calibration_table;

/// Payload per batch at most: larger records get smaller `b` (as `bench io` sizes
/// batches by bytes).
pub const MAX_BATCH_BYTES: u64 = 1 << 20;
/// The calibration cache (one region on one server).
pub const CACHE_BYTES: u64 = 64 << 20;

/// What `farcache calibrate` measures.
#[derive(Debug, Clone)]
pub struct CalibrateOptions {
    /// The `farcache` binary that runs the manager and the server.
    pub bin: PathBuf,
    pub record_sizes: Vec<u32>,
    pub read_fractions: Vec<f64>,
    /// Most server worker threads (`s`); `None`: from the cores (see [`Self::knob_limits`]).
    pub max_server_threads: Option<u32>,
    /// Most client threads (`c`); `None`: from the cores.
    pub max_client_threads: Option<u32>,
    /// Most ops per batch (`b`), also capped at [`MAX_BATCH_BYTES`] of records.
    pub max_batch: u32,
    /// Most batches in flight per thread (`q`).
    pub max_depth: u32,
    /// Measured time per configuration (after the 100 ms warm-up).
    pub seconds_per_point: f64,
    /// Smallest throughput gain that keeps a knob rising (0.05: 5 %).
    pub min_gain: f64,
    /// Held-out configurations per section.
    pub held_out: usize,
    pub seed: u64,
    /// Calibrate this running cluster (a cache of its own on one of its servers, `s`
    /// fixed by that server's threads) instead of starting a local one.
    pub remote: Option<farcache_client::ClientConfig>,
}

impl CalibrateOptions {
    pub fn new(bin: impl Into<PathBuf>) -> Self {
        Self {
            bin: bin.into(),
            record_sizes: vec![8, 64, 512, 4096],
            read_fractions: vec![1.0, 0.0],
            max_server_threads: None,
            max_client_threads: None,
            max_batch: 1024,
            max_depth: 16,
            seconds_per_point: 0.25,
            min_gain: 0.05,
            held_out: 12,
            seed: 1,
            remote: None,
        }
    }

    /// A small grid: 8 and 512 B records, b ≤ 64, q ≤ 8, 0.1 s per point.
    pub fn quick(bin: impl Into<PathBuf>) -> Self {
        Self {
            record_sizes: vec![8, 512],
            max_batch: 64,
            max_depth: 8,
            seconds_per_point: 0.1,
            ..Self::new(bin)
        }
    }

    /// `(max s, max c)`, powers of two: client and server share this machine's cores,
    /// so by default `c` gets half of them and `s` the rest (2 cores: 1 and 1). `s`
    /// never exceeds `c` (more server threads than client lanes idle).
    pub fn knob_limits(&self) -> (u32, u32) {
        let cores = cores();
        let floor_pow2 = |x: u32| powers(x.max(1)).last().copied().unwrap_or(1);
        if self.remote.is_some() {
            // The server runs elsewhere: the client has the cores, and `s` is what the
            // server runs (set once connected); `c` is at least `s`.
            let s = floor_pow2(self.max_server_threads.unwrap_or(1));
            let c = floor_pow2(self.max_client_threads.unwrap_or(cores)).max(s);
            return (s, c);
        }
        let c = floor_pow2(self.max_client_threads.unwrap_or(cores / 2));
        let s = floor_pow2(
            self.max_server_threads
                .unwrap_or_else(|| cores.saturating_sub(c)),
        );
        (s.min(c), c)
    }

    /// A warning when the threads measured outnumber the cores (the figures then
    /// measure contention, not the transport).
    pub fn oversubscribed(&self) -> Option<String> {
        let (s, c) = self.knob_limits();
        let cores = cores();
        (self.remote.is_none() && s + c > cores).then(|| {
            format!(
                "{s} server + {c} client threads on {cores} core(s): the server and the \
                 client share cores, so the largest settings measure contention"
            )
        })
    }

    /// The knob ranges of `record_size`-byte sections.
    pub fn plan(&self, record_size: u32) -> Plan {
        let (max_s, max_c) = self.knob_limits();
        let by_bytes = (MAX_BATCH_BYTES / u64::from(record_size.max(1))).max(1);
        let max_b = u64::from(self.max_batch).min(by_bytes) as u32;
        Plan {
            min_s: if self.remote.is_some() { max_s } else { 1 },
            max_s,
            max_c,
            max_b,
            max_q: self.max_depth,
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(BenchError::InvalidArgument(m));
        if self.record_sizes.is_empty() || self.read_fractions.is_empty() {
            return bad("no record sizes or read fractions given".into());
        }
        if let Some(r) = self
            .record_sizes
            .iter()
            .find(|&&r| r == 0 || u64::from(r) > MAX_BATCH_BYTES)
        {
            return bad(format!("record size {r} outside 1 B..={MAX_BATCH_BYTES} B"));
        }
        if let Some(f) = self
            .read_fractions
            .iter()
            .find(|f| !(0.0..=1.0).contains(*f))
        {
            return bad(format!("read fraction {f} outside [0, 1]"));
        }
        let mut seen = HashSet::new();
        for &r in &self.record_sizes {
            for &f in &self.read_fractions {
                if !seen.insert((r, f.to_bits())) {
                    return bad(format!(
                        "record size {r} with read fraction {f} given twice"
                    ));
                }
            }
        }
        if self.max_batch == 0 || self.max_batch > u32::from(u16::MAX) {
            return bad(format!("max batch {} outside 1..=65535", self.max_batch));
        }
        if self.max_depth == 0
            || self.max_server_threads == Some(0)
            || self.max_client_threads == Some(0)
        {
            return bad("max depth and thread counts must be at least 1".into());
        }
        if !(self.seconds_per_point.is_finite() && self.seconds_per_point > 0.0) {
            return bad(format!(
                "seconds per point must be positive, not {}",
                self.seconds_per_point
            ));
        }
        if !(self.min_gain.is_finite() && self.min_gain >= 0.0) {
            return bad(format!("min gain must be ≥ 0, not {}", self.min_gain));
        }
        Ok(())
    }

    /// `(record size, read fraction)` of every section, in measuring order.
    fn sections(&self) -> Vec<(u32, f64)> {
        let mut v = Vec::new();
        for &r in &self.record_sizes {
            for &f in &self.read_fractions {
                v.push((r, f));
            }
        }
        v
    }
}

fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// Measures the model. The file is returned, not written.
pub fn run_calibration(opts: &CalibrateOptions) -> Result<ModelFile> {
    opts.validate()?;
    let started = Instant::now();
    let remote = match &opts.remote {
        Some(cfg) => Some(runner::Remote::connect(cfg.clone(), CACHE_BYTES)?),
        None => None,
    };
    // A running cluster's server has the threads it has: only that `s` (rounded
    // down to a power of two, so the model never promises more) is measured.
    let fixed = CalibrateOptions {
        max_server_threads: remote.as_ref().map(|r| r.threads),
        ..opts.clone()
    };
    let opts = if remote.is_some() { &fixed } else { opts };
    let sections = opts.sections();
    let mut walks: Vec<Walk> = sections
        .iter()
        .map(|&(r, _)| Walk::new(opts.plan(r), opts.min_gain))
        .collect();
    let grid: u64 = walks.iter().map(|w| w.plan.grid_size()).sum();
    let held_total = (opts.held_out * sections.len()) as u64;
    let pb = progress(grid + held_total);
    let duration = Duration::from_secs_f64(opts.seconds_per_point);
    let mut runner = Runner::new(&opts.bin, CACHE_BYTES, duration);
    if let Some(r) = remote {
        runner = runner.on(r);
    }
    let (max_s, _) = opts.knob_limits();

    // `s` outermost: one server start per `s` for all sections.
    for s in powers(max_s) {
        for (walk, &(size, fraction)) in walks.iter_mut().zip(&sections) {
            if !walk.wants(s) {
                continue;
            }
            pb.set_prefix(section_name(size, fraction));
            let mut measure = |t: Transport| {
                pb.set_message(format!("{t}"));
                let p = runner.measure(size, fraction, t);
                pb.inc(1);
                p
            };
            let skipped = walk.measure_s(s, &mut measure)?;
            pb.set_length(pb.length().unwrap_or(0).saturating_sub(skipped));
        }
    }

    let mut file = ModelFile::new(Machine::detect(), 0);
    for (walk, &(record_size, read_fraction)) in walks.iter().zip(&sections) {
        let mut points = walk.points.clone();
        points.sort_by_key(|p| p.transport);
        file.sections.push(Section {
            record_size,
            read_fraction,
            points,
        });
    }
    let model = Model::from_file(file.clone())?;

    // Held-out: chosen from the finished model, measured grouped by `s` (the running
    // cluster's first), kept out of the file.
    let mut held = Vec::new();
    for (i, (walk, &(size, fraction))) in walks.iter().zip(&sections).enumerate() {
        let measured: HashSet<Transport> = walk.points.iter().map(|p| p.transport).collect();
        let seed = opts.seed.wrapping_add(i as u64);
        for (t, predicted) in
            held_out::choose(&model, size, fraction, &measured, opts.held_out, seed)?
        {
            held.push((size, fraction, t, predicted));
        }
    }
    let first = runner.current_s();
    held.sort_by_key(|h| (Some(h.2.s) != first, std::cmp::Reverse(h.2.s)));
    pb.set_length(pb.position() + held.len() as u64);
    let mut pairs: Vec<(Perf, Perf)> = Vec::with_capacity(held.len());
    for &(size, fraction, t, predicted) in &held {
        pb.set_prefix(section_name(size, fraction));
        pb.set_message(format!("held out {t}"));
        pairs.push((predicted, runner.measure(size, fraction, t)?));
        pb.inc(1);
    }
    drop(runner);
    pb.finish_and_clear();

    let mut configurations = 0u64;
    for &(size, fraction) in &sections {
        configurations += settings(&model, size, fraction, &SearchLimits::default())?.len() as u64;
    }
    let errors = held_out::errors(&pairs);
    let points: usize = walks.iter().map(|w| w.points.len()).sum();
    file.calibration = CalibrationSummary {
        measured: (points + pairs.len()) as u64,
        grid,
        configurations,
        seconds: started.elapsed().as_secs_f64(),
        seconds_per_point: opts.seconds_per_point,
        held_out: pairs.len() as u64,
        latency_error_median: errors.map(|e| e.latency_median),
        throughput_error_median: errors.map(|e| e.throughput_median),
        latency_error_max: errors.map(|e| e.latency_max),
        throughput_error_max: errors.map(|e| e.throughput_max),
    };
    file.created_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok(file)
}

/// `8 B r=1`, `4096 B r=0.5`.
fn section_name(size: u32, fraction: f64) -> String {
    format!("{size} B r={fraction}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_hold_at_most_a_mebibyte() {
        let o = CalibrateOptions::new("farcache");
        assert_eq!(o.plan(8).max_b, 1024);
        assert_eq!(o.plan(4096).max_b, 256);
        assert_eq!(o.plan(1 << 20).max_b, 1);
        assert_eq!(CalibrateOptions::quick("farcache").plan(512).max_b, 64);
    }

    #[test]
    fn thread_limits_are_powers_with_s_at_most_c() {
        let mut o = CalibrateOptions::new("farcache");
        o.max_client_threads = Some(6);
        o.max_server_threads = Some(8);
        assert_eq!(o.knob_limits(), (4, 4));
        o.max_server_threads = Some(1);
        assert_eq!(o.knob_limits(), (1, 4));
        o.max_client_threads = None;
        o.max_server_threads = None;
        let (s, c) = o.knob_limits();
        assert!(s.is_power_of_two() && c.is_power_of_two() && s <= c);
        assert!(s + c <= cores().max(2));
    }

    #[test]
    fn rejects_what_cannot_be_measured() {
        let ok = CalibrateOptions::quick("farcache");
        assert!(ok.validate().is_ok());
        let bad = [
            CalibrateOptions {
                record_sizes: vec![0],
                ..ok.clone()
            },
            CalibrateOptions {
                read_fractions: vec![1.5],
                ..ok.clone()
            },
            CalibrateOptions {
                read_fractions: vec![1.0, 1.0],
                ..ok.clone()
            },
            CalibrateOptions {
                seconds_per_point: f64::NAN,
                ..ok.clone()
            },
            CalibrateOptions {
                max_depth: 0,
                ..ok.clone()
            },
            CalibrateOptions {
                max_batch: 1 << 20,
                ..ok.clone()
            },
        ];
        for o in bad {
            assert!(o.validate().is_err(), "{o:?}");
        }
    }
}
