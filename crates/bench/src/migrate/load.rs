//! The load of `bench migrate`: one closed loop of batched 8-byte reads or writes over
//! uniform addresses of the whole cache, counting completed ops per time bucket.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use farcache_client::{Cache, Ticket};

use crate::error::Result;
use crate::io::IoOp;
use crate::workload::KeyGen;

/// Bytes per op.
pub const RECORD: usize = 8;

/// What one load thread saw.
#[derive(Debug, Clone, Default)]
pub struct LoadTimeline {
    /// Ops completed without error, per bucket since the shared start.
    pub counts: Vec<u64>,
    pub errors: u64,
    /// The first op error, to say what went wrong.
    pub first_error: Option<String>,
}

impl LoadTimeline {
    fn complete(&mut self, t: Ticket, t0: Instant, bucket: Duration) {
        let r = t.wait();
        let bad = r.failed() as u64;
        if bad > 0 && self.first_error.is_none() {
            self.first_error = r.first_error().map(ToString::to_string);
        }
        self.errors += bad;
        // Ops count where their batch completed: a batch waits for its slowest op.
        let i = (t0.elapsed().as_nanos() / bucket.as_nanos().max(1)) as usize;
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += r.len() as u64 - bad;
    }
}

/// Uniform record addresses over the whole cache, drawn before the clock runs and
/// replayed cyclically (as `bench io`).
pub fn addresses(cache: &Cache, seed: u64) -> Result<Vec<u64>> {
    let records = cache.capacity() / RECORD as u64;
    let mut keys = KeyGen::uniform(records, RECORD, seed)?;
    Ok((0..records.clamp(1024, 1 << 20))
        .map(|_| keys.next_offset())
        .collect())
}

/// Keeps `depth` batches of `batch` ops in flight until `stop` is set, as `bench io`
/// does, with every completion counted in its `bucket` after `t0`.
pub fn run_load(
    cache: &Cache,
    (op, addrs): (IoOp, &[u64]),
    (batch, depth): (usize, usize),
    (t0, bucket): (Instant, Duration),
    stop: &AtomicBool,
) -> Result<LoadTimeline> {
    if addrs.is_empty() {
        return Ok(LoadTimeline::default());
    }
    let payload = [0xA5u8; RECORD];
    let mut out = LoadTimeline::default();
    let mut inflight: VecDeque<Ticket> = VecDeque::with_capacity(depth + 1);
    let mut next = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let mut b = cache.batch().with_capacity(batch);
        for _ in 0..batch {
            let a = addrs[next];
            next = (next + 1) % addrs.len();
            match op {
                IoOp::Read => b.read(a, RECORD as u64),
                IoOp::Write => b.write(a, &payload),
            };
        }
        inflight.push_back(b.submit());
        if inflight.len() >= depth
            && let Some(t) = inflight.pop_front()
        {
            out.complete(t, t0, bucket);
        }
    }
    while let Some(t) = inflight.pop_front() {
        out.complete(t, t0, bucket);
    }
    Ok(out)
}

/// Ops per second over `[from, to)` seconds after the start; buckets partly inside
/// count in proportion.
pub fn ops_in(counts: &[u64], bucket: Duration, from: f64, to: f64) -> f64 {
    let w = bucket.as_secs_f64();
    if w <= 0.0 || to <= from {
        return 0.0;
    }
    let first = (from / w).floor().max(0.0) as usize;
    let last = ((to / w).ceil() as usize).min(counts.len());
    (first..last)
        .map(|i| {
            let (s, e) = (i as f64 * w, (i + 1) as f64 * w);
            let overlap = (e.min(to) - s.max(from)).max(0.0);
            counts[i] as f64 * overlap / w
        })
        .sum()
}

/// Mean ops per second over the windows (seconds after the start); NaN when they are
/// empty.
pub fn rate_in(counts: &[u64], bucket: Duration, windows: &[(f64, f64)]) -> f64 {
    let secs: f64 = windows.iter().map(|(s, e)| (e - s).max(0.0)).sum();
    if secs <= 0.0 {
        return f64::NAN;
    }
    let ops: f64 = windows
        .iter()
        .map(|&(s, e)| ops_in(counts, bucket, s, e))
        .sum();
    ops / secs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_buckets_count_in_proportion() {
        let b = Duration::from_millis(10);
        let counts = [100, 100, 200, 0];
        assert!((ops_in(&counts, b, 0.0, 0.02) - 200.0).abs() < 1e-9);
        assert!((ops_in(&counts, b, 0.005, 0.025) - 250.0).abs() < 1e-9);
        // Past the end counts nothing.
        assert_eq!(ops_in(&counts, b, 0.05, 0.08), 0.0);
        let r = rate_in(&counts, b, &[(0.0, 0.01), (0.02, 0.03)]);
        assert!((r - 15_000.0).abs() < 1e-6, "{r}");
        assert!(rate_in(&counts, b, &[]).is_nan());
    }
}
