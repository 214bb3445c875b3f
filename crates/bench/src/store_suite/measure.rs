//! The farcache side of `bench store`: one store per value size, loaded, then timed
//! batched runs (`q` threads, each waiting for its `mget`/`mput`), then unbatched
//! calls one at a time.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use farcache_client::{Bytes, Cache, Client};
use farcache_store::{Store, StoreError, StoreExt, StoreOptions, StoreStats};
use indicatif::ProgressBar;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{BYTE_CACHE, StoreBenchOptions, cluster_err, store_capacity};
use crate::baseline::driver::{KEY_LEN, KEY_RING_MAX, key_digits, value_bytes};
use crate::error::{BenchError, Result};
use crate::histogram::{LatencyHistogram, LatencySummary};

/// Progress steps per size: load, first read, batched GET, unbatched GET + read,
/// batched PUT, unbatched PUT.
pub(super) const PHASES: usize = 6;
/// Discarded start of every timed run (connections, page faults, branch predictors).
const WARMUP: Duration = Duration::from_millis(100);
/// Alternating slices of the unbatched GET and read runs, so that a shared machine
/// speeding up or slowing down shifts both alike.
const SLICES: u64 = 10;

/// `key:%012d`, the spelling the Redis baseline uses.
pub(super) type Key = [u8; KEY_LEN];

pub(super) fn key(i: u64) -> Key {
    let mut k = [0u8; KEY_LEN];
    k[..4].copy_from_slice(b"key:");
    k[4..].copy_from_slice(&key_digits(i));
    k
}

/// Uniformly random keys below `keys`, drawn before the clock starts (as `bench io`
/// draws addresses): `clamp(keys, 1024, 1 Mi)` of them, whole batches.
fn ring(keys: u64, batch: usize, seed: u64) -> Vec<Key> {
    let len = (keys as usize).clamp(1024, KEY_RING_MAX).div_ceil(batch) * batch;
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| key(rng.gen_range(0..keys))).collect()
}

/// Failed and missing keys of a run (warm-up included), and the first failure.
#[derive(Debug, Clone, Default)]
pub(super) struct Tally {
    pub errors: u64,
    pub misses: u64,
    pub first_error: Option<String>,
}

impl Tally {
    fn error(&mut self, n: u64, what: impl FnOnce() -> String) {
        self.errors += n;
        if self.first_error.is_none() {
            self.first_error = Some(what());
        }
    }

    fn add(&mut self, o: Tally) {
        self.errors += o.errors;
        self.misses += o.misses;
        self.first_error = self.first_error.take().or(o.first_error);
    }

    /// One GET's answer: a value of `size` bytes (equal to `want` when given).
    fn get(&mut self, r: Result<Option<Bytes>, StoreError>, size: usize, want: Option<&[u8]>) {
        match r {
            Ok(Some(v)) if v.len() == size && want.is_none_or(|w| v[..] == *w) => {}
            Ok(Some(v)) => {
                let len = v.len();
                self.error(1, || format!("wrong value ({len} bytes) returned"));
            }
            Ok(None) => self.misses += 1,
            Err(e) => self.error(1, || e.to_string()),
        }
    }

    fn puts(&mut self, rs: Vec<Result<(), StoreError>>) {
        for r in rs {
            if let Err(e) = r {
                self.error(1, || e.to_string());
            }
        }
    }
}

/// What one run measured.
#[derive(Debug, Clone)]
pub(super) struct Phase {
    /// Keys in the measured window.
    pub ops: u64,
    pub tally: Tally,
    pub secs: f64,
    pub mops: f64,
    /// Per call: a whole batch for `mget`/`mput`, one key unbatched.
    pub latency: LatencySummary,
}

impl Phase {
    /// A run of single calls: its rate is one over the mean latency.
    fn serial(hist: &LatencyHistogram, tally: Tally) -> Self {
        let latency = hist.summary();
        Self {
            ops: latency.count,
            tally,
            secs: latency.mean_us * latency.count as f64 / 1e6,
            mops: 1.0 / latency.mean_us,
            latency,
        }
    }
}

