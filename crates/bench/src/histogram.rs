//! Latency histogram (nanoseconds) over `hdrhistogram`.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::row::nan_as_null;

/// Latency percentiles in microseconds. All fields are NaN (and `count` 0)
/// for an empty histogram.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p50_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p99_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p999_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub mean_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub max_us: f64,
    pub count: u64,
}

/// Auto-resizing histogram of nanosecond latencies, 3 significant digits.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    inner: Histogram<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// Empty histogram (1 ns .. 60 s initially; grows if needed).
    pub fn new() -> Self {
        let mut inner = Histogram::new_with_bounds(1, 60_000_000_000, 3)
            .expect("static histogram bounds are valid");
        inner.auto(true);
        LatencyHistogram { inner }
    }

    /// Records one latency in nanoseconds.
    #[inline]
    pub fn record(&mut self, value_ns: u64) {
        self.record_n(value_ns, 1);
    }

    /// Records `count` occurrences of `value_ns` (e.g. a batch of requests
    /// that all completed together).
    #[inline]
    pub fn record_n(&mut self, value_ns: u64, count: u64) {
        // Auto-resize grows the range as needed; only absurd values fail,
        // and those are clamped to the maximum trackable value.
        if self.inner.record_n(value_ns, count).is_err() {
            self.inner.saturating_record_n(value_ns, count);
        }
    }

    /// Records a [`Duration`].
    #[inline]
    pub fn record_duration(&mut self, d: Duration) {
        self.record(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Adds every sample of `other` into `self`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Cannot fail with auto-resize enabled; fall back to re-recording.
        if self.inner.add(&other.inner).is_err() {
            for v in other.inner.iter_recorded() {
                self.inner
                    .saturating_record_n(v.value_iterated_to(), v.count_at_value());
            }
        }
    }

    pub fn count(&self) -> u64 {
        self.inner.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    pub fn reset(&mut self) {
        self.inner.reset();
    }

    /// Latency at `quantile` (0.0..=1.0) in µs; NaN if empty.
    pub fn quantile_us(&self, quantile: f64) -> f64 {
        if self.is_empty() {
            f64::NAN
        } else {
            self.inner.value_at_quantile(quantile) as f64 / 1000.0
        }
    }

    /// p50 / p99 / p99.9 / mean / max in µs.
    pub fn summary(&self) -> LatencySummary {
        if self.is_empty() {
            return LatencySummary {
                p50_us: f64::NAN,
                p99_us: f64::NAN,
                p999_us: f64::NAN,
                mean_us: f64::NAN,
                max_us: f64::NAN,
                count: 0,
            };
        }
        LatencySummary {
            p50_us: self.quantile_us(0.50),
            p99_us: self.quantile_us(0.99),
            p999_us: self.quantile_us(0.999),
            mean_us: self.inner.mean() / 1000.0,
            max_us: self.inner.max() as f64 / 1000.0,
            count: self.inner.len(),
        }
    }

    /// The underlying histogram.
    pub fn inner(&self) -> &Histogram<u64> {
        &self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(a: f64, b: f64) -> f64 {
        (a - b).abs() / b
    }

    #[test]
    fn summary_percentiles() {
        let mut h = LatencyHistogram::new();
        // 1..=10_000 µs, one sample each.
        for us in 1..=10_000u64 {
            h.record(us * 1000);
        }
        let s = h.summary();
        assert_eq!(s.count, 10_000);
        assert!(rel(s.p50_us, 5000.0) < 0.002, "{s:?}");
        assert!(rel(s.p99_us, 9900.0) < 0.002, "{s:?}");
        assert!(rel(s.p999_us, 9990.0) < 0.002, "{s:?}");
        assert!(rel(s.mean_us, 5000.5) < 0.002, "{s:?}");
        assert!(rel(s.max_us, 10_000.0) < 0.002, "{s:?}");
    }

    #[test]
    fn record_n_and_merge() {
        let mut a = LatencyHistogram::new();
        a.record_n(2_000, 99);
        let mut b = LatencyHistogram::new();
        b.record_n(1_000_000, 1);
        b.record_duration(Duration::from_secs(120)); // beyond initial bound
        a.merge(&b);
        let s = a.summary();
        assert_eq!(s.count, 101);
        assert!(rel(s.p50_us, 2.0) < 0.002);
        assert!(rel(s.p99_us, 1000.0) < 0.002, "{s:?}");
        assert!(rel(s.max_us, 120e6) < 0.002, "{s:?}");
        a.reset();
        assert!(a.is_empty());
        assert!(a.summary().p50_us.is_nan());
    }
}
