//! `farcache simulate`: the traversal projected on clusters far larger than one
//! machine holds, with the costs `farcache bench model` fitted in the lab.

use std::path::PathBuf;

use anyhow::{Context, Result};
use farcache_bench::DEFAULT_RESULTS_DIR;
use farcache_bench::model_suite::{
    ModelReport, SimulateOptions, format_simulate_table, simulate, write_simulate_chart,
};

#[derive(clap::Args)]
pub struct Args {
    /// The fitted model (`farcache bench model` writes it).
    #[arg(long, default_value = "bench-results/model-traversal-latest.json")]
    model: PathBuf,
    /// Kronecker scale of the projected graph.
    #[arg(long, default_value_t = 20)]
    scale: u32,
    /// Cluster sizes to project.
    #[arg(long, value_delimiter = ',', default_value = "16,64,256,1024")]
    servers: Vec<usize>,
    /// Hops per query.
    #[arg(long, value_delimiter = ',', default_value = "2,3")]
    k: Vec<u8>,
    /// Sources averaged per point.
    #[arg(long, default_value_t = 8)]
    sources: usize,
    /// Client–server round trip of the projected network, in µs.
    #[arg(long, default_value_t = 50.0)]
    rtt_us: f64,
    /// The client's link, in Gbit/s.
    #[arg(long, default_value_t = 10.0)]
    link_gbit: f64,
    /// Directory for the JSON and the chart.
    #[arg(long, default_value = DEFAULT_RESULTS_DIR)]
    out: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    let text = std::fs::read_to_string(&a.model).with_context(|| {
        format!(
            "cannot read the model {} (run `farcache bench model` first, as root)",
            a.model.display()
        )
    })?;
    let model: ModelReport = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a model `farcache bench model` wrote",
            a.model.display()
        )
    })?;
    let opts = SimulateOptions {
        scale: a.scale,
        servers: a.servers,
        k: a.k,
        sources: a.sources,
        rtt_us: a.rtt_us,
        link_gbit: a.link_gbit,
    };
    let pb = indicatif::ProgressBar::new_spinner();
    let report = simulate(&model, &opts, |m| pb.set_message(m.to_string()))?;
    pb.finish_and_clear();
    out!("{}", format_simulate_table(&report))?;
    let json = report.write_json(&a.out)?;
    outln!("results: {}", json.display())?;
    match write_simulate_chart(&report, &a.out) {
        Ok(png) => outln!("chart:   {}", png.display())?,
        Err(e) => eprintln!("chart not written: {e}"),
    }
    Ok(())
}
