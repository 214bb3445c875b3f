//! Row 3: chains of `CHASE_LEN` nodes over three servers, walked by one `chase` call
//! (FFlow, DFlow) and by dependent reads from the client.

use std::time::Duration;

use farcache_client::Cache;
use farcache_sproc::builtin::{Chase, Flow, NULL};
use indicatif::ProgressBar;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use super::measure::{RunOutcome, run_serial};
use super::spread::{ClientSide, Measured, SPREAD_SERVERS, SpreadCluster, flow_tag, procedure_row};
use super::{
    CHASE_LEN, REGION, SprocBenchOptions, TARGET_CHASE_LAB_RATIO, TARGET_CHASE_RT_RATIO,
    TARGET_CHASE_TIME_RATIO, TARGET_DELAY_US, check_writes, cluster_err, with_targets,
};
use crate::error::{BenchError, Result};
use crate::report::{BenchReport, BenchRow};

/// Chain nodes: 32-byte slots with the next pointer at offset 16.
const NODE: u64 = 32;
const NEXT_OFF: u32 = 16;
/// Two regions per server hold the chains.
pub(super) const CHASE_CAP: u64 = 2 * SPREAD_SERVERS as u64 * REGION;
/// The cache holding the chains.
const CACHE: &str = "bench-sproc-chase";

/// Row 3 for both placements: the `chase` procedure with FFlow and DFlow, then the
/// client-side reads, all timed one walk at a time.
/// `delay_us` labels rows run in the network lab (their targets are the lab's).
pub(super) fn chase_rows(
    opts: &SprocBenchOptions,
    spread: &mut SpreadCluster,
    pb: &ProgressBar,
    report: &mut BenchReport,
    delay_us: Option<f64>,
) -> Result<()> {
    let cache = spread
        .client
        .create_with_region_size(CACHE, CHASE_CAP, Some(REGION))
        .map_err(cluster_err)?;
    let mut free = free_slots(&cache)?;
    for placement in [Placement::Segments, Placement::Interleaved] {
        let mut chains = Chains::build(&cache, &mut free, opts.chains, placement)?;
        chains.delay_us = delay_us;
        if let Some(d) = delay_us {
            chains.label.push_str(&format!(" @ {d:.0}us one-way"));
        }
        let mut flows = Vec::new();
        for flow in [Flow::Ship, Flow::Pull] {
            pb.set_message(format!("{}: chase procedure, {flow:?}", chains.label));
            let exec = spread.counted("execute", || {
                chains.run_procedure(&cache, flow, opts.duration)
            })?;
            pb.inc(1);
            flows.push((flow, exec));
        }
        pb.set_message(format!("{}: client-side reads", chains.label));
        let reads = spread.counted("read", || chains.run_reads(&cache, opts.duration))?;
        pb.inc(1);
        // Every sample, warm-up included, went through the counters.
        let (rt, _, _) = reads.per_op();
        let local = ClientSide { out: reads.out, rt };
        for (flow, exec) in flows {
            report.rows.push(chains.procedure_row(flow, &exec, &local));
        }
        let name = format!("{}, client reads", chains.label);
        let mut row = local.row(name, NODE as usize, &chains.dist());
        row.one_way_delay_us = delay_us;
        report.rows.push(row);
    }
    drop(cache);
    spread.client.delete(CACHE).map_err(cluster_err)?;
    Ok(())
}

/// Every node slot of the chase cache, per server holding its regions, shuffled.
fn free_slots(cache: &Cache) -> Result<Vec<Vec<u64>>> {
    let info = cache.info();
    let mut owners: Vec<u32> = info.regions.clone();
    owners.sort_unstable();
    owners.dedup();
    if owners.len() != SPREAD_SERVERS {
        return Err(cluster_err(format!(
            "the chase cache spans {} servers, not {SPREAD_SERVERS}",
            owners.len()
        )));
    }
    let mut rng = StdRng::seed_from_u64(5);
    Ok(owners
        .iter()
        .map(|&s| {
            let mut slots: Vec<u64> = (0..info.regions.len())
                .filter(|&r| info.regions[r] == s)
                .flat_map(|r| (0..REGION / NODE).map(move |j| r as u64 * REGION + j * NODE))
                .collect();
            slots.shuffle(&mut rng);
            slots
        })
        .collect())
}

/// The chains of one placement, written to the cache, and the label of their rows.
struct Chains {
    placement: Placement,
    heads: Vec<u64>,
    /// Server crossings per chain.
    crossings: u32,
    label: String,
    /// The lab's one-way delay, for rows run there.
    delay_us: Option<f64>,
}

impl Chains {
    fn build(
        cache: &Cache,
        free: &mut [Vec<u64>],
        chains: usize,
        placement: Placement,
    ) -> Result<Self> {
        let (heads, crossings) = build_chains(cache, free, chains, placement)?;
        let label = match placement {
            Placement::Segments => format!("pointer chase {CHASE_LEN} across 3 servers"),
            Placement::Interleaved => format!("pointer chase {CHASE_LEN}, every hop crosses"),
        };
        Ok(Self {
            placement,
            heads,
            crossings,
            label,
            delay_us: None,
        })
    }

    fn dist(&self) -> String {
        format!("{} crossings", self.crossings)
    }

