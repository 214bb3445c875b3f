//! `farcache bench slo` (Redy §5.7.3, Figures 5.13–5.14): draws random SLOs from a
//! calibrated model, creates a cache for each through the manager, runs it at the
//! SLO's offered load with the chosen transport, and reports how many real runs met
//! their SLO, predicted against measured figures, search times, and whether each
//! choice costs what an exhaustive scan of the model finds.

pub mod chart;
pub mod draw;
pub mod load;
pub mod output;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use farcache_client::Client;
use farcache_proto::control::PriceClass;
use farcache_slo::{
    CLIENT_CORE_HOUR, CorePrices, Model, ON_DEMAND_CORE_HOUR, SPOT_CORE_HOUR, SearchLimits, oracle,
    search,
};
use farcache_testkit::{ClusterOptions, ProcessCluster};

use crate::error::{BenchError, Result};
use crate::io_suite::progress;
use crate::report::{MachineInfo, build_kind, unix_now};
use load::{Offered, run_offered};
use output::{SloReport, SloRun};

pub use chart::write_slo_chart;
pub use output::{format_slo_table, write_slo_json, write_slo_json_to};

/// The headroom the manager applies by default (`--slo-headroom`).
pub use farcache_slo::DEFAULT_HEADROOM;

#[derive(Debug, Clone)]
pub struct SloBenchOptions {
    /// The `farcache` binary for the cluster.
    pub bin: PathBuf,
    /// The model `farcache calibrate` wrote (measured on this machine).
    pub model: PathBuf,
    pub slos: usize,
    /// Measured time per SLO run (after `warmup`).
    pub run: Duration,
    pub warmup: Duration,
    pub seed: u64,
    pub headroom: f64,
    /// Measured throughput down to this share below the SLO still meets it: the
    /// paced schedule's own jitter.
    pub throughput_tolerance: f64,
    /// Bytes of each SLO's cache.
    pub capacity: u64,
}

impl SloBenchOptions {
    pub fn new(bin: impl Into<PathBuf>, model: impl Into<PathBuf>, quick: bool) -> Self {
        Self {
            bin: bin.into(),
            model: model.into(),
            slos: if quick { 20 } else { 100 },
            run: Duration::from_millis(if quick { 300 } else { 1000 }),
            warmup: Duration::from_millis(100),
            seed: 5,
            headroom: DEFAULT_HEADROOM,
            throughput_tolerance: 0.01,
            capacity: 16 << 20,
        }
    }
}

fn cluster_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Cluster(e.to_string())
}

/// The server threads the model measured at most: the cluster runs that many.
fn model_threads(model: &Model) -> u32 {
    model
        .file
        .sections
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.transport.s))
        .max()
        .unwrap_or(1)
}

/// The core prices the manager will use for this cluster (its servers' class).
fn prices(client: &Client) -> Result<CorePrices> {
    let st = client.status().map_err(cluster_err)?;
    let spot = st
        .servers
        .iter()
        .min_by(|a, b| a.price_per_gib_hour.total_cmp(&b.price_per_gib_hour))
        .is_some_and(|s| s.price_class == PriceClass::Spot);
    Ok(CorePrices {
        server_core_hour: if spot {
            SPOT_CORE_HOUR
        } else {
            ON_DEMAND_CORE_HOUR
        },
        client_core_hour: CLIENT_CORE_HOUR,
    })
}

