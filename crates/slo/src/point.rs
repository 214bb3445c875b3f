//! One measured configuration: its transport settings and what they achieved.

use farcache_proto::slo::Transport;
use serde::{Deserialize, Serialize};

/// Latency and throughput of one configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Perf {
    pub p50_us: f64,
    pub p99_us: f64,
    /// Ops per second.
    pub throughput: f64,
}

impl Perf {
    pub fn latency(&self, p: farcache_proto::slo::Percentile) -> f64 {
        match p {
            farcache_proto::slo::Percentile::P50 => self.p50_us,
            farcache_proto::slo::Percentile::P99 => self.p99_us,
        }
    }
}

/// One measured configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Point {
    #[serde(flatten)]
    pub transport: Transport,
    #[serde(flatten)]
    pub perf: Perf,
}
