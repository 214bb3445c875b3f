//! `farcache bench model`: calibrates the traversal's cost model
//! ([`farcache_graph::model`]) on a small lab cluster and validates it on larger
//! ones, as MimicNet does: the costs are fitted on 2 server hosts only, then the
//! same costs predict the traversal's latency on 4 and 8 hosts, which are measured
//! too. The fitted model is written as JSON for `farcache simulate`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use farcache_graph::model::{Costs, Model, Network, QueryShape, Sample};
use farcache_graph::{Csr, GraphCache, LoadOptions, kronecker_edges};
use farcache_testkit::{ClusterOptions, Lab, ProcessCluster};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::error::{BenchError, Result};
use crate::io_suite::progress;
use crate::report::{unix_now, write_json_as};

/// Link rate of every lab host (Mbit/s).
const LINK_MBIT: u32 = 10_000;

#[derive(Debug, Clone)]
pub struct ModelBenchOptions {
    pub bin: PathBuf,
    /// Kronecker scale of the graph traversed.
    pub scale: u32,
    /// Server hosts the costs are fitted on.
    pub calibrate_on: usize,
    /// Server hosts the fitted model predicts, each measured to check it.
    pub validate_on: Vec<usize>,
    /// One-way delay between lab hosts (µs).
    pub delay_us: u32,
    /// Sources per k, and runs per source (their median is the sample).
    pub sources: usize,
    pub repeats: usize,
}

impl ModelBenchOptions {
    pub fn new(bin: impl Into<PathBuf>, quick: bool) -> Self {
        Self {
            bin: bin.into(),
            scale: if quick { 14 } else { 16 },
            calibrate_on: 2,
            validate_on: vec![4, 8],
            delay_us: 25,
            sources: if quick { 8 } else { 16 },
            repeats: if quick { 3 } else { 7 },
        }
    }

    fn validate(&self) -> Result<()> {
        if !(8..=22).contains(&self.scale) {
            return Err(BenchError::InvalidArgument(
                "the model's graph scale must be between 8 and 22".into(),
            ));
        }
        let hosts = std::iter::once(self.calibrate_on).chain(self.validate_on.iter().copied());
        if hosts.clone().any(|n| !(1..=16).contains(&n)) {
            return Err(BenchError::InvalidArgument(
                "server hosts must be between 1 and 16".into(),
            ));
        }
        if self.sources == 0 || self.repeats == 0 {
            return Err(BenchError::InvalidArgument(
                "sources and repeats must be >= 1".into(),
            ));
        }
        Ok(())
    }
}

/// What one cluster size measured and the model predicted, for one k.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelPoint {
    pub hosts: usize,
    pub k: u8,
    /// Mean over the sources of each source's median latency.
    pub measured_us: f64,
    pub predicted_us: f64,
    /// |predicted - measured| / measured.
    pub error: f64,
    /// Whether the costs were fitted on these runs.
    pub calibration: bool,
    pub rtt_us: f64,
}

/// The fitted model and how well it predicted: `farcache simulate`'s input.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelReport {
    pub bench: String,
    pub timestamp_unix: u64,
    pub scale: u32,
    pub delay_us: u32,
    pub link_gbit: f64,
    /// Cores the lab's servers shared (the model's scan width in the lab).
    pub lab_cores: usize,
    pub per_level_us: f64,
    pub per_call_us: f64,
    pub per_edge_us: f64,
    pub per_neighbour_us: f64,
    #[serde(default)]
    pub per_byte_us: f64,
    pub points: Vec<ModelPoint>,
    /// Median error over the validation points (hosts other than the calibration's).
    pub median_validation_error: f64,
    /// Median error over every validation query (source, k, hosts).
    pub median_query_error: f64,
}

impl ModelReport {
    pub fn model(&self) -> Model {
        Model {
            costs: Costs {
                per_level_us: self.per_level_us,
                per_call_us: self.per_call_us,
                per_edge_us: self.per_edge_us,
                per_neighbour_us: self.per_neighbour_us,
                per_byte_us: self.per_byte_us,
            },
        }
    }

    pub fn write_json(&self, dir: impl AsRef<std::path::Path>) -> Result<PathBuf> {
        write_json_as(self, &self.bench, self.timestamp_unix, dir.as_ref())
    }
}

