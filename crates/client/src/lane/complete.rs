//! Completing a response frame: each reply goes to the op its part names. Runs of
//! whole ops (see `parts.rs`) take a short road with their ticket looked up once;
//! everything else (`PAUSED`, `WRONG_SERVER`, hops, errors, split reads) the general
//! one, which may queue the part to be sent again.
//!
//! Invariant: a frame's replies are matched to its parts in order, one each; a frame
//! that ends early or does not decode gives its unanswered parts back to the
//! connection, so the connection's failure fails (or re-routes) them.

use std::time::Instant;

use bytes::Bytes;
use farcache_proto::reply::{self, ExecReply, MAX_HOPS};
use farcache_proto::response::{Reply, ReplyBody};
use farcache_proto::{DoneOutputs, ResponseDecoder, ServerId, Status};
use slab::Slab;

use super::retry::{Parked, Parking, Retry, pause_backoff, unleased_backoff};
use super::tickets::{TicketState, part_done, ticket_done};
use crate::conn::{InFlight, ServerConn};
use crate::error::OpError;
use crate::op::{Kind, PartRef};
use crate::parts::{Item, Run};
use crate::results::Cell;

pub(super) fn complete_frame(
    conn: &mut ServerConn,
    tickets: &mut Slab<TicketState>,
    retries: &mut Vec<(PartRef, Retry)>,
    hops: &mut Vec<PartRef>,
    parking: &mut Parking,
    fl: InFlight,
    payload: Bytes,
) -> Result<(), OpError> {
    let protocol = |server, reason: String| OpError::Protocol { server, reason };
    let InFlight { seq, parts, sent } = fl;
    let mut dec = match ResponseDecoder::new(&payload) {
        Ok(d) if d.declared() as usize == parts.len() => d,
        Ok(d) => {
            let reason = format!("{} replies for {} ops", d.declared(), parts.len());
            conn.inflight.push_front(InFlight { seq, parts, sent });
            return Err(protocol(conn.server, reason));
        }
        Err(e) => {
            conn.inflight.push_front(InFlight { seq, parts, sent });
            return Err(protocol(conn.server, e.to_string()));
        }
    };
    let mut done = Completion {
        server: conn.server,
        tickets,
        retries,
        hops,
        parking,
        payload: &payload,
    };
    for (at, item) in parts.items().iter().enumerate() {
        let answered = match *item {
            Item::One(part) => match dec.next() {
                Some(Ok(reply)) => {
                    done.part(part, reply);
                    Ok(())
                }
                bad => Err((0, unanswered(bad))),
            },
            Item::Run(run) => done.run(run, &mut dec),
        };
        if let Err((k, reason)) = answered {
            // Give the unanswered parts back so the connection failure fails them.
            let rest = parts.rest_from(at, k);
            conn.inflight.push_front(InFlight {
                seq,
                parts: rest,
                sent,
            });
            return Err(protocol(conn.server, reason));
        }
    }
    dec.finish()
        .map_err(|e| protocol(conn.server, e.to_string()))
}

/// Why a reply is missing: its decode error, or the response's end.
fn unanswered(bad: Option<Result<Reply<'_>, farcache_proto::DecodeError>>) -> String {
    match bad {
        Some(Err(e)) => e.to_string(),
        _ => "response ended early".into(),
    }
}

/// What completing one response frame's parts touches.
struct Completion<'a> {
    server: ServerId,
    tickets: &'a mut Slab<TicketState>,
    retries: &'a mut Vec<(PartRef, Retry)>,
    hops: &'a mut Vec<PartRef>,
    parking: &'a mut Parking,
    payload: &'a Bytes,
}

