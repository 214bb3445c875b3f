//! Row 5: level-synchronous k-hop traversal (`expand`, one call per server per level)
//! on a Graph500 Kronecker graph over three servers, against the same search done at
//! the client with batched reads of entries and edge lists.

use farcache_graph::{Csr, GraphCache, LoadOptions, Traversal, kronecker_edges};
use std::sync::Arc;

use farcache_testkit::{Lab, ProcessCluster};
use indicatif::ProgressBar;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::measure::{RunOutcome, run_serial};
use super::spread::SPREAD_SERVERS;
use super::spread::SpreadCluster;
use super::{SprocBenchOptions, cluster_err};
use crate::error::Result;
use crate::report::{BenchReport, BenchRow};

const CACHE: &str = "bench-sproc-graph";
/// Sources queried in turn by the one-source rows, and together by the shared row.
const SOURCES: usize = 16;

/// The graph, generated and laid out before the cluster starts (its size sets the
/// servers' memory).
pub(super) struct KroneckerGraph {
    scale: u32,
    csr: Csr,
    gen_secs: f64,
    region: u64,
}

impl KroneckerGraph {
    pub(super) fn build(scale: u32) -> Result<Self> {
        let t0 = std::time::Instant::now();
        let edges = kronecker_edges(scale, 16, 1).map_err(cluster_err)?;
        let csr = Csr::from_edges(1 << scale, &edges, true).map_err(cluster_err)?;
        // Six or more regions, so every server holds two partitions or more.
        let bytes = u64::from(csr.vertices()) * 16 + 4 * csr.edges();
        let region = (bytes / 6).next_power_of_two().clamp(1 << 20, 16 << 20);
        Ok(Self {
            scale,
            csr,
            gen_secs: t0.elapsed().as_secs_f64(),
            region,
        })
    }

    /// Memory each of the three servers needs for the graph's cache.
    pub(super) fn server_memory(&self) -> u64 {
        let bytes = u64::from(self.csr.vertices()) * 16 + 4 * self.csr.edges();
        let regions = bytes.div_ceil(self.region * 9 / 10).next_multiple_of(6) + 6;
        regions.div_ceil(SPREAD_SERVERS as u64) * self.region
    }
}

/// What the rows of one k measured.
struct Side {
    out: RunOutcome,
    rounds: f64,
    bytes: f64,
}

fn measure(
    opts: &SprocBenchOptions,
    sources: &[u32],
    expected: &[Vec<u64>],
    group: usize,
    run: impl Fn(&[u32]) -> farcache_graph::Result<Traversal>,
) -> Side {
    let (mut rounds, mut bytes, mut queries) = (0u64, 0u64, 0u64);
    let out = run_serial(opts.duration, |i| {
        let at = (i as usize * group) % sources.len();
        let (src, want) = (&sources[at..at + group], &expected[at..at + group]);
        match run(src) {
            Ok(t) => {
                rounds += u64::from(t.stats.rounds);
                bytes += t.stats.bytes();
                queries += group as u64;
                t.levels == want
            }
            Err(_) => false,
        }
    });
    let q = queries.max(1) as f64;
    Side {
        out,
        rounds: rounds as f64 / q,
        bytes: bytes as f64 / q,
    }
}

/// Sources of degree ≥ 1, the same in every run.
fn pick_sources(g: &KroneckerGraph) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(23);
    let mut sources = Vec::with_capacity(SOURCES);
    while sources.len() < SOURCES {
        let v = rng.gen_range(0..g.csr.vertices());
        if g.csr.degree(v) > 0 {
            sources.push(v);
        }
    }
    sources
}

/// Writes the graph into a fresh cache of `spread`; returns it and the seconds taken.
fn load(spread: &SpreadCluster, g: &KroneckerGraph) -> Result<(GraphCache, f64)> {
    let load = LoadOptions {
        region_size: g.region,
        min_parts: 2 * SPREAD_SERVERS,
        undirected: true,
    };
    let t0 = std::time::Instant::now();
    let gc =
        GraphCache::create(&spread.client, CACHE, &g.csr, &load, |_, _| {}).map_err(cluster_err)?;
    let secs = t0.elapsed().as_secs_f64();
    gc.warm().map_err(cluster_err)?;
    Ok((gc, secs))
}

