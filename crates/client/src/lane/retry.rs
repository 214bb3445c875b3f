//! Parts that go out again: to a region's new owner after `wrong server` (by the
//! owner the server named, else by a table refreshed from the manager), after a
//! shrink, after their server became unreachable (a failover may re-place its
//! regions), and after `paused`/`not serving` answers (parked for a backoff). A failed
//! connection hands all its parts here.
//!
//! Invariant: a part is sent again at most `max_redirects` times for redirects, and
//! waits (parked) no longer than the op timeout counted from its op's first pause; then
//! it fails with the error that stands.

use std::sync::Arc;
use std::time::{Duration, Instant};

use farcache_proto::control::CacheInfo;
use farcache_proto::{ServerId, Status};

use super::LaneInner;
use crate::error::OpError;
use crate::op::{Kind, PartRef};

/// First wait before sending a `paused` part again; doubles up to [`PAUSE_MAX`]. A
/// pause lasts the last copy round of a migration, typically well under a millisecond.
const PAUSE_FIRST: Duration = Duration::from_micros(100);
const PAUSE_MAX: Duration = Duration::from_millis(2);

/// How long an op refused by a server without a lease waits before the table is
/// asked for again: a failover takes about the manager's heartbeat timeout.
pub(super) fn unleased_backoff(attempt: u8) -> Duration {
    let shift = u32::from(attempt.saturating_sub(1).min(3));
    (UNLEASED_FIRST * (1 << shift)).min(UNLEASED_MAX)
}

const UNLEASED_FIRST: Duration = Duration::from_millis(20);
const UNLEASED_MAX: Duration = Duration::from_millis(160);

/// The wait before sending a part again after its `attempt`-th `paused` answer
/// (1-based): 100 µs, 200 µs, 400 µs, … capped at 2 ms.
pub(super) fn pause_backoff(attempt: u8) -> Duration {
    // Past 5 doublings the cap applies anyway; bounding the shift keeps it in range.
    let shift = u32::from(attempt.saturating_sub(1).min(5));
    (PAUSE_FIRST * (1 << shift)).min(PAUSE_MAX)
}

/// Why a part goes out again.
#[derive(Debug, Clone)]
pub(crate) enum Retry {
    /// `wrong server`, naming the owner if the server knew it.
    Moved(Option<String>),
    /// `out of range` for an op the handle's table (of this epoch) allows: the cache
    /// may have shrunk.
    Shrunk(u64),
    /// The server could not be reached: the region may have been placed elsewhere
    /// (its server died and the manager re-placed it); else this error stands.
    Unreachable(ServerId, OpError),
}

/// A part a server answered `paused`: sent again, re-routed, at `due`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Parked {
    pub(super) part: PartRef,
    /// The ticket's id, so a reused slab key never picks the part up.
    pub(super) ticket: u64,
    pub(super) due: Instant,
    /// Ask the manager for the cache's table before sending it again (the server
    /// that refused it may have lost the region to a failover).
    pub(super) refresh: bool,
}

/// Parts waiting out a migration's write pause.
pub(super) struct Parking {
    pub(super) parked: Vec<Parked>,
    /// An op paused for longer than this fails with `Status::Paused` (the op timeout).
    pub(super) limit: Duration,
}

impl Parking {
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.parked.iter().map(|p| p.due).min()
    }
}

impl LaneInner {
    /// Sends parts whose backoff ran out again, routed by the cache's current table: the
    /// region may have moved meanwhile (a `wrong server` answer then redirects it).
    pub(super) fn process_parked(&mut self) {
        let now = Instant::now();
        if self.parking.parked.iter().all(|p| p.due > now) {
            return;
        }
        let mut due = Vec::new();
        self.parking.parked.retain(|p| {
            let ready = p.due <= now;
            if ready {
                due.push(*p);
            }
            !ready
        });
        // Tables asked for this round, one per cache.
        let mut refreshed: Vec<u32> = Vec::new();
        for Parked {
            part,
            ticket,
            refresh,
            ..
        } in due
        {
            let Some(t) = self.tickets.get(part.key as usize) else {
                continue;
            };
            if t.id != ticket {
                continue;
            }
            if refresh && !refreshed.contains(&t.route.id()) {
                refreshed.push(t.route.id());
                // A manager out of reach leaves the table as it was: the part goes to
                // the same server again, and waits again, until the op timeout.
                if let Err(e) = t.route.refresh() {
                    tracing::debug!(cache = t.route.id(), "table refresh failed: {e}");
                }
            }
            let info = t.route.info();
            let op = t.ops[part.op as usize];
            // A procedure part has length 0 but needs its start address in the cache.
            let end = part.addr.saturating_add(u64::from(part.len).max(1));
            if end > info.capacity {
                // The cache shrank while the part waited.
                let e = OpError::OutOfRange {
                    addr: op.addr,
                    len: op.len,
                    capacity: info.capacity,
                };
                self.fail_part(part, e);
                continue;
            }
            self.route_by_table(part, &info);
        }
    }

