//! Submitting a batch: its ticket is set up, each op checked against the cache's
//! table (alignment, range) and cut into parts by region and size, and the parts
//! put on their servers' connections. Runs of plain ops to one server whose
//! connection is already checked against this table take a short road: counted, then
//! encoded in one go (see `parts.rs`).
//!
//! Invariant: an op's `pending` count is set to its number of parts before the first
//! of them is routed, and the open batches are sealed (as `q` allows) and flushed
//! before `submit` returns, so a submitted batch never waits for more ops to come.

use std::sync::Arc;

use farcache_proto::control::CacheInfo;
use farcache_proto::op::MAX_OP_BYTES;
use farcache_proto::request::READ_LEN;
use farcache_proto::{Op, ServerId, Tag};

use super::route::op_tag;
use super::shared::RouteTable;
use super::tickets::{TicketState, part_done};
use super::{EXECUTE_REPLY_GUESS, LaneInner};
use crate::conn::{Append, REPLY_HEAD, WRITE_REPLY};
use crate::error::OpError;
use crate::idmap::IdMap;
use crate::op::{BatchOp, Kind, PartRef};
use crate::parts::Entry;
use crate::results::Store;
use crate::routing::split;

impl LaneInner {
    /// Takes a batch's ops as a new ticket routed by `route` and sends them on their
    /// way; returns the ticket's key and id.
    pub(super) fn submit(
        &mut self,
        route: Arc<RouteTable>,
        ops: Vec<BatchOp>,
        data: Vec<u8>,
        names: String,
    ) -> (usize, u64) {
        let info = route.info();
        let n = ops.len();
        let id = self.next_id;
        self.next_id += 1;
        let tag = (info.replicas > 1
            && ops.iter().any(|o| {
                matches!(
                    o.kind,
                    Kind::Write | Kind::Cas | Kind::FetchAdd | Kind::Execute
                )
            }))
        .then(|| {
            let seq = self.next_seq;
            self.next_seq += n as u64;
            // Every op numbered below the oldest unanswered tagged ticket's has its
            // answer: the servers may drop their records.
            while let Some((_, &(key, tid))) = self.live_tags.first_key_value() {
                let live = self
                    .tickets
                    .get(key)
                    .is_some_and(|t| t.id == tid && t.remaining > 0);
                if live {
                    break;
                }
                self.live_tags.pop_first();
            }
            let done_below = self.live_tags.keys().next().copied().unwrap_or(seq);
            Tag {
                session: self.session,
                seq,
                done_below,
                result: 0,
            }
        });
        let key = self.tickets.insert(TicketState {
            id,
            route,
            ops,
            data,
            names,
            // One part per op until routing splits one.
            pending: vec![1; n],
            results: Store::new(n),
            assembly: IdMap::default(),
            continuations: IdMap::default(),
            paused_since: IdMap::default(),
            remaining: n,
            waker: None,
            abandoned: false,
            tag,
        });
        if let Some(t) = tag {
            self.live_tags.insert(t.seq, (key, id));
        }
        let mut next = 0;
        while next < n {
            // Runs of plain ops to one server take the short road; the rest, one op
            // at a time, the general one below.
            let after = self.submit_run(key, next, &info);
            if after > next {
                next = after;
                continue;
            }
            let i = next;
            next += 1;
            let op = self.tickets[key].ops[i];
            if op.kind == Kind::Execute {
                self.submit_execute(key, i, op, &info);
                continue;
            }
            if matches!(op.kind, Kind::Cas | Kind::FetchAdd) && !op.addr.is_multiple_of(8) {
                self.fail_op(key, i, OpError::Misaligned(op.addr));
                continue;
            }
            if op
                .addr
                .checked_add(op.len)
                .is_none_or(|end| end > info.capacity)
            {
                let e = OpError::OutOfRange {
                    addr: op.addr,
                    len: op.len,
                    capacity: info.capacity,
                };
                self.fail_op(key, i, e);
                continue;
            }
            if op.len == 0 {
                // An empty range inside the cache: nothing to ask any server.
                self.tickets[key].pending[i] = 1;
                part_done(&mut self.tickets, key, i);
                continue;
            }
            let region = info.region_of(op.addr);
            let region_end = (region as u64 + 1) * info.region_size;
            if op.len > 0 && op.addr + op.len <= region_end && op.len <= u64::from(MAX_OP_BYTES) {
                // Common case: the op lies in one region and needs no splitting.
                self.tickets[key].pending[i] = 1;
                let part = PartRef {
                    key: key as u32,
                    op: i as u32,
                    op_off: 0,
                    addr: op.addr,
                    len: op.len as u32,
                    redirects: 0,
                    pauses: 0,
                    kind: op.kind,
                };
                let server = info.regions.get(region).copied().unwrap_or(0);
                if !self.append_checked(part, server, &info, &op) {
                    self.route(part, server, &info);
                }
                continue;
            }
            let mut parts = std::mem::take(&mut self.scratch);
            parts.clear();
            split(&info, op.addr, op.len, |p| parts.push(p));
            let t = &mut self.tickets[key];
            t.pending[i] = parts.len() as u32;
            if op.kind == Kind::Read && parts.len() > 1 {
                t.assembly.insert(i as u32, vec![0; op.len as usize]);
            }
            for p in &parts {
                let part = PartRef {
                    key: key as u32,
                    op: i as u32,
                    op_off: p.op_off,
                    addr: p.addr,
                    len: p.len,
                    redirects: 0,
                    pauses: 0,
                    kind: op.kind,
                };
                self.route(part, p.server, &info);
            }
            self.scratch = parts;
        }
        // The batch is complete: send what is open now rather than wait for more.
        self.seal_and_flush();
        (key, id)
    }