/// Rows for k = 2 and 3 and each group size (sources per traversal), each against
/// the client-side search; `delay_us` labels rows run in the lab.
fn rows(
    opts: &SprocBenchOptions,
    gc: &GraphCache,
    g: &KroneckerGraph,
    groups: &[usize],
    delay_us: Option<f64>,
    pb: &ProgressBar,
) -> Vec<BenchRow> {
    let sources = pick_sources(g);
    let dist = format!("Kronecker {}, {SPREAD_SERVERS} srv", g.scale);
    let at = delay_us.map_or_else(String::new, |d| format!(" @ {d:.0}us one-way"));
    let mut out = Vec::new();
    for k in [2u8, 3] {
        let expected: Vec<Vec<u64>> = sources.iter().map(|&s| g.csr.levels(s, k)).collect();
        for &group in groups {
            let shared = if group == 1 {
                String::new()
            } else {
                format!(", {group} sources per traversal")
            };
            pb.set_message(format!("traversal k={k}{shared}{at}: client-side reads"));
            let client = measure(opts, &sources, &expected, group, |s| {
                gc.traverse_by_reads(s, k)
            });
            pb.inc(1);
            pb.set_message(format!("traversal k={k}{shared}{at}: expand"));
            let near = measure(opts, &sources, &expected, group, |s| gc.traverse(s, k));
            pb.inc(1);
            // Per query: one traversal serves `group` queries.
            let per_query = |o: &RunOutcome| o.latency.p50_us / group as f64;
            let mut row = BenchRow {
                name: format!("traversal k={k}{shared}{at} (expand per server per level)"),
                system: "farcache".into(),
                op: farcache_sproc::builtin::Expand::NAME.into(),
                record_size: 4,
                distribution: dist.clone(),
                mops: near.out.mops * group as f64,
                p50_us: per_query(&near.out),
                p99_us: near.out.latency.p99_us / group as f64,
                p999_us: near.out.latency.p999_us / group as f64,
                baseline: Some(format!(
                    "client-side level-by-level search with batched reads (entries, then edge lists) p50 {:.1}us per query, {:.0} B per query",
                    per_query(&client.out),
                    client.bytes
                )),
                ..BenchRow::default()
            }
            .with_client_side_ratio(client.out.latency.p50_us / near.out.latency.p50_us)
            .with_round_trips(near.rounds, Some(client.rounds));
            row.bytes_per_query = Some(near.bytes);
            row.client_bytes_per_query = Some(client.bytes);
            row.one_way_delay_us = delay_us;
            if near.out.errors + client.out.errors > 0 {
                row.name.push_str(&format!(
                    " ({} errors)",
                    near.out.errors + client.out.errors
                ));
            }
            out.push(row);
        }
    }
    out
}

fn graph_note(g: &KroneckerGraph, parts: usize, write_secs: f64) -> String {
    format!(
        "traversal graph: Graph500 Kronecker scale {} edge factor 16 (A=0.57, B=C=0.19), {} vertices, {} \
         stored edges (both ways, deduplicated), generated in {:.1} s; {parts} vertex-range partitions \
         (entries and their edge lists in one region of {} B) over {SPREAD_SERVERS} servers, \
         written in {write_secs:.1} s; {SOURCES} sources of degree >= 1; every answer checked against a local \
         BFS. Bytes per query are payload (args and replies; 12 B per read request)",
        g.scale,
        g.csr.vertices(),
        g.csr.edges(),
        g.gen_secs,
        g.region,
    )
}

/// Row 5 on loopback: one source per traversal, and all sources sharing rounds.
pub(super) fn traversal_rows(
    opts: &SprocBenchOptions,
    spread: &SpreadCluster,
    g: &KroneckerGraph,
    pb: &ProgressBar,
    report: &mut BenchReport,
) -> Result<()> {
    pb.set_message(format!("writing the Kronecker scale-{} graph", g.scale));
    let (gc, write_secs) = load(spread, g)?;
    report
        .rows
        .extend(rows(opts, &gc, g, &[1, SOURCES], None, pb));
    report
        .notes
        .push(graph_note(g, gc.layout.parts.len(), write_secs));
    spread.client.delete(CACHE).map_err(cluster_err)?;
    Ok(())
}

/// Row 5 in the network lab (root): every process on a host of its own, each host's
/// link shaped to 10 Gbit/s and delayed by half of each one-way delay in
/// `opts.lab_delays`, so any two hosts are that far apart.
pub(super) fn traversal_lab_rows(
    opts: &SprocBenchOptions,
    g: Arc<KroneckerGraph>,
    pb: &ProgressBar,
    report: &mut BenchReport,
) -> Result<()> {
    let lab = Arc::new(Lab::create(&["c0"]).map_err(cluster_err)?);
    let (o, l, pb2) = (opts.clone(), lab.clone(), pb.clone());
    let (rows, notes) = lab
        .run_on("c0", move || -> Result<(Vec<BenchRow>, Vec<String>)> {
            pb2.set_message("traversal: cluster in the lab");
            let spread = SpreadCluster::start_with(&o, g.server_memory(), true, Some(l.clone()))?;
            let (gc, write_secs) = load(&spread, &g)?;
            let mut hosts = vec!["c0".to_string(), ProcessCluster::manager_host(0)];
            hosts.extend((0..SPREAD_SERVERS).map(ProcessCluster::server_host));
            for h in &hosts {
                l.shape(h, 10_000).map_err(cluster_err)?;
            }
            let (mut rows, mut notes) = (Vec::new(), vec![graph_note(&g, gc.layout.parts.len(), write_secs)]);
            for &d in &o.lab_delays {
                let half = std::time::Duration::from_nanos(u64::from(d) * 500);
                for h in &hosts {
                    l.delay(h, half, std::time::Duration::ZERO).map_err(cluster_err)?;
                }
                let rtt = l.rtt("c0", &hosts[2], 21).map_err(cluster_err)?;
                notes.push(format!(
                    "lab at {d} us one-way (10 Gbit/s links): client-server TCP round trip p50 {:.1} us",
                    rtt.as_secs_f64() * 1e6
                ));
                rows.extend(rows_at(&o, &gc, &g, f64::from(d), &pb2));
            }
            Ok((rows, notes))
        })
        .map_err(cluster_err)??;
    report.rows.extend(rows);
    report.notes.extend(notes);
    Ok(())
}

fn rows_at(
    opts: &SprocBenchOptions,
    gc: &GraphCache,
    g: &KroneckerGraph,
    delay_us: f64,
    pb: &ProgressBar,
) -> Vec<BenchRow> {
    rows(opts, gc, g, &[1], Some(delay_us), pb)
}
