//! A cost model of the level-synchronous traversal ([`crate::GraphCache::traverse`]),
//! calibrated from measured runs and used to project clusters no one machine holds
//! (MimicNet's idea, at farcache's scale).
//!
//! A query's *shape* is exact and needs only the graph and who holds each vertex:
//! per level, per server, the frontier vertices it is sent, the edges it scans and
//! the distinct neighbours it returns ([`QueryShape`]). The *costs* are few and
//! fitted ([`Costs`]): a fixed cost per level (the client planning and issuing a
//! round), per call (one `expand` at the client and at its server), per edge a
//! server scans, per neighbour the client merges, and per byte moved (the kernels'
//! copies). The network adds the round trip and the bytes' time on the client's
//! link. A level takes
//!
//! `rtt + level + call × calls + edge × E + neighbour × R + byte × B + B / link`
//!
//! where `E` is the scanning on the critical path: the busiest server's edges, or
//! all servers' edges over the cores that run them at once (`width`), whichever is
//! more. On one machine running a lab of many hosts the width is its cores; on real
//! servers, one per server.

use crate::csr::Csr;

/// Bytes of an `expand` call besides its frontier (vertex count, partitions, tags),
/// and of its reply besides the neighbours; about, for the link's share.
const CALL_HEAD: u64 = 64;
const REPLY_HEAD: u64 = 32;
/// Frontier vertices per call, as the traversal splits them.
const CALL_VERTICES: u64 = 1 << 16;

/// One level of one query on one server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerLevel {
    /// Frontier vertices sent to it.
    pub frontier: u64,
    /// Edges it scans.
    pub edges: u64,
    /// Distinct neighbours it returns.
    pub returned: u64,
}

/// One level of one query, over the servers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelShape {
    pub servers: Vec<ServerLevel>,
    /// Vertices first reached at this level.
    pub fresh: u64,
}

impl LevelShape {
    /// `expand` calls of the level (one per server with a frontier, more past
    /// [`CALL_VERTICES`]).
    pub fn calls(&self) -> u64 {
        self.servers
            .iter()
            .filter(|s| s.frontier > 0)
            .map(|s| s.frontier.div_ceil(CALL_VERTICES))
            .sum()
    }

    pub fn edges(&self) -> u64 {
        self.servers.iter().map(|s| s.edges).sum()
    }

    /// Neighbours the client merges.
    pub fn returned(&self) -> u64 {
        self.servers.iter().map(|s| s.returned).sum()
    }

    /// Scanning on the critical path when `width` servers work at once.
    pub fn critical_edges(&self, width: usize) -> f64 {
        let busiest = self.servers.iter().map(|s| s.edges).max().unwrap_or(0) as f64;
        busiest.max(self.edges() as f64 / width.max(1) as f64)
    }

    /// Bytes over the client's link, both ways.
    pub fn bytes(&self) -> u64 {
        self.servers
            .iter()
            .filter(|s| s.frontier > 0)
            .map(|s| CALL_HEAD + 4 * s.frontier + REPLY_HEAD + 4 * s.returned)
            .sum()
    }
}

/// The levels of one k-hop query from one source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryShape {
    pub levels: Vec<LevelShape>,
}

impl QueryShape {
    /// The query's levels from `src` to depth `k`, with vertex `v` held by server
    /// `owner(v)` of `servers`.
    pub fn compute(g: &Csr, owner: impl Fn(u32) -> usize, servers: usize, src: u32, k: u8) -> Self {
        let servers = servers.max(1);
        let n = g.vertices() as usize;
        let mut seen = vec![false; n];
        // `stamp[w] == pass`: w already returned by this server at this level.
        let mut stamp = vec![0u32; n];
        let mut pass = 0u32;
        let mut frontier = vec![src];
        if let Some(s) = seen.get_mut(src as usize) {
            *s = true;
        }
        let mut levels = Vec::new();
        let mut by_server: Vec<Vec<u32>> = vec![Vec::new(); servers];
        for _ in 0..k {
            if frontier.is_empty() {
                break;
            }
            let mut level = LevelShape {
                servers: vec![ServerLevel::default(); servers],
                fresh: 0,
            };
            by_server.iter_mut().for_each(Vec::clear);
            for &v in &frontier {
                by_server[owner(v).min(servers - 1)].push(v);
            }
            let mut next = Vec::new();
            for (s, list) in by_server.iter().enumerate() {
                if list.is_empty() {
                    continue;
                }
                pass += 1;
                let at = &mut level.servers[s];
                for &v in list {
                    let out = g.out(v);
                    at.frontier += 1;
                    at.edges += out.len() as u64;
                    for &w in out {
                        let w = w as usize;
                        if stamp[w] != pass {
                            stamp[w] = pass;
                            at.returned += 1;
                            if !seen[w] {
                                seen[w] = true;
                                next.push(w as u32);
                            }
                        }
                    }
                }
            }
            level.fresh = next.len() as u64;
            levels.push(level);
            frontier = next;
        }
        Self { levels }
    }

