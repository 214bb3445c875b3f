//! Driving a lane's sockets: one round of sending, waiting for readiness (or, while
//! spinning on a few connections, reading them directly), reading replies, and then
//! the deadlines (op timeout, silent servers) and the parts that go out again.
//!
//! Invariant: a round never blocks past the earliest deadline it knows (the oldest
//! frame's op timeout, the next parked part's due time, [`MAX_POLL`]), and the parts
//! that go out again (hops, retries, parked) are handled at the end of a round, one
//! kind at a time, guarded by `in_retry` against re-entry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use farcache_proto::ServerId;

use super::complete::complete_frame;
use super::route::drain_backlog;
use super::shared::RouteTable;
use super::{LaneInner, WAKE};
use crate::error::OpError;

/// Longest a driver blocks in poll before re-checking deadlines.
const MAX_POLL: Duration = Duration::from_millis(100);

/// Spinning reads connections directly (see `LaneInner::probe_directly`) when at most
/// this many have replies due...
const PROBE_AT_MOST: usize = 2;
/// ... and polls every this many spins all the same.
const POLL_EVERY: u32 = 16;

impl LaneInner {
    pub(super) fn seal_and_flush(&mut self) {
        let q = self.cfg.queue_depth;
        let mut broken = Vec::new();
        for (id, c) in self.conns.iter_mut() {
            if c.has_open() {
                c.seal(q);
            }
            if let Err(e) = c.flush() {
                broken.push((id, c.unavailable(&e.to_string())));
            }
        }
        for (id, e) in broken {
            self.fail_conn(id, e);
        }
    }

