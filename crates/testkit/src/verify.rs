//! A verifying load: clients that check every read against a model of the bytes
//! they wrote, for tests and `farcache chaos`.
//!
//! One writer thread owns the values of a set of 8-byte slots, so the model is exact:
//! a read may return the last acknowledged value of its slot, the value being written,
//! or, if a write was acknowledged meanwhile, that one. Anything else is a wrong
//! read. A read answered `DataLost` is not wrong (the loss is reported); if the slot
//! held an acknowledged value, it counts as an acknowledged write lost *and reported*.
//! The writer then writes the slot again, which makes it data again.
//!
//! [`Verifier::start_recording`] also records every op in a [`History`] for the
//! linearizable-register check of [`crate::history`] (slots whose bytes were lost and
//! cleared are left out of it: clearing is not a write it can model).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use farcache_client::{Cache, ClientError, OpError};
use parking_lot::Mutex;

use crate::history::{Event, History, Kind, Outcome, outcome_of};

/// Throughput is counted per bucket of this length.
pub const BUCKET: Duration = Duration::from_millis(100);
/// Wrong reads and errors kept verbatim (the counts are exact).
const KEEP: usize = 20;

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct VerifyReport {
    pub reads: u64,
    pub writes: u64,
    /// Reads that returned bytes that were never written there or are stale.
    pub wrong_reads: u64,
    /// Slots whose acknowledged value came back as `DataLost` (reported losses).
    pub acked_writes_lost_reported: u64,
    /// Slots whose acknowledged value was gone without a report (silent losses),
    /// found by the final full check.
    pub acked_writes_lost: u64,
    /// Ops that failed (server unreachable, timeouts...), by first words of the error.
    pub op_errors: u64,
    /// Longest stretch a region had only failing ops, or one op took to succeed, in
    /// milliseconds.
    pub max_unavailable_ms: u64,
    /// Every such stretch of at least `WINDOW_MIN`: (start, length) in ms since the
    /// load started (for attributing unavailability to the faults that caused it).
    pub unavailable: Vec<(u64, u64)>,
    /// Ops completed per `BUCKET`.
    pub timeline: Vec<u64>,
    pub samples: Vec<String>,
}

struct Model {
    acked: Vec<u64>,
    inflight: Vec<u64>,
    /// Since when ops on a region fail (None while they succeed), and the worst gap.
    down_since: Vec<Option<Instant>>,
    worst_down: Duration,
    windows: Vec<(u64, u64)>,
}

/// Shorter stretches of failing ops are not listed one by one.
const WINDOW_MIN: Duration = Duration::from_millis(20);

struct Shared {
    stop: AtomicBool,
    reads: AtomicU64,
    writes: AtomicU64,
    wrong: AtomicU64,
    lost_reported: AtomicU64,
    errors: AtomicU64,
    model: Mutex<Model>,
    buckets: Mutex<Vec<u64>>,
    samples: Mutex<Vec<String>>,
    start: Instant,
    region_size: u64,
    history: Option<Arc<History>>,
    /// Slots read as lost (and cleared): out of the history check.
    lost_slots: Mutex<std::collections::BTreeSet<u64>>,
}

impl Shared {
    fn sample(&self, s: String) {
        let mut v = self.samples.lock();
        if v.len() < KEEP {
            v.push(s);
        }
    }

    fn record(&self, slot: u64, kind: Kind, invoked: Instant, outcome: Outcome) {
        if let Some(h) = &self.history {
            h.record(Event {
                addr: slot * 8,
                kind,
                invoked,
                completed: Instant::now(),
                outcome,
            });
        }
    }

    fn tick(&self) {
        let b = (self.start.elapsed().as_millis() / BUCKET.as_millis()) as usize;
        let mut v = self.buckets.lock();
        if v.len() <= b {
            v.resize(b + 1, 0);
        }
        v[b] += 1;
    }

    /// An op on `slot` invoked at `invoked` ended now, `ok` or failing. A region is
    /// unavailable from its first failing op to its next success, and for as long as
    /// one op took to succeed (an op the client retried through a failover).
    fn region_ok(&self, slot: u64, ok: bool, invoked: Instant) {
        let r = (slot * 8 / self.region_size) as usize;
        let mut m = self.model.lock();
        let now = Instant::now();
        let took = now - invoked;
        if ok && m.down_since[r].is_none() && took >= WINDOW_MIN {
            m.worst_down = m.worst_down.max(took);
            let start = invoked.saturating_duration_since(self.start).as_millis() as u64;
            m.windows.push((start, took.as_millis() as u64));
        }
        match (ok, m.down_since[r]) {
            (true, Some(t)) => {
                m.worst_down = m.worst_down.max(now - t);
                m.down_since[r] = None;
                if now - t >= WINDOW_MIN {
                    let start = t.saturating_duration_since(self.start).as_millis() as u64;
                    m.windows.push((start, (now - t).as_millis() as u64));
                }
            }
            (false, None) => m.down_since[r] = Some(now),
            _ => {}
        }
    }
}

