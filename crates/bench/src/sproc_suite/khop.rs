//! Row 4: k-hop counts on a power-law graph over three servers, by the `khop`
//! procedure (FFlow, DFlow with and without per-destination batching) and by a
//! level-by-level BFS at the client.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use farcache_client::{Cache, Client};
use farcache_sproc::builtin::{Flow, KHop};
use indicatif::ProgressBar;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::measure::{RunOutcome, run_serial};
use super::spread::{ClientSide, Measured, SpreadCluster, flow_tag, procedure_row};
use super::{REGION, SprocBenchOptions, cluster_err, write_all};
use crate::error::{BenchError, Result};
use crate::report::{BenchReport, BenchRow};
use crate::workload::{DEFAULT_ZIPF_THETA, KeyGen};

/// Vertices per edge in the k-hop graph (100k vertices for 1M edges).
const EDGES_PER_VERTEX: u64 = 10;
/// k-hop sources whose 3-hop neighbourhood is larger than this many vertices are not
/// queried: the BFS carries its visited set in every continuation, and a state near
/// the 1 MiB per-op limit fails.
const MAX_REACH: usize = 1 << 15;
/// The cache holding the graph.
pub(super) const CACHE: &str = "bench-sproc-khop";

/// Row 4 with per-destination batching: for k = 2 and 3, the client-side BFS, then
/// `khop` with FFlow and DFlow. Returns what the unbatched rows reuse.
pub(super) fn khop_rows(
    opts: &SprocBenchOptions,
    spread: &mut SpreadCluster,
    g: &StoredGraph,
    pb: &ProgressBar,
    report: &mut BenchReport,
) -> Result<KhopBaseline> {
    pb.set_message("writing the graph");
    let cache = g.create(&spread.client)?;
    let t0 = Instant::now();
    g.write(&cache)?;
    let write_secs = t0.elapsed().as_secs_f64();
    let info = cache.info();
    let servers = info.regions.iter().copied().collect::<HashSet<u32>>().len();
    let sources = pick_sources(&g.graph, opts.khop_sources)?;
    let dist = format!("power-law, {servers} srv");
    let mut clients = Vec::new();
    for k in [2u8, 3] {
        let expected: Vec<u64> = sources
            .list
            .iter()
            .map(|&s| g.graph.reach(s, k) as u64)
            .collect();
        let mean_reach = expected.iter().sum::<u64>() as f64 / expected.len() as f64;
        let q = g.queries(&sources.list, &expected, k);
        pb.set_message(format!("k-hop k={k}: client-side BFS"));
        let local = q.run_client(&cache, opts.duration);
        pb.inc(1);
        for flow in [Flow::Ship, Flow::Pull] {
            pb.set_message(format!("k-hop k={k}: khop procedure, {flow:?}"));
            let exec = spread.counted("execute", || q.run(&cache, opts.duration, flow))?;
            pb.inc(1);
            report
                .rows
                .push(khop_row(&q, flow, "batched", &exec, &local, &dist));
        }
        let name = format!("k-hop count k={k}, client BFS");
        report.rows.push(local.row(name, 16, &dist));
        clients.push((k, local, expected));
        report.notes.push(format!(
            "k-hop k={k}: mean {mean_reach:.0} vertices reached per query"
        ));
    }
    let regions = info.regions.len();
    report
        .notes
        .push(g.note(regions, servers, &sources, write_secs));
    report.notes.push(
        "chase/k-hop round trips (RT) per query are the client's EXECUTE (or read) ops the \
         servers counted; procedures cross servers themselves (FFlow hand-offs, DFlow \
         fetches), counted as server messages and frames per query. Client-side k-hop RT \
         are dependent batches (2 per level)"
            .into(),
    );
    Ok(KhopBaseline {
        sources,
        dist,
        clients,
    })
}

