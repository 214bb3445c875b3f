//! How the sproc rows are timed: batched runs with `q` batches in flight (alone or two
//! variants in alternating slices) and runs of one logical op at a time.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use farcache_client::{Batch, BatchResults, Cache, Ticket};

use super::TABLE;
use crate::histogram::{LatencyHistogram, LatencySummary};

/// Warm-up of every batched run (discarded).
const WARMUP: Duration = Duration::from_millis(100);
/// Fewest samples of a one-at-a-time run, whatever `duration`.
const MIN_SAMPLES: u64 = 20;

/// Outcome of a measured run (batched or one at a time).
#[derive(Debug, Clone)]
pub(super) struct RunOutcome {
    /// Logical ops run, warm-up included (what the servers' counters saw).
    pub(super) total: u64,
    /// Logical ops that failed or returned a wrong answer (warm-up included).
    pub(super) errors: u64,
    pub(super) mops: f64,
    pub(super) latency: LatencySummary,
}

/// Slices per variant of [`run_paired`]; each variant is measured for `duration` in all.
const PAIRED_SLICES: u32 = 6;

/// Two variants of the same logical work measured in alternating slices (A B B A A B …)
/// of `duration / PAIRED_SLICES` each (`duration` per variant), so their ratio is not skewed by the shared
/// machine speeding up or slowing down between two long runs.
pub(super) fn run_paired<FA, CA, FB, CB>(
    cache: &Cache,
    b: usize,
    q: usize,
    duration: Duration,
    a: &mut Batched<FA, CA>,
    bv: &mut Batched<FB, CB>,
) -> (RunOutcome, RunOutcome)
where
    FA: FnMut(&mut Batch, usize),
    CA: FnMut(&BatchResults, usize, usize) -> u64,
    FB: FnMut(&mut Batch, usize),
    CB: FnMut(&BatchResults, usize, usize) -> u64,
{
    let slice = duration / PAIRED_SLICES;
    for i in 0..PAIRED_SLICES {
        if i % 2 == 0 {
            a.slice(cache, b, q, slice);
            bv.slice(cache, b, q, slice);
        } else {
            bv.slice(cache, b, q, slice);
            a.slice(cache, b, q, slice);
        }
    }
    (a.outcome(), bv.outcome())
}

/// A batched run measured in one or more slices: `q` batches of `b` logical ops kept in
/// flight, `fill` adds logical op `j` (a table index) to a batch, `check` counts the
/// wrong answers among a completed batch's `n` logical ops starting at table index
/// `first`.
pub(super) struct Batched<F, C> {
    fill: F,
    check: C,
    hist: LatencyHistogram,
    /// Next table index.
    next: usize,
    /// Logical ops submitted (warm-ups included), measured, and wrong.
    submitted: u64,
    ops: u64,
    errors: u64,
    /// Measured time over all slices.
    secs: f64,
}

impl<F, C> Batched<F, C>
where
    F: FnMut(&mut Batch, usize),
    C: FnMut(&BatchResults, usize, usize) -> u64,
{
    pub(super) fn new(fill: F, check: C) -> Self {
        Self {
            fill,
            check,
            hist: LatencyHistogram::new(),
            next: 0,
            submitted: 0,
            ops: 0,
            errors: 0,
            secs: 0.0,
        }
    }

    /// A warm-up, then `duration` measured.
    pub(super) fn slice(&mut self, cache: &Cache, b: usize, q: usize, duration: Duration) {
        let mut inflight: VecDeque<(Instant, usize, Ticket)> = VecDeque::with_capacity(q + 1);
        let mut measuring = false;
        let mut start = Instant::now();
        let mut end = start + WARMUP;
        loop {
            let now = Instant::now();
            if now >= end {
                if measuring {
                    break;
                }
                // Warm-up over: finish its batches, then start the clock.
                while let Some((_, first, t)) = inflight.pop_front() {
                    self.errors += (self.check)(&t.wait(), first, b);
                }
                measuring = true;
                start = Instant::now();
                end = start + duration;
            }
            let mut batch = cache.batch();
            let first = self.next;
            for _ in 0..b {
                (self.fill)(&mut batch, self.next);
                self.next = (self.next + 1) % TABLE;
            }
            inflight.push_back((Instant::now(), first, batch.submit()));
            self.submitted += b as u64;
            if inflight.len() >= q
                && let Some((t0, first, t)) = inflight.pop_front()
            {
                let r = t.wait();
                self.errors += (self.check)(&r, first, b);
                // Batches finished during the warm-up are checked but not counted.
                if measuring {
                    self.hist.record_n(t0.elapsed().as_nanos() as u64, b as u64);
                    self.ops += b as u64;
                }
            }
        }
        while let Some((t0, first, t)) = inflight.pop_front() {
            let r = t.wait();
            self.hist.record_n(t0.elapsed().as_nanos() as u64, b as u64);
            self.errors += (self.check)(&r, first, b);
            self.ops += b as u64;
        }
        self.secs += start.elapsed().as_secs_f64();
    }

    pub(super) fn outcome(&self) -> RunOutcome {
        RunOutcome {
            total: self.submitted,
            errors: self.errors,
            mops: self.ops as f64 / self.secs.max(1e-9) / 1e6,
            latency: self.hist.summary(),
        }
    }
}

/// One logical op at a time: `one(i)` runs op `i` and says whether its answer was
/// right. A tenth of `duration` (at least 2 ops) warms up, then ops run until
/// `duration` has passed and at least [`MIN_SAMPLES`] were timed.
pub(super) fn run_serial(duration: Duration, mut one: impl FnMut(u64) -> bool) -> RunOutcome {
    let mut errors = 0u64;
    let mut i = 0u64;
    let warm_until = Instant::now() + duration / 10;
    while i < 2 || Instant::now() < warm_until {
        errors += u64::from(!one(i));
        i += 1;
    }
    let mut hist = LatencyHistogram::new();
    let start = Instant::now();
    let mut n = 0u64;
    while n < MIN_SAMPLES || start.elapsed() < duration {
        let t0 = Instant::now();
        let ok = one(i);
        hist.record(t0.elapsed().as_nanos() as u64);
        errors += u64::from(!ok);
        i += 1;
        n += 1;
    }
    let latency = hist.summary();
    RunOutcome {
        total: i,
        errors,
        mops: 1.0 / latency.mean_us,
        latency,
    }
}