/// The runs of one cluster size: a sample per (k, source).
struct Measured {
    hosts: usize,
    rtt_us: f64,
    samples: Vec<(u8, Sample)>,
}

/// Calibrates on `opts.calibrate_on` hosts, validates on the others.
pub fn run_model_bench(opts: &ModelBenchOptions) -> Result<ModelReport> {
    opts.validate()?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let edges = kronecker_edges(opts.scale, 16, 1).map_err(other)?;
    let g = Arc::new(Csr::from_edges(1 << opts.scale, &edges, true).map_err(other)?);
    let sources = pick_sources(&g, opts.sources);
    let sizes: Vec<usize> = std::iter::once(opts.calibrate_on)
        .chain(opts.validate_on.iter().copied())
        .collect();
    let pb = progress(sizes.len() as u64);
    pb.set_prefix("model");
    let mut measured = Vec::new();
    for &hosts in &sizes {
        pb.set_message(format!("{hosts} server hosts in the lab"));
        measured.push(measure(opts, &g, &sources, hosts, cores)?);
        pb.inc(1);
    }
    pb.finish_and_clear();
    let calib: Vec<Sample> = measured[0].samples.iter().map(|(_, s)| s.clone()).collect();
    let model = Model::fit(&calib).ok_or_else(|| other("no fit: too few calibration runs"))?;
    let mut points = Vec::new();
    let mut query_errors = Vec::new();
    for (i, m) in measured.iter().enumerate() {
        for k in [2u8, 3] {
            let of_k: Vec<&Sample> = m
                .samples
                .iter()
                .filter(|(kk, _)| *kk == k)
                .map(|(_, s)| s)
                .collect();
            if of_k.is_empty() {
                continue;
            }
            let n = of_k.len() as f64;
            let measured_us = of_k.iter().map(|s| s.latency_us).sum::<f64>() / n;
            let predicted_us = of_k
                .iter()
                .map(|s| model.latency_us(&s.shape, &s.net))
                .sum::<f64>()
                / n;
            if i > 0 {
                query_errors.extend(of_k.iter().map(|s| {
                    (model.latency_us(&s.shape, &s.net) - s.latency_us).abs() / s.latency_us
                }));
            }
            points.push(ModelPoint {
                hosts: m.hosts,
                k,
                measured_us,
                predicted_us,
                error: (predicted_us - measured_us).abs() / measured_us,
                calibration: i == 0,
                rtt_us: m.rtt_us,
            });
        }
    }
    let validation: Vec<f64> = points
        .iter()
        .filter(|p| !p.calibration)
        .map(|p| p.error)
        .collect();
    let c = model.costs;
    Ok(ModelReport {
        bench: "model-traversal".into(),
        timestamp_unix: unix_now(),
        scale: opts.scale,
        delay_us: opts.delay_us,
        link_gbit: f64::from(LINK_MBIT) / 1000.0,
        lab_cores: cores,
        per_level_us: c.per_level_us,
        per_call_us: c.per_call_us,
        per_edge_us: c.per_edge_us,
        per_neighbour_us: c.per_neighbour_us,
        per_byte_us: c.per_byte_us,
        points,
        median_validation_error: median(validation),
        median_query_error: median(query_errors),
    })
}

