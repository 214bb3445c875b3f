//! Whether this manager may act on the cluster.
//!
//! A manager on the embedded catalogue is the only one and always leads. A manager on
//! etcd leads while its etcd lease lives: it holds leadership until `sent + ttl ×
//! (1 − margin)`, counted from when it *sent* the last keep-alive etcd answered, so it
//! stops before etcd can expire the lease and let another manager in (etcd counts from
//! when the keep-alive arrived, which is later). Once lapsed, leadership is never
//! regained by this instance: a manager that wants to lead again starts over, reading
//! the catalogue afresh.
//!
//! Leases the manager grants servers stay safe across a change of leader: the old
//! leader grants none after its leadership lapsed, which is before etcd let the new one
//! in, and the new leader declares a server dead only a heartbeat timeout after it took
//! over, longer than any lease.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Share of the etcd lease the manager counts on (clock rates may differ).
pub const LEASE_MARGIN: f64 = 0.1;

#[derive(Debug, Clone)]
enum Lead {
    /// The only manager: always leads.
    Sole,
    /// Leads until this instant unless extended.
    Until(Instant),
    /// Lost it, and why.
    Deposed(String),
}

#[derive(Debug)]
pub struct Leadership {
    lead: Mutex<Lead>,
    changed: Condvar,
}

impl Leadership {
    pub fn sole() -> Arc<Self> {
        Self::with(Lead::Sole)
    }

    pub fn until(t: Instant) -> Arc<Self> {
        Self::with(Lead::Until(t))
    }

    fn with(lead: Lead) -> Arc<Self> {
        Arc::new(Self {
            lead: Mutex::new(lead),
            changed: Condvar::new(),
        })
    }

    /// True while this manager may act. Notices a lapse itself.
    pub fn holds(&self) -> bool {
        let mut g = self.lead.lock();
        match &*g {
            Lead::Sole => true,
            Lead::Until(t) if Instant::now() < *t => true,
            Lead::Until(_) => {
                *g = Lead::Deposed("the etcd lease was not renewed in time".into());
                self.changed.notify_all();
                false
            }
            Lead::Deposed(_) => false,
        }
    }

    /// etcd answered a keep-alive sent at `sent` with `ttl` left.
    pub fn renewed(&self, sent: Instant, ttl: Duration) {
        let until = sent + ttl.mul_f64(1.0 - LEASE_MARGIN);
        let mut g = self.lead.lock();
        if let Lead::Until(t) = &mut *g
            && Instant::now() < *t
        {
            *t = (*t).max(until);
        }
    }

    pub fn depose(&self, why: impl Into<String>) {
        let mut g = self.lead.lock();
        if !matches!(*g, Lead::Deposed(_)) {
            let why = why.into();
            tracing::warn!(%why, "this manager no longer leads");
            *g = Lead::Deposed(why);
            self.changed.notify_all();
        }
    }

    /// Why leadership was lost, once it is (`None` after `timeout` if it still holds).
    pub fn wait_deposed(&self, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if !self.holds() {
                return match &*self.lead.lock() {
                    Lead::Deposed(why) => Some(why.clone()),
                    _ => Some("leadership lapsed".into()),
                };
            }
            let mut g = self.lead.lock();
            // Wake at the lapse or the deadline, whichever is first.
            let wake = match &*g {
                Lead::Until(t) => (*t).min(deadline),
                _ => deadline,
            };
            if Instant::now() >= deadline {
                return None;
            }
            self.changed.wait_until(&mut g, wake);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_lapses_unless_renewed_and_never_comes_back() {
        let l = Leadership::until(Instant::now() + Duration::from_millis(50));
        assert!(l.holds());
        l.renewed(Instant::now(), Duration::from_millis(200));
        std::thread::sleep(Duration::from_millis(80));
        assert!(l.holds(), "renewed past the first deadline");
        assert!(l.wait_deposed(Duration::from_secs(5)).is_some());
        assert!(!l.holds());
        l.renewed(Instant::now(), Duration::from_secs(10));
        assert!(!l.holds(), "a lapsed leadership is not revived");
    }

    #[test]
    fn sole_always_holds_and_depose_wakes_waiters() {
        let s = Leadership::sole();
        assert!(s.holds());
        assert_eq!(s.wait_deposed(Duration::from_millis(10)), None);
        let l = Leadership::until(Instant::now() + Duration::from_secs(60));
        let w = Arc::clone(&l);
        let t = std::thread::spawn(move || w.wait_deposed(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(20));
        l.depose("test");
        assert_eq!(t.join().unwrap().as_deref(), Some("test"));
    }
}