/// Everything measured for one value size.
#[derive(Debug, Clone)]
pub(super) struct SizeOutcome {
    pub size: usize,
    pub capacity: u64,
    pub load: Phase,
    /// `mget` of every key once, in order, after the load.
    pub first_get: Phase,
    pub get: Phase,
    pub put: Phase,
    pub get_one: Phase,
    pub read_one: Phase,
    pub put_one: Phase,
    /// The store's census after every run.
    pub stats: std::result::Result<StoreStats, String>,
}

/// Creates a store for `size`-byte values, runs every phase, deletes it.
pub(super) fn run_size(
    client: &Client,
    bytes: &Cache,
    opts: &StoreBenchOptions,
    size: usize,
    pb: &ProgressBar,
) -> Result<SizeOutcome> {
    let name = format!("bench-store-{size}");
    let capacity = store_capacity(opts.keys, size);
    let (b, q) = (opts.batch, opts.depth);
    pb.set_message(format!("{size} B: store of {} MiB", capacity >> 20));
    let store = client
        .create_store(
            &name,
            capacity,
            &StoreOptions {
                avg_value_size: size as u64,
                ..StoreOptions::default()
            },
        )
        .map_err(cluster_err)?;
    let value = value_bytes(size);
    pb.set_message(format!("{size} B: load {} keys, mput b={b}", opts.keys));
    let load = sweep(opts, "load", |keys, t| {
        let pairs: Vec<(&Key, &[u8])> = keys.iter().map(|k| (k, &value[..])).collect();
        t.puts(store.mput(&pairs));
    })?;
    pb.inc(1);
    // Every key read once, in order: checks that the load stored them all, and sets
    // their CLOCK reference bytes (a key's first hit also writes its byte), so the
    // timed run measures reads of referenced keys however long it runs.
    pb.set_message(format!("{size} B: first read of every key, mget b={b}"));
    let first_get = sweep(opts, "first read", |keys, t| match store.mget(keys) {
        Ok(rs) => rs.into_iter().for_each(|r| t.get(r, size, Some(&value))),
        Err(e) => t.error(keys.len() as u64, || e.to_string()),
    })?;
    pb.inc(1);
    pb.set_message(format!("{size} B: mget b={b} q={q}"));
    let get = pipelined_gets(&store, opts, size);
    pb.inc(1);
    pb.set_message(format!("{size} B: unbatched get and 8 B read"));
    let (get_one, read_one) = unbatched_get_and_read(&store, bytes, opts, &value);
    pb.inc(1);
    pb.set_message(format!("{size} B: mput b={b} q={q}"));
    let put = timed(
        opts,
        |i| (ring(opts.keys, b, 4242 + i as u64), 0usize),
        |(ring, pos), t| {
            let pairs: Vec<(&Key, &[u8])> = ring[*pos..*pos + b]
                .iter()
                .map(|k| (k, &value[..]))
                .collect();
            *pos = (*pos + b) % ring.len();
            t.puts(store.mput(&pairs));
            b as u64
        },
    )?;
    pb.inc(1);
    pb.set_message(format!("{size} B: unbatched put"));
    let put_one = unbatched_put(&store, opts, &value);
    pb.inc(1);
    let stats = store.stats().map_err(|e| e.to_string());
    // The handle returns the items it kept for reuse when dropped: before the delete.
    drop(store);
    client.delete(&name).map_err(cluster_err)?;
    Ok(SizeOutcome {
        size,
        capacity,
        load,
        first_get,
        get,
        put,
        get_one,
        read_one,
        put_one,
        stats,
    })
}

