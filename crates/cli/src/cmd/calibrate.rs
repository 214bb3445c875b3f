//! `farcache calibrate`: measures the SLO performance model on this machine and
//! writes it for `farcache manager --slo-model`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use farcache_bench::calibrate::{CalibrateOptions, format_calibration_table, run_calibration};

use crate::size::parse_size;

#[derive(clap::Args)]
pub struct Args {
    /// Where the model file goes.
    #[arg(long, default_value = "farcache-slo-model.json")]
    out: PathBuf,
    /// A small grid: 8 and 512 B records, b <= 64, q <= 8, 0.1 s per point (flags
    /// given explicitly still win).
    #[arg(long)]
    quick: bool,
    /// Record sizes, one model section per size and read fraction (default
    /// 8,64,512,4KiB).
    #[arg(long, value_delimiter = ',', value_parser = parse_record_size)]
    record_sizes: Vec<u32>,
    /// Shares of reads, the rest writes (default 1,0).
    #[arg(long, value_delimiter = ',', value_parser = parse_fraction)]
    read_fractions: Vec<f64>,
    /// Most server worker threads measured (default: from the cores; the client and
    /// the server share them).
    #[arg(long, value_parser = parse_count)]
    max_server_threads: Option<u32>,
    /// Most client threads measured (default: half the cores).
    #[arg(long, value_parser = parse_count)]
    max_client_threads: Option<u32>,
    /// Most ops per batch (default 1024, 64 with --quick); also at most 1 MiB of
    /// records per batch.
    #[arg(long, value_parser = parse_count)]
    max_batch: Option<u32>,
    /// Most batches in flight per client thread (default 16, 8 with --quick).
    #[arg(long, value_parser = parse_count)]
    max_depth: Option<u32>,
    /// Measured seconds per configuration, after a 100 ms warm-up (default 0.25, 0.1
    /// with --quick).
    #[arg(long)]
    seconds_per_point: Option<f64>,
    /// Stop raising a knob once it raises throughput by less than this share.
    #[arg(long, default_value_t = 0.05)]
    min_gain: f64,
    /// Configurations per section measured to check the interpolation, not added to
    /// the model.
    #[arg(long, default_value_t = 12)]
    held_out: usize,
    /// Seed of the held-out sample.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Calibrate this running cluster (its manager's address) instead of starting a
    /// local one: a 64 MiB cache of its own on one server, `s` fixed by that server's
    /// threads, deleted afterwards. The model records this (client) machine; a
    /// manager elsewhere needs --slo-model-any-machine.
    #[arg(long)]
    manager: Option<String>,
    #[command(flatten)]
    creds: super::Credentials,
}

pub fn run(a: Args) -> Result<()> {
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut o = if a.quick {
        CalibrateOptions::quick(bin)
    } else {
        CalibrateOptions::new(bin)
    };
    if !a.record_sizes.is_empty() {
        o.record_sizes = a.record_sizes;
    }
    if !a.read_fractions.is_empty() {
        o.read_fractions = a.read_fractions;
    }
    o.max_server_threads = a.max_server_threads;
    o.max_client_threads = a.max_client_threads;
    o.max_batch = a.max_batch.unwrap_or(o.max_batch);
    o.max_depth = a.max_depth.unwrap_or(o.max_depth);
    if let Some(s) = a.seconds_per_point {
        if !(s.is_finite() && s > 0.0) {
            bail!("--seconds-per-point must be positive");
        }
        o.seconds_per_point = s;
    }
    o.min_gain = a.min_gain;
    if let Some(m) = &a.manager {
        o.remote = Some(a.creds.config(m)?);
    }
    o.held_out = a.held_out;
    o.seed = a.seed;
    if let Some(w) = o.oversubscribed() {
        eprintln!("warning: {w}");
    }
    // Fail on an unwritable destination before minutes of measuring, not after.
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        bail!("directory {} does not exist", dir.display());
    }

    let file = run_calibration(&o)?;
    file.save(&a.out)
        .with_context(|| format!("writing {}", a.out.display()))?;

    let c = &file.calibration;
    out!("{}", format_calibration_table(&file))?;
    outln!()?;
    let knob = |f: fn(&farcache_proto::slo::Transport) -> u32| {
        let all = file.sections.iter().flat_map(|x| x.points.iter());
        let v: Vec<u32> = all.map(|p| f(&p.transport)).collect();
        (
            v.iter().copied().min().unwrap_or(0),
            v.iter().copied().max().unwrap_or(0),
        )
    };
    let ((s0, s), (c0, cl)) = (knob(|t| t.s), knob(|t| t.c));
    outln!(
        "measured {} configurations ({} held out) of a {}-point power-of-two grid \
         ({s0} <= s <= {s}, {c0} <= c <= {cl}); the model covers {} configurations",
        c.measured,
        c.held_out,
        c.grid,
        c.configurations
    )?;
    outln!(
        "took {:.1} s ({} s per point + 0.1 s warm-up)",
        c.seconds,
        c.seconds_per_point
    )?;
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0));
    outln!(
        "held-out error: p50 latency median {} max {}, throughput median {} max {}",
        pct(c.latency_error_median),
        pct(c.latency_error_max),
        pct(c.throughput_error_median),
        pct(c.throughput_error_max)
    )?;
    outln!("wrote {}", a.out.display())?;
    outln!(
        "use it: farcache manager --slo-model {} ... (only on this machine and release)",
        a.out.display()
    )?;
    Ok(())
}

fn parse_count(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) | Err(_) => Err(format!("`{s}` is not a positive number")),
        Ok(v) => Ok(v),
    }
}

fn parse_record_size(s: &str) -> Result<u32, String> {
    let v = parse_size(s)?;
    match u32::try_from(v) {
        Ok(0) => Err("a record size must be at least 1 byte".into()),
        Ok(v) => Ok(v),
        Err(_) => Err(format!("record size `{s}` is too large")),
    }
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("`{s}` is not a read fraction in [0, 1]")),
    }
}
