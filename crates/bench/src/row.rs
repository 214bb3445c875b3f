//! One line of a benchmark report, shared by every suite and every peer driver.

use serde::{Deserialize, Serialize};

/// serde helper: `f64` fields serialize NaN as `null` (serde_json does this
/// by itself); this maps `null` back to NaN when deserializing.
pub(crate) mod nan_as_null {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }
}

/// One line of a benchmark report. Unknown numeric values are NaN
/// (serialized as `null`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchRow {
    pub name: String,
    /// "farcache" | "redis" | "sockperf"
    pub system: String,
    pub op: String,
    pub record_size: usize,
    pub distribution: String,
    pub c: Option<usize>,
    pub s: Option<usize>,
    pub b: Option<usize>,
    pub q: Option<usize>,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub mops: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p50_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p99_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p999_us: f64,
    /// e.g. "redis GET P=64 c=4"
    pub baseline: Option<String>,
    pub baseline_mops: Option<f64>,
    pub ratio_vs_redis: Option<f64>,
    pub baseline_latency_us: Option<f64>,
    pub latency_ratio_vs_raw_tcp: Option<f64>,
    pub bandwidth_gbps: Option<f64>,
    pub bandwidth_ratio_vs_sockperf: Option<f64>,
    /// `bandwidth_gbps` ÷ the spinning multi-message loopback stream's Gbit/s.
    #[serde(default)]
    pub bandwidth_ratio_vs_stream: Option<f64>,
    /// Speedup of a stored procedure over doing the same work at the client with
    /// plain reads (`bench sproc`): throughput ÷ client-side throughput, or
    /// client-side time ÷ procedure time. Above 1 = the procedure wins.
    #[serde(default)]
    pub ratio_vs_client_side: Option<f64>,
    /// Server round trips per logical op (`bench sproc`: EXECUTE messages,
    /// continuations included, counted from the servers' op counters).
    #[serde(default)]
    pub round_trips: Option<f64>,
    /// Server round trips per logical op of the client-side equivalent (reads).
    #[serde(default)]
    pub client_side_round_trips: Option<f64>,
    /// Server-to-server messages and frames per logical op (`bench sproc`: FFlow
    /// hand-offs, DFlow fetches and their answers, from the servers' counters).
    #[serde(default)]
    pub peer_msgs: Option<f64>,
    #[serde(default)]
    pub peer_frames: Option<f64>,
    /// The fastest peer measured for this row's op and size in the same run (Redis
    /// pipelined or MGET/MSET, redis-benchmark, memcached multi-get), e.g.
    /// `memcached multi-get b=1024 q=4 c=2`.
    #[serde(default)]
    pub best_peer: Option<String>,
    #[serde(default)]
    pub best_peer_mops: Option<f64>,
    /// `mops / best_peer_mops`.
    #[serde(default)]
    pub ratio_vs_best_peer: Option<f64>,
    /// `mops` ÷ the same batches run by the server's executor in-process (no sockets).
    #[serde(default)]
    pub fraction_of_ceiling: Option<f64>,
    /// Bytes the run's addresses span (records × record size): whether it fits the
    /// CPU's caches.
    #[serde(default)]
    pub working_set_bytes: Option<u64>,
    /// Payload bytes moved per query by a near-data row (args and replies), and by
    /// the client-side equivalent (read requests and the bytes read).
    #[serde(default)]
    pub bytes_per_query: Option<f64>,
    #[serde(default)]
    pub client_bytes_per_query: Option<f64>,
    /// Delay added each way between any two hosts (`bench sproc --lab-delays`).
    #[serde(default)]
    pub one_way_delay_us: Option<f64>,
    /// The client–server TCP round trip the lab measured at that delay (µs).
    #[serde(default)]
    pub lab_rtt_us: Option<f64>,
    /// e.g. ">= 10x"
    pub target: Option<String>,
    pub meets_target: Option<bool>,
}

