//! Objects of one size and calls timed one at a time.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

use super::StoreLargeOptions;
use crate::histogram::{LatencyHistogram, LatencySummary};

/// Length of the id at the start of every object.
const HEADER: usize = 16;

/// The objects of one size: a random base value with each object's id in its first
/// 16 bytes, so that a value read back can be checked without keeping every object.
pub(crate) struct Objects {
    pub size: usize,
    pub count: u64,
    base: Vec<u8>,
}

impl Objects {
    pub fn new(size: u64, count: u64) -> Self {
        let mut base = vec![0u8; size as usize];
        // Random bytes: no codec or allocator can shortcut them.
        StdRng::seed_from_u64(size).fill_bytes(&mut base);
        Self {
            size: size as usize,
            count,
            base,
        }
    }

    pub fn key(i: u64) -> Vec<u8> {
        format!("large:{i:010}").into_bytes()
    }

    fn header(i: u64) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h.copy_from_slice(format!("object{i:010}").as_bytes());
        h
    }

    /// A copy of the base value, to be turned into objects by [`Objects::stamp`].
    pub fn buffer(&self) -> Vec<u8> {
        self.base.clone()
    }

    /// Makes `buf` (from [`Objects::buffer`]) object `i`.
    pub fn stamp(i: u64, buf: &mut [u8]) {
        buf[..HEADER].copy_from_slice(&Self::header(i));
    }

    /// Whether `v` is object `i`.
    pub fn check(&self, i: u64, v: &[u8]) -> std::result::Result<(), String> {
        if v.len() != self.size {
            return Err(format!(
                "object {i}: {} bytes read, {} put",
                v.len(),
                self.size
            ));
        }
        if v[..HEADER] != Self::header(i) || v[HEADER..] != self.base[HEADER..] {
            return Err(format!("object {i}: wrong bytes read"));
        }
        Ok(())
    }
}

/// Calls timed one at a time: latency of every attempt, failures apart.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sampler {
    hist: LatencyHistogram,
    ok: u64,
    failures: u64,
    first_failure: Option<String>,
    /// Summed latency of the successful calls.
    busy: Duration,
    /// When the first call started.
    start: Option<Instant>,
    calls: Vec<Call>,
}

/// One call: its start (ms since the run's first call), its latency (ms), whether it
/// succeeded. Serialized as `[start, latency, ok]`.
pub type Call = (f64, f64, bool);

impl Sampler {
    pub fn record(&mut self, took: Duration, outcome: std::result::Result<(), String>) {
        self.hist.record_duration(took);
        let began = Instant::now() - took;
        let start = *self.start.get_or_insert(began);
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        self.calls.push((
            ms(began.saturating_duration_since(start)),
            ms(took),
            outcome.is_ok(),
        ));
        match outcome {
            Ok(()) => {
                self.ok += 1;
                self.busy += took;
            }
            Err(e) => {
                self.failures += 1;
                self.first_failure.get_or_insert(e);
            }
        }
    }

    pub fn attempts(&self) -> u64 {
        self.ok + self.failures
    }

    pub fn finish(self, size: usize) -> Run {
        let secs = self.busy.as_secs_f64();
        let per_s = if secs > 0.0 {
            self.ok as f64 / secs
        } else {
            0.0
        };
        Run {
            attempts: self.attempts(),
            ok: self.ok,
            failures: self.failures,
            first_failure: self.first_failure,
            latency: self.hist.summary(),
            objects_per_s: per_s,
            mib_per_s: per_s * size as f64 / f64::from(1u32 << 20),
            calls: self.calls,
        }
    }
}

/// What a run of calls measured. Calls run one at a time, so the rate is successful
/// calls over the time they took (checking values is not counted).
#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub attempts: u64,
    pub ok: u64,
    pub failures: u64,
    pub first_failure: Option<String>,
    /// Every attempt, failed ones included (a failed read waited for its timeout).
    pub latency: LatencySummary,
    pub objects_per_s: f64,
    pub mib_per_s: f64,
    pub calls: Vec<Call>,
}

/// Runs `call(object)` over `objects` round robin until `opts.duration` passed and
/// `opts.min_gets` calls were made, or `cap` calls were.
pub(crate) fn timed_gets(
    opts: &StoreLargeOptions,
    objects: &[u64],
    size: usize,
    cap: u64,
    mut call: impl FnMut(u64) -> (Duration, std::result::Result<(), String>),
) -> Run {
    let mut s = Sampler::default();
    let start = Instant::now();
    for &i in objects.iter().cycle() {
        let (took, outcome) = call(i);
        s.record(took, outcome);
        let n = s.attempts();
        if n >= cap || (n >= opts.min_gets && start.elapsed() >= opts.duration) {
            break;
        }
    }
    s.finish(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store_suite::large::MIN_SIZE;

    #[test]
    fn objects_check_their_bytes() {
        let o = Objects::new(MIN_SIZE, 3);
        let mut b = o.buffer();
        Objects::stamp(2, &mut b);
        assert!(o.check(2, &b).is_ok());
        assert!(o.check(1, &b).is_err());
        b[MIN_SIZE as usize - 1] ^= 1;
        assert!(o.check(2, &b).is_err());
        assert!(o.check(2, &b[1..]).is_err());
    }
}
