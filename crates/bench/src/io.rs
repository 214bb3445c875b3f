//! The farcache side of `bench io`: closed-loop runs against a live cache.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use farcache_client::{Cache, Ticket};

use crate::histogram::{LatencyHistogram, LatencySummary};
use crate::workload::{KeyDistribution, KeyGen};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    Read,
    Write,
}

impl IoOp {
    pub fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

#[derive(Debug, Clone)]
pub struct IoSpec {
    pub op: IoOp,
    pub record_size: usize,
    pub dist: KeyDistribution,
    /// Records in the address space (`records * record_size` ≤ cache capacity).
    pub records: u64,
    /// Ops per batch (`b`).
    pub batch: usize,
    /// Batches kept in flight (`q`).
    pub depth: usize,
    pub duration: Duration,
    /// Share of reads, the rest writes (`op` is then ignored); `None`: every op is `op`.
    pub read_fraction: Option<f64>,
}

/// Whether op `i` of a thread's stream reads: reads spread evenly (Bresenham), so any
/// `b` consecutive ops hold `b·f` reads rounded down or up.
#[inline]
fn reads_at(i: u64, f: f64) -> bool {
    ((i + 1) as f64 * f).floor() > (i as f64 * f).floor()
}

#[derive(Debug, Clone)]
pub struct IoOutcome {
    pub ops: u64,
    pub errors: u64,
    pub secs: f64,
    pub mops: f64,
    pub bytes_per_sec: f64,
    /// Per-op latency: submit of its batch to completion of its batch.
    pub latency: LatencySummary,
}

impl IoOutcome {
    fn new(ops: u64, errors: u64, secs: f64, record_size: usize, hist: &LatencyHistogram) -> Self {
        Self {
            ops,
            errors,
            secs,
            mops: ops as f64 / secs / 1e6,
            bytes_per_sec: ops as f64 * record_size as f64 / secs,
            latency: hist.summary(),
        }
    }
}

/// Addresses are drawn before the clock starts so the generator's cost (Zipf
/// sampling is ~50 ns) is not charged to the cache.
fn addresses(spec: &IoSpec, seed: u64) -> crate::Result<Vec<u64>> {
    let mut g = KeyGen::new(spec.dist, spec.records, spec.record_size, seed)?;
    let n = (spec.records as usize).clamp(1024, 1 << 20);
    Ok((0..n).map(|_| g.next_offset()).collect())
}

/// `threads` application threads, each mapped to its own client connection
/// lane, each running [`run_throughput`]; results are summed.
pub fn run_throughput_threads(
    cache: &Cache,
    spec: &IoSpec,
    threads: usize,
) -> crate::Result<IoOutcome> {
    if threads <= 1 {
        return run_throughput(cache, spec);
    }
    let outs: Vec<crate::Result<(IoOutcome, LatencyHistogram)>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|i| {
                let cache = cache.clone();
                sc.spawn(move || run_one(&cache, spec, 42 + i as u64))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(crate::BenchError::Cluster("load thread panicked".into()))
                })
            })
            .collect()
    });
    let mut hist = LatencyHistogram::new();
    let (mut ops, mut errors, mut secs) = (0, 0, 0f64);
    for o in outs {
        let (o, h) = o?;
        ops += o.ops;
        errors += o.errors;
        secs = secs.max(o.secs);
        hist.merge(&h);
    }
    Ok(IoOutcome::new(ops, errors, secs, spec.record_size, &hist))
}

/// Keeps `depth` batches of `batch` ops in flight for `duration`.
pub fn run_throughput(cache: &Cache, spec: &IoSpec) -> crate::Result<IoOutcome> {
    run_one(cache, spec, 42).map(|(o, _)| o)
}