/// One thread keeping `q` MGETs of `b` uniform random keys in flight
/// ([`Store::mget_submit`]), as `bench io` keeps `q` batches in flight: a warm-up,
/// then `opts.duration`. Latency is per MGET, from its submission to its values.
fn pipelined_gets(store: &Store, opts: &StoreBenchOptions, size: usize) -> Phase {
    let (b, q) = (opts.batch, opts.depth.max(1));
    let ring = ring(opts.keys, b, 42);
    let mut pos = 0usize;
    let mut next = || {
        let keys = &ring[pos..pos + b];
        pos = (pos + b) % ring.len();
        keys
    };
    let (mut hist, mut tally) = (LatencyHistogram::new(), Tally::default());
    let mut inflight = std::collections::VecDeque::with_capacity(q);
    let warm_end = Instant::now() + WARMUP;
    let (mut ops, mut start) = (0u64, None);
    loop {
        while inflight.len() < q {
            inflight.push_back((Instant::now(), store.mget_submit(next())));
        }
        let Some((t0, p)) = inflight.pop_front() else {
            break;
        };
        match p.wait() {
            Ok(rs) => rs.into_iter().for_each(|r| tally.get(r, size, None)),
            Err(e) => tally.error(b as u64, || e.to_string()),
        }
        let t1 = Instant::now();
        match start {
            None if t1 >= warm_end => start = Some(t1),
            None => {}
            Some(s) => {
                hist.record_duration(t1 - t0);
                ops += b as u64;
                if t1 - s >= opts.duration {
                    // The ones still in flight are waited for, not counted.
                    for (_, p) in inflight.drain(..) {
                        let _ = p.wait();
                    }
                    return merge(vec![(ops, (t1 - s).as_secs_f64(), hist, tally)]);
                }
            }
        }
    }
    merge(vec![(ops, 0.0, hist, tally)])
}

/// Calls `one` on every key once, in order, `b` keys a call, the keys split evenly
/// over `q` threads; the rate is keys over the slowest thread's time.
fn sweep(
    opts: &StoreBenchOptions,
    what: &str,
    one: impl Fn(&[Key], &mut Tally) + Sync,
) -> Result<Phase> {
    let per = opts.keys.div_ceil(opts.depth as u64);
    let barrier = Barrier::new(opts.depth);
    let outs = scoped(opts.depth, what, |i| {
        let lo = (i as u64 * per).min(opts.keys);
        let hi = (lo + per).min(opts.keys);
        let keys: Vec<Key> = (lo..hi).map(key).collect();
        barrier.wait();
        let start = Instant::now();
        let (mut hist, mut tally) = (LatencyHistogram::new(), Tally::default());
        for chunk in keys.chunks(opts.batch) {
            let t0 = Instant::now();
            one(chunk, &mut tally);
            hist.record_duration(t0.elapsed());
        }
        (
            keys.len() as u64,
            start.elapsed().as_secs_f64(),
            hist,
            tally,
        )
    })?;
    let mut phase = merge(outs);
    phase.mops = phase.ops as f64 / phase.secs.max(1e-9) / 1e6;
    Ok(phase)
}

/// `q` threads, each calling `one` (which returns the keys it handled) in a loop for
/// a warm-up and then `opts.duration`; rates are summed over threads.
fn timed<S>(
    opts: &StoreBenchOptions,
    setup: impl Fn(usize) -> S + Sync,
    one: impl Fn(&mut S, &mut Tally) -> u64 + Sync,
) -> Result<Phase> {
    let barrier = Barrier::new(opts.depth);
    let outs = scoped(opts.depth, "timed", |i| {
        let mut state = setup(i);
        barrier.wait();
        let warm_end = Instant::now() + WARMUP;
        let (mut hist, mut tally) = (LatencyHistogram::new(), Tally::default());
        let (mut ops, mut start) = (0u64, None);
        loop {
            let t0 = Instant::now();
            let n = one(&mut state, &mut tally);
            let t1 = Instant::now();
            match start {
                None if t1 >= warm_end => start = Some(t1),
                None => {}
                Some(s) => {
                    hist.record_duration(t1 - t0);
                    ops += n;
                    if t1 - s >= opts.duration {
                        return (ops, (t1 - s).as_secs_f64(), hist, tally);
                    }
                }
            }
        }
    })?;
    Ok(merge(outs))
}

type ThreadOut = (u64, f64, LatencyHistogram, Tally);

/// Runs `f(i)` on `n` scoped threads.
fn scoped(n: usize, what: &str, f: impl Fn(usize) -> ThreadOut + Sync) -> Result<Vec<ThreadOut>> {
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..n)
            .map(|i| {
                sc.spawn({
                    let f = &f;
                    move || f(i)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| BenchError::Cluster(format!("store {what} thread panicked")))
            })
            .collect()
    })
}

/// Sums keys and per-thread rates; the window is the longest thread's.
fn merge(outs: Vec<ThreadOut>) -> Phase {
    let mut hist = LatencyHistogram::new();
    let (mut ops, mut secs, mut mops, mut tally) = (0, 0f64, 0f64, Tally::default());
    for (o, s, h, t) in outs {
        ops += o;
        secs = secs.max(s);
        if s > 0.0 {
            mops += o as f64 / s / 1e6;
        }
        hist.merge(&h);
        tally.add(t);
    }
    Phase {
        ops,
        tally,
        secs,
        mops,
        latency: hist.summary(),
    }
}