/// One lab with `hosts` single-threaded servers: the graph written, every link
/// shaped and delayed, each (k, source) traversed `opts.repeats` times.
fn measure(
    opts: &ModelBenchOptions,
    g: &Arc<Csr>,
    sources: &[u32],
    hosts: usize,
    cores: usize,
) -> Result<Measured> {
    let lab = Arc::new(Lab::create(&["c0"]).map_err(other)?);
    let (o, l, g, sources) = (opts.clone(), lab.clone(), g.clone(), sources.to_vec());
    lab.run_on("c0", move || -> Result<Measured> {
        let data = u64::from(g.vertices()) * 16 + 4 * g.edges();
        let region = (data / (2 * hosts as u64))
            .next_power_of_two()
            .clamp(1 << 20, 16 << 20);
        let memory = (data / hosts as u64 * 2).next_multiple_of(region) + 8 * region;
        let co = ClusterOptions::default()
            .servers(hosts)
            .server_threads(1)
            .server_memory(memory)
            .region_size(region);
        let cluster = ProcessCluster::start_in_lab(&o.bin, &co, l.clone()).map_err(other)?;
        let client = cluster.client().map_err(other)?;
        let load = LoadOptions {
            region_size: region,
            min_parts: 2 * hosts,
            undirected: true,
            ..LoadOptions::default()
        };
        let gc = GraphCache::create(&client, "model-graph", &g, &load, |_, _| {}).map_err(other)?;
        gc.warm().map_err(other)?;
        let mut names = vec!["c0".to_string(), ProcessCluster::manager_host(0)];
        names.extend((0..hosts).map(ProcessCluster::server_host));
        let half = Duration::from_nanos(u64::from(o.delay_us) * 500);
        for h in &names {
            l.shape(h, LINK_MBIT).map_err(other)?;
            l.delay(h, half, Duration::ZERO).map_err(other)?;
        }
        let rtt_us = l.rtt("c0", &names[2], 21).map_err(other)?.as_secs_f64() * 1e6;
        // Vertex → dense server index, from where the partitions live now.
        let owners = gc.owners();
        let mut ids = owners.clone();
        ids.sort_unstable();
        ids.dedup();
        let part_server: Vec<usize> = owners
            .iter()
            .map(|o| ids.binary_search(o).unwrap_or(0))
            .collect();
        let layout = gc.layout.clone();
        let owner = |v: u32| part_server[layout.part_of(v)];
        let net = Network {
            rtt_us,
            link_gbit: f64::from(LINK_MBIT) / 1000.0,
            width: cores.min(hosts),
        };
        let mut samples = Vec::new();
        for k in [2u8, 3] {
            for &src in &sources {
                let want = g.levels(src, k);
                let mut times = Vec::with_capacity(o.repeats);
                for _ in 0..o.repeats {
                    let t0 = Instant::now();
                    let t = gc.traverse(&[src], k).map_err(other)?;
                    times.push(t0.elapsed().as_secs_f64() * 1e6);
                    if t.levels.first() != Some(&want) {
                        return Err(other(format!(
                            "traversal from {src} (k = {k}) disagrees with the local BFS"
                        )));
                    }
                }
                let shape = QueryShape::compute(&g, owner, ids.len().max(1), src, k);
                samples.push((
                    k,
                    Sample {
                        shape,
                        net,
                        latency_us: median(times),
                    },
                ));
            }
        }
        drop(client);
        drop(cluster);
        Ok(Measured {
            hosts,
            rtt_us,
            samples,
        })
    })
    .map_err(other)?
}

/// Sources of degree ≥ 1, the same in every run.
fn pick_sources(g: &Csr, n: usize) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(41);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let v = rng.gen_range(0..g.vertices());
        if g.degree(v) > 0 {
            out.push(v);
        }
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

fn other(e: impl std::fmt::Display) -> BenchError {
    BenchError::Cluster(e.to_string())
}

/// The calibration and validation table.
pub fn format_model_table(r: &ModelReport) -> String {
    let mut s = format!(
        "traversal model: Kronecker scale {}, lab at {} us one-way, {} Gbit/s links, {} cores\n\
         fitted on {} hosts: {:.2} us per level, {:.2} us per call, {:.4} us per edge scanned, \
         {:.4} us per neighbour merged, {:.5} us per byte\n\n",
        r.scale,
        r.delay_us,
        r.link_gbit,
        r.lab_cores,
        r.points.first().map_or(0, |p| p.hosts),
        r.per_level_us,
        r.per_call_us,
        r.per_edge_us,
        r.per_neighbour_us,
        r.per_byte_us,
    );
    s.push_str("hosts  k  rtt (us)  measured (us)  predicted (us)  error  role\n");
    for p in &r.points {
        s.push_str(&format!(
            "{:>5}  {}  {:>8.0}  {:>13.0}  {:>14.0}  {:>4.1}%  {}\n",
            p.hosts,
            p.k,
            p.rtt_us,
            p.measured_us,
            p.predicted_us,
            p.error * 100.0,
            if p.calibration { "fitted" } else { "predicted" }
        ));
    }
    s.push_str(&format!(
        "\nmedian error over the validation points: {:.1}% (over every validation query: {:.1}%)\n",
        r.median_validation_error * 100.0,
        r.median_query_error * 100.0
    ));
    s
}

