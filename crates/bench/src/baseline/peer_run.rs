//! One timed run against one peer, and the op it ran: what every peer driver
//! (our spinning drivers, redis-benchmark's batch form) reports.

use serde::{Deserialize, Serialize};

use super::driver::{LoadOpts, LoadOutcome};
use crate::row::{BenchRow, nan_as_null};

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PeerOp {
    Get,
    Set,
}

impl PeerOp {
    /// "GET" / "SET".
    pub fn name(self) -> &'static str {
        match self {
            PeerOp::Get => "GET",
            PeerOp::Set => "SET",
        }
    }
}

/// One timed run against one peer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerRun {
    /// e.g. "redis MGET b=1024 q=4 c=2", "memcached multi-get b=1024 q=4 c=2",
    /// "redis pipelined GET P=1024 q=4 c=1".
    pub peer: String,
    /// "redis" | "memcached"
    pub system: String,
    pub op: PeerOp,
    pub value_size: usize,
    pub keys: u64,
    /// Connections (`c`).
    pub connections: usize,
    /// Keys per batch (`b`).
    pub batch: usize,
    /// Batches in flight per connection (`q`).
    pub depth: usize,
    /// Million keys per second.
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub mops: f64,
    /// Batch latency percentiles, µs.
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p50_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p99_us: f64,
    /// Failed keys (misses, error replies, wrong sizes); should be 0.
    pub errors: u64,
}

impl PeerRun {
    pub(super) fn new(
        system: &str,
        label: String,
        op: PeerOp,
        opts: &LoadOpts,
        o: &LoadOutcome,
    ) -> Self {
        if o.errors > 0 {
            eprintln!(
                "[farcache-bench] warning: {system} {label} c={}: {} failed keys (first: {})",
                opts.connections,
                o.errors,
                o.first_error.as_deref().unwrap_or("?")
            );
        }
        PeerRun {
            peer: format!("{system} {label} c={}", opts.connections),
            system: system.into(),
            op,
            value_size: opts.value_size,
            keys: opts.keys,
            connections: opts.connections,
            batch: opts.batch,
            depth: opts.depth,
            mops: o.mops,
            p50_us: o.batch_latency.p50_us,
            p99_us: o.batch_latency.p99_us,
            errors: o.errors,
        }
    }

    /// This run as a report row (latencies are per batch).
    pub fn to_row(&self) -> BenchRow {
        BenchRow {
            name: format!("{} {}B", self.peer, self.value_size),
            system: self.system.clone(),
            op: self.op.name().into(),
            record_size: self.value_size,
            distribution: "uniform".into(),
            c: Some(self.connections),
            b: Some(self.batch),
            q: Some(self.depth),
            mops: self.mops,
            p50_us: self.p50_us,
            p99_us: self.p99_us,
            ..BenchRow::default()
        }
    }
}