/// Single `get`s of random keys (the value checked byte for byte) and single 8-byte
/// `read`s of the plain cache, in alternating slices after an unrecorded tenth.
fn unbatched_get_and_read(
    store: &Store,
    bytes: &Cache,
    opts: &StoreBenchOptions,
    value: &[u8],
) -> (Phase, Phase) {
    let keys = ring(opts.keys, 1, 7);
    let mut rng = StdRng::seed_from_u64(8);
    let addrs: Vec<u64> = (0..1 << 16)
        .map(|_| rng.gen_range(0..BYTE_CACHE / 8) * 8)
        .collect();
    let (mut gh, mut rh) = (LatencyHistogram::new(), LatencyHistogram::new());
    let (mut gt, mut rt) = (Tally::default(), Tally::default());
    let (mut gi, mut ri) = (0usize, 0usize);
    let mut get = |h: Option<&mut LatencyHistogram>, t: &mut Tally| {
        let k = &keys[gi % keys.len()];
        gi += 1;
        let t0 = Instant::now();
        let r = store.get(k);
        let dt = t0.elapsed();
        if let Some(h) = h {
            h.record_duration(dt);
        }
        t.get(r, value.len(), Some(value));
    };
    let mut read = |h: Option<&mut LatencyHistogram>, t: &mut Tally| {
        let a = addrs[ri % addrs.len()];
        ri += 1;
        let t0 = Instant::now();
        let r = bytes.read(a, 8);
        let dt = t0.elapsed();
        if let Some(h) = h {
            h.record_duration(dt);
        }
        match r {
            Ok(v) if v.len() == 8 => {}
            Ok(v) => t.error(1, || format!("read of 8 bytes returned {}", v.len())),
            Err(e) => t.error(1, || e.to_string()),
        }
    };
    for _ in 0..(opts.latency_samples / 10).max(100) {
        get(None, &mut gt);
        read(None, &mut rt);
    }
    let per = opts.latency_samples.div_ceil(SLICES);
    for s in 0..SLICES {
        for half in 0..2 {
            for _ in 0..per {
                if (s + half) % 2 == 0 {
                    get(Some(&mut gh), &mut gt);
                } else {
                    read(Some(&mut rh), &mut rt);
                }
            }
        }
    }
    (Phase::serial(&gh, gt), Phase::serial(&rh, rt))
}

/// Single `put`s of random keys (overwrites), after an unrecorded tenth.
fn unbatched_put(store: &Store, opts: &StoreBenchOptions, value: &[u8]) -> Phase {
    let keys = ring(opts.keys, 1, 9);
    let (mut hist, mut tally) = (LatencyHistogram::new(), Tally::default());
    let warm = (opts.latency_samples / 10).max(100);
    for i in 0..warm + opts.latency_samples {
        let k = &keys[i as usize % keys.len()];
        let t0 = Instant::now();
        let r = store.put(k, value);
        let dt = t0.elapsed();
        if i >= warm {
            hist.record_duration(dt);
        }
        if let Err(e) = r {
            tally.error(1, || e.to_string());
        }
    }
    Phase::serial(&hist, tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_rings() {
        assert_eq!(&key(12345), b"key:000000012345");
        let r = ring(10, 64, 1);
        assert_eq!(r.len() % 64, 0);
        assert!(r.len() >= 1024);
        assert!(r.iter().all(|k| k[..15] == *b"key:00000000000"));
    }

    #[test]
    fn tally_counts_and_keeps_first_error() {
        let mut t = Tally::default();
        t.get(Ok(Some(Bytes::from_static(b"abcd"))), 4, Some(b"abcd"));
        t.get(Ok(Some(Bytes::from_static(b"abce"))), 4, Some(b"abcd"));
        t.get(Ok(None), 4, None);
        t.get(Err(StoreError::Key("x".into())), 4, None);
        assert_eq!((t.errors, t.misses), (2, 1));
        assert!(
            t.first_error
                .as_deref()
                .is_some_and(|e| e.contains("wrong value"))
        );
    }
}