    /// Appends ops `from..` of ticket `key` while they are one-part READs or WRITEs, or
    /// EXECUTEs, to the server holding op `from`, whose connection is checked against
    /// this table, and its open batch has room. Returns the first op not appended.
    fn submit_run(&mut self, key: usize, from: usize, info: &Arc<CacheInfo>) -> usize {
        let Self {
            conns,
            tickets,
            cfg,
            ..
        } = self;
        let t = &mut tickets[key];
        let (b, q, cache) = (cfg.batch_size, cfg.queue_depth, info.id);
        // A one-region op's owner, or None for ops the general road must take.
        let tagged = t.tag.is_some();
        let owner = |op: &BatchOp| {
            if op.kind == Kind::Execute {
                // A tagged call goes the general road, which tags it.
                if tagged {
                    return None;
                }
                let named =
                    (1..=farcache_proto::op::MAX_PROC_NAME).contains(&usize::from(op.name_len));
                return (named && op.addr < info.capacity)
                    .then(|| info.regions.get(info.region_of(op.addr)).copied())
                    .flatten();
            }
            if !matches!(op.kind, Kind::Read | Kind::Write)
                || op.len == 0
                || op.len > u64::from(MAX_OP_BYTES)
                || op
                    .addr
                    .checked_add(op.len)
                    .is_none_or(|e| e > info.capacity)
            {
                return None;
            }
            let region = info.region_of(op.addr);
            if op.addr + op.len > (region as u64 + 1) * info.region_size {
                return None;
            }
            info.regions.get(region).copied()
        };
        let Some(server) = t.ops.get(from).and_then(owner) else {
            return from;
        };
        let Some(c) = conns.get_mut(&server) else {
            return from;
        };
        if !c.checked.as_ref().is_some_and(|x| Arc::ptr_eq(x, info)) {
            return from;
        }
        let mut i = from;
        while let Some(op) = t.ops.get(i).copied() {
            if owner(&op) != Some(server) {
                break;
            }
            let (addr, len) = (op.addr, op.len as u32);
            if op.kind != Kind::Execute {
                // A stretch of reads (or writes) of one length: counted, then encoded
                // in one go, as many as the open batch takes.
                let read = op.kind == Kind::Read;
                let data_of = |o: &BatchOp| t.data.get(o.data_off..o.data_off + len as usize);
                if !read && data_of(&op).is_none() {
                    break;
                }
                let (op_len, reply_len) = match (read, t.tag) {
                    (true, _) => (READ_LEN, len as usize + REPLY_HEAD),
                    (false, None) => (READ_LEN + len as usize, WRITE_REPLY),
                    (false, Some(_)) => (Tag::LEN + READ_LEN + len as usize, WRITE_REPLY),
                };
                let room = c.room(op_len, reply_len, b, q);
                if room == 0 {
                    break;
                }
                let same = |o: &BatchOp| {
                    o.kind == op.kind
                        && o.len == op.len
                        && owner(o) == Some(server)
                        && (read || data_of(o).is_some())
                };
                let n = 1 + t.ops[i + 1..]
                    .iter()
                    .take(room - 1)
                    .take_while(|o| same(o))
                    .count();
                let run = &t.ops[i..i + n];
                let at = (key as u32, i as u32);
                if read {
                    c.push_reads(at, cache, len, run.iter().map(|o| o.addr));
                } else {
                    let writes = run.iter().map(|o| (o.addr, data_of(o).unwrap_or_default()));
                    let first = t.tag.map(|g| Tag {
                        seq: g.seq + i as u64,
                        ..g
                    });
                    c.push_writes(at, cache, len, first, writes);
                }
                i += n;
                continue;
            }
            let name_end = op.data_off + usize::from(op.name_len);
            let Some(name) = t.names.get(op.data_off..name_end) else {
                break;
            };
            if op.len <= farcache_proto::op::SHORT_ARGS as u64 {
                // A stretch of calls of one procedure with arguments of one length:
                // counted, then encoded in one go, as many as the open batch takes.
                let op_len = Op::EXECUTE_HEAD + name.len() + op.len as usize;
                let room = c.room(op_len, EXECUTE_REPLY_GUESS, b, q);
                if room == 0 {
                    break;
                }
                // Consecutive calls of one procedure share its name's place in `names`.
                let same = |o: &BatchOp| {
                    o.kind == Kind::Execute
                        && o.data_off == op.data_off
                        && o.name_len == op.name_len
                        && o.len == op.len
                        && owner(o) == Some(server)
                };
                let n = 1 + t.ops[i + 1..]
                    .iter()
                    .take(room - 1)
                    .take_while(|o| same(o))
                    .count();
                let run = t.ops[i..i + n].iter().map(|o| (o.addr, o.args(&t.data)));
                let at = (key as u32, i as u32);
                // A lone call is smaller as a plain EXECUTE.
                if n > 1
                    && c.push_executes(at, cache, name, op.len as u32, EXECUTE_REPLY_GUESS, run)
                {
                    i += n;
                    continue;
                }
            }
            let part = Entry::Whole(key as u32, i as u32, 0, op.kind);
            let args = op.args(&t.data);
            let appended =
                c.append_execute(part, cache, addr, name, args, EXECUTE_REPLY_GUESS, (b, q));
            if matches!(appended, Append::Full) {
                break;
            }
            i += 1;
        }
        i
    }