impl Completion<'_> {
    /// A run of whole ops of one ticket: the common answers (a read's bytes, a
    /// write's ok, a finished procedure's result) are stored right here, with the
    /// ticket and the frame's index looked up once; any other answer takes the
    /// general road of [`Completion::part`]. `Err` names the first op left
    /// unanswered and why.
    #[inline]
    fn run(&mut self, run: Run, dec: &mut ResponseDecoder<'_>) -> Result<(), (u32, String)> {
        let key = run.key as usize;
        let base = self.payload.as_ptr() as usize;
        let mut frame = None;
        let mut k = 0;
        while k < run.count {
            if run.kind == Kind::Execute
                && let Some(d) = dec.take_done(run.count - k)
            {
                self.outputs(key, run.first + k, d, &mut frame);
                k += d.count;
                continue;
            }
            let k_now = k;
            k += 1;
            let reply = match dec.next() {
                Some(Ok(r)) => r,
                bad => return Err((k_now, unanswered(bad))),
            };
            let i = (run.first + k_now) as usize;
            let Some(t) = self.tickets.get_mut(key) else {
                continue;
            };
            let data = match (reply.status, run.kind, reply.body) {
                (Status::Ok, Kind::Read, ReplyBody::Data(d)) if d.len() == run.len as usize => {
                    Some(d)
                }
                (Status::Ok, Kind::Execute, ReplyBody::Data([reply::TAG_DONE, r @ ..])) => Some(r),
                (Status::Ok, Kind::Execute, ReplyBody::Done(r)) => Some(r),
                (Status::Ok, Kind::Write, ReplyBody::None) => None,
                _ => {
                    let addr = t.ops.get(i).map_or(0, |o| o.addr);
                    self.part(run.part(k_now, addr), reply);
                    continue;
                }
            };
            if t.results.is_pending(i) {
                let cell = match data {
                    Some(d) => Cell::Data {
                        frame: *frame.get_or_insert_with(|| t.results.frame(self.payload)),
                        off: (d.as_ptr() as usize - base) as u32,
                        len: d.len() as u32,
                    },
                    None => Cell::Done,
                };
                t.results.set(i, cell);
            }
            // A whole op is one part: it is done.
            let pending = &mut t.pending[i];
            *pending = pending.saturating_sub(1);
            if *pending == 0 {
                t.remaining -= 1;
                if t.remaining == 0 {
                    ticket_done(self.tickets, key);
                }
            }
        }
        Ok(())
    }

    /// Outputs of one DONE_RUN answering ops `first..` of ticket `key`, whole calls
    /// all: each becomes a view into the frame. Out of line: a run of 1,000 calls
    /// takes it once, and reads' loop stays small.
    #[inline(never)]
    fn outputs(&mut self, key: usize, first: u32, d: DoneOutputs<'_>, frame: &mut Option<u32>) {
        let Some(t) = self.tickets.get_mut(key) else {
            return;
        };
        let base = self.payload.as_ptr() as usize;
        let mut off = (d.bytes.as_ptr() as usize - base) as u32;
        let len = d.len as u32;
        let first = first as usize;
        let mut finished = 0;
        for i in first..first + d.count as usize {
            if t.results.is_pending(i) {
                let frame = *frame.get_or_insert_with(|| t.results.frame(self.payload));
                t.results.set(i, Cell::Data { frame, off, len });
            }
            off += len;
            // A whole op is one part: it is done.
            let pending = &mut t.pending[i];
            *pending = pending.saturating_sub(1);
            finished += u32::from(*pending == 0);
        }
        if finished > 0 {
            t.remaining = t.remaining.saturating_sub(finished as usize);
            if t.remaining == 0 {
                ticket_done(self.tickets, key);
            }
        }
    }

    /// One part's answer, whatever it is.
    fn part(&mut self, part: PartRef, reply: Reply<'_>) {
        let tickets = &mut *self.tickets;
        let (retries, hops, parking) = (&mut *self.retries, &mut *self.hops, &mut *self.parking);
        let key = part.key as usize;
        let Some(t) = tickets.get_mut(key) else {
            return;
        };
        let i = part.op as usize;
        let kind = part.kind;
        // The common replies, a read's bytes or a finished procedure's result, share
        // one road to the cell: a view into this frame.
        let bytes = match (reply.status, kind, reply.body) {
            (Status::Ok, Kind::Execute, ReplyBody::Data([reply::TAG_DONE, r @ ..]))
            | (Status::Ok, Kind::Execute, ReplyBody::Done(r)) => Some(r),
            (Status::Ok, Kind::Read, ReplyBody::Data(d))
                if d.len() == part.len as usize
                    && (t.assembly.is_empty() || !t.assembly.contains_key(&part.op)) =>
            {
                Some(d)
            }
            _ => None,
        };
        if let Some(d) = bytes {
            if t.results.is_pending(i) {
                t.results.set_view(i, self.payload, d);
            }
            part_done(tickets, key, i);
            return;
        }
        let res = &mut t.results;
        match (reply.status, kind, reply.body) {
            (Status::Ok, Kind::Read, ReplyBody::Data(d)) if d.len() == part.len as usize => {
                if let Some(buf) = t.assembly.get_mut(&part.op) {
                    buf[part.op_off as usize..][..d.len()].copy_from_slice(d);
                }
            }
            (Status::Ok, Kind::Write, ReplyBody::None) => {}
            (Status::Ok, Kind::Execute, ReplyBody::Data(d)) => match reply::decode(d) {
                Ok(ExecReply::Done(r)) => {
                    if res.is_pending(i) {
                        res.set_view(i, self.payload, r);
                    }
                }
                Ok(ExecReply::Failed(m)) => res.fail(i, OpError::Procedure(m.into())),
                Ok(ExecReply::Continue { addr, state }) => {
                    let entry = t.continuations.entry(part.op).or_insert((Vec::new(), 0));
                    if entry.1 < MAX_HOPS {
                        entry.0.clear();
                        entry.0.extend_from_slice(state);
                        entry.1 += 1;
                        let mut next = part;
                        next.addr = addr;
                        next.redirects = 0;
                        next.pauses = 0;
                        hops.push(next);
                        return;
                    }
                    res.fail(i, OpError::Hops(entry.1));
                }
                Err(e) => res.fail(
                    i,
                    OpError::Protocol {
                        server: self.server,
                        reason: e.to_string(),
                    },
                ),
            },
            (Status::Ok, Kind::Cas | Kind::FetchAdd, ReplyBody::Value(v)) => {
                if res.is_pending(i) {
                    res.set(i, Cell::Value(v));
                }
            }
            (Status::WrongServer, _, body) => {
                let hint = match body {
                    ReplyBody::Owner(Some(o)) => Some(o.to_owned()),
                    _ => None,
                };
                retries.push((part, Retry::Moved(hint)));
                return;
            }
            (Status::OutOfRange, ..) if part.redirects == 0 => {
                retries.push((part, Retry::Shrunk(t.route.info().epoch)));
                return;
            }
            // The region is mid-migration (`PAUSED`): send the part again shortly,
            // not counted as a redirect. The server holds no lease (`NOT_SERVING`: cut
            // off from the manager): nothing was applied; ask the manager for the owner
            // first (a failover hands the region to a backup once the lease has run
            // out). Either way until the op has waited too long.
            (s @ (Status::Paused | Status::NotServing), ..) => {
                let refresh = s == Status::NotServing;
                let now = Instant::now();
                let since = *t.paused_since.entry(part.op).or_insert(now);
                if now.duration_since(since) < parking.limit {
                    let mut next = part;
                    next.pauses = next.pauses.saturating_add(1);
                    let wait = if refresh {
                        unleased_backoff(next.pauses)
                    } else {
                        pause_backoff(next.pauses)
                    };
                    parking.parked.push(Parked {
                        part: next,
                        ticket: t.id,
                        due: now + wait,
                        refresh,
                    });
                    return;
                }
                res.fail(i, OpError::Status(s));
            }
            (Status::DataLost, kind, _) => {
                let (addr, len) = if kind == Kind::Execute {
                    // A procedure names no range: report the region it ran in.
                    let info = t.route.info();
                    let size = info.region_size;
                    (part.addr - part.addr % size.max(1), size)
                } else {
                    (part.addr, u64::from(part.len))
                };
                res.fail(i, OpError::DataLost { addr, len });
            }
            (Status::Ok, ..) => res.fail(
                i,
                OpError::Protocol {
                    server: self.server,
                    reason: format!("reply {:?} does not match a {kind:?}", reply.op),
                },
            ),
            (s, ..) => res.fail(i, OpError::Status(s)),
        }
        part_done(tickets, key, i);
    }
}
