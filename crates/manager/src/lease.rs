//! Leases: how long a server may serve its regions without hearing from the manager.
//!
//! Every `Registered` and every heartbeat answer grants the server a lease of
//! [`lease_for`]`(timeout)`, which the server counts from when it *sent* the request
//! (server/src/lease.rs). The manager counts its heartbeat timeout from when the
//! request *arrived*, which is later. So when the manager declares a silent server
//! dead (and only then promotes a backup or re-places its regions), the server's last
//! lease ended at least `timeout - lease` earlier by the manager's clock, provided the
//! two clocks run at rates that differ by less than [`CLOCK_RATE_MARGIN`]: no two
//! servers ever serve one region at overlapping times. A dead server that comes back
//! is fenced: its heartbeat is refused (`Fenced`) and its registration tells it to drop
//! every region it held, before it gets a new lease.

use std::time::Duration;

/// The share of the heartbeat timeout a lease lasts.
pub const LEASE_SHARE: f64 = 0.8;

/// How much faster the manager's clock may run than a server's (or slower, the
/// other way round) before a lease could outlive the timeout: with leases of 0.8 of
/// the timeout, `0.8 × (1 + m) / (1 − m) < 1` holds for `m` up to 11 %.
pub const CLOCK_RATE_MARGIN: f64 = 0.11;

/// The lease granted to servers under a heartbeat timeout of `timeout`.
pub fn lease_for(timeout: Duration) -> Duration {
    timeout.mul_f64(LEASE_SHARE)
}

/// The lease in whole milliseconds, as sent (at least 1: 0 means no lease).
pub fn lease_ms(timeout: Duration) -> u64 {
    u64::try_from(lease_for(timeout).as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_ends_before_the_timeout_even_with_clocks_at_the_margin() {
        let timeout = Duration::from_secs(3);
        let lease = lease_for(timeout).as_secs_f64();
        // The server's lease measured by a clock slower by the margin, seen from a
        // manager clock faster by it.
        let worst = lease * (1.0 + CLOCK_RATE_MARGIN) / (1.0 - CLOCK_RATE_MARGIN);
        assert!(worst < timeout.as_secs_f64(), "{worst} s >= the timeout");
        assert_eq!(lease_ms(timeout), 2400);
        assert_eq!(lease_ms(Duration::from_micros(100)), 1);
    }
}