/// What `farcache simulate` projects.
#[derive(Debug, Clone)]
pub struct SimulateOptions {
    pub scale: u32,
    pub servers: Vec<usize>,
    pub k: Vec<u8>,
    pub sources: usize,
    /// Client–server round trip on the projected network (µs).
    pub rtt_us: f64,
    pub link_gbit: f64,
}

/// One projected cluster size and k, averaged over the sources.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Projected {
    pub servers: usize,
    pub k: u8,
    pub latency_us: f64,
    /// Queries per second with many in flight (the first of the client's CPU, the
    /// busiest server's CPU and the client's link to run out).
    pub throughput: f64,
    pub calls_per_query: f64,
    pub bytes_per_query: f64,
    /// Bytes between the client and one server per query (the mean server).
    pub bytes_per_server: f64,
    pub reached: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimulateReport {
    pub bench: String,
    pub timestamp_unix: u64,
    pub scale: u32,
    pub rtt_us: f64,
    pub link_gbit: f64,
    /// The model's own check (from `bench model`).
    pub model_median_validation_error: f64,
    pub rows: Vec<Projected>,
}

impl SimulateReport {
    pub fn write_json(&self, dir: impl AsRef<std::path::Path>) -> Result<PathBuf> {
        write_json_as(self, &self.bench, self.timestamp_unix, dir.as_ref())
    }
}

/// Projects the traversal on clusters of `opts.servers` servers, each on a machine
/// of its own (every server scans at once), vertex ranges dealt round them two per
/// server, with the fitted costs of `model`.
pub fn simulate(
    model: &ModelReport,
    opts: &SimulateOptions,
    progress: impl Fn(&str),
) -> Result<SimulateReport> {
    if !(8..=24).contains(&opts.scale) {
        return Err(BenchError::InvalidArgument(
            "the simulated graph's scale must be between 8 and 24".into(),
        ));
    }
    if opts.servers.iter().any(|&n| !(1..=65_536).contains(&n)) || opts.sources == 0 {
        return Err(BenchError::InvalidArgument(
            "servers must be between 1 and 65536, sources >= 1".into(),
        ));
    }
    progress(&format!(
        "generating a Kronecker scale-{} graph",
        opts.scale
    ));
    let edges = kronecker_edges(opts.scale, 16, 1).map_err(other)?;
    let g = Csr::from_edges(1 << opts.scale, &edges, true).map_err(other)?;
    drop(edges);
    let sources = pick_sources(&g, opts.sources);
    let m = model.model();
    let mut rows = Vec::new();
    for &n in &opts.servers {
        progress(&format!("{n} servers"));
        let owners = farcache_graph::model::range_owners(&g, 2 * n, n);
        let net = Network {
            rtt_us: opts.rtt_us,
            link_gbit: opts.link_gbit,
            width: n,
        };
        for &k in &opts.k {
            let q = sources.len() as f64;
            let mut acc = Projected {
                servers: n,
                k,
                latency_us: 0.0,
                throughput: 0.0,
                calls_per_query: 0.0,
                bytes_per_query: 0.0,
                bytes_per_server: 0.0,
                reached: 0.0,
            };
            let mut per_query_time = 0.0;
            for &src in &sources {
                let shape = QueryShape::compute(&g, |v| owners[v as usize] as usize, n, src, k);
                let p = m.project(&shape, &net);
                acc.latency_us += p.latency_us / q;
                per_query_time += 1.0 / p.throughput / q;
                acc.calls_per_query += p.calls as f64 / q;
                acc.bytes_per_query += p.bytes as f64 / q;
                acc.reached += shape.reached() as f64 / q;
            }
            // A mix of the sources' queries: their mean bottleneck time each.
            acc.throughput = 1.0 / per_query_time;
            acc.bytes_per_server = acc.bytes_per_query / n as f64;
            rows.push(acc);
        }
    }
    Ok(SimulateReport {
        bench: "simulate".into(),
        timestamp_unix: unix_now(),
        scale: opts.scale,
        rtt_us: opts.rtt_us,
        link_gbit: opts.link_gbit,
        model_median_validation_error: model.median_validation_error,
        rows,
    })
}