fn unavailable(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Op(OpError::ServerUnavailable { .. } | OpError::Timeout { .. })
    )
}

fn lost(e: &ClientError) -> bool {
    matches!(e, ClientError::Op(OpError::DataLost { .. }))
}

/// A running verifying load over `slots` 8-byte slots from address 0 of a cache.
pub struct Verifier {
    sh: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    cache: Cache,
}

impl Verifier {
    pub fn start(cache: &Cache, slots: u64) -> Self {
        Self::start_with(cache, slots, None)
    }

    /// A load that also records every op in `history`.
    pub fn start_recording(cache: &Cache, slots: u64, history: Arc<History>) -> Self {
        Self::start_with(cache, slots, Some(history))
    }

    /// Slots whose bytes were read as lost (left out of the history check).
    pub fn lost_slots(&self) -> Vec<u64> {
        self.sh.lost_slots.lock().iter().copied().collect()
    }

    fn start_with(cache: &Cache, slots: u64, history: Option<Arc<History>>) -> Self {
        let region_size = cache.info().region_size.max(8);
        let regions = (slots * 8).div_ceil(region_size) as usize;
        let sh = Arc::new(Shared {
            stop: AtomicBool::new(false),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            wrong: AtomicU64::new(0),
            lost_reported: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            model: Mutex::new(Model {
                acked: vec![0; slots as usize],
                inflight: vec![0; slots as usize],
                down_since: vec![None; regions],
                worst_down: Duration::ZERO,
                windows: Vec::new(),
            }),
            buckets: Mutex::new(Vec::new()),
            samples: Mutex::new(Vec::new()),
            start: Instant::now(),
            region_size,
            history,
            lost_slots: Mutex::new(Default::default()),
        });
        let writer = {
            let (sh, cache) = (sh.clone(), cache.clone());
            std::thread::spawn(move || write_loop(&sh, &cache, slots))
        };
        let reader = {
            let (sh, cache) = (sh.clone(), cache.clone());
            std::thread::spawn(move || read_loop(&sh, &cache, slots))
        };
        Self {
            sh,
            threads: vec![writer, reader],
            cache: cache.clone(),
        }
    }

    /// Ops completed so far.
    pub fn ops(&self) -> u64 {
        self.sh.reads.load(Ordering::Relaxed) + self.sh.writes.load(Ordering::Relaxed)
    }