impl Default for BenchRow {
    fn default() -> Self {
        BenchRow {
            name: String::new(),
            system: String::new(),
            op: String::new(),
            record_size: 0,
            distribution: String::new(),
            c: None,
            s: None,
            b: None,
            q: None,
            mops: f64::NAN,
            p50_us: f64::NAN,
            p99_us: f64::NAN,
            p999_us: f64::NAN,
            baseline: None,
            baseline_mops: None,
            ratio_vs_redis: None,
            baseline_latency_us: None,
            latency_ratio_vs_raw_tcp: None,
            bandwidth_gbps: None,
            bandwidth_ratio_vs_sockperf: None,
            bandwidth_ratio_vs_stream: None,
            ratio_vs_client_side: None,
            round_trips: None,
            client_side_round_trips: None,
            peer_msgs: None,
            peer_frames: None,
            best_peer: None,
            best_peer_mops: None,
            ratio_vs_best_peer: None,
            fraction_of_ceiling: None,
            working_set_bytes: None,
            bytes_per_query: None,
            client_bytes_per_query: None,
            one_way_delay_us: None,
            lab_rtt_us: None,
            target: None,
            meets_target: None,
        }
    }
}

impl BenchRow {
    /// Sets `baseline`/`baseline_mops` and `ratio_vs_redis = mops / baseline_mops`.
    pub fn with_redis_baseline(mut self, label: impl Into<String>, baseline_mops: f64) -> Self {
        self.baseline = Some(label.into());
        self.baseline_mops = Some(baseline_mops);
        self.ratio_vs_redis = ratio(self.mops, baseline_mops);
        self
    }

    /// Sets `baseline_latency_us` and `latency_ratio_vs_raw_tcp = p50_us / raw_rtt_us`.
    pub fn with_latency_baseline(mut self, raw_rtt_us: f64) -> Self {
        self.baseline_latency_us = Some(raw_rtt_us);
        self.latency_ratio_vs_raw_tcp = ratio(self.p50_us, raw_rtt_us);
        self
    }

    /// Sets `bandwidth_gbps` and `bandwidth_ratio_vs_sockperf = gbps / sockperf_gbps`.
    pub fn with_bandwidth(mut self, gbps: f64, sockperf_gbps: f64) -> Self {
        self.bandwidth_gbps = Some(gbps);
        self.bandwidth_ratio_vs_sockperf = ratio(gbps, sockperf_gbps);
        self
    }

    /// Sets `ratio_vs_client_side` (see the field) when `speedup` is a finite positive number.
    pub fn with_client_side_ratio(mut self, speedup: f64) -> Self {
        self.ratio_vs_client_side = (speedup.is_finite() && speedup > 0.0).then_some(speedup);
        self
    }

    /// Sets `round_trips` and `client_side_round_trips` (per logical op).
    pub fn with_round_trips(mut self, procedure: f64, client_side: Option<f64>) -> Self {
        self.round_trips = Some(procedure);
        self.client_side_round_trips = client_side;
        self
    }

    /// Sets the server-to-server messages and frames per logical op.
    pub fn with_peer(mut self, msgs: f64, frames: f64) -> Self {
        self.peer_msgs = Some(msgs);
        self.peer_frames = Some(frames);
        self
    }

    /// Sets `best_peer`, `best_peer_mops` and `ratio_vs_best_peer`.
    pub fn with_best_peer(mut self, peer: impl Into<String>, peer_mops: f64) -> Self {
        self.best_peer = Some(peer.into());
        self.best_peer_mops = Some(peer_mops);
        self.ratio_vs_best_peer = ratio(self.mops, peer_mops);
        self
    }

    /// Sets `fraction_of_ceiling = mops / ceiling_mops`.
    pub fn with_ceiling(mut self, ceiling_mops: f64) -> Self {
        self.fraction_of_ceiling = ratio(self.mops, ceiling_mops);
        self
    }

    /// Sets the target description and whether it was met.
    pub fn with_target(mut self, target: impl Into<String>, meets: bool) -> Self {
        self.target = Some(target.into());
        self.meets_target = Some(meets);
        self
    }

    /// `c/s/b/q` as printed in the table, `-` for unset parameters.
    pub fn params(&self) -> String {
        [self.c, self.s, self.b, self.q]
            .iter()
            .map(|v| v.map_or_else(|| "-".to_string(), |v| v.to_string()))
            .collect::<Vec<_>>()
            .join("/")
    }
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (a.is_finite() && b.is_finite() && b > 0.0).then(|| a / b)
}