pub fn run_slo_bench(o: &SloBenchOptions) -> Result<SloReport> {
    if o.slos == 0 {
        return Err(BenchError::InvalidArgument("at least one SLO".into()));
    }
    let model = Model::load(&o.model, false)?;
    let threads = model_threads(&model);
    let cluster = ProcessCluster::start(
        &o.bin,
        &ClusterOptions::default()
            .servers(1)
            .server_threads(threads as usize)
            .server_memory(o.capacity * 2)
            .region_size(o.capacity)
            .manager_args([
                "--slo-model".to_string(),
                o.model.to_string_lossy().into_owned(),
                "--slo-headroom".to_string(),
                o.headroom.to_string(),
            ]),
    )
    .map_err(cluster_err)?;
    let client = cluster.client().map_err(cluster_err)?;
    let prices = prices(&client)?;
    let limits = SearchLimits {
        max_s: threads,
        max_c: u32::MAX,
        headroom: o.headroom,
    };
    let drawn = draw::draw_slos(&model, o.slos, o.seed, &limits, &prices)?;

    let mut report = SloReport {
        bench: "slo".into(),
        created_unix: unix_now(),
        machine: MachineInfo::detect(),
        build: build_kind(),
        model_path: o.model.display().to_string(),
        model_id: model.id(),
        model_calibration: model.file.calibration.clone(),
        headroom: o.headroom,
        seconds_per_run: o.run.as_secs_f64(),
        throughput_tolerance: o.throughput_tolerance,
        slos: 0,
        met: 0,
        met_latency: 0,
        met_throughput: 0,
        redrawn: drawn.redrawn,
        search_ms_min: 0.0,
        search_ms_median: 0.0,
        search_ms_mean: 0.0,
        search_ms_max: 0.0,
        search_ms_mean_local: 0.0,
        cost_equal_oracle: 0,
        oracle_cost_levels: 0,
        manager_agrees: 0,
        model_error_latency_median: None,
        model_error_throughput_median: None,
        run_error_latency_median: None,
        run_error_throughput_median: None,
        runs: Vec::with_capacity(drawn.slos.len()),
    };
    let pb = progress(drawn.slos.len() as u64);
    pb.set_prefix("SLOs");
    for (i, slo) in drawn.slos.iter().enumerate() {
        pb.set_message(slo.to_string());
        let t0 = Instant::now();
        let local = search(&model, slo, &limits, &prices)?;
        let search_us_local = t0.elapsed().as_secs_f64() * 1e6;
        let best = oracle(&model, slo, &limits, &prices)?;

        let name = format!("slo-{i}");
        let cache = client
            .create_with_slo(&name, o.capacity, slo)
            .map_err(|e| BenchError::Cluster(format!("creating a cache for SLO {slo}: {e}")))?;
        let choice = cache
            .slo()
            .ok_or_else(|| BenchError::Cluster("the cache came back without its SLO".into()))?;
        let t = choice.transport;
        let offered = Offered {
            rate: slo.throughput,
            record_size: slo.record_size as usize,
            read_fraction: slo.read_fraction,
            threads: t.c as usize,
            batch: t.b as usize,
            depth: t.q as usize,
            records: (o.capacity / u64::from(slo.record_size)).max(1),
            duration: o.run,
            warmup: o.warmup,
        };
        let m = run_offered(&cache, &offered)?;
        drop(cache);
        client.delete(&name).map_err(cluster_err)?;

        let measured_latency_us = match slo.percentile {
            farcache_proto::slo::Percentile::P50 => m.p50_us,
            farcache_proto::slo::Percentile::P99 => m.p99_us,
        };
        let met_latency = measured_latency_us <= slo.latency_us;
        let met_throughput =
            m.throughput >= slo.throughput * (1.0 - o.throughput_tolerance) && m.errors == 0;
        report.runs.push(SloRun {
            slo: slo.clone(),
            transport: t,
            predicted_latency_us: choice.predicted_latency_us,
            predicted_throughput: choice.predicted_throughput,
            measured_latency_us,
            measured_p50_us: m.p50_us,
            measured_p99_us: m.p99_us,
            measured_throughput: m.throughput,
            errors: m.errors,
            met_latency,
            met_throughput,
            met: met_latency && met_throughput,
            search_us: choice.search_us,
            search_us_local,
            visited: local.visited,
            oracle_visited: best.visited,
            core_cost: local.core_cost,
            oracle_core_cost: best.core_cost,
            cost_equal_oracle: local.core_cost == best.core_cost,
            manager_agrees: local.transport == t,
            dollars_per_hour: choice.dollars_per_hour,
        });
        pb.inc(1);
    }
    pb.finish_and_clear();
    drop(cluster);
    report.summarize();
    Ok(report)
}