/// The DFlow `khop` again, on servers that send one frame per message, against the
/// client-side runs of [`khop_rows`].
pub(super) fn khop_unbatched_rows(
    opts: &SprocBenchOptions,
    spread: &mut SpreadCluster,
    g: &StoredGraph,
    batched: &KhopBaseline,
    pb: &ProgressBar,
    report: &mut BenchReport,
) -> Result<()> {
    let cache = g.create(&spread.client)?;
    g.write(&cache)?;
    for (k, local, expected) in &batched.clients {
        let q = g.queries(&batched.sources.list, expected, *k);
        pb.set_message(format!("k-hop k={k}: DFlow, unbatched"));
        let exec = spread.counted("execute", || q.run(&cache, opts.duration, Flow::Pull))?;
        pb.inc(1);
        report.rows.push(khop_row(
            &q,
            Flow::Pull,
            "one frame per message",
            &exec,
            local,
            &batched.dist,
        ));
    }
    Ok(())
}

/// What the unbatched k-hop rows reuse from the batched ones: the sources, the
/// distribution label, and per k the client-side BFS and the right answers.
pub(super) struct KhopBaseline {
    sources: Sources,
    dist: String,
    clients: Vec<(u8, ClientSide, Vec<u64>)>,
}

/// A `khop` row against the client-side BFS; `batching` says how servers send peer
/// messages.
fn khop_row(
    q: &KhopQueries<'_>,
    flow: Flow,
    batching: &str,
    exec: &Measured,
    local: &ClientSide,
    dist: &str,
) -> BenchRow {
    let how = match flow {
        Flow::Ship => "FFlow: the search moves to the server holding the next bytes",
        _ => "DFlow: the first server pulls each level's vertex entries, then edge lists",
    };
    let mut row = procedure_row(
        format!("k-hop count k={} ({}, {batching})", q.k, flow_tag(flow)),
        KHop::NAME,
        16,
        dist,
        exec,
        local,
    );
    row.baseline = Some(format!(
        "client-side level-by-level BFS p50 {:.1}us; {how}; peer messages {batching}",
        local.out.latency.p50_us
    ));
    row
}

/// The k-hop graph and its bytes as stored: vertex entries from 0, then the edges.
pub(super) struct StoredGraph {
    graph: Graph,
    edges: u64,
    vbytes: Vec<u8>,
    ebytes: Vec<u8>,
    build_secs: f64,
    /// Region size and capacity of the graph's cache.
    region: u64,
    pub(super) cap: u64,
}

impl StoredGraph {
    pub(super) fn build(edges: u64) -> Result<Self> {
        let t0 = Instant::now();
        let graph = Graph::power_law(edges, 99)?;
        let (vbytes, ebytes) = graph.layout();
        let build_secs = t0.elapsed().as_secs_f64();
        let bytes = (vbytes.len() + ebytes.len()) as u64;
        // At least six regions, so the graph spans all three servers even when small.
        let region = (bytes / 6).div_ceil(4096).clamp(1, REGION / 4096) * 4096;
        let cap = bytes.div_ceil(region).max(6) * region;
        Ok(Self {
            graph,
            edges,
            vbytes,
            ebytes,
            build_secs,
            region,
            cap,
        })
    }

    const VBASE: u64 = 0;

    fn ebase(&self) -> u64 {
        self.vbytes.len() as u64
    }

    fn create(&self, client: &Client) -> Result<Cache> {
        client
            .create_with_region_size(CACHE, self.cap, Some(self.region))
            .map_err(cluster_err)
    }

    fn write(&self, cache: &Cache) -> Result<()> {
        write_all(cache, Self::VBASE, &self.vbytes)?;
        write_all(cache, self.ebase(), &self.ebytes)
    }

    fn queries<'a>(&self, sources: &'a [u32], expected: &'a [u64], k: u8) -> KhopQueries<'a> {
        KhopQueries {
            sources,
            expected,
            vbase: Self::VBASE,
            ebase: self.ebase(),
            vertices: self.graph.vertices,
            k,
        }
    }

    /// The report's note on the graph, how it is stored, and the sources queried.
    fn note(&self, regions: usize, servers: usize, sources: &Sources, write_secs: f64) -> String {
        format!(
            "k-hop graph: {} vertices, {} edges (Zipf {DEFAULT_ZIPF_THETA} sources, uniform \
             targets, max out-degree {}), {} B vertex entries + {} B edges in {} \
             regions of {} B over {} servers, generated in {:.2} s and written in \
             {write_secs:.2} s; {} \
             sources with out-degree >= 1 queried in turn ({} skipped: 3-hop reach > \
             {MAX_REACH})",
            self.graph.vertices,
            self.edges,
            self.graph.max_degree(),
            self.ebase(),
            self.ebytes.len(),
            regions,
            self.region,
            servers,
            self.build_secs,
            sources.list.len(),
            sources.skipped,
        )
    }
}