    pub fn reached(&self) -> u64 {
        self.levels.iter().map(|l| l.fresh).sum()
    }

    pub fn calls(&self) -> u64 {
        self.levels.iter().map(LevelShape::calls).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.levels.iter().map(LevelShape::bytes).sum()
    }

    /// The fitted terms' inputs, summed over the levels: levels, calls, critical
    /// edges at `width`, neighbours merged, bytes moved.
    pub fn features(&self, width: usize) -> [f64; TERMS] {
        self.levels.iter().fold([0.0; TERMS], |f, l| {
            [
                f[0] + 1.0,
                f[1] + l.calls() as f64,
                f[2] + l.critical_edges(width),
                f[3] + l.returned() as f64,
                f[4] + l.bytes() as f64,
            ]
        })
    }
}

/// Vertex `v`'s server when `g` is cut into `parts` vertex ranges of about equal
/// bytes (as [`crate::Layout::plan`] cuts them, without its region bound) dealt
/// round the `servers`: the owners of a projected cluster.
pub fn range_owners(g: &Csr, parts: usize, servers: usize) -> Vec<u16> {
    let n = g.vertices();
    let total = u64::from(n) * 16 + 4 * g.edges();
    let target = total.div_ceil(parts.max(1) as u64).max(1);
    let (mut out, mut part, mut size) = (Vec::with_capacity(n as usize), 0usize, 0u64);
    for v in 0..n {
        if size >= target && part + 1 < parts {
            part += 1;
            size = 0;
        }
        size += 16 + 4 * g.degree(v);
        out.push((part % servers.max(1)) as u16);
    }
    out
}

/// Fitted costs, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Costs {
    pub per_level_us: f64,
    pub per_call_us: f64,
    pub per_edge_us: f64,
    pub per_neighbour_us: f64,
    /// Per byte sent or received, beyond the wire's own time (the kernels' and, in
    /// the lab, its relays' copying).
    pub per_byte_us: f64,
}

/// The fitted costs' count.
pub const TERMS: usize = 5;

impl Costs {
    fn as_array(&self) -> [f64; TERMS] {
        [
            self.per_level_us,
            self.per_call_us,
            self.per_edge_us,
            self.per_neighbour_us,
            self.per_byte_us,
        ]
    }

    fn from_array(a: [f64; TERMS]) -> Self {
        Self {
            per_level_us: a[0],
            per_call_us: a[1],
            per_edge_us: a[2],
            per_neighbour_us: a[3],
            per_byte_us: a[4],
        }
    }
}

/// Where a query runs: the round trip, the client's link, and how many servers
/// scan at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Network {
    pub rtt_us: f64,
    pub link_gbit: f64,
    pub width: usize,
}

impl Network {
    fn wire_us(&self, bytes: u64) -> f64 {
        bytes as f64 * 8.0 / (self.link_gbit * 1e3)
    }
}

/// A query's measured latency, with its shape, for calibration.
#[derive(Debug, Clone)]
pub struct Sample {
    pub shape: QueryShape,
    pub net: Network,
    pub latency_us: f64,
}

/// The model: fitted costs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Model {
    pub costs: Costs,
}

/// A projection of one query shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Projection {
    pub latency_us: f64,
    /// Queries per second with many in flight: the client's CPU, the busiest
    /// server's CPU or the client's link, whichever runs out first.
    pub throughput: f64,
    pub calls: u64,
    pub bytes: u64,
}