    /// One round of progress: send, wait up to `timeout` for readiness, read replies,
    /// enforce deadlines and re-route redirected parts.
    pub(crate) fn drive_once(&mut self, timeout: Option<Duration>) {
        self.seal_and_flush();
        let now = Instant::now();
        let mut wait = timeout.unwrap_or(MAX_POLL).min(MAX_POLL);
        for c in self.conns.values() {
            if let Some(sent) = c.oldest_sent() {
                wait = wait.min((sent + self.cfg.op_timeout).saturating_duration_since(now));
            }
        }
        if let Some(due) = self.parking.next_due() {
            // Wake for the next parked part rather than sleep a whole MAX_POLL.
            wait = wait.min(due.saturating_duration_since(now));
        }
        // Reused every round: a spin allocates nothing.
        let mut ready = std::mem::take(&mut self.ready);
        ready.clear();
        if !self.probe_directly(wait, &mut ready) {
            if let Err(e) = self.poll.poll(&mut self.events, Some(wait))
                && e.kind() != std::io::ErrorKind::Interrupted
            {
                tracing::warn!("client poll failed: {e}");
            }
            ready.clear();
            ready.extend(
                self.events
                    .iter()
                    .filter(|e| e.token() != WAKE)
                    .map(|e| e.token().0 as ServerId),
            );
        }
        for &server in &ready {
            let Self {
                conns,
                tickets,
                retries,
                hops,
                parking,
                ..
            } = self;
            let Some(conn) = conns.get_mut(&server) else {
                continue;
            };
            let r = conn.read_ready(|conn, fl, payload| {
                complete_frame(conn, tickets, retries, hops, parking, fl, payload)
            });
            if r.is_ok() && !conn.backlog.is_empty() {
                drain_backlog(conn, tickets, (self.cfg.batch_size, self.cfg.queue_depth));
                conn.seal(self.cfg.queue_depth);
            }
            let r = r.and_then(|()| conn.flush().map_err(|e| conn.unavailable(&e.to_string())));
            if let Err(e) = r {
                self.fail_conn(server, e);
            }
        }
        self.ready = ready;
        if !self.dialing.is_empty() {
            self.finish_dials();
        }
        let now = Instant::now();
        let late: Vec<(ServerId, OpError)> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.oldest_sent()
                    .is_some_and(|s| now.duration_since(s) >= self.cfg.op_timeout)
            })
            .map(|(id, c)| {
                let e = OpError::Timeout {
                    server: id,
                    addr: c.addr.clone(),
                    timeout_ms: self.cfg.op_timeout.as_millis() as u64,
                };
                (id, e)
            })
            .collect();
        for (id, e) in late {
            self.fail_conn(id, e);
        }
        self.check_silent(now);
        if !self.in_retry && !self.hops.is_empty() {
            self.in_retry = true;
            self.process_hops();
            self.in_retry = false;
        }
        if !self.in_retry && !self.retries.is_empty() {
            self.in_retry = true;
            self.process_retries();
            self.in_retry = false;
        }
        if !self.in_retry && !self.parking.parked.is_empty() {
            self.in_retry = true;
            self.process_parked();
            self.in_retry = false;
        }
    }

    /// Connections unanswered for `suspect_after`: if the manager gave every region
    /// of their server away (in every cache this lane has ops for), the server is
    /// gone (a vanished host sends no RST): its ops go to the new owners.
    fn check_silent(&mut self, now: Instant) {
        let after = self.cfg.suspect_after;
        if after.is_zero() || after >= self.cfg.op_timeout {
            return;
        }
        // Servers silent for `after`, and since when.
        let silent: Vec<(ServerId, Instant)> = self
            .conns
            .iter()
            .filter_map(|(id, c)| {
                let s = c.oldest_sent()?;
                (now.duration_since(s) >= after).then_some((id, s))
            })
            .collect();
        if silent.is_empty() {
            return;
        }
        let mut caches: Vec<Arc<RouteTable>> = Vec::new();
        for (_, t) in self.tickets.iter() {
            if t.remaining > 0 && !caches.iter().any(|c| c.id() == t.route.id()) {
                caches.push(t.route.clone());
            }
        }
        if caches.is_empty() {
            return;
        }
        // Tables come from the manager on a thread of their own (`refresh_soon`): a
        // manager out of reach must not hold this lane, and every thread using it,
        // for its timeouts. A server is judged by tables fetched after it was asked
        // about, during this silence; until they come, it keeps its ops.
        let mut ask = false;
        for (id, since) in silent {
            let asked = self.suspected.get(&id).copied().filter(|&a| a >= since);
            if let Some(a) = asked
                && caches.iter().all(|c| c.refreshed_since(a))
                && !caches.iter().any(|c| c.info().regions.contains(&id))
            {
                // Its ops were routed to it by these caches' tables: owning none of
                // their regions now, it lost them all.
                let addr = self
                    .conns
                    .get(&id)
                    .map(|c| c.addr.clone())
                    .unwrap_or_default();
                let e = OpError::ServerUnavailable {
                    server: id,
                    addr,
                    reason: format!(
                        "no answer for {after:?}, and the manager gave its regions to other servers"
                    ),
                };
                tracing::debug!(server = id, "silent server replaced: sending its ops on");
                self.fail_conn(id, e);
                continue;
            }
            // Asked again 5 times as often as `after`, until it answers or is
            // replaced (a failover takes the lease after the silence began).
            if asked.is_none_or(|a| now.duration_since(a) >= after / 5) {
                self.suspected.insert(id, now);
                ask = true;
            }
        }
        if ask {
            for c in &caches {
                c.refresh_soon();
            }
        }
    }

    /// While spinning on a few connections with replies due, reading them is how the
    /// wait ends: one `recv` per connection both notices and takes a reply, where
    /// `epoll_wait` and then `recv` cost two system calls on the round trip. Every
    /// [`POLL_EVERY`]-th spin still polls, for events of other connections (a hang-up,
    /// room to write) and the waker. Fills `due` with the connections to read; false
    /// when this round must poll instead.
    fn probe_directly(&mut self, wait: Duration, due: &mut Vec<ServerId>) -> bool {
        if !wait.is_zero() || !self.dialing.is_empty() {
            return false;
        }
        self.spins = self.spins.wrapping_add(1);
        if self.spins.is_multiple_of(POLL_EVERY) {
            return false;
        }
        for (id, c) in self.conns.iter() {
            if c.oldest_sent().is_some() {
                if due.len() == PROBE_AT_MOST {
                    return false;
                }
                due.push(id);
            }
        }
        true
    }
}
