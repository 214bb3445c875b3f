//! The three-server cluster of rows 3 and 4 (chase, k-hop): the clusters, what their servers count while a run
//! goes on, and the rows comparing a procedure with the same work done at the client.

use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use farcache_client::Client;
use farcache_proto::Role;
use farcache_proto::blocking::{control_call, handshake};
use farcache_proto::control::{ControlRequest, ControlResponse, PeerStats};
use farcache_sproc::builtin::Flow;
use farcache_testkit::{ClusterOptions, Lab, ProcessCluster};

use super::measure::RunOutcome;
use super::{REGION, SprocBenchOptions, cluster_err, farcache_row};
use crate::error::Result;
use crate::report::BenchRow;

/// Servers of the chase / k-hop cluster.
pub(super) const SPREAD_SERVERS: usize = 3;

/// Three single-threaded servers, a client, and op counters on every server. Fields
/// drop in order, the servers last.
pub(super) struct SpreadCluster {
    pub(super) client: Client,
    counters: OpCounters,
    _cluster: ProcessCluster,
}

impl SpreadCluster {
    pub(super) fn start(
        opts: &SprocBenchOptions,
        server_memory: u64,
        peer_batching: bool,
    ) -> Result<Self> {
        Self::start_with(opts, server_memory, peer_batching, None)
    }

    /// The cluster, in `lab` when given (a host per process; call from a lab host's
    /// thread so the client reaches it).
    pub(super) fn start_with(
        opts: &SprocBenchOptions,
        server_memory: u64,
        peer_batching: bool,
        lab: Option<Arc<Lab>>,
    ) -> Result<Self> {
        let o = ClusterOptions::default()
            .servers(SPREAD_SERVERS)
            .server_threads(1)
            .server_memory(server_memory)
            .region_size(REGION)
            .peer_batching(peer_batching);
        let cluster = match lab {
            Some(lab) => ProcessCluster::start_in_lab(&opts.bin, &o, lab),
            None => ProcessCluster::start(&opts.bin, &o),
        }
        .map_err(cluster_err)?;
        let client = cluster.client().map_err(cluster_err)?;
        let addrs: Vec<String> = (0..SPREAD_SERVERS)
            .map(|i| cluster.server_addr(i).to_string())
            .collect();
        let cred = farcache_proto::Credential::Cluster(cluster.secret().clone());
        let counters = OpCounters::connect(&addrs, &cred)?;
        Ok(Self {
            client,
            counters,
            _cluster: cluster,
        })
    }

    /// Runs `run` and returns it with what the servers counted of `op` meanwhile.
    pub(super) fn counted(
        &mut self,
        op: &str,
        run: impl FnOnce() -> RunOutcome,
    ) -> Result<Measured> {
        let (before, p0) = self.counters.count(op)?;
        let out = run();
        let (after, p1) = self.counters.count(op)?;
        Ok(Measured {
            out,
            ops: (after - before) as f64,
            peer_msgs: (p1.msgs_sent - p0.msgs_sent) as f64,
            peer_frames: (p1.frames_sent - p0.frames_sent) as f64,
        })
    }
}

/// Per-server op counters read over each server's control API (`ServerStats`).
struct OpCounters {
    conns: Vec<TcpStream>,
}

impl OpCounters {
    fn connect(addrs: &[String], cred: &farcache_proto::Credential) -> Result<Self> {
        let mut conns = Vec::new();
        for (i, a) in addrs.iter().enumerate() {
            let mut s = TcpStream::connect(a.as_str())?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.set_nodelay(true)?;
            handshake(&mut s, Role::Client, 0x5000 + i as u64, "", cred).map_err(cluster_err)?;
            conns.push(s);
        }
        Ok(Self { conns })
    }

    /// `op`s executed so far and the server-to-server traffic, summed over the
    /// servers (counts are published before a batch's reply is sent, so they are exact
    /// once the replies are in).
    fn count(&mut self, op: &str) -> Result<(u64, PeerStats)> {
        let mut total = 0;
        let mut peer = PeerStats::default();
        for s in &mut self.conns {
            match control_call(s, &ControlRequest::ServerStats).map_err(cluster_err)? {
                ControlResponse::Stats(st) => {
                    total += st.ops.iter().find(|o| o.op == op).map_or(0, |o| o.count);
                    peer.msgs_sent += st.peer.msgs_sent;
                    peer.frames_sent += st.peer.frames_sent;
                }
                other => return Err(cluster_err(format!("unexpected stats reply {other:?}"))),
            }
        }
        Ok((total, peer))
    }
}

/// A run and what the servers counted while it went on.
pub(super) struct Measured {
    pub(super) out: RunOutcome,
    ops: f64,
    peer_msgs: f64,
    peer_frames: f64,
}

impl Measured {
    /// Per logical op of the run: (round trips, peer messages, peer frames).
    pub(super) fn per_op(&self) -> (f64, f64, f64) {
        let n = self.out.total.max(1) as f64;
        (self.ops / n, self.peer_msgs / n, self.peer_frames / n)
    }
}

/// The same work done at the client, which procedure rows are compared with: the run
/// and its round trips per query.
pub(super) struct ClientSide {
    pub(super) out: RunOutcome,
    pub(super) rt: f64,
}

impl ClientSide {
    /// The client-side run's own row.
    pub(super) fn row(&self, name: String, size: usize, dist: &str) -> BenchRow {
        spread_row(name, "read", &self.out, size, dist).with_round_trips(self.rt, None)
    }
}

/// A procedure's row against the client-side run: p50 and round trips compared, and the
/// servers' messages and frames per query.
pub(super) fn procedure_row(
    name: String,
    op: &str,
    size: usize,
    dist: &str,
    exec: &Measured,
    local: &ClientSide,
) -> BenchRow {
    let (rt, msgs, frames) = exec.per_op();
    spread_row(name, op, &exec.out, size, dist)
        .with_client_side_ratio(local.out.latency.p50_us / exec.out.latency.p50_us)
        .with_round_trips(rt, Some(local.rt))
        .with_peer(msgs, frames)
}

fn spread_row(name: String, op: &str, out: &RunOutcome, size: usize, dist: &str) -> BenchRow {
    let mut row = farcache_row(name, op, out, 1, 1);
    row.record_size = size;
    row.distribution = dist.into();
    row
}

/// How a row names the flow.
pub(super) fn flow_tag(flow: Flow) -> &'static str {
    if flow == Flow::Ship { "FFlow" } else { "DFlow" }
}
