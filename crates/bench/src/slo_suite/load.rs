//! Runs a cache at an SLO's offered load: `c` threads each submit batches of `b`
//! ops on a fixed schedule (the SLO's ops/s split over the threads), never more
//! than `q` batches in flight. A thread that falls behind issues as soon as a slot
//! frees, so a transport too weak for the load shows as missing throughput, not as
//! a quietly lowered rate.
//!
//! Latency is per op, from its batch's submit to the batch's completion: the same
//! definition calibration measured, so predicted and measured figures compare.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use farcache_client::{Cache, Ticket};

use crate::error::{BenchError, Result};
use crate::histogram::LatencyHistogram;
use crate::workload::{Access, KeyDistribution, Mix, Op, WorkloadGen};

/// What to offer.
#[derive(Debug, Clone)]
pub struct Offered {
    /// Ops per second over all threads.
    pub rate: f64,
    pub record_size: usize,
    pub read_fraction: f64,
    pub threads: usize,
    pub batch: usize,
    pub depth: usize,
    /// Records spread over the cache (`records * record_size` ≤ capacity).
    pub records: u64,
    pub duration: Duration,
    pub warmup: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    pub ops: u64,
    pub errors: u64,
    pub secs: f64,
    /// Ops per second completed inside the measured window.
    pub throughput: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// Sleeping is only safe this far ahead of the next submit (wake-ups are late).
const SLEEP_SLACK: Duration = Duration::from_micros(300);

pub fn run_offered(cache: &Cache, o: &Offered) -> Result<Measured> {
    if o.threads == 0 || o.batch == 0 || o.depth == 0 || !(o.rate.is_finite() && o.rate > 0.0) {
        return Err(BenchError::InvalidArgument(format!(
            "offered load needs threads, batch, depth and rate > 0: {o:?}"
        )));
    }
    let per_thread: Vec<Result<(u64, u64, f64, LatencyHistogram)>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..o.threads)
            .map(|i| {
                let cache = cache.clone();
                sc.spawn(move || one_thread(&cache, o, 7 + i as u64))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Cluster("load thread panicked".into())))
            })
            .collect()
    });
    let mut hist = LatencyHistogram::new();
    let (mut ops, mut errors, mut secs) = (0u64, 0u64, 0f64);
    for r in per_thread {
        let (n, e, s, h) = r?;
        ops += n;
        errors += e;
        secs = secs.max(s);
        hist.merge(&h);
    }
    let s = hist.summary();
    Ok(Measured {
        ops,
        errors,
        secs,
        throughput: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
        p50_us: s.p50_us,
        p99_us: s.p99_us,
    })
}

fn accesses(o: &Offered, seed: u64) -> Result<Vec<Access>> {
    let g = WorkloadGen::new(
        KeyDistribution::Uniform,
        o.records,
        o.record_size,
        Mix::new(o.read_fraction),
        seed,
    )?;
    let n = (o.records as usize).clamp(1024, 1 << 18);
    Ok(g.take(n).collect())
}

/// One thread's schedule: `(ops, errors, measured seconds, latencies)`.
fn one_thread(cache: &Cache, o: &Offered, seed: u64) -> Result<(u64, u64, f64, LatencyHistogram)> {
    let acc = accesses(o, seed)?;
    let payload = vec![0x3Cu8; o.record_size];
    let interval = Duration::from_secs_f64(o.batch as f64 * o.threads as f64 / o.rate);
    let mut hist = LatencyHistogram::new();
    let mut inflight: VecDeque<(Instant, Ticket)> = VecDeque::with_capacity(o.depth + 1);
    let (mut ops, mut errors) = (0u64, 0u64);
    let mut next_acc = 0usize;
    let warm_end = Instant::now() + o.warmup;
    let mut measuring = false;
    let mut start = Instant::now();
    let mut end = warm_end + o.duration;
    let mut next = Instant::now();
    let mut finish = |t0: Instant, r: farcache_client::BatchResults, measuring: bool| {
        if measuring {
            hist.record_n(t0.elapsed().as_nanos() as u64, o.batch as u64);
            ops += o.batch as u64;
            errors += r.failed() as u64;
        }
    };
    loop {
        let now = Instant::now();
        if !measuring && now >= warm_end {
            // Batches of the warm-up finish uncounted; the schedule restarts.
            while let Some((_, t)) = inflight.pop_front() {
                t.wait();
            }
            measuring = true;
            start = Instant::now();
            end = start + o.duration;
            next = start;
        }
        if measuring && now >= end {
            break;
        }
        let now = Instant::now();
        if now >= next {
            if inflight.len() >= o.depth {
                // Behind schedule with every slot taken: wait for the oldest.
                if let Some((t0, t)) = inflight.pop_front() {
                    let r = t.wait();
                    finish(t0, r, measuring);
                }
                continue;
            }
            let mut b = cache.batch().with_capacity(o.batch);
            for _ in 0..o.batch {
                let a = acc[next_acc];
                next_acc = if next_acc + 1 == acc.len() {
                    0
                } else {
                    next_acc + 1
                };
                match a.op {
                    Op::Read => b.read(a.offset, o.record_size as u64),
                    Op::Write => b.write(a.offset, &payload),
                };
            }
            inflight.push_back((Instant::now(), b.submit()));
            next += interval;
        } else if let Some((t0, t)) = inflight.pop_front() {
            // Ahead of schedule: wait for the oldest batch, as a closed loop does.
            // Completions arrive in order, so the waited one is timed when it lands;
            // polling every ticket instead costs the shared cores a syscall per poll.
            let r = t.wait();
            finish(t0, r, measuring);
        } else if next - now > SLEEP_SLACK {
            std::thread::sleep(next - now - SLEEP_SLACK);
        } else {
            std::hint::spin_loop();
        }
    }
    // Batches submitted inside the window count when they finish.
    while let Some((t0, t)) = inflight.pop_front() {
        let r = t.wait();
        finish(t0, r, true);
    }
    let secs = start.elapsed().as_secs_f64();
    Ok((ops, errors, secs, hist))
}