    /// One `chase` call per walk, the chains in turn.
    fn run_procedure(&self, cache: &Cache, flow: Flow, duration: Duration) -> RunOutcome {
        run_serial(duration, |i| {
            let head = self.heads[i as usize % self.heads.len()];
            cache
                .execute(
                    Chase::NAME,
                    head,
                    &Chase::args_with(head, NEXT_OFF, CHASE_LEN, flow),
                )
                .ok()
                .and_then(|r| Chase::result(&r).ok())
                == Some((NULL, CHASE_LEN))
        })
    }

    /// The same walks as `CHASE_LEN` dependent reads from the client.
    fn run_reads(&self, cache: &Cache, duration: Duration) -> RunOutcome {
        run_serial(duration, |i| {
            let mut cur = self.heads[i as usize % self.heads.len()];
            for _ in 0..CHASE_LEN {
                // A chain that ends early (NULL) fails here rather than wrapping.
                let Some(at) = cur.checked_add(u64::from(NEXT_OFF)) else {
                    return false;
                };
                match cache.read(at, 8) {
                    Ok(d) if d.len() == 8 => {
                        cur = u64::from_le_bytes(d[..8].try_into().unwrap_or([0; 8]));
                    }
                    _ => return false,
                }
            }
            cur == NULL
        })
    }

    /// A `chase` row; FFlow over three segments carries the row-3 targets.
    fn procedure_row(&self, flow: Flow, exec: &Measured, local: &ClientSide) -> BenchRow {
        let how = match flow {
            Flow::Ship => "FFlow: servers hand the invocation to each other",
            _ => "DFlow: the first server pulls every remote node",
        };
        let mut row = procedure_row(
            format!("{} ({})", self.label, flow_tag(flow)),
            Chase::NAME,
            NODE as usize,
            &self.dist(),
            exec,
            local,
        );
        row.baseline = Some(format!(
            "client-side {CHASE_LEN} dependent reads p50 {:.1}us; {how}",
            local.out.latency.p50_us
        ));
        row.one_way_delay_us = self.delay_us;
        if self.placement == Placement::Segments && flow == Flow::Ship {
            row = with_chase_targets(row, exec, local, self.delay_us);
        }
        row
    }
}

/// Row 3's targets: the client's time and round trips over the procedure's; in the
/// lab, the client's time at [`TARGET_DELAY_US`] only.
fn with_chase_targets(
    row: BenchRow,
    exec: &Measured,
    local: &ClientSide,
    delay_us: Option<f64>,
) -> BenchRow {
    let speedup = local.out.latency.p50_us / exec.out.latency.p50_us;
    let (rt, _, _) = exec.per_op();
    let rt_ratio = local.rt / rt;
    let targets = match delay_us {
        None => vec![
            (
                format!(">= {TARGET_CHASE_TIME_RATIO}x client time"),
                speedup >= TARGET_CHASE_TIME_RATIO,
            ),
            (
                format!(">= {TARGET_CHASE_RT_RATIO}x fewer RT"),
                rt_ratio >= TARGET_CHASE_RT_RATIO,
            ),
        ],
        Some(d) if d == TARGET_DELAY_US => vec![(
            format!(">= {TARGET_CHASE_LAB_RATIO}x client time"),
            speedup >= TARGET_CHASE_LAB_RATIO,
        )],
        Some(_) => Vec::new(),
    };
    with_targets(row, exec.out.errors + local.out.errors, &targets)
}

/// How a chain's nodes are spread over the servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Three contiguous runs of nodes, one per server: the chain crosses servers twice.
    Segments,
    /// Node `i` on server `i mod 3`: every pointer leads to another server.
    Interleaved,
}

/// Lays out `chains` chains of `CHASE_LEN` nodes at random free slots of the servers'
/// regions and returns their heads with the server crossings per chain.
fn build_chains(
    cache: &Cache,
    free: &mut [Vec<u64>],
    chains: usize,
    placement: Placement,
) -> Result<(Vec<u64>, u32)> {
    let info = cache.info();
    let servers = free.len();
    let mut heads = Vec::with_capacity(chains);
    let mut batch = cache.batch();
    let mut pending = Vec::new();
    let mut crossings = 0;
    for c in 0..chains {
        let mut nodes = Vec::with_capacity(CHASE_LEN as usize);
        for i in 0..CHASE_LEN as usize {
            let part = match placement {
                Placement::Segments => i * servers / CHASE_LEN as usize,
                Placement::Interleaved => i,
            };
            let s = (c + part) % servers;
            let slot = free[s].pop().ok_or_else(|| {
                BenchError::InvalidArgument("too many chains for the chase cache".into())
            })?;
            nodes.push(slot);
        }
        let owner = |a: u64| info.regions[info.region_of(a)];
        crossings = nodes
            .windows(2)
            .filter(|w| owner(w[0]) != owner(w[1]))
            .count() as u32;
        for (i, &n) in nodes.iter().enumerate() {
            let next = nodes.get(i + 1).copied().unwrap_or(NULL);
            batch.write(n + u64::from(NEXT_OFF), &next.to_le_bytes());
        }
        heads.push(nodes[0]);
        if batch.len() >= 1024 {
            pending.push(std::mem::replace(&mut batch, cache.batch()).submit());
        }
    }
    pending.push(batch.submit());
    pending.into_iter().try_for_each(check_writes)?;
    Ok((heads, crossings))
}