impl Model {
    /// Least squares of the relative errors over `samples` with every cost ≥ 0
    /// (each subset of the four costs is solved, the best non-negative fit kept).
    pub fn fit(samples: &[Sample]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let rows: Vec<([f64; TERMS], f64)> = samples
            .iter()
            .map(|s| {
                let fixed: f64 = s
                    .shape
                    .levels
                    .iter()
                    .map(|l| s.net.rtt_us + s.net.wire_us(l.bytes()))
                    .sum();
                // Relative errors count: a 1 ms query's miss weighs as much as a
                // 10 ms one's, so the per-level and per-call costs that dominate
                // short queries are fitted too.
                let w = 1.0 / s.latency_us.max(1.0);
                let x = s.shape.features(s.net.width).map(|f| f * w);
                (x, (s.latency_us - fixed) * w)
            })
            .collect();
        let mut best: Option<([f64; TERMS], f64)> = None;
        for mask in 1u32..(1 << TERMS) {
            let idx: Vec<usize> = (0..TERMS).filter(|i| mask & (1 << i) != 0).collect();
            let Some(sol) = solve_subset(&rows, &idx) else {
                continue;
            };
            if sol.iter().any(|&c| c < 0.0) {
                continue;
            }
            let mut c = [0.0; TERMS];
            for (i, &j) in idx.iter().enumerate() {
                c[j] = sol[i];
            }
            let err: f64 = rows
                .iter()
                .map(|(x, y)| {
                    let p: f64 = x.iter().zip(&c).map(|(a, b)| a * b).sum();
                    (p - y) * (p - y)
                })
                .sum();
            if best.is_none_or(|(_, e)| err < e) {
                best = Some((c, err));
            }
        }
        best.map(|(c, _)| Self {
            costs: Costs::from_array(c),
        })
    }

    /// Latency of one query of `shape` on `net`.
    pub fn latency_us(&self, shape: &QueryShape, net: &Network) -> f64 {
        let c = self.costs.as_array();
        let f = shape.features(net.width);
        let costs: f64 = f.iter().zip(&c).map(|(a, b)| a * b).sum();
        let fixed: f64 = shape
            .levels
            .iter()
            .map(|l| net.rtt_us + net.wire_us(l.bytes()))
            .sum();
        costs + fixed
    }

    /// Latency and saturated throughput of `shape` on `net`.
    pub fn project(&self, shape: &QueryShape, net: &Network) -> Projection {
        let c = self.costs;
        let client: f64 = shape
            .levels
            .iter()
            .map(|l| {
                c.per_level_us
                    + c.per_call_us * l.calls() as f64
                    + c.per_neighbour_us * l.returned() as f64
                    + c.per_byte_us * l.bytes() as f64
            })
            .sum();
        let servers = shape.levels.first().map_or(0, |l| l.servers.len());
        let busiest = (0..servers)
            .map(|s| {
                shape
                    .levels
                    .iter()
                    .map(|l| c.per_edge_us * l.servers[s].edges as f64)
                    .sum::<f64>()
            })
            .fold(0.0, f64::max);
        let wire = net.wire_us(shape.bytes());
        let bottleneck = client.max(busiest).max(wire).max(1e-3);
        Projection {
            latency_us: self.latency_us(shape, net),
            throughput: 1e6 / bottleneck,
            calls: shape.calls(),
            bytes: shape.bytes(),
        }
    }
}