    /// Routes parts again that reached the wrong server: to the owner the server named
    /// when the cache's table lists it (the table is patched, no manager round trip),
    /// else by a table refreshed from the manager (once per cache per round). A part a
    /// server found out of range fails with the refreshed capacity, or as the server
    /// said if the table did not change.
    pub(super) fn process_retries(&mut self) {
        let parts = std::mem::take(&mut self.retries);
        let mut refreshed: Vec<(u32, Result<Arc<CacheInfo>, String>)> = Vec::new();
        for (mut part, why) in parts {
            let Some(t) = self.tickets.get(part.key as usize) else {
                continue;
            };
            let route = t.route.clone();
            let op = t.ops[part.op as usize];
            if u32::from(part.redirects) >= self.cfg.max_redirects {
                self.fail_part(part, OpError::Redirects(part.redirects.into()));
                continue;
            }
            let id = route.id();
            let (hint, seen_epoch, unreachable) = match why {
                Retry::Moved(h) => (h, None, None),
                Retry::Shrunk(e) => (None, Some(e), None),
                Retry::Unreachable(s, e) => (None, None, Some((s, e))),
            };
            let owner_now = |info: &CacheInfo| {
                info.regions
                    .get(info.region_of(part.addr))
                    .copied()
                    .unwrap_or(0)
            };
            let hinted = hint.and_then(|h| route.follow_hint(part.addr, &h));
            let info = match (hinted, refreshed.iter().find(|(c, _)| *c == id)) {
                (Some(info), _) => Ok(info),
                (None, Some((_, r))) => r.clone(),
                (None, None) => {
                    let r = route.refresh().map_err(|e| e.to_string());
                    refreshed.push((id, r.clone()));
                    r
                }
            };
            match info {
                Ok(info) if part.addr + u64::from(part.len) > info.capacity => {
                    // The cache shrank under this handle.
                    let e = OpError::OutOfRange {
                        addr: op.addr,
                        len: op.len,
                        capacity: info.capacity,
                    };
                    self.fail_part(part, e);
                }
                Ok(info) if seen_epoch == Some(info.epoch) => {
                    // Nothing changed: the server's answer stands.
                    self.fail_part(part, OpError::Status(Status::OutOfRange));
                }
                Ok(info)
                    if unreachable
                        .as_ref()
                        .is_some_and(|(s, _)| *s == owner_now(&info)) =>
                {
                    // Still that server's region. With backups, the manager promotes
                    // one once the server's lease has run out: wait for that (a tagged
                    // write is applied once however often it is sent). Else the
                    // failure stands.
                    if info.replicas > 1 && self.park_for_failover(part) {
                        continue;
                    }
                    if let Some((_, e)) = unreachable {
                        self.fail_part(part, e);
                    }
                }
                Ok(info) => {
                    part.redirects = part.redirects.saturating_add(1);
                    let server = info
                        .regions
                        .get(info.region_of(part.addr))
                        .copied()
                        .unwrap_or(0);
                    self.route(part, server, &info);
                }
                Err(e) => match unreachable {
                    Some((_, first)) => self.fail_part(part, first),
                    None => self.fail_part(part, OpError::Refresh(e)),
                },
            }
        }
    }

    /// Parks `part` to be routed again by a fresh table after a backoff, unless its op
    /// has waited the op timeout already.
    fn park_for_failover(&mut self, part: PartRef) -> bool {
        let Some(t) = self.tickets.get_mut(part.key as usize) else {
            return false;
        };
        let now = Instant::now();
        let since = *t.paused_since.entry(part.op).or_insert(now);
        if now.duration_since(since) >= self.parking.limit {
            return false;
        }
        let mut next = part;
        next.pauses = next.pauses.saturating_add(1);
        self.parking.parked.push(Parked {
            part: next,
            ticket: t.id,
            due: now + unleased_backoff(next.pauses),
            refresh: true,
        });
        true
    }

    /// A part could not reach `server`: ask the manager once whether its region lives
    /// elsewhere now (a dead server's regions are re-placed), else fail with `e`.
    pub(super) fn unreachable(&mut self, part: PartRef, server: ServerId, e: OpError) {
        if u32::from(part.redirects) >= self.cfg.max_redirects {
            return self.fail_part(part, e);
        }
        self.retries.push((part, Retry::Unreachable(server, e)));
    }

    pub(super) fn fail_conn(&mut self, server: ServerId, e: OpError) {
        let Some(mut c) = self.conns.remove(&server) else {
            return;
        };
        tracing::debug!(server, addr = %c.addr, "connection failed: {e}");
        c.deregister(self.poll.registry());
        for list in c.take_all_parts() {
            let tickets = &self.tickets;
            let parts = list.into_parts(|key, op| {
                let t = tickets.get(key as usize)?;
                t.ops.get(op as usize).map(|o| o.addr)
            });
            for part in parts {
                self.unreachable(part, server, e.clone());
            }
        }
        for (part, id) in std::mem::take(&mut c.backlog) {
            match self.tickets.get(part.key as usize) {
                Some(t) if t.id == id && t.abandoned && part.kind == Kind::Read => {
                    self.fail_part(part, e.clone())
                }
                Some(t) if t.id == id => self.unreachable(part, server, e.clone()),
                _ => {}
            }
        }
        // A silent server is not dialled again at once; a connection the server
        // closed or reset is (it is alive: it may have dropped only that connection,
        // e.g. failing writes it could not acknowledge), and a failed dial then arms
        // the wait.
        if matches!(e, OpError::Timeout { .. }) {
            self.failed.insert(server, (Instant::now(), e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_backoff_doubles_to_a_cap() {
        let us = |a| pause_backoff(a).as_micros();
        assert_eq!(us(0), 100);
        assert_eq!(us(1), 100);
        assert_eq!(us(2), 200);
        assert_eq!(us(3), 400);
        assert_eq!(us(4), 800);
        assert_eq!(us(5), 1600);
        assert_eq!(us(6), 2000);
        assert_eq!(us(u8::MAX), 2000);
    }
}