    /// Stops the load, then reads every slot once more: a value other than the last
    /// acknowledged one (and not reported lost) is a silent loss.
    pub fn stop(self) -> VerifyReport {
        self.sh.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        let sh = &self.sh;
        let (acked, inflight) = {
            let m = sh.model.lock();
            (m.acked.clone(), m.inflight.clone())
        };
        let mut silent = 0;
        // A write that failed at the client may still have been applied (its server
        // died after applying it): its value is as good as the acknowledged one.
        let mut check = |i: usize, got: u64| {
            if got != acked[i] && got != inflight[i] {
                silent += 1;
                sh.sample(format!(
                    "final: slot {i} reads {got:#x}, acknowledged {:#x}",
                    acked[i]
                ));
            }
        };
        // In chunks; a chunk with lost bytes is read again slot by slot.
        const CHUNK_SLOTS: usize = 8192;
        for first in (0..acked.len()).step_by(CHUNK_SLOTS) {
            let n = CHUNK_SLOTS.min(acked.len() - first);
            match self.cache.read(first as u64 * 8, n as u64 * 8) {
                Ok(b) if b.len() == n * 8 => {
                    for (k, w) in b.chunks_exact(8).enumerate() {
                        check(first + k, word(w));
                    }
                }
                _ => {
                    for (i, &want) in acked.iter().enumerate().skip(first).take(n) {
                        match self.cache.read(i as u64 * 8, 8) {
                            Ok(b) if b.len() == 8 => check(i, word(&b)),
                            Err(e) if lost(&e) => {
                                if want != 0 {
                                    sh.lost_reported.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            other => sh.sample(format!("final read of slot {i}: {other:?}")),
                        }
                    }
                }
            }
        }
        let m = sh.model.lock();
        let now = Instant::now();
        let mut unavailable = m.windows.clone();
        for t in m.down_since.iter().flatten() {
            let start = t.saturating_duration_since(sh.start).as_millis() as u64;
            unavailable.push((start, (now - *t).as_millis() as u64));
        }
        let open = m
            .down_since
            .iter()
            .flatten()
            .map(|t| now - *t)
            .max()
            .unwrap_or_default();
        VerifyReport {
            reads: sh.reads.load(Ordering::Relaxed),
            writes: sh.writes.load(Ordering::Relaxed),
            wrong_reads: sh.wrong.load(Ordering::Relaxed),
            acked_writes_lost_reported: sh.lost_reported.load(Ordering::Relaxed),
            acked_writes_lost: silent,
            op_errors: sh.errors.load(Ordering::Relaxed),
            max_unavailable_ms: m.worst_down.max(open).as_millis() as u64,
            unavailable,
            timeline: sh.buckets.lock().clone(),
            samples: sh.samples.lock().clone(),
        }
    }
}

fn word(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_le_bytes(w)
}

fn next(x: &mut u64) -> u64 {
    *x = x
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    *x >> 16
}

fn write_loop(sh: &Shared, cache: &Cache, slots: u64) {
    let mut x = 0x5eed_u64;
    while !sh.stop.load(Ordering::Relaxed) {
        let slot = next(&mut x) % slots;
        let v = next(&mut x) | 1;
        sh.model.lock().inflight[slot as usize] = v;
        let invoked = Instant::now();
        let r = cache.write(slot * 8, &v.to_le_bytes());
        sh.record(slot, Kind::Write(v), invoked, outcome_of(&r));
        match &r {
            Ok(()) => {
                sh.model.lock().acked[slot as usize] = v;
                sh.writes.fetch_add(1, Ordering::Relaxed);
                sh.tick();
            }
            Err(e) => {
                sh.errors.fetch_add(1, Ordering::Relaxed);
                sh.sample(format!("write slot {slot}: {e}"));
                if unavailable(e) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        sh.region_ok(slot, r.is_ok(), invoked);
    }
}

fn read_loop(sh: &Shared, cache: &Cache, slots: u64) {
    let mut x = 0xfeed_u64;
    while !sh.stop.load(Ordering::Relaxed) {
        let slot = next(&mut x) % slots;
        let before = sh.model.lock().acked[slot as usize];
        let invoked = Instant::now();
        let r = cache.read(slot * 8, 8);
        if let Ok(b) = &r
            && b.len() == 8
        {
            sh.record(slot, Kind::Read(word(b)), invoked, Outcome::Ok);
        }
        let ok = match &r {
            Ok(b) if b.len() == 8 => {
                let got = word(b);
                let m = sh.model.lock();
                let (after, pending) = (m.acked[slot as usize], m.inflight[slot as usize]);
                drop(m);
                if got != before && got != after && got != pending {
                    sh.wrong.fetch_add(1, Ordering::Relaxed);
                    sh.sample(format!(
                        "slot {slot}: read {got:#x}, acknowledged {before:#x} / {after:#x}"
                    ));
                }
                sh.reads.fetch_add(1, Ordering::Relaxed);
                sh.tick();
                true
            }
            Ok(b) => {
                sh.wrong.fetch_add(1, Ordering::Relaxed);
                sh.sample(format!("slot {slot}: {} bytes", b.len()));
                true
            }
            Err(e) if lost(e) => {
                // Reported, so not wrong; the region answers, so it is available.
                if before != 0 {
                    sh.lost_reported.fetch_add(1, Ordering::Relaxed);
                }
                let mut m = sh.model.lock();
                // Unless the writer wrote the slot meanwhile (which made it data).
                if m.acked[slot as usize] == before {
                    m.acked[slot as usize] = 0;
                }
                drop(m);
                // Make it data again, as an application would.
                sh.lost_slots.lock().insert(slot);
                let _ = cache.clear_lost(slot * 8, 8);
                true
            }
            Err(e) => {
                sh.errors.fetch_add(1, Ordering::Relaxed);
                sh.sample(format!("read slot {slot}: {e}"));
                if unavailable(e) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                false
            }
        };
        sh.region_ok(slot, ok, invoked);
    }
}