/// Least squares for the columns `idx` of `rows` (normal equations, Gaussian
/// elimination with partial pivoting); `None` when singular.
fn solve_subset(rows: &[([f64; TERMS], f64)], idx: &[usize]) -> Option<Vec<f64>> {
    let m = idx.len();
    let mut a = vec![vec![0.0; m + 1]; m];
    for (x, y) in rows {
        for i in 0..m {
            for j in 0..m {
                a[i][j] += x[idx[i]] * x[idx[j]];
            }
            a[i][m] += x[idx[i]] * y;
        }
    }
    for col in 0..m {
        let pivot = (col..m).max_by(|&r, &s| a[r][col].abs().total_cmp(&a[s][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        let row = a[col].clone();
        for (r, other) in a.iter_mut().enumerate() {
            if r != col {
                let f = other[col] / row[col];
                for (x, p) in other.iter_mut().zip(&row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    Some((0..m).map(|i| a[i][m] / a[i][i]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path 0-1-2-3 and a star 4-{5,6,7}, both ways.
    fn small() -> Csr {
        let edges = [(0, 1), (1, 2), (2, 3), (4, 5), (4, 6), (4, 7), (3, 4)];
        Csr::from_edges(8, &edges, true).expect("csr")
    }

    #[test]
    fn shapes_count_what_each_server_is_sent_scans_and_returns() {
        let g = small();
        // Vertices 0..4 on server 0, 4..8 on server 1.
        let q = QueryShape::compute(&g, |v| (v / 4) as usize, 2, 2, 3);
        assert_eq!(q.levels.len(), 3);
        // Level 1: vertex 2 (server 0) scans 1 and 3.
        assert_eq!(
            q.levels[0].servers,
            vec![
                ServerLevel {
                    frontier: 1,
                    edges: 2,
                    returned: 2
                },
                ServerLevel::default()
            ]
        );
        assert_eq!(q.levels[0].fresh, 2);
        // Level 2: 1 and 3 (server 0) scan 0, 2 and 2, 4: distinct {0, 2, 4}.
        assert_eq!(q.levels[1].servers[0].edges, 4);
        assert_eq!(q.levels[1].servers[0].returned, 3);
        assert_eq!(q.levels[1].fresh, 2, "0 and 4");
        // Level 3: 0 on server 0, 4 on server 1.
        assert_eq!(q.levels[2].calls(), 2);
        assert_eq!(q.levels[2].servers[1].edges, 4);
        assert_eq!(q.reached(), g.reach(2, 3), "all but the source");
        // Critical edges: the busiest server, or the total over the width.
        assert_eq!(q.levels[2].critical_edges(2), 4.0);
        assert_eq!(q.levels[2].critical_edges(1), 5.0);
    }

    #[test]
    fn a_fit_recovers_the_costs_that_made_the_samples() {
        let g = crate::Csr::from_edges(
            1 << 10,
            &crate::kronecker_edges(10, 8, 3).expect("edges"),
            true,
        )
        .expect("csr");
        let truth = Model {
            costs: Costs {
                per_level_us: 7.0,
                per_call_us: 3.0,
                per_edge_us: 0.01,
                per_neighbour_us: 0.02,
                per_byte_us: 0.0,
            },
        };
        let mut samples = Vec::new();
        for servers in [2usize, 3] {
            let owners = range_owners(&g, 2 * servers, servers);
            for src in 0..40u32 {
                for k in [1u8, 2, 3] {
                    let shape =
                        QueryShape::compute(&g, |v| owners[v as usize] as usize, servers, src, k);
                    let net = Network {
                        rtt_us: 50.0 + f64::from(src % 3) * 20.0,
                        link_gbit: 10.0,
                        width: 2,
                    };
                    let latency_us = truth.latency_us(&shape, &net);
                    samples.push(Sample {
                        shape,
                        net,
                        latency_us,
                    });
                }
            }
        }
        let fit = Model::fit(&samples).expect("a fit");
        let (a, b) = (fit.costs.as_array(), truth.costs.as_array());
        for i in 0..TERMS {
            assert!(
                (a[i] - b[i]).abs() <= 1e-6 * b[i].max(1.0),
                "{a:?} vs {b:?}"
            );
        }
        // Projections: more servers scan in parallel, so the latency drops.
        let shape = |servers: usize| {
            let owners = range_owners(&g, 2 * servers, servers);
            QueryShape::compute(&g, |v| owners[v as usize] as usize, servers, 1, 3)
        };
        let net = |width| Network {
            rtt_us: 50.0,
            link_gbit: 10.0,
            width,
        };
        let p2 = fit.project(&shape(2), &net(2));
        let p8 = fit.project(&shape(8), &net(8));
        assert!(p8.calls > p2.calls);
        assert!(p2.throughput > 0.0 && p8.throughput > 0.0);
    }

    #[test]
    fn range_owners_deal_parts_round_the_servers() {
        let g = small();
        let o = range_owners(&g, 4, 2);
        assert_eq!(o.len(), 8);
        assert!(
            o.windows(2)
                .all(|w| w[0] <= w[1] || (w[0] == 1 && w[1] == 0))
        );
        assert!(o.contains(&0) && o.contains(&1));
    }
}
