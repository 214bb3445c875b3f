//! Putting one part on the wire: onto the open batch of its server's connection
//! (dialling it first if needed), or into the connection's backlog when `q` frames
//! are in flight and the open batch is full; the backlog goes out as replies make
//! room. Also procedure hops, which route by where the continuation points.
//!
//! Invariant: a connection's backlog keeps its parts in the order they were routed,
//! and nothing new is appended to the connection while the backlog is not empty, so a
//! thread's ops reach each server in program order.

use std::sync::Arc;

use farcache_proto::control::CacheInfo;
use farcache_proto::{Op, ServerId, Tag};
use slab::Slab;

use super::tickets::{TicketState, part_done};
use super::{EXECUTE_REPLY_GUESS, LaneInner};
use crate::conn::{Append, ServerConn};
use crate::error::OpError;
use crate::op::{Kind, PartRef};
use crate::parts::Entry;

impl LaneInner {
    /// Sends procedure parts on to where their continuations point.
    pub(super) fn process_hops(&mut self) {
        for part in std::mem::take(&mut self.hops) {
            let Some(t) = self.tickets.get(part.key as usize) else {
                continue;
            };
            let info = t.route.info();
            if part.addr >= info.capacity {
                let e = OpError::OutOfRange {
                    addr: part.addr,
                    len: 1,
                    capacity: info.capacity,
                };
                self.fail_part(part, e);
                continue;
            }
            self.route_by_table(part, &info);
        }
    }

    /// Routes a part to the owner its cache's table names.
    pub(super) fn route_by_table(&mut self, part: PartRef, info: &Arc<CacheInfo>) {
        let server = info
            .regions
            .get(info.region_of(part.addr))
            .copied()
            .unwrap_or(0);
        self.route(part, server, info);
    }

    pub(super) fn route(&mut self, part: PartRef, server: ServerId, info: &Arc<CacheInfo>) {
        let (b, q) = (self.cfg.batch_size, self.cfg.queue_depth);
        loop {
            let checked = self
                .conns
                .get(&server)
                .is_some_and(|c| c.checked.as_ref().is_some_and(|i| Arc::ptr_eq(i, info)));
            if !checked {
                match self.ensure_conn(server, info) {
                    Err(e) => return self.unreachable(part, server, e),
                    Ok(false) => {
                        // Sent once the dial finishes.
                        let id = self.tickets[part.key as usize].id;
                        if let Some(d) = self.dialing.get_mut(&server) {
                            d.parts.push((part, id));
                        }
                        return;
                    }
                    Ok(true) => {}
                }
                if let Some(c) = self.conns.get_mut(&server) {
                    c.checked = Some(info.clone());
                }
            }
            let Self { conns, tickets, .. } = self;
            let Some(conn) = conns.get_mut(&server) else {
                return;
            };
            let t = &tickets[part.key as usize];
            let appended = append_part(conn, t, part, info.id, (b, q));
            match appended {
                Append::Queued => return,
                Append::Full => {
                    if let Err(e) = conn.flush() {
                        let err = conn.unavailable(&e.to_string());
                        self.fail_conn(server, err);
                        continue;
                    }
                    // Waits for room without holding up the caller's other parts.
                    conn.backlog.push_back((part, t.id));
                    return;
                }
            }
        }
    }
}

/// Appends one part to `conn`'s open batch, encoded from its ticket's op.
fn append_part(
    conn: &mut ServerConn,
    t: &TicketState,
    part: PartRef,
    cache: farcache_proto::CacheId,
    (b, q): (usize, usize),
) -> Append {
    let op = &t.ops[part.op as usize];
    match op.kind {
        Kind::Execute => {
            // Whole names at their own offsets, so this finds the name.
            let proc_name = t
                .names
                .get(op.data_off..op.data_off + usize::from(op.name_len))
                .unwrap_or_default();
            let hop = if t.continuations.is_empty() {
                None
            } else {
                t.continuations.get(&part.op)
            };
            let args = match hop {
                Some((state, _)) => state.as_slice(),
                None => op.args(&t.data),
            };
            let reply = EXECUTE_REPLY_GUESS;
            let tag = op_tag(t, part);
            let (addr, part) = (part.addr, Entry::One(part));
            match tag {
                // A call that may write is applied once across a failover: the
                // servers keep its reply by its tag (read-only ones ignore it).
                Some(tag) => {
                    let wire = Op::Execute {
                        cache,
                        addr,
                        proc_name,
                        args,
                    };
                    conn.append_tagged(part, Some(tag), &wire, reply, b, q)
                }
                None => conn.append_execute(part, cache, addr, proc_name, args, reply, (b, q)),
            }
        }
        Kind::Read => {
            let (addr, len) = (part.addr, part.len);
            let wire = Op::Read { cache, addr, len };
            conn.append(Entry::One(part), &wire, len as usize + 6, b, q)
        }
        Kind::Write => {
            let at = op.data_off + part.op_off as usize;
            let data = &t.data[at..at + part.len as usize];
            let addr = part.addr;
            let wire = Op::Write { cache, addr, data };
            conn.append_tagged(Entry::One(part), op_tag(t, part), &wire, 2, b, q)
        }
        Kind::Cas => {
            let (addr, expected, new) = (part.addr, op.a(), op.b());
            let wire = Op::Cas {
                cache,
                addr,
                expected,
                new,
            };
            conn.append_tagged(Entry::One(part), op_tag(t, part), &wire, 10, b, q)
        }
        Kind::FetchAdd => {
            let (addr, delta) = (part.addr, op.a());
            let wire = Op::FetchAdd { cache, addr, delta };
            conn.append_tagged(Entry::One(part), op_tag(t, part), &wire, 10, b, q)
        }
    }
}

/// The tag of `part`'s op, if its ticket's ops are tagged.
pub(super) fn op_tag(t: &TicketState, part: PartRef) -> Option<Tag> {
    t.tag.map(|g| Tag {
        seq: g.seq + u64::from(part.op),
        ..g
    })
}

/// Moves parts from `conn`'s backlog into frames while there is room. Reads of
/// tickets nobody waits for any more are not sent (they complete as abandoned);
/// anything that may change state still is, as dropping a ticket does not undo it.
pub(super) fn drain_backlog(
    conn: &mut ServerConn,
    tickets: &mut Slab<TicketState>,
    bq: (usize, usize),
) {
    let mut backlog = std::mem::take(&mut conn.backlog);
    while let Some((part, id)) = backlog.pop_front() {
        let key = part.key as usize;
        let Some(t) = tickets.get(key).filter(|t| t.id == id) else {
            continue;
        };
        if t.abandoned && part.kind == Kind::Read {
            if let Some(t) = tickets.get_mut(key) {
                t.results.fail(part.op as usize, abandoned(conn));
            }
            part_done(tickets, key, part.op as usize);
            continue;
        }
        if let Append::Full = append_part(conn, t, part, t.route.id(), bq) {
            backlog.push_front((part, id));
            break;
        }
    }
    conn.backlog = backlog;
}

fn abandoned(conn: &ServerConn) -> OpError {
    conn.unavailable("not sent: its caller stopped waiting")
}