/// The k-hop sources and how many candidates were passed over for too large a reach.
struct Sources {
    list: Vec<u32>,
    skipped: usize,
}

/// Up to `n` random vertices with at least one out-edge and a 3-hop reach of at most
/// `MAX_REACH`.
fn pick_sources(graph: &Graph, n: usize) -> Result<Sources> {
    let mut rng = StdRng::seed_from_u64(17);
    let (mut list, mut skipped) = (Vec::new(), 0usize);
    let mut tries = 0;
    while list.len() < n && tries < n * 100 {
        tries += 1;
        let v = rng.gen_range(0..graph.vertices);
        if graph.degree(v) == 0 {
            continue;
        }
        if graph.reach(v, 3) > MAX_REACH {
            skipped += 1;
            continue;
        }
        list.push(v);
    }
    if list.is_empty() {
        return Err(BenchError::InvalidArgument(
            "the graph has no usable k-hop source".into(),
        ));
    }
    Ok(Sources { list, skipped })
}

/// A graph in CSR form (out-edges).
struct Graph {
    vertices: u32,
    /// `offsets[v]..offsets[v + 1]` index `targets`.
    offsets: Vec<u64>,
    targets: Vec<u32>,
}

impl Graph {
    /// `edges` edges over `edges / 10` vertices: sources Zipf(0.99) (ranks scrambled
    /// over the ids), so out-degrees follow a power law; targets uniform.
    fn power_law(edges: u64, seed: u64) -> Result<Self> {
        let vertices = (edges / EDGES_PER_VERTEX).max(2);
        let mut src = KeyGen::zipf(vertices, 1, DEFAULT_ZIPF_THETA, seed)?;
        let mut rng = StdRng::seed_from_u64(seed ^ 0xD1CE);
        let pairs: Vec<(u32, u32)> = (0..edges)
            .map(|_| (src.next_index() as u32, rng.gen_range(0..vertices) as u32))
            .collect();
        let mut offsets = vec![0u64; vertices as usize + 1];
        for &(s, _) in &pairs {
            offsets[s as usize + 1] += 1;
        }
        for v in 0..vertices as usize {
            offsets[v + 1] += offsets[v];
        }
        let mut at = offsets.clone();
        let mut targets = vec![0u32; edges as usize];
        for &(s, t) in &pairs {
            targets[at[s as usize] as usize] = t;
            at[s as usize] += 1;
        }
        Ok(Self {
            vertices: vertices as u32,
            offsets,
            targets,
        })
    }

    fn degree(&self, v: u32) -> u64 {
        self.offsets[v as usize + 1] - self.offsets[v as usize]
    }

    fn max_degree(&self) -> u64 {
        (0..self.vertices)
            .map(|v| self.degree(v))
            .max()
            .unwrap_or(0)
    }

    fn out(&self, v: u32) -> &[u32] {
        &self.targets[self.offsets[v as usize] as usize..self.offsets[v as usize + 1] as usize]
    }

    /// Vertices within `k` hops of `src`, the source excluded (what `khop` returns).
    fn reach(&self, src: u32, k: u8) -> usize {
        let mut seen = HashSet::from([src]);
        let mut frontier = vec![src];
        for _ in 0..k {
            let mut next = Vec::new();
            for v in frontier {
                for &u in self.out(v) {
                    if seen.insert(u) {
                        next.push(u);
                    }
                }
            }
            frontier = next;
        }
        seen.len() - 1
    }

    /// The vertex entries (`first edge` u64, `degree` u32, pad u32) then the edges.
    fn layout(&self) -> (Vec<u8>, Vec<u8>) {
        let mut v = Vec::with_capacity(self.vertices as usize * 16);
        for i in 0..self.vertices {
            v.extend_from_slice(&self.offsets[i as usize].to_le_bytes());
            v.extend_from_slice(&(self.degree(i) as u32).to_le_bytes());
            v.extend_from_slice(&0u32.to_le_bytes());
        }
        let e = self.targets.iter().flat_map(|t| t.to_le_bytes()).collect();
        (v, e)
    }
}

