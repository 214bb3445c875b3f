//! The server's lease from the manager. A server that registered with a manager
//! serves its regions (reads, writes, atomics, procedure calls from clients) only
//! while its lease runs. Each heartbeat renews it for the lease the manager granted,
//! counted from when the heartbeat was *sent*, so the lease always ends before the
//! manager could think it still runs. The manager declares the server dead, and hands
//! its regions to others, only after the lease has certainly ended (see
//! `farcache-manager`'s `lease`): a server cut off from the manager stops serving before anyone
//! else starts.
//!
//! A check is one monotonic clock read and one atomic load, made per batch (before it
//! runs and again before its replies leave), not per op.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// `until` when no manager grants leases (a server without a manager).
const FOREVER: u64 = u64::MAX;

#[derive(Debug)]
pub struct Lease {
    origin: Instant,
    /// When the lease ends, in nanoseconds after `origin`; 0: no lease.
    until: AtomicU64,
}

impl Lease {
    /// A server with a manager: it holds no lease until the manager grants one.
    pub fn pending() -> Self {
        Self {
            origin: Instant::now(),
            until: AtomicU64::new(0),
        }
    }

    /// A server without a manager serves whatever it holds.
    pub fn unbounded() -> Self {
        Self {
            origin: Instant::now(),
            until: AtomicU64::new(FOREVER),
        }
    }

    /// The lease clock now (nanoseconds); take it before sending a renewal.
    pub fn clock(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(FOREVER - 1)
    }

    /// Whether the server may serve now.
    #[inline]
    pub fn valid(&self) -> bool {
        let until = self.until.load(Ordering::Acquire);
        until == FOREVER || (until != 0 && self.clock() < until)
    }

    /// Records a grant of `lease` for a request sent at `sent_at` (from [`clock`]).
    /// A zero lease means the manager grants none: serve without one.
    ///
    /// [`clock`]: Self::clock
    pub fn grant(&self, sent_at: u64, lease: Duration) {
        let until = if lease.is_zero() {
            FOREVER
        } else {
            // Never `FOREVER` by saturation: a granted lease always ends.
            sent_at
                .saturating_add(u64::try_from(lease.as_nanos()).unwrap_or(FOREVER))
                .min(FOREVER - 1)
        };
        self.until.store(until, Ordering::Release);
    }

    /// Ends the lease now (the server was fenced).
    pub fn revoke(&self) {
        self.until.store(0, Ordering::Release);
    }

    /// Time left on the lease (`None`: unbounded), for status and metrics.
    pub fn remaining(&self) -> Option<Duration> {
        match self.until.load(Ordering::Acquire) {
            FOREVER => None,
            until => Some(Duration::from_nanos(until.saturating_sub(self.clock()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_lease_serves_nothing_until_granted() {
        let l = Lease::pending();
        assert!(!l.valid());
        l.grant(l.clock(), Duration::from_secs(5));
        assert!(l.valid());
        l.revoke();
        assert!(!l.valid());
    }

    #[test]
    fn a_lease_ends_when_its_time_is_up() {
        let l = Lease::pending();
        l.grant(l.clock(), Duration::from_millis(30));
        assert!(l.valid());
        std::thread::sleep(Duration::from_millis(40));
        assert!(!l.valid(), "lease still valid after it ran out");
        assert_eq!(l.remaining(), Some(Duration::ZERO));
    }

    #[test]
    fn a_lease_counts_from_when_the_renewal_was_sent() {
        let l = Lease::pending();
        let sent = l.clock();
        std::thread::sleep(Duration::from_millis(30));
        // The answer came 30 ms after the request: only what is left counts.
        l.grant(sent, Duration::from_millis(35));
        std::thread::sleep(Duration::from_millis(10));
        assert!(!l.valid());
    }

    #[test]
    fn no_manager_means_no_lease_to_run_out() {
        let l = Lease::unbounded();
        assert!(l.valid());
        assert_eq!(l.remaining(), None);
        // A manager that grants no lease (0) leaves the server serving.
        let p = Lease::pending();
        p.grant(p.clock(), Duration::ZERO);
        assert!(p.valid());
    }
}
