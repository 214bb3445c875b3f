//! Op counters. Workers tally a batch locally and publish once per batch, so the hot
//! path does no atomic traffic per op.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use farcache_proto::OpCode;
use farcache_proto::control::{GuardStats, OpStats, PeerStats};

const N: usize = OpCode::ALL.len();

fn slot(op: OpCode) -> usize {
    OpCode::ALL.iter().position(|o| *o == op).unwrap_or(0)
}

#[derive(Default)]
pub struct Metrics {
    count: [AtomicU64; N],
    bytes: [AtomicU64; N],
    errors: [AtomicU64; N],
    pub protocol_errors: AtomicU64,
    pub connections: AtomicU64,
    pub peer: PeerCounters,
    pub guard: GuardCounters,
    /// Worker threads that panicked (and were restarted).
    pub worker_panics: AtomicU64,
}

/// What the server did to protect itself (see [`GuardStats`]).
#[derive(Default)]
pub struct GuardCounters {
    pub refused: AtomicU64,
    pub evicted: AtomicU64,
    pub auth_failures: AtomicU64,
    pub timed_out: AtomicU64,
    pub cut_off: AtomicU64,
    pub forbidden: AtomicU64,
    pub peer_dropped: AtomicU64,
    pub unleased: AtomicU64,
    pub fenced: AtomicU64,
}

impl GuardCounters {
    pub fn snapshot(&self) -> GuardStats {
        GuardStats {
            refused: self.refused.load(Relaxed),
            evicted: self.evicted.load(Relaxed),
            auth_failures: self.auth_failures.load(Relaxed),
            timed_out: self.timed_out.load(Relaxed),
            cut_off: self.cut_off.load(Relaxed),
            forbidden: self.forbidden.load(Relaxed),
            peer_dropped: self.peer_dropped.load(Relaxed),
            unleased: self.unleased.load(Relaxed),
            fenced: self.fenced.load(Relaxed),
        }
    }

    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Relaxed);
    }
}

/// Server-to-server traffic (see [`PeerStats`]).
#[derive(Default)]
pub struct PeerCounters {
    pub frames_sent: AtomicU64,
    pub msgs_sent: AtomicU64,
    pub forwards: AtomicU64,
    pub fetches: AtomicU64,
    pub results: AtomicU64,
    pub failures: AtomicU64,
    pub queued: AtomicU64,
    pub stolen: AtomicU64,
}

impl PeerCounters {
    pub fn snapshot(&self) -> PeerStats {
        PeerStats {
            frames_sent: self.frames_sent.load(Relaxed),
            msgs_sent: self.msgs_sent.load(Relaxed),
            forwards: self.forwards.load(Relaxed),
            fetches: self.fetches.load(Relaxed),
            results: self.results.load(Relaxed),
            failures: self.failures.load(Relaxed),
            queued: self.queued.load(Relaxed),
            stolen: self.stolen.load(Relaxed),
        }
    }

    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }
}

/// A batch's worth of counts, kept on the worker's stack.
#[derive(Default)]
pub struct Tally {
    count: [u64; N],
    bytes: [u64; N],
    errors: [u64; N],
    /// Ops refused for the connection's token.
    pub forbidden: u64,
}

impl Tally {
    #[inline]
    pub fn op(&mut self, op: OpCode, bytes: usize, ok: bool) {
        let i = slot(op);
        self.count[i] += 1;
        self.bytes[i] += bytes as u64;
        self.errors[i] += u64::from(!ok);
    }
}

impl Metrics {
    pub fn publish(&self, t: &Tally) {
        if t.forbidden > 0 {
            self.guard.forbidden.fetch_add(t.forbidden, Relaxed);
        }
        for i in 0..N {
            if t.count[i] != 0 {
                self.count[i].fetch_add(t.count[i], Relaxed);
                self.bytes[i].fetch_add(t.bytes[i], Relaxed);
                self.errors[i].fetch_add(t.errors[i], Relaxed);
            }
        }
    }

    pub fn ops(&self) -> Vec<OpStats> {
        OpCode::ALL
            .iter()
            .enumerate()
            .map(|(i, op)| OpStats {
                op: op.name().to_string(),
                count: self.count[i].load(Relaxed),
                bytes: self.bytes[i].load(Relaxed),
                errors: self.errors[i].load(Relaxed),
            })
            .collect()
    }
}