fn run_one(
    cache: &Cache,
    spec: &IoSpec,
    seed: u64,
) -> crate::Result<(IoOutcome, LatencyHistogram)> {
    let addrs = addresses(spec, seed)?;
    let payload = vec![0xA5u8; spec.record_size];
    let mut hist = LatencyHistogram::new();
    let mut inflight: VecDeque<(Instant, usize, Ticket)> = VecDeque::with_capacity(spec.depth + 1);
    let mut next = 0usize;
    let mut op_index = 0u64;
    let (mut ops, mut errors) = (0u64, 0u64);
    // Only ops completed inside the measured window count towards throughput
    // (`measured` is false for batches finished during the warm-up).
    let mut complete =
        |t0: Instant, n: usize, t: Ticket, hist: &mut LatencyHistogram, measured: bool| {
            let r = t.wait();
            hist.record_n(t0.elapsed().as_nanos() as u64, n as u64);
            errors += r.failed() as u64;
            if measured {
                ops += n as u64;
            }
        };
    // Short warm-up: connections, page faults, branch predictors.
    let warm = Instant::now() + Duration::from_millis(100);
    let mut measuring = false;
    let mut start = Instant::now();
    let mut end = start + spec.duration;
    loop {
        let now = Instant::now();
        if !measuring && now >= warm {
            while let Some((t0, n, t)) = inflight.pop_front() {
                complete(t0, n, t, &mut LatencyHistogram::new(), false);
            }
            measuring = true;
            hist.reset();
            start = Instant::now();
            end = start + spec.duration;
        } else if measuring && now >= end {
            break;
        }
        let mut b = cache.batch().with_capacity(spec.batch);
        for _ in 0..spec.batch {
            let a = addrs[next];
            next = if next + 1 == addrs.len() { 0 } else { next + 1 };
            let op = match spec.read_fraction {
                Some(f) if reads_at(op_index, f) => IoOp::Read,
                Some(_) => IoOp::Write,
                None => spec.op,
            };
            op_index += 1;
            match op {
                IoOp::Read => b.read(a, spec.record_size as u64),
                IoOp::Write => b.write(a, &payload),
            };
        }
        inflight.push_back((Instant::now(), spec.batch, b.submit()));
        if inflight.len() >= spec.depth
            && let Some((t0, n, t)) = inflight.pop_front()
        {
            complete(t0, n, t, &mut hist, measuring);
        }
    }
    while let Some((t0, n, t)) = inflight.pop_front() {
        complete(t0, n, t, &mut hist, true);
    }
    let secs = start.elapsed().as_secs_f64();
    Ok((
        IoOutcome::new(ops, errors, secs, spec.record_size, &hist),
        hist,
    ))
}

/// One op at a time (`b = 1, q = 1`): the latency floor of the data path.
pub fn run_latency(
    cache: &Cache,
    op: IoOp,
    record_size: usize,
    records: u64,
    n: u64,
) -> crate::Result<IoOutcome> {
    let spec = IoSpec {
        op,
        record_size,
        dist: KeyDistribution::Uniform,
        records,
        batch: 1,
        depth: 1,
        duration: Duration::ZERO,
        read_fraction: None,
    };
    let addrs = addresses(&spec, 7)?;
    let payload = vec![0x5Au8; record_size];
    let mut hist = LatencyHistogram::new();
    let mut errors = 0;
    for i in 0..(n + n / 10) {
        let a = addrs[i as usize % addrs.len()];
        let t0 = Instant::now();
        let r = match op {
            IoOp::Read => cache.read(a, record_size as u64).map(|_| ()),
            IoOp::Write => cache.write(a, &payload),
        };
        if i >= n / 10 {
            hist.record(t0.elapsed().as_nanos() as u64);
        }
        errors += u64::from(r.is_err());
    }
    let s = hist.summary();
    Ok(IoOutcome {
        ops: n,
        errors,
        secs: s.mean_us * n as f64 / 1e6,
        mops: 1.0 / s.mean_us,
        bytes_per_sec: record_size as f64 / (s.mean_us / 1e6),
        latency: s,
    })
}

#[cfg(test)]
mod tests {
    use super::reads_at;

    #[test]
    fn read_fraction_spreads_reads_evenly() {
        let count =
            |f: f64, from: u64, b: u64| (from..from + b).filter(|&i| reads_at(i, f)).count();
        assert_eq!(count(1.0, 0, 64), 64);
        assert_eq!(count(0.0, 0, 64), 0);
        // Any window of 8 ops at f = 0.5 holds exactly 4 reads; at 0.3, 2 or 3.
        for from in 0..20 {
            assert_eq!(count(0.5, from, 8), 4);
            assert!((2..=3).contains(&count(0.3, from, 8)));
        }
        assert_eq!(count(0.25, 0, 1000), 250);
    }
}