/// The projection's table.
pub fn format_simulate_table(r: &SimulateReport) -> String {
    let mut s = format!(
        "projected traversal (model): Kronecker scale {}, {:.0} us round trip, {} Gbit/s client link, \
         every server on a machine of its own; the model's median validation error was {:.1}%\n\n",
        r.scale,
        r.rtt_us,
        r.link_gbit,
        r.model_median_validation_error * 100.0
    );
    s.push_str(
        "servers  k  reached  latency (us)  queries/s  calls/query  KB/query  KB/server/query\n",
    );
    for p in &r.rows {
        s.push_str(&format!(
            "{:>7}  {}  {:>7.0}  {:>12.0}  {:>9.0}  {:>11.0}  {:>8.1}  {:>15.2}\n",
            p.servers,
            p.k,
            p.reached,
            p.latency_us,
            p.throughput,
            p.calls_per_query,
            p.bytes_per_query / 1e3,
            p.bytes_per_server / 1e3,
        ));
    }
    s
}

/// Latency and throughput against the servers, one line per k:
/// `<dir>/simulate-<timestamp>.png` and `simulate-latest.png`.
pub fn write_simulate_chart(
    r: &SimulateReport,
    dir: impl AsRef<std::path::Path>,
) -> Result<PathBuf> {
    use crate::report::canvas::{self, BLUE, GREEN, ORANGE, RED, err};
    use plotters::prelude::*;
    canvas::write_with_latest(dir.as_ref(), &r.bench, r.timestamp_unix, |path| {
        let text = canvas::prepare(path)?;
        let root = canvas::canvas(path, (1400, 560))?;
        let (left, right) = root.split_horizontally(700);
        let ks: Vec<u8> = {
            let mut k: Vec<u8> = r.rows.iter().map(|p| p.k).collect();
            k.sort_unstable();
            k.dedup();
            k
        };
        let x_hi = r.rows.iter().map(|p| p.servers).max().unwrap_or(2) as f64;
        let x_lo = r.rows.iter().map(|p| p.servers).min().unwrap_or(1) as f64;
        let palette = [BLUE, RED, GREEN, ORANGE];
        for (area, title, pick) in [
            (
                &left,
                "latency per query (us, log)",
                (|p: &Projected| p.latency_us) as fn(&Projected) -> f64,
            ),
            (&right, "queries/s at saturation (log)", |p: &Projected| {
                p.throughput
            }),
        ] {
            let vals: Vec<f64> = r.rows.iter().map(pick).filter(|v| *v > 0.0).collect();
            let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = vals.iter().copied().fold(0.0, f64::max);
            if !(lo.is_finite() && hi > 0.0) {
                continue;
            }
            let mut b = ChartBuilder::on(area);
            b.margin(15);
            if text {
                b.caption(title, ("sans-serif", 18))
                    .x_label_area_size(40)
                    .y_label_area_size(60);
            }
            let mut chart = b
                .build_cartesian_2d(
                    (x_lo * 0.8..x_hi * 1.25).log_scale(),
                    (lo * 0.7..hi * 1.4).log_scale(),
                )
                .map_err(err)?;
            if text {
                chart
                    .configure_mesh()
                    .x_desc("servers (log)")
                    .y_label_formatter(&|v| format!("{v:.0}"))
                    .draw()
                    .map_err(err)?;
            }
            for (i, &k) in ks.iter().enumerate() {
                let c = palette[i % palette.len()];
                let pts: Vec<(f64, f64)> = r
                    .rows
                    .iter()
                    .filter(|p| p.k == k)
                    .map(|p| (p.servers as f64, pick(p)))
                    .collect();
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                    .map_err(err)?;
                let line = chart
                    .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                    .map_err(err)?;
                if text {
                    line.label(format!("k = {k}"))
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
                }
            }
            if text {
                canvas::legend(&mut chart, SeriesLabelPosition::UpperRight, 12, 0.85)?;
            }
        }
        root.present().map_err(err)?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        let ok = ModelBenchOptions::new("farcache", true);
        assert!(ok.validate().is_ok());
        for bad in [
            ModelBenchOptions {
                scale: 30,
                ..ok.clone()
            },
            ModelBenchOptions {
                validate_on: vec![0],
                ..ok.clone()
            },
            ModelBenchOptions {
                repeats: 0,
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