    /// Appends a one-part READ or WRITE to `server`'s open batch when the connection is
    /// already checked against this table and the batch has room: the common case,
    /// without `route`'s general road. False when `route` must take the part.
    #[inline]
    fn append_checked(
        &mut self,
        part: PartRef,
        server: ServerId,
        info: &Arc<CacheInfo>,
        op: &BatchOp,
    ) -> bool {
        let Self {
            conns,
            tickets,
            cfg,
            ..
        } = self;
        let Some(conn) = conns.get_mut(&server) else {
            return false;
        };
        if !conn.checked.as_ref().is_some_and(|i| Arc::ptr_eq(i, info)) {
            return false;
        }
        let (b, q, cache, addr) = (cfg.batch_size, cfg.queue_depth, info.id, part.addr);
        let whole = Entry::Whole(part.key, part.op, part.len, part.kind);
        let appended = match op.kind {
            Kind::Read => {
                let len = part.len;
                conn.append(
                    whole,
                    &Op::Read { cache, addr, len },
                    len as usize + 6,
                    b,
                    q,
                )
            }
            Kind::Write => {
                let t = &tickets[part.key as usize];
                let at = op.data_off;
                let Some(data) = t.data.get(at..at + part.len as usize) else {
                    return false;
                };
                let wire = Op::Write { cache, addr, data };
                conn.append_tagged(whole, op_tag(t, part), &wire, 2, b, q)
            }
            _ => return false,
        };
        matches!(appended, Append::Queued)
    }

    #[inline]
    fn submit_execute(&mut self, key: usize, i: usize, op: BatchOp, info: &Arc<CacheInfo>) {
        if op.name_len == 0 || usize::from(op.name_len) > farcache_proto::op::MAX_PROC_NAME {
            let e = OpError::Procedure(format!(
                "procedure names have 1 to {} bytes",
                farcache_proto::op::MAX_PROC_NAME
            ));
            return self.fail_op(key, i, e);
        }
        if op.addr >= info.capacity {
            let e = OpError::OutOfRange {
                addr: op.addr,
                len: 1,
                capacity: info.capacity,
            };
            return self.fail_op(key, i, e);
        }
        self.tickets[key].pending[i] = 1;
        let part = PartRef {
            key: key as u32,
            op: i as u32,
            op_off: 0,
            addr: op.addr,
            len: 0,
            redirects: 0,
            pauses: 0,
            kind: Kind::Execute,
        };
        let server = info
            .regions
            .get(info.region_of(op.addr))
            .copied()
            .unwrap_or(0);
        self.route(part, server, info);
    }
}