/// The k-hop count done at the client: per level, one batch reading every frontier
/// vertex's entry, then one batch reading their edge lists. Returns the count and the
/// batches waited for (dependent round trips).
fn client_khop(cache: &Cache, vbase: u64, ebase: u64, src: u32, k: u8) -> Option<(u64, u32)> {
    let mut seen = HashSet::from([src]);
    let mut frontier = vec![src];
    let mut trips = 0;
    for _ in 0..k {
        if frontier.is_empty() {
            break;
        }
        let mut b = cache.batch().with_capacity(frontier.len());
        for &v in &frontier {
            b.read(vbase + 16 * u64::from(v), 12);
        }
        let r = b.run();
        trips += 1;
        let mut lists = cache.batch();
        for i in 0..frontier.len() {
            let e = r.data(i).ok()?;
            let first = u64::from_le_bytes(e.get(..8)?.try_into().ok()?);
            let degree = u32::from_le_bytes(e.get(8..12)?.try_into().ok()?);
            if degree > 0 {
                lists.read(ebase + 4 * first, 4 * u64::from(degree));
            }
        }
        let mut next = Vec::new();
        if !lists.is_empty() {
            let n = lists.len();
            let r = lists.run();
            trips += 1;
            for i in 0..n {
                for t in r.data(i).ok()?.chunks_exact(4) {
                    let u = u32::from_le_bytes(t.try_into().ok()?);
                    if seen.insert(u) {
                        next.push(u);
                    }
                }
            }
        }
        frontier = next;
    }
    Some((seen.len() as u64 - 1, trips))
}

/// k-hop queries over one graph and the answers they must give.
struct KhopQueries<'a> {
    sources: &'a [u32],
    expected: &'a [u64],
    vbase: u64,
    ebase: u64,
    vertices: u32,
    k: u8,
}

impl KhopQueries<'_> {
    fn run(&self, cache: &Cache, duration: Duration, flow: Flow) -> RunOutcome {
        run_serial(duration, |i| {
            let j = i as usize % self.sources.len();
            let s = self.sources[j];
            cache
                .execute(
                    KHop::NAME,
                    self.vbase + 16 * u64::from(s),
                    &KHop::args_with(self.vbase, self.ebase, self.vertices, s, self.k, flow),
                )
                .ok()
                .and_then(|r| KHop::result(&r).ok())
                == Some(self.expected[j])
        })
    }

    /// The same counts by the BFS at the client, with its dependent round trips per
    /// query.
    fn run_client(&self, cache: &Cache, duration: Duration) -> ClientSide {
        let mut trips = 0u64;
        let out = run_serial(duration, |i| {
            let j = i as usize % self.sources.len();
            match client_khop(cache, self.vbase, self.ebase, self.sources[j], self.k) {
                Some((n, t)) => {
                    trips += u64::from(t);
                    n == self.expected[j]
                }
                None => false,
            }
        });
        let rt = trips as f64 / out.total as f64;
        ClientSide { out, rt }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_law_graph_is_csr() {
        let g = Graph::power_law(20_000, 3).expect("graph");
        assert_eq!(g.vertices, 2000);
        assert_eq!(g.offsets[g.vertices as usize], 20_000);
        assert!(g.targets.iter().all(|&t| t < g.vertices));
        // Skewed: the busiest vertex has far more than the mean of 10 out-edges.
        let max = (0..g.vertices).map(|v| g.degree(v)).max().unwrap_or(0);
        assert!(max > 200, "max out-degree {max}");
        let (v, e) = g.layout();
        assert_eq!((v.len(), e.len()), (2000 * 16, 20_000 * 4));
        let src = (0..g.vertices).find(|&v| g.degree(v) > 0).unwrap_or(0);
        let entry = &v[16 * src as usize..][..12];
        assert_eq!(
            u64::from_le_bytes(entry[..8].try_into().unwrap_or_default()),
            g.offsets[src as usize]
        );
        assert_eq!(
            u32::from_le_bytes(entry[8..].try_into().unwrap_or_default()) as u64,
            g.degree(src)
        );
        assert!(g.reach(src, 1) <= g.degree(src) as usize);
        assert!(g.reach(src, 2) >= g.reach(src, 1));
    }
}
