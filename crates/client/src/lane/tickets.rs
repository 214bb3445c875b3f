//! A ticket's state while its ops are out, and its bookkeeping: how many parts of
//! each op are unanswered, when the ticket is done, and what its handle (`Ticket`,
//! the async driver) asks of the lane.
//!
//! Invariant: `remaining` counts the ops with parts unanswered (`pending[i] > 0`); an
//! op's result is in its cell by the time its last part is counted off
//! ([`part_done`]), and the ticket's waker is woken (an abandoned ticket removed) the
//! moment `remaining` reaches 0.

use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

use bytes::Bytes;
use farcache_proto::Tag;
use slab::Slab;

use super::LaneInner;
use super::shared::RouteTable;
use crate::conn::ServerConn;
use crate::error::OpError;
use crate::idmap::IdMap;
use crate::op::{BatchOp, Kind, PartRef};
use crate::results::{BatchResults, Cell, Store};

pub(crate) struct TicketState {
    pub(super) id: u64,
    /// The routing handle of the ticket's cache.
    pub(super) route: Arc<RouteTable>,
    pub(super) ops: Vec<BatchOp>,
    pub(super) data: Vec<u8>,
    pub(super) names: String,
    /// Parts still unanswered, per op.
    pub(super) pending: Vec<u32>,
    pub(super) results: Store,
    /// Assembly buffers of reads split into several parts, by op index (rare, so kept
    /// out of the per-op slot).
    pub(super) assembly: IdMap<Vec<u8>>,
    /// Procedure invocations that moved on: op index → (state to resume with, hops).
    pub(super) continuations: IdMap<(Vec<u8>, u32)>,
    /// When an op was first answered `paused`, by op index (rare; bounds the wait).
    pub(super) paused_since: IdMap<Instant>,
    pub(super) remaining: usize,
    pub(super) waker: Option<Waker>,
    pub(super) abandoned: bool,
    /// Writes and atomics to a cache with backups carry a tag, so that one sent again
    /// after a failover is applied once: this is op 0's (`seq` + op index is op i's).
    pub(super) tag: Option<Tag>,
}

impl LaneInner {
    pub(super) fn fail_op(&mut self, key: usize, op: usize, e: OpError) {
        let t = &mut self.tickets[key];
        t.results.fail_over(op, e);
        t.pending[op] = 1;
        part_done(&mut self.tickets, key, op);
    }

    pub(super) fn fail_part(&mut self, part: PartRef, e: OpError) {
        if let Some(t) = self.tickets.get_mut(part.key as usize) {
            t.results.fail(part.op as usize, e);
            part_done(&mut self.tickets, part.key as usize, part.op as usize);
        }
    }

    pub(crate) fn spin(&self) -> Duration {
        self.cfg.spin
    }

    pub(crate) fn is_done(&self, key: usize, id: u64) -> bool {
        self.tickets
            .get(key)
            .is_none_or(|t| t.id != id || t.remaining == 0)
    }

    /// Takes a finished ticket's results.
    pub(crate) fn take(&mut self, key: usize, id: u64) -> BatchResults {
        match self.tickets.get(key) {
            Some(t) if t.id == id && t.remaining == 0 => {}
            _ => return BatchResults::default(),
        }
        BatchResults::from_store(self.tickets.remove(key).results)
    }

    /// Stores a waker; returns true if the ticket had none (a new async waiter).
    pub(crate) fn set_waker(&mut self, key: usize, id: u64, w: &Waker) -> bool {
        match self.tickets.get_mut(key) {
            Some(t) if t.id == id => {
                let new = t.waker.is_none();
                t.waker = Some(w.clone());
                new
            }
            _ => false,
        }
    }

    /// The ticket handle went away unfinished: drop its results when they arrive.
    pub(crate) fn abandon(&mut self, key: usize, id: u64) -> bool {
        match self.tickets.get_mut(key) {
            Some(t) if t.id == id => {
                let had_waker = t.waker.take().is_some();
                if t.remaining == 0 {
                    self.tickets.remove(key);
                } else {
                    t.abandoned = true;
                }
                had_waker
            }
            _ => false,
        }
    }

    /// Whether this lane holds work that only driving it completes (ops in a backlog
    /// or an open batch, bytes not yet written, dials, retries, paused parts) while
    /// no caller waits on a ticket: e.g. the writes of a ticket dropped unfinished,
    /// or a frame half written when its caller went idle (a server would close that
    /// connection once the frame stalls).
    pub(crate) fn orphaned_work(&self) -> bool {
        let pending = !self.dialing.is_empty()
            || !self.retries.is_empty()
            || !self.hops.is_empty()
            || !self.parking.parked.is_empty()
            || self.conns.values().any(ServerConn::unsent);
        pending
            && !self
                .tickets
                .iter()
                .any(|(_, t)| !t.abandoned && t.remaining > 0)
    }

    /// Tickets an async caller is waiting on (the async driver polls while non-zero).
    pub(crate) fn async_waiters(&self) -> usize {
        self.tickets
            .iter()
            .filter(|(_, t)| t.waker.is_some())
            .count()
    }

    /// Nothing can make progress for this ticket: fail what is left instead of hanging.
    pub(crate) fn stuck(&self) -> bool {
        self.retries.is_empty()
            && self.dialing.is_empty()
            && self.hops.is_empty()
            && self.parking.parked.is_empty()
            && self.conns.values().all(ServerConn::idle)
    }

    pub(crate) fn fail_pending(&mut self, key: usize, id: u64) {
        let Some(t) = self.tickets.get_mut(key) else {
            return;
        };
        if t.id != id {
            return;
        }
        for i in 0..t.pending.len() {
            let t = &mut self.tickets[key];
            if t.pending[i] > 0 {
                t.results.fail(
                    i,
                    OpError::Protocol {
                        server: 0,
                        reason: "op lost by the transport".into(),
                    },
                );
                t.pending[i] = 1;
                part_done(&mut self.tickets, key, i);
            }
        }
    }
}

/// One part of op `op` of ticket `key` is answered (its result, if any, stored).
pub(super) fn part_done(tickets: &mut Slab<TicketState>, key: usize, op: usize) {
    let t = &mut tickets[key];
    let pending = &mut t.pending[op];
    *pending = pending.saturating_sub(1);
    if *pending > 0 {
        return;
    }
    if t.results.is_pending(op) {
        let assembled = if t.assembly.is_empty() {
            None
        } else {
            t.assembly.remove(&(op as u32))
        };
        match (t.ops[op].kind, assembled) {
            (Kind::Read, Some(buf)) => t.results.set_owned(op, Bytes::from(buf)),
            (Kind::Read, None) => t.results.set_owned(op, Bytes::new()),
            _ => t.results.set(op, Cell::Done),
        }
    }
    t.remaining -= 1;
    if t.remaining == 0 {
        ticket_done(tickets, key);
    }
}

/// Every op of ticket `key` has its result: wake its waiter, or drop it if nobody
/// waits any more.
pub(super) fn ticket_done(tickets: &mut Slab<TicketState>, key: usize) {
    let t = &mut tickets[key];
    if let Some(w) = t.waker.take() {
        w.wake();
    }
    if t.abandoned {
        tickets.remove(key);
    }
}
