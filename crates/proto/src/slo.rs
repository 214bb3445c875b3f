//! Service-level objectives on the control plane: what a client asks for when it
//! creates a cache from an SLO, and what the manager chose to meet it.

use serde::{Deserialize, Serialize};

/// Which latency percentile an SLO bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Percentile {
    #[default]
    P50,
    P99,
}

impl std::fmt::Display for Percentile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::P50 => "p50",
            Self::P99 => "p99",
        })
    }
}

impl std::str::FromStr for Percentile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "p50" | "50" | "median" => Ok(Self::P50),
            "p99" | "99" => Ok(Self::P99),
            other => Err(format!("percentile must be p50 or p99, not '{other}'")),
        }
    }
}

/// What the application needs from a cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// Bytes per read or write.
    pub record_size: u32,
    /// Share of ops that are reads, in `[0, 1]`.
    pub read_fraction: f64,
    /// Ops per second the cache must sustain.
    pub throughput: f64,
    /// Bound on per-op latency at `percentile`, in microseconds.
    pub latency_us: f64,
    #[serde(default)]
    pub percentile: Percentile,
    /// Copies of every region (0 or 1: none extra).
    #[serde(default)]
    pub replicas: u32,
    /// How long the cache is needed, in seconds: kept with the SLO for the operator;
    /// the search does not use it (a cache costs the same per hour whatever its life).
    #[serde(default)]
    pub duration_s: Option<u64>,
}

impl Slo {
    /// A read-only SLO on p50 latency.
    pub fn new(record_size: u32, throughput: f64, latency_us: f64) -> Self {
        Self {
            record_size,
            read_fraction: 1.0,
            throughput,
            latency_us,
            percentile: Percentile::P50,
            replicas: 0,
            duration_s: None,
        }
    }

    /// Rejects values no search can answer (NaN, negative, zero sizes).
    pub fn validate(&self) -> Result<(), String> {
        if self.record_size == 0 {
            return Err("SLO record size must be at least 1 byte".into());
        }
        if !(0.0..=1.0).contains(&self.read_fraction) {
            return Err(format!(
                "SLO read fraction must be within [0, 1], not {}",
                self.read_fraction
            ));
        }
        if !self.throughput.is_finite() || self.throughput <= 0.0 {
            return Err(format!(
                "SLO throughput must be a positive number of ops/s, not {}",
                self.throughput
            ));
        }
        if !self.latency_us.is_finite() || self.latency_us <= 0.0 {
            return Err(format!(
                "SLO latency must be a positive number of microseconds, not {}",
                self.latency_us
            ));
        }
        Ok(())
    }
}

impl std::fmt::Display for Slo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} B records, {:.0}% reads, >= {:.3} Mops/s, {} <= {:.1} us",
            self.record_size,
            self.read_fraction * 100.0,
            self.throughput / 1e6,
            self.percentile,
            self.latency_us
        )
    }
}

/// The transport knobs of Redy's model: client threads (`c`, one connection lane
/// each), server worker threads (`s`), ops per batch (`b`), batches in flight per
/// connection (`q`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Transport {
    pub s: u32,
    pub c: u32,
    pub b: u32,
    pub q: u32,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c={} s={} b={} q={}", self.c, self.s, self.b, self.q)
    }
}

/// What the manager chose for a cache created from an SLO, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloChoice {
    pub slo: Slo,
    pub transport: Transport,
    /// The model's prediction for `transport` at the SLO's percentile.
    pub predicted_latency_us: f64,
    pub predicted_throughput: f64,
    /// Memory and cores, at the prices of the servers holding the cache.
    pub dollars_per_hour: f64,
    /// Which model answered (its id: machine and date).
    pub model: String,
    /// Time the search took, in microseconds.
    pub search_us: f64,
}
