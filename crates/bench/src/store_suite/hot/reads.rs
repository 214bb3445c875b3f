//! The reads of `bench store-hot`: the load of every key, Zipf-drawn key rings, and
//! timed windows of batched GETs with each server's load read at both edges.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use farcache_store::{Store, StoreError};

use super::StoreHotOptions;
use super::placement::{Probe, lookup_counts};
use crate::baseline::driver::{KEY_RING_MAX, value_bytes};
use crate::error::{BenchError, Result};
use crate::histogram::{LatencyHistogram, LatencySummary};
use crate::store_suite::measure::{Key, key};
use crate::workload::KeyGen;

/// Failed and missing keys of a run, and the first failure.
#[derive(Debug, Clone, Default)]
pub(super) struct Tally {
    pub(super) errors: u64,
    pub(super) misses: u64,
    pub(super) first_error: Option<String>,
}

impl Tally {
    fn error(&mut self, n: u64, what: impl FnOnce() -> String) {
        self.errors += n;
        if self.first_error.is_none() {
            self.first_error = Some(what());
        }
    }

    fn get(
        &mut self,
        r: std::result::Result<Option<farcache_client::Bytes>, StoreError>,
        v: &[u8],
    ) {
        match r {
            Ok(Some(got)) if got[..] == *v => {}
            Ok(Some(got)) => {
                let len = got.len();
                self.error(1, || format!("wrong value ({len} bytes) returned"));
            }
            Ok(None) => self.misses += 1,
            Err(e) => self.error(1, || e.to_string()),
        }
    }

    fn add(&mut self, o: Tally) {
        self.errors += o.errors;
        self.misses += o.misses;
        self.first_error = self.first_error.take().or(o.first_error);
    }
}

/// Zipf-drawn keys, drawn before the clock starts.
pub(super) fn zipf_ring(o: &StoreHotOptions, seed: u64) -> Result<Vec<Key>> {
    let mut g = KeyGen::zipf(o.keys, o.value_size, o.theta, seed)?;
    let len = KEY_RING_MAX.div_ceil(o.batch) * o.batch;
    Ok((0..len).map(|_| key(g.next_index())).collect())
}

/// What one timed window measured.
pub(super) struct Window {
    pub(super) keys: u64,
    pub(super) secs: f64,
    pub(super) loads: Vec<u64>,
    pub(super) copy_reads: u64,
    pub(super) latency: LatencySummary,
    pub(super) tally: Tally,
    pub(super) hot_keys: Vec<Vec<u8>>,
}

/// `threads` threads keep `depth` mgets of the ring's keys in flight from
/// `warmup` before the window until its end; loads are read at both edges.
pub(super) fn timed_reads(
    store: &Store,
    o: &StoreHotOptions,
    ring: &[Key],
    probes: &[Probe],
    warmup: Duration,
) -> Result<Window> {
    let value = value_bytes(o.value_size);
    let done = AtomicU64::new(0);
    let (recording, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    let barrier = Barrier::new(o.threads + 1);
    let b = o.batch;
    std::thread::scope(|sc| {
        let workers: Vec<_> = (0..o.threads)
            .map(|t| {
                let (done, recording, stop, barrier, value) =
                    (&done, &recording, &stop, &barrier, &value);
                sc.spawn(move || {
                    let (mut hist, mut tally) = (LatencyHistogram::new(), Tally::default());
                    // Threads start apart in the ring so they do not read in step.
                    let mut pos = (t * ring.len() / o.threads) / b * b;
                    let mut inflight = std::collections::VecDeque::with_capacity(o.depth);
                    barrier.wait();
                    while !stop.load(Ordering::Relaxed) {
                        while inflight.len() < o.depth {
                            let keys = &ring[pos..pos + b];
                            pos = (pos + b) % ring.len();
                            inflight.push_back((Instant::now(), store.mget_submit(keys)));
                        }
                        let Some((t0, p)) = inflight.pop_front() else {
                            break;
                        };
                        match p.wait() {
                            Ok(rs) => rs.into_iter().for_each(|r| tally.get(r, value)),
                            Err(e) => tally.error(b as u64, || e.to_string()),
                        }
                        done.fetch_add(b as u64, Ordering::Relaxed);
                        if recording.load(Ordering::Relaxed) {
                            hist.record_duration(t0.elapsed());
                        }
                    }
                    for (_, p) in inflight.drain(..) {
                        let _ = p.wait();
                    }
                    (hist, tally)
                })
            })
            .collect();
        barrier.wait();
        let measured = (|| {
            std::thread::sleep(warmup);
            let (l0, c0, k0) = (
                lookup_counts(store.cache(), probes)?,
                store.copy_reads(),
                done.load(Ordering::Relaxed),
            );
            let t0 = Instant::now();
            recording.store(true, Ordering::Relaxed);
            std::thread::sleep(o.duration);
            let (k1, c1) = (done.load(Ordering::Relaxed), store.copy_reads());
            let secs = t0.elapsed().as_secs_f64();
            recording.store(false, Ordering::Relaxed);
            let l1 = lookup_counts(store.cache(), probes)?;
            let loads = l1
                .iter()
                .zip(&l0)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect();
            Ok::<_, BenchError>((k1 - k0, secs, loads, c1 - c0))
        })();
        stop.store(true, Ordering::Relaxed);
        let (mut hist, mut tally) = (LatencyHistogram::new(), Tally::default());
        for w in workers {
            let (h, t) = w
                .join()
                .map_err(|_| BenchError::Cluster("store-hot reader thread panicked".into()))?;
            hist.merge(&h);
            tally.add(t);
        }
        let (keys, secs, loads, copy_reads) = measured?;
        Ok(Window {
            keys,
            secs,
            loads,
            copy_reads,
            latency: hist.summary(),
            tally,
            hot_keys: store.hot_keys(),
        })
    })
}

/// Puts every key once, `batch` keys a call, from `threads` threads.
pub(super) fn load(store: &Store, o: &StoreHotOptions) -> Result<Tally> {
    let value = value_bytes(o.value_size);
    let per = o.keys.div_ceil(o.threads as u64);
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..o.threads as u64)
            .map(|t| {
                let value = &value;
                sc.spawn(move || {
                    let mut tally = Tally::default();
                    let (lo, hi) = ((t * per).min(o.keys), ((t + 1) * per).min(o.keys));
                    let keys: Vec<Key> = (lo..hi).map(key).collect();
                    for chunk in keys.chunks(o.batch) {
                        let pairs: Vec<(&Key, &[u8])> =
                            chunk.iter().map(|k| (k, &value[..])).collect();
                        for r in store.mput(&pairs) {
                            if let Err(e) = r {
                                tally.error(1, || e.to_string());
                            }
                        }
                    }
                    tally
                })
            })
            .collect();
        let mut all = Tally::default();
        for h in hs {
            all.add(
                h.join()
                    .map_err(|_| BenchError::Cluster("store-hot load thread panicked".into()))?,
            );
        }
        Ok(all)
    })
}
