//! Rows 3–5 in the network lab (root): the manager, the three servers and the client
//! each on a host of its own, every host's link shaped to 10 Gbit/s and delayed by
//! half of each one-way delay in `--lab-delays`, so any two hosts are that far
//! apart. At each delay: the pointer chase (FFlow, DFlow, client reads), the k-hop
//! procedure against the client-side BFS, and the traversal against the client-side
//! search.

use std::sync::Arc;
use std::time::Duration;

use farcache_testkit::{Lab, ProcessCluster};
use indicatif::ProgressBar;

use super::chase::chase_rows;
use super::khop::{self, StoredGraph, khop_rows};
use super::spread::{SPREAD_SERVERS, SpreadCluster};
use super::traversal::{self, BenchGraph};
use super::{SprocBenchOptions, cluster_err};
use crate::error::Result;
use crate::report::{BenchReport, BenchRow};

/// Link rate of every lab host (Mbit/s).
const LINK_MBIT: u32 = 10_000;
/// Progress steps per delay: chase 2 × 3, k-hop 2 × 3, traversal 2 × 2.
const STEPS_PER_DELAY: u64 = 16;

/// Runs rows 3–5 at every delay of `opts.lab_delays` on one lab cluster holding all
/// three data sets; `server_memory` is what the chase and k-hop data need per server.
pub(super) fn lab_rows(
    opts: &SprocBenchOptions,
    graph: StoredGraph,
    graphs: Vec<BenchGraph>,
    server_memory: u64,
    pb: &ProgressBar,
    report: &mut BenchReport,
) -> Result<()> {
    let steps = STEPS_PER_DELAY + 4 * (graphs.len() as u64 - 1);
    pb.inc_length(steps * opts.lab_delays.len() as u64);
    let lab = Arc::new(Lab::create(&["c0"]).map_err(cluster_err)?);
    let (o, l, pb2) = (opts.clone(), lab.clone(), pb.clone());
    let memory = server_memory + graphs.iter().map(BenchGraph::server_memory).sum::<u64>();
    let (rows, notes) = lab
        .run_on("c0", move || run(&o, &l, &graph, &graphs, memory, &pb2))
        .map_err(cluster_err)??;
    report.rows.extend(rows);
    report.notes.extend(notes);
    Ok(())
}

/// The lab's side: starts the cluster and measures at each delay.
fn run(
    o: &SprocBenchOptions,
    l: &Arc<Lab>,
    graph: &StoredGraph,
    graphs: &[BenchGraph],
    memory: u64,
    pb: &ProgressBar,
) -> Result<(Vec<BenchRow>, Vec<String>)> {
    pb.set_message("lab: starting the cluster");
    let mut spread = SpreadCluster::start_with(o, memory, true, Some(l.clone()))?;
    let mut loaded = Vec::new();
    let mut notes = Vec::new();
    for (i, g) in graphs.iter().enumerate() {
        pb.set_message(format!("lab: writing the graph {}", g.label()));
        let (gc, write_secs) = traversal::load(&spread, g, &traversal::cache_name(i))?;
        notes.push(traversal::graph_note(g, gc.layout.parts.len(), write_secs));
        loaded.push(gc);
    }
    let mut hosts = vec!["c0".to_string(), ProcessCluster::manager_host(0)];
    hosts.extend((0..SPREAD_SERVERS).map(ProcessCluster::server_host));
    for h in &hosts {
        l.shape(h, LINK_MBIT).map_err(cluster_err)?;
    }
    let mut rows = Vec::new();
    for (i, &d) in o.lab_delays.iter().enumerate() {
        let half = Duration::from_nanos(u64::from(d) * 500);
        for h in &hosts {
            l.delay(h, half, Duration::ZERO).map_err(cluster_err)?;
        }
        let rtt = l.rtt("c0", &hosts[2], 21).map_err(cluster_err)?;
        let rtt_us = rtt.as_secs_f64() * 1e6;
        notes.push(format!(
            "lab at {d} us one-way ({} Gbit/s links): client-server TCP round trip p50 {:.1} us",
            LINK_MBIT / 1000,
            rtt_us
        ));
        let first = rows.len();
        let delay = f64::from(d);
        let mut scratch = BenchReport::new("sproc");
        chase_rows(o, &mut spread, pb, &mut scratch, Some(delay))?;
        khop_rows(o, &mut spread, graph, pb, &mut scratch)?;
        spread.client.delete(khop::CACHE).map_err(cluster_err)?;
        for mut row in scratch.rows {
            if row.one_way_delay_us.is_none() {
                row.name = at_delay(&row.name, delay);
                row.one_way_delay_us = Some(delay);
            }
            rows.push(row);
        }
        if i == 0 {
            notes.extend(scratch.notes);
        }
        for (gc, g) in loaded.iter().zip(graphs) {
            rows.extend(traversal::rows_at(o, gc, g, delay, pb));
        }
        for row in &mut rows[first..] {
            row.lab_rtt_us = Some(rtt_us);
        }
    }
    for i in 0..graphs.len() {
        spread
            .client
            .delete(&traversal::cache_name(i))
            .map_err(cluster_err)?;
    }
    Ok((rows, notes))
}

/// `name` with the delay after its first part: "k-hop count k=2 @ 25us one-way (…)".
fn at_delay(name: &str, delay_us: f64) -> String {
    let at = format!(" @ {delay_us:.0}us one-way");
    match name.find(" (").or_else(|| name.find(", ")) {
        Some(i) => format!("{}{at}{}", &name[..i], &name[i..]),
        None => format!("{name}{at}"),
    }
}

#[cfg(test)]
mod tests {
    use super::at_delay;

    #[test]
    fn the_delay_goes_after_the_rows_first_part() {
        assert_eq!(
            at_delay("k-hop count k=2 (DFlow, batched)", 25.0),
            "k-hop count k=2 @ 25us one-way (DFlow, batched)"
        );
        assert_eq!(
            at_delay("k-hop count k=3, client BFS", 0.0),
            "k-hop count k=3 @ 0us one-way, client BFS"
        );
        assert_eq!(at_delay("plain", 10.0), "plain @ 10us one-way");
    }
}
