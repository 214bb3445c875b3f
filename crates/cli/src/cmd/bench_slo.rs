//! `farcache bench slo`: random SLOs against a calibrated model, each created as a
//! cache and run at its offered load (see `farcache_bench::slo_suite`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use farcache_bench::DEFAULT_RESULTS_DIR;
use farcache_bench::calibrate::{CalibrateOptions, format_calibration_table, run_calibration};
use farcache_bench::slo_suite::{
    SloBenchOptions, format_slo_table, run_slo_bench, write_slo_chart, write_slo_json,
    write_slo_json_to,
};

#[derive(clap::Args)]
pub struct SloArgs {
    /// The model from `farcache calibrate`. Missing, a model is calibrated first
    /// (the quick grid with --quick) and written here.
    #[arg(long, default_value = "farcache-slo-model.json")]
    model: PathBuf,
    /// 20 SLOs of 0.3 s each (and a quick calibration if there is no model).
    #[arg(long)]
    quick: bool,
    /// Number of SLOs (default 100, 20 with --quick).
    #[arg(long)]
    slos: Option<usize>,
    /// Measured seconds per SLO run (default 1, 0.3 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Margin the manager keeps on predictions (its --slo-headroom).
    #[arg(long, default_value_t = farcache_bench::slo_suite::DEFAULT_HEADROOM)]
    headroom: f64,
    #[arg(long, default_value_t = 5)]
    seed: u64,
    /// Write the JSON here (the chart next to it) instead of the results directory.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(a: SloArgs) -> Result<()> {
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    if !a.model.exists() {
        eprintln!(
            "no model at {}: calibrating this machine first ({} grid)",
            a.model.display(),
            if a.quick { "quick" } else { "full" }
        );
        let o = if a.quick {
            CalibrateOptions::quick(&bin)
        } else {
            CalibrateOptions::new(&bin)
        };
        let file = run_calibration(&o)?;
        file.save(&a.model)
            .with_context(|| format!("writing {}", a.model.display()))?;
        out!("{}", format_calibration_table(&file))?;
        outln!("wrote {}", a.model.display())?;
    }
    let mut o = SloBenchOptions::new(bin, &a.model, a.quick);
    if let Some(n) = a.slos {
        o.slos = n;
    }
    if let Some(s) = a.seconds {
        if !(s.is_finite() && s > 0.0) {
            bail!("--seconds must be positive");
        }
        o.run = Duration::from_secs_f64(s);
    }
    o.headroom = a.headroom;
    o.seed = a.seed;
    let report = run_slo_bench(&o)?;
    out!("{}", format_slo_table(&report))?;
    let json = match &a.json {
        Some(p) => {
            write_slo_json_to(&report, p)?;
            p.clone()
        }
        None => write_slo_json(&report, Path::new(DEFAULT_RESULTS_DIR))?,
    };
    outln!("results: {}", json.display())?;
    let png = json.with_extension("png");
    match write_slo_chart(&report, &png) {
        Ok(()) => outln!("chart:   {}", png.display())?,
        Err(e) => eprintln!("chart not written: {e}"),
    }
    Ok(())
}
