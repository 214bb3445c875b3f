//! How much FETCH work a worker does for other servers while clients wait.
//!
//! A FETCH asks this server to read up to 64 KiB and send it on: cheap to ask,
//! costly to answer. A cluster member flooding them (a bug, or a compromised host) would
//! otherwise take the worker from its clients, since each turn serves at least one
//! message. While clients were served in the last [`CLIENT_RECENT`], FETCHes spend
//! from a token bucket ([`RATE`] bytes/s, bursts of [`BURST`]); a FETCH the bucket
//! cannot pay waits (the connection is retried shortly, and stops being read). With
//! no client work, peers run unmetered, so procedures pulling data between idle
//! servers go at full speed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// FETCH bytes per second a worker answers while its clients are busy (each FETCH
/// also costs [`PER_MESSAGE`]).
pub const RATE: f64 = 256.0 * 1024.0 * 1024.0;
/// What answering a FETCH costs beyond its bytes, in bytes of the budget.
pub const PER_MESSAGE: usize = 256;
/// Bytes the bucket holds: a burst of procedures' pulls goes through at once.
pub const BURST: f64 = 4.0 * 1024.0 * 1024.0;
/// Client work this recent means clients are waiting.
pub const CLIENT_RECENT: Duration = Duration::from_millis(2);

/// When any worker of a server last served a client's batch (shared by its workers:
/// a flood on one worker must yield to clients on another, on the same cores).
pub struct ClientActivity {
    born: Instant,
    /// Microseconds since `born`, plus one (0: never).
    at_us: AtomicU64,
}

impl Default for ClientActivity {
    fn default() -> Self {
        Self {
            born: Instant::now(),
            at_us: AtomicU64::new(0),
        }
    }
}

impl ClientActivity {
    /// A client's batch was served.
    #[inline]
    pub fn served(&self, now: Instant) {
        let us = now.saturating_duration_since(self.born).as_micros() as u64 + 1;
        // Written only when it moves by 100 µs: workers share this line.
        let at = self.at_us.load(Ordering::Relaxed);
        if at == 0 || us > at + 100 {
            self.at_us.store(us, Ordering::Relaxed);
        }
    }

    fn recent(&self, now: Instant) -> bool {
        let at = self.at_us.load(Ordering::Relaxed);
        at > 0 && {
            let now_us = now.saturating_duration_since(self.born).as_micros() as u64 + 1;
            now_us.saturating_sub(at) < CLIENT_RECENT.as_micros() as u64
        }
    }
}

pub struct PeerBudget {
    tokens: f64,
    refilled: Instant,
    clients: Arc<ClientActivity>,
    /// FETCHes held back so far.
    pub deferred: u64,
}

impl PeerBudget {
    pub fn new(clients: Arc<ClientActivity>) -> Self {
        Self {
            tokens: BURST,
            refilled: Instant::now(),
            clients,
            deferred: 0,
        }
    }

    /// A client's batch was served.
    #[inline]
    pub fn client_served(&self, now: Instant) {
        self.clients.served(now);
    }

    /// Whether a FETCH of `len` bytes may be answered now (and if so, pays for it).
    pub fn take(&mut self, len: usize, now: Instant) -> bool {
        let cost = len + PER_MESSAGE;
        let earned = now.saturating_duration_since(self.refilled).as_secs_f64() * RATE;
        self.tokens = (self.tokens + earned).min(BURST);
        self.refilled = now;
        let clients_wait = self.clients.recent(now);
        // A full bucket pays for anything, so no message waits forever.
        if !clients_wait || self.tokens >= cost as f64 || self.tokens >= BURST {
            self.tokens = (self.tokens - cost as f64).max(-BURST);
            return true;
        }
        self.deferred += 1;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn fetches_are_metered_only_while_clients_are_busy() {
        let t0 = Instant::now();
        let mut b = PeerBudget::new(Arc::default());
        // No clients: everything goes, the bucket runs into debt at most one burst.
        assert!((0..100).all(|_| b.take(MIB, t0)));
        b.client_served(t0);
        assert!(!b.take(MIB, t0), "clients busy and the bucket is empty");
        // Refilled at RATE: after 20 ms, about 5 MiB earned, less the 4 MiB debt.
        let later = t0 + Duration::from_millis(20);
        b.client_served(later);
        assert!(b.take(MIB, later));
        assert!(!b.take(MIB, later));
        // Clients quiet for longer than CLIENT_RECENT: unmetered again.
        let quiet = later + CLIENT_RECENT + Duration::from_micros(1);
        assert!(b.take(MIB, quiet));
        assert_eq!(b.deferred, 2);
    }

    #[test]
    fn clients_of_another_worker_count() {
        let t0 = Instant::now();
        let clients = Arc::new(ClientActivity::default());
        let (mut a, b) = (PeerBudget::new(clients.clone()), PeerBudget::new(clients));
        assert!(a.take(8 * MIB, t0));
        b.client_served(t0);
        assert!(!a.take(MIB, t0));
    }

    #[test]
    fn a_full_bucket_pays_for_a_message_larger_than_a_burst() {
        let t0 = Instant::now();
        let mut b = PeerBudget::new(Arc::default());
        b.client_served(t0);
        assert!(b.take(16 * MIB, t0));
        assert!(!b.take(1, t0));
    }
}
