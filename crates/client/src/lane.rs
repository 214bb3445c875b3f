//! A lane: one connection per server plus the tickets whose ops travel on them.
//! Whoever holds the lane's lock drives its sockets (see the crate docs).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Waker;
use std::time::{Duration, Instant};

use farcache_proto::control::CacheInfo;
use farcache_proto::op::MAX_OP_BYTES;
use farcache_proto::request::READ_LEN;
use farcache_proto::{Op, ServerId, Status, Tag};
use mio::{Events, Poll, Token};
use parking_lot::Mutex;
use slab::Slab;

use crate::batch::{Batch, BatchOp, Kind};
use crate::cache::CacheShared;
use crate::config::ClientConfig;
use crate::conn::{Append, Dial, Dialed, REPLY_HEAD, ServerConn, WRITE_REPLY};
use crate::error::OpError;
use crate::idmap::{ConnTable, IdMap};
use crate::parts::Entry;
use crate::results::{BatchResults, Store};
use crate::routing::{Part, split};
use crate::ticket::Ticket;

mod complete;

use complete::{complete_frame, part_done};

/// How long a failed connection attempt is remembered before trying again.
const REDIAL_AFTER: Duration = Duration::from_millis(200);
/// Reply-size guess for an EXECUTE when packing frames (the server enforces the limit).
const EXECUTE_REPLY_GUESS: usize = 64;
/// Longest a driver blocks in poll before re-checking deadlines.
const MAX_POLL: Duration = Duration::from_millis(100);
/// First wait before sending a `paused` part again; doubles up to [`PAUSE_MAX`]. A
/// pause lasts the last copy round of a migration, typically well under a millisecond.
const PAUSE_FIRST: Duration = Duration::from_micros(100);
const PAUSE_MAX: Duration = Duration::from_millis(2);

/// The wait before sending a part again after its `attempt`-th `paused` answer
/// (1-based): 100 µs, 200 µs, 400 µs, … capped at 2 ms.
/// How long an op refused by a server without a lease waits before the table is
/// asked for again: a failover takes about the manager's heartbeat timeout.
pub(crate) fn unleased_backoff(attempt: u8) -> Duration {
    let shift = u32::from(attempt.saturating_sub(1).min(3));
    (UNLEASED_FIRST * (1 << shift)).min(UNLEASED_MAX)
}

const UNLEASED_FIRST: Duration = Duration::from_millis(20);
const UNLEASED_MAX: Duration = Duration::from_millis(160);

pub(crate) fn pause_backoff(attempt: u8) -> Duration {
    // Past 5 doublings the cap applies anyway; bounding the shift keeps it in range.
    let shift = u32::from(attempt.saturating_sub(1).min(5));
    (PAUSE_FIRST * (1 << shift)).min(PAUSE_MAX)
}

/// Spinning reads connections directly (see `LaneInner::probe_directly`) when at most
/// this many have replies due...
const PROBE_AT_MOST: usize = 2;
/// ... and polls every this many spins all the same.
const POLL_EVERY: u32 = 16;
/// The token of the lane's waker (dialing threads report through it); connections
/// use their server's id.
const WAKE: Token = Token(usize::MAX);

/// A connection being dialed on its own thread, and the parts waiting for it.
struct Dialing {
    done: std::sync::mpsc::Receiver<Result<Dialed, OpError>>,
    /// With their ticket's id, in the order they were routed.
    parts: Vec<(PartRef, u64)>,
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

/// One part of one op, as tracked while in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartRef {
    pub key: u32,
    pub op: u32,
    pub op_off: u64,
    pub addr: u64,
    pub len: u32,
    pub redirects: u8,
    /// `paused` answers in a row, for the backoff (fits the struct's padding).
    pub pauses: u8,
    /// The op's kind, so an answer is matched without reading the batch's ops.
    pub kind: Kind,
}

/// A part a server answered `paused`: sent again, re-routed, at `due`.
#[derive(Debug, Clone, Copy)]
struct Parked {
    part: PartRef,
    /// The ticket's id, so a reused slab key never picks the part up.
    ticket: u64,
    due: Instant,
    /// Ask the manager for the cache's table before sending it again (the server
    /// that refused it may have lost the region to a failover).
    refresh: bool,
}

/// Parts waiting out a migration's write pause.
struct Parking {
    parked: Vec<Parked>,
    /// An op paused for longer than this fails with `Status::Paused` (the op timeout).
    limit: Duration,
}

impl Parking {
    fn next_due(&self) -> Option<Instant> {
        self.parked.iter().map(|p| p.due).min()
    }
}

pub(crate) struct TicketState {
    id: u64,
    cache: Arc<CacheShared>,
    ops: Vec<BatchOp>,
    data: Vec<u8>,
    names: String,
    /// Parts still unanswered, per op.
    pending: Vec<u32>,
    results: Store,
    /// Assembly buffers of reads split into several parts, by op index (rare, so kept
    /// out of the per-op slot).
    assembly: IdMap<Vec<u8>>,
    /// Procedure invocations that moved on: op index → (state to resume with, hops).
    continuations: IdMap<(Vec<u8>, u32)>,
    /// When an op was first answered `paused`, by op index (rare; bounds the wait).
    paused_since: IdMap<Instant>,
    remaining: usize,
    waker: Option<Waker>,
    abandoned: bool,
    /// Writes and atomics to a cache with backups carry a tag, so that one sent again
    /// after a failover is applied once: this is op 0's (`seq` + op index is op i's).
    tag: Option<Tag>,
}

pub(crate) struct Lane {
    pub inner: Mutex<LaneInner>,
    /// Tickets with a stored waker: the async driver polls this lane while non-zero.
    pub async_pending: AtomicUsize,
    /// Work is left that no caller will drive (see [`LaneInner::orphaned_work`]): the
    /// async driver drives this lane until it is done.
    pub background: std::sync::atomic::AtomicBool,
}

pub(crate) struct LaneInner {
    cfg: ClientConfig,
    poll: Poll,
    events: Events,
    conns: ConnTable<ServerConn>,
    failed: IdMap<(Instant, OpError)>,
    /// Connections being dialed: a silent server's handshake (up to the connect
    /// timeout) keeps no caller waiting that needs other servers.
    dialing: IdMap<Dialing>,
    /// Wakes the lane's poll when a dial finishes.
    waker: Arc<mio::Waker>,
    tickets: Slab<TicketState>,
    next_id: u64,
    /// Parts to route again after a server's answer (see [`Retry`]).
    retries: Vec<(PartRef, Retry)>,
    /// Procedure parts to send on to the server their continuation names.
    hops: Vec<PartRef>,
    /// Parts to send again once a region's write pause is likely over.
    parking: Parking,
    in_retry: bool,
    scratch: Vec<Part>,
    /// Spinning rounds of `drive_once`, for [`POLL_EVERY`].
    spins: u32,
    /// The connections a round reads (kept to reuse its allocation).
    ready: Vec<ServerId>,
    /// This lane's tag session (random) and the number of its next tagged op.
    session: u64,
    next_seq: u64,
    /// Tagged tickets by their first op's number, with their slab key and id; the
    /// front ones that are answered are dropped lazily at the next tagged submit.
    live_tags: std::collections::BTreeMap<u64, (usize, u64)>,
    /// When each silent connection's server was last checked against the tables
    /// (see [`ClientConfig::suspect_after`]).
    suspected: IdMap<Instant>,
}

/// A random session id for a lane's tags (std's hasher keys are random per process;
/// the time and a counter set lanes of one process apart).
fn new_session() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static LANES: AtomicUsize = AtomicUsize::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_usize(LANES.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}

impl Lane {
    pub fn new(cfg: ClientConfig) -> std::io::Result<Self> {
        let poll = Poll::new()?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), WAKE)?);
        Ok(Self {
            inner: Mutex::new(LaneInner {
                parking: Parking {
                    parked: Vec::new(),
                    limit: cfg.op_timeout,
                },
                cfg,
                poll,
                events: Events::with_capacity(64),
                conns: ConnTable::default(),
                failed: IdMap::default(),
                dialing: IdMap::default(),
                waker,
                tickets: Slab::new(),
                next_id: 1,
                retries: Vec::new(),
                hops: Vec::new(),
                in_retry: false,
                scratch: Vec::new(),
                spins: 0,
                ready: Vec::new(),
                session: new_session(),
                next_seq: 1,
                live_tags: std::collections::BTreeMap::new(),
                suspected: IdMap::default(),
            }),
            async_pending: AtomicUsize::new(0),
            background: std::sync::atomic::AtomicBool::new(false),
        })
    }
}

thread_local! {
    static THREAD_SEED: usize = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed)
    };
}

/// The lane of the calling thread: fixed per thread, so its ops stay in program order.
pub(crate) fn lane_for_thread(lanes: usize) -> usize {
    THREAD_SEED.with(|s| *s % lanes)
}

pub(crate) fn submit(batch: Batch) -> Ticket {
    let client = batch.cache.client.clone();
    let lane = lane_for_thread(client.lanes.len());
    let (key, id) = client.lanes[lane].inner.lock().submit(batch);
    Ticket::new(client, lane, key, id)
}

impl LaneInner {
    fn submit(&mut self, batch: Batch) -> (usize, u64) {
        let Batch {
            cache,
            ops,
            data,
            names,
            ..
        } = batch;
        let info = cache.info();
        let n = ops.len();
        let id = self.next_id;
        self.next_id += 1;
        let tag = (info.replicas > 1
            && ops
                .iter()
                .any(|o| matches!(o.kind, Kind::Write | Kind::Cas | Kind::FetchAdd)))
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
            cache,
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
        let owner = |op: &BatchOp| {
            if op.kind == Kind::Execute {
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

    /// Sends procedure parts on to where their continuations point.
    fn process_hops(&mut self) {
        for part in std::mem::take(&mut self.hops) {
            let Some(t) = self.tickets.get(part.key as usize) else {
                continue;
            };
            let info = t.cache.info();
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
    fn route_by_table(&mut self, part: PartRef, info: &Arc<CacheInfo>) {
        let server = info
            .regions
            .get(info.region_of(part.addr))
            .copied()
            .unwrap_or(0);
        self.route(part, server, info);
    }

    fn route(&mut self, part: PartRef, server: ServerId, info: &Arc<CacheInfo>) {
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

    /// Makes sure a connection to `server` exists or is being dialed: `Ok(true)`
    /// when it is ready, `Ok(false)` while a dialing thread works on it.
    fn ensure_conn(&mut self, server: ServerId, info: &CacheInfo) -> Result<bool, OpError> {
        let tls = self.cfg.tls.is_some();
        let addr = info.server(server).and_then(|s| {
            if tls {
                s.tls_addr.as_deref()
            } else {
                Some(&s.addr)
            }
        });
        if tls && addr.is_none() && info.server(server).is_some() {
            return Err(OpError::ServerUnavailable {
                server,
                addr: info
                    .server(server)
                    .map(|s| s.addr.clone())
                    .unwrap_or_default(),
                reason: "the client uses TLS and this server does not serve it".into(),
            });
        }
        if let Some(c) = self.conns.get(&server) {
            if Some(c.addr.as_str()) == addr {
                return Ok(true);
            }
            let err = c.unavailable("server moved to a new address");
            self.fail_conn(server, err);
        }
        let Some(addr) = addr else {
            return Err(OpError::ServerUnavailable {
                server,
                addr: String::new(),
                reason: "server missing from the region table".into(),
            });
        };
        if let Some((at, e)) = self.failed.get(&server)
            && at.elapsed() < REDIAL_AFTER
        {
            return Err(e.clone());
        }
        let Some(cred) = self.cfg.credential.as_ref() else {
            return Err(OpError::ServerUnavailable {
                server,
                addr: addr.to_string(),
                reason: "the client has no credential".into(),
            });
        };
        if self.dialing.contains_key(&server) {
            return Ok(false);
        }
        let (tx, done) = std::sync::mpsc::channel();
        let (owned, tls) = (cred.clone(), self.cfg.tls.clone());
        // No op waits longer than its timeout, so neither does the dial it waits for:
        // a host that vanished (no RST) is given up on in time to find its successor.
        let dial_timeout = self.cfg.connect_timeout.min(self.cfg.op_timeout);
        let (timeout, waker, at) = (dial_timeout, self.waker.clone(), addr.to_string());
        let spawned = std::thread::Builder::new()
            .name("farcache-dial".into())
            .spawn(move || {
                let dial = Dial {
                    cred: &owned,
                    tls: tls.as_ref(),
                    timeout,
                };
                let _ = tx.send(ServerConn::dial(server, &at, &dial));
                let _ = waker.wake();
            });
        if spawned.is_ok() {
            let parts = Vec::new();
            self.dialing.insert(server, Dialing { done, parts });
            return Ok(false);
        }
        // No thread to spare: dial here.
        let dial = Dial {
            cred,
            tls: self.cfg.tls.as_ref(),
            timeout: dial_timeout,
        };
        let r = ServerConn::connect(
            server,
            addr,
            &dial,
            self.poll.registry(),
            Token(server as usize),
        );
        self.connected(server, r).map(|()| true)
    }

    /// Keeps a new connection, or remembers why there is none.
    fn connected(
        &mut self,
        server: ServerId,
        r: Result<ServerConn, OpError>,
    ) -> Result<(), OpError> {
        match r {
            Ok(c) => {
                self.failed.remove(&server);
                self.conns.insert(server, c);
                Ok(())
            }
            Err(e) => {
                tracing::debug!(server, "connect failed: {e}");
                self.failed.insert(server, (Instant::now(), e.clone()));
                Err(e)
            }
        }
    }

    /// Takes the dials that finished: their parts go out on the new connection, or
    /// fail over as unreachable.
    fn finish_dials(&mut self) {
        use std::sync::mpsc::TryRecvError;
        let done: Vec<(ServerId, Result<Dialed, OpError>)> = self
            .dialing
            .iter()
            .filter_map(|(&server, d)| match d.done.try_recv() {
                Ok(r) => Some((server, r)),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => Some((
                    server,
                    Err(OpError::ServerUnavailable {
                        server,
                        addr: String::new(),
                        reason: "the dialing thread ended without an answer".into(),
                    }),
                )),
            })
            .collect();
        for (server, r) in done {
            let Some(d) = self.dialing.remove(&server) else {
                continue;
            };
            let token = Token(server as usize);
            let r = r.and_then(|dialed| ServerConn::attach(dialed, self.poll.registry(), token));
            let outcome = self.connected(server, r);
            for (part, id) in d.parts {
                let Some(t) = self.tickets.get(part.key as usize).filter(|t| t.id == id) else {
                    continue;
                };
                match &outcome {
                    Err(e) if t.abandoned && part.kind == Kind::Read => {
                        self.fail_part(part, e.clone())
                    }
                    Err(e) => self.unreachable(part, server, e.clone()),
                    Ok(()) if t.abandoned && part.kind == Kind::Read => {
                        let e = OpError::ServerUnavailable {
                            server,
                            addr: String::new(),
                            reason: "not sent: its caller stopped waiting".into(),
                        };
                        self.fail_part(part, e)
                    }
                    Ok(()) => {
                        let info = t.cache.info();
                        self.route(part, server, &info);
                    }
                }
            }
        }
        self.seal_and_flush();
    }

    fn seal_and_flush(&mut self) {
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
    pub fn drive_once(&mut self, timeout: Option<Duration>) {
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
        let mut caches: Vec<Arc<CacheShared>> = Vec::new();
        for (_, t) in self.tickets.iter() {
            if t.remaining > 0 && !caches.iter().any(|c| c.id() == t.cache.id()) {
                caches.push(t.cache.clone());
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

    /// Sends parts whose backoff ran out again, routed by the cache's current table: the
    /// region may have moved meanwhile (a `wrong server` answer then redirects it).
    fn process_parked(&mut self) {
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
            if refresh && !refreshed.contains(&t.cache.id()) {
                refreshed.push(t.cache.id());
                // A manager out of reach leaves the table as it was: the part goes to
                // the same server again, and waits again, until the op timeout.
                if let Err(e) = t.cache.refresh() {
                    tracing::debug!(cache = t.cache.id(), "table refresh failed: {e}");
                }
            }
            let info = t.cache.info();
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
    fn process_retries(&mut self) {
        let parts = std::mem::take(&mut self.retries);
        let mut refreshed: Vec<(u32, Result<Arc<CacheInfo>, String>)> = Vec::new();
        for (mut part, why) in parts {
            let Some(t) = self.tickets.get(part.key as usize) else {
                continue;
            };
            let cache = t.cache.clone();
            let op = t.ops[part.op as usize];
            if u32::from(part.redirects) >= self.cfg.max_redirects {
                self.fail_part(part, OpError::Redirects(part.redirects.into()));
                continue;
            }
            let id = cache.id();
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
            let hinted = hint.and_then(|h| cache.follow_hint(part.addr, &h));
            let info = match (hinted, refreshed.iter().find(|(c, _)| *c == id)) {
                (Some(info), _) => Ok(info),
                (None, Some((_, r))) => r.clone(),
                (None, None) => {
                    let r = cache.refresh().map_err(|e| e.to_string());
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
    fn unreachable(&mut self, part: PartRef, server: ServerId, e: OpError) {
        if u32::from(part.redirects) >= self.cfg.max_redirects {
            return self.fail_part(part, e);
        }
        self.retries.push((part, Retry::Unreachable(server, e)));
    }

    fn fail_conn(&mut self, server: ServerId, e: OpError) {
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

    fn fail_op(&mut self, key: usize, op: usize, e: OpError) {
        let t = &mut self.tickets[key];
        t.results.fail_over(op, e);
        t.pending[op] = 1;
        part_done(&mut self.tickets, key, op);
    }

    fn fail_part(&mut self, part: PartRef, e: OpError) {
        if let Some(t) = self.tickets.get_mut(part.key as usize) {
            t.results.fail(part.op as usize, e);
            part_done(&mut self.tickets, part.key as usize, part.op as usize);
        }
    }

    pub fn spin(&self) -> Duration {
        self.cfg.spin
    }

    pub fn is_done(&self, key: usize, id: u64) -> bool {
        self.tickets
            .get(key)
            .is_none_or(|t| t.id != id || t.remaining == 0)
    }

    /// Takes a finished ticket's results.
    pub fn take(&mut self, key: usize, id: u64) -> BatchResults {
        match self.tickets.get(key) {
            Some(t) if t.id == id && t.remaining == 0 => {}
            _ => return BatchResults::default(),
        }
        BatchResults::from_store(self.tickets.remove(key).results)
    }

    /// Stores a waker; returns true if the ticket had none (a new async waiter).
    pub fn set_waker(&mut self, key: usize, id: u64, w: &Waker) -> bool {
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
    pub fn abandon(&mut self, key: usize, id: u64) -> bool {
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
    pub fn orphaned_work(&self) -> bool {
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
    pub fn async_waiters(&self) -> usize {
        self.tickets
            .iter()
            .filter(|(_, t)| t.waker.is_some())
            .count()
    }

    /// Nothing can make progress for this ticket: fail what is left instead of hanging.
    pub fn stuck(&self) -> bool {
        self.retries.is_empty()
            && self.dialing.is_empty()
            && self.hops.is_empty()
            && self.parking.parked.is_empty()
            && self.conns.values().all(ServerConn::idle)
    }

    pub fn fail_pending(&mut self, key: usize, id: u64) {
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
            let (addr, part) = (part.addr, Entry::One(part));
            conn.append_execute(part, cache, addr, proc_name, args, reply, (b, q))
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
fn op_tag(t: &TicketState, part: PartRef) -> Option<Tag> {
    t.tag.map(|g| Tag {
        seq: g.seq + u64::from(part.op),
        ..g
    })
}

/// Moves parts from `conn`'s backlog into frames while there is room. Reads of
/// tickets nobody waits for any more are not sent (they complete as abandoned);
/// anything that may change state still is, as dropping a ticket does not undo it.
fn drain_backlog(conn: &mut ServerConn, tickets: &mut Slab<TicketState>, bq: (usize, usize)) {
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
        if let Append::Full = append_part(conn, t, part, t.cache.id(), bq) {
            backlog.push_front((part, id));
            break;
        }
    }
    conn.backlog = backlog;
}

fn abandoned(conn: &ServerConn) -> OpError {
    conn.unavailable("not sent: its caller stopped waiting")
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::AtomicU32;

    use farcache_proto::blocking::{read_frame, write_frame};
    use farcache_proto::control::{PriceClass, ServerInfo, ServerState};
    use farcache_proto::{
        Authority, ClusterSecret, FrameKind, Hello, MAX_FRAME_DEFAULT, OpCode, RequestDecoder,
        ResponseEncoder, reply,
    };

    use super::*;
    use crate::cache::Cache;
    use crate::client::ClientShared;
    use crate::error::ClientError;
    use crate::results::BatchResults;

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

    #[test]
    fn pause_count_costs_no_space() {
        // Parts travel by the thousand in in-flight frames: keep them at 32 bytes.
        assert!(std::mem::size_of::<PartRef>() <= 32);
    }

    /// A one-connection server that answers each op with `answer(op index, op)`.
    fn fake_server(
        secret: ClusterSecret,
        answer: impl Fn(u32, &Op<'_>) -> Status + Send + 'static,
    ) -> String {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr").to_string();
        std::thread::spawn(move || {
            let Ok((mut s, _)) = l.accept() else { return };
            let _ = serve(&mut s, &Authority::new(secret), &answer);
        });
        addr
    }

    fn serve(
        s: &mut TcpStream,
        auth: &Authority,
        answer: &dyn Fn(u32, &Op<'_>) -> Status,
    ) -> Result<(), Box<dyn std::error::Error>> {
        s.set_nodelay(true)?;
        let ch = auth.challenge();
        write_frame(s, FrameKind::Challenge, 0, &ch.encode())?;
        let (_, hello) = read_frame(s, MAX_FRAME_DEFAULT)?;
        let v = auth.verify(&ch, &Hello::decode(&hello)?)?;
        let ack = auth.ack(&v, &ch, 1, MAX_FRAME_DEFAULT);
        write_frame(s, FrameKind::HelloAck, 0, &ack.encode())?;
        let mut n = 0;
        loop {
            let (h, payload) = read_frame(s, MAX_FRAME_DEFAULT)?;
            let mut out = Vec::new();
            let mut enc = ResponseEncoder::begin(&mut out, h.seq);
            for op in RequestDecoder::new(&payload)? {
                let op = op?;
                let status = answer(n, &op);
                n += 1;
                match (status, &op) {
                    (Status::Ok, Op::Read { len, .. }) => {
                        enc.data(&mut out, op.code(), &vec![7; *len as usize])
                    }
                    (s, _) => enc.status(&mut out, op.code(), s),
                }
            }
            enc.finish(&mut out);
            std::io::Write::write_all(s, &out)?;
        }
    }

    fn server_info(id: ServerId, addr: String) -> ServerInfo {
        ServerInfo {
            id,
            addr,
            memory: 1 << 30,
            used: 0,
            cores: 1,
            threads: 1,
            price_class: PriceClass::OnDemand,
            price_per_gib_hour: 0.0,
            state: ServerState::Alive,
            tls_addr: None,
        }
    }

    /// 16 regions of 64 KiB, all on server 1 at `addr`.
    fn table(addr: String) -> CacheInfo {
        CacheInfo {
            id: 1,
            name: "t".into(),
            capacity: 1 << 20,
            region_size: 1 << 16,
            epoch: 1,
            regions: vec![1; 16],
            servers: vec![server_info(1, addr)],
            replicas: 1,
            backups: vec![],
            from_file: None,
            slo: None,
        }
    }

    fn shared_on(addr: String, secret: ClusterSecret, op_timeout: Duration) -> Arc<CacheShared> {
        let cfg = ClientConfig::new("127.0.0.1:1")
            .secret(secret)
            .op_timeout(op_timeout);
        CacheShared::new(ClientShared::for_test(cfg), table(addr), None)
    }

    fn cache_on(addr: String, secret: ClusterSecret, op_timeout: Duration) -> Cache {
        Cache::new(shared_on(addr, secret, op_timeout))
    }

    #[test]
    fn a_paused_part_follows_the_region_to_its_new_server() {
        let secret = ClusterSecret::generate();
        let to = fake_server(secret.clone(), |_, _| Status::Ok);
        let shared: Arc<std::sync::OnceLock<Arc<CacheShared>>> = Arc::default();
        let (seen, to_addr) = (shared.clone(), to.clone());
        // The source pauses the write and, meanwhile, the region moves to server 2.
        let from = fake_server(secret.clone(), move |_, _| {
            if let Some(c) = seen.get() {
                let mut next = CacheInfo::clone(&c.info());
                next.regions[0] = 2;
                next.epoch += 1;
                next.servers.push(server_info(2, to_addr.clone()));
                *c.info_write() = Arc::new(next);
            }
            Status::Paused
        });
        let s = shared_on(from, secret, Duration::from_secs(10));
        assert!(shared.set(s.clone()).is_ok());
        Cache::new(s)
            .write(8, b"moved")
            .expect("lands on the new owner");
    }

    #[test]
    fn paused_writes_are_sent_again_until_they_land() {
        let secret = ClusterSecret::generate();
        let seen = Arc::new(AtomicU32::new(0));
        let counter = seen.clone();
        let addr = fake_server(secret.clone(), move |n, op| {
            counter.fetch_add(1, Ordering::Relaxed);
            match op {
                Op::Write { .. } if n < 4 => Status::Paused,
                _ => Status::Ok,
            }
        });
        let cache = cache_on(addr, secret, Duration::from_secs(10));
        let t = Instant::now();
        cache
            .write(4096, b"hello")
            .expect("write lands after the pause");
        // Backoffs of 100, 200, 400 and 800 µs came first.
        assert!(t.elapsed() >= Duration::from_micros(1500));
        assert_eq!(seen.load(Ordering::Relaxed), 5);
        // The lane is usable (and nothing stays parked) afterwards.
        assert_eq!(&cache.read(4096, 5).expect("read")[..], &[7; 5]);
    }

    #[test]
    fn answers_inside_a_run_that_need_a_second_send_land_in_their_own_cells() {
        let secret = ClusterSecret::generate();
        // Every op whose address is a multiple of 7 × 64 is answered `paused` the
        // first time: the rest of its run completes on the fast road, it goes again.
        let seen = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
        let addr = fake_server(secret.clone(), move |_, op| {
            let at = match op {
                Op::Read { addr, .. } | Op::Write { addr, .. } => *addr,
                _ => return Status::Ok,
            };
            let first = seen.lock().map(|mut s| s.insert(at)).unwrap_or(false);
            if at % (7 * 64) == 0 && first {
                Status::Paused
            } else {
                Status::Ok
            }
        });
        let cache = cache_on(addr, secret, Duration::from_secs(10));
        let mut b = cache.batch();
        for i in 0..300u64 {
            // Runs of reads, then of writes, then reads of another length.
            match i / 100 {
                0 => b.read(i * 64, 8),
                1 => b.write(i * 64, b"abcd"),
                _ => b.read(i * 64, 3),
            };
        }
        let r = b.submit().wait();
        assert_eq!(r.failed(), 0, "{:?}", r.first_error());
        for i in 0..300usize {
            match i / 100 {
                0 => assert_eq!(r.data(i).unwrap(), &[7; 8], "op {i}"),
                1 => assert_eq!(r.get(i), Some(Ok(crate::OpOutput::Done)), "op {i}"),
                _ => assert_eq!(r.data(i).unwrap(), &[7; 3], "op {i}"),
            }
        }
    }

    #[test]
    fn a_reply_that_does_not_decode_mid_run_fails_the_rest_and_keeps_the_answers() {
        let secret = ClusterSecret::generate();
        let addr = scripted_server(secret.clone(), |payload, seq| {
            let n = RequestDecoder::new(payload).map_or(0, |d| d.count());
            let mut out = Vec::new();
            let mut enc = ResponseEncoder::begin(&mut out, seq);
            for _ in 0..10 {
                enc.data(&mut out, farcache_proto::OpCode::Read, &[5; 8]);
            }
            // The 11th reply has an opcode no server sends; the count still says n.
            out.extend_from_slice(&[0xEE, 0]);
            for _ in 11..n {
                enc.placeholder();
            }
            enc.placeholder();
            enc.finish(&mut out);
            out
        });
        let cache = cache_on(addr, secret, Duration::from_secs(10));
        let mut b = cache.batch();
        for i in 0..40u64 {
            b.read(i * 8, 8);
        }
        let r = b.submit().wait();
        for i in 0..10 {
            assert_eq!(r.data(i).unwrap(), &[5; 8], "op {i} was answered");
        }
        for i in 10..40 {
            let e = r.error(i).map(ToString::to_string).unwrap_or_default();
            assert!(
                e.contains("op code 0xee"),
                "op {i} fails with the frame's error: {e}"
            );
        }
    }

    /// A server that completes the handshake, then answers each request frame with
    /// the response `respond(request payload, seq)` builds.
    fn scripted_server(
        secret: ClusterSecret,
        respond: impl Fn(&[u8], u64) -> Vec<u8> + Send + 'static,
    ) -> String {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr").to_string();
        let auth = Authority::new(secret);
        std::thread::spawn(move || {
            let Ok((mut s, _)) = l.accept() else { return };
            let ch = auth.challenge();
            let _ = write_frame(&mut s, FrameKind::Challenge, 0, &ch.encode());
            let Ok((_, hello)) = read_frame(&mut s, MAX_FRAME_DEFAULT) else {
                return;
            };
            let Ok(Ok(v)) = Hello::decode(&hello).map(|h| auth.verify(&ch, &h)) else {
                return;
            };
            let ack = auth.ack(&v, &ch, 1, MAX_FRAME_DEFAULT);
            let _ = write_frame(&mut s, FrameKind::HelloAck, 0, &ack.encode());
            while let Ok((h, payload)) = read_frame(&mut s, MAX_FRAME_DEFAULT) {
                let out = respond(&payload, h.seq);
                if std::io::Write::write_all(&mut s, &out).is_err() {
                    return;
                }
            }
        });
        addr
    }

    /// 60 calls of one procedure (sent as one EXECUTE_RUN) answered by `respond`.
    fn sixty_calls(respond: impl Fn(&[u8], u64) -> Vec<u8> + Send + 'static) -> BatchResults {
        let secret = ClusterSecret::generate();
        let addr = scripted_server(secret.clone(), respond);
        let cache = cache_on(addr, secret, Duration::from_secs(10));
        let mut b = cache.batch();
        for i in 0..60u64 {
            b.execute("p", i * 8, &[1]);
        }
        b.submit().wait()
    }

    #[test]
    fn done_runs_answer_each_call_in_its_own_cell() {
        let r = sixty_calls(|payload, seq| {
            let n = RequestDecoder::new(payload).map_or(0, |d| d.count());
            assert_eq!(n, 60);
            let mut out = Vec::new();
            let mut enc = ResponseEncoder::begin(&mut out, seq);
            for i in 0..60u8 {
                match i {
                    // A failure and a plain done reply break the runs.
                    20 => enc.data(&mut out, OpCode::Execute, &reply::failed("no")),
                    30 => {
                        let mut d = Vec::new();
                        reply::push_done(&mut d, b"plain");
                        enc.data(&mut out, OpCode::Execute, &d);
                    }
                    i if i < 40 => enc.done(&mut out, &[i; 8]),
                    i => enc.done(&mut out, &[i; 3]),
                }
            }
            enc.finish(&mut out);
            out
        });
        for i in 0..60u8 {
            let k = usize::from(i);
            match i {
                20 => assert!(r.error(k).is_some_and(|e| e.to_string().contains("no"))),
                30 => assert_eq!(r.data(k).unwrap(), b"plain"),
                i if i < 40 => assert_eq!(r.data(k).unwrap(), &[i; 8], "call {i}"),
                i => assert_eq!(r.data(k).unwrap(), &[i; 3], "call {i}"),
            }
        }
    }

    #[test]
    fn a_done_run_longer_than_the_frame_fails_the_rest_and_keeps_the_answers() {
        let r = sixty_calls(|_, seq| {
            let mut out = Vec::new();
            let mut enc = ResponseEncoder::begin(&mut out, seq);
            for i in 0..10u8 {
                enc.done(&mut out, &[i; 8]);
            }
            enc.status(&mut out, OpCode::Execute, Status::NoSuchProc);
            // A run claiming 60 outputs where 49 replies are left.
            out.extend_from_slice(&[farcache_proto::response::DONE_RUN, Status::Ok as u8]);
            out.extend_from_slice(&60u32.to_le_bytes());
            out.extend_from_slice(&1u32.to_le_bytes());
            out.extend_from_slice(&[9; 60]);
            for _ in 11..60 {
                enc.placeholder();
            }
            enc.finish(&mut out);
            out
        });
        for i in 0..10u8 {
            assert_eq!(
                r.data(usize::from(i)).unwrap(),
                &[i; 8],
                "call {i} was answered"
            );
        }
        let e = r.error(10).map(ToString::to_string).unwrap_or_default();
        assert!(
            e.contains("procedure"),
            "call 10 fails with its status: {e}"
        );
        for i in 11..60 {
            let e = r.error(i).map(ToString::to_string).unwrap_or_default();
            assert!(
                e.contains("done run of 60"),
                "call {i} fails with the frame's error: {e}"
            );
        }
    }

    /// A server that completes the handshake, then reads frames and never answers
    /// (a SIGSTOPped process, as the client sees it once connected).
    fn silent_server(secret: ClusterSecret) -> String {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr").to_string();
        std::thread::spawn(move || {
            let Ok((mut s, _)) = l.accept() else { return };
            let _ = serve(&mut s, &Authority::new(secret), &|_, _| {
                std::thread::sleep(Duration::from_secs(3600));
                Status::Ok
            });
        });
        addr
    }

    /// A cache whose regions 0..8 are on a silent server and 8..16 (from address
    /// `8 << 16`) on one that answers every read with 7s; op timeout 20 s.
    fn silent_and_live(tune: impl FnOnce(ClientConfig) -> ClientConfig) -> Cache {
        let secret = ClusterSecret::generate();
        let silent = silent_server(secret.clone());
        let live = fake_server(secret.clone(), |_, _| Status::Ok);
        let mut info = table(silent);
        info.servers.push(server_info(2, live));
        for r in 8..16 {
            info.regions[r] = 2;
        }
        let cfg = tune(
            ClientConfig::new("127.0.0.1:1")
                .secret(secret)
                .op_timeout(Duration::from_secs(20)),
        );
        Cache::new(CacheShared::new(ClientShared::for_test(cfg), info, None))
    }

    /// With `q` frames in flight to a silent server and its open batch full, more
    /// parts for it wait in the backlog: the calling thread is not held up, and a
    /// read from another server completes at once.
    #[test]
    fn a_silent_server_does_not_hold_up_calls_to_others() {
        let cache = silent_and_live(|cfg| cfg.batch_size(1).queue_depth(1));
        let t = Instant::now();
        // One frame in flight, one open batch, then the backlog: none may block.
        let abandoned: Vec<Ticket> = (0..8)
            .map(|i| {
                let mut b = cache.batch();
                b.read(i * 64, 8);
                b.submit()
            })
            .collect();
        drop(abandoned);
        let live_addr = 8 << 16;
        assert_eq!(&cache.read(live_addr, 4).expect("live server")[..], &[7; 4]);
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "held up for {:?}",
            t.elapsed()
        );
    }

    /// `wait_until` hands the ticket back at its deadline while a server is silent,
    /// and returns the results at once from one that answers.
    #[test]
    fn wait_until_returns_the_ticket_at_its_deadline() {
        let cache = silent_and_live(|cfg| cfg);
        let mut b = cache.batch();
        b.read(0, 8);
        let t = Instant::now();
        let Err(ticket) = b.submit().wait_until(t + Duration::from_millis(100)) else {
            panic!("a silent server answered");
        };
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(100) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
        drop(ticket);
        let mut b = cache.batch();
        b.read(8 << 16, 4);
        let r = b
            .submit()
            .wait_until(Instant::now() + Duration::from_secs(5))
            .unwrap_or_else(|_| panic!("the live server did not answer"));
        assert_eq!(r.data(0).expect("read"), &[7; 4]);
    }

    /// A server that accepts connections and never says a word (a stopped process
    /// whose kernel still completes TCP handshakes).
    fn mute_server() -> String {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr").to_string();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while let Ok((s, _)) = l.accept() {
                held.push(s);
            }
        });
        addr
    }

    /// Dialing a server that never answers its handshake happens on a dialing
    /// thread: a read from another server completes meanwhile, and the mute one's
    /// read fails once the connect timeout passes.
    #[test]
    fn a_dial_to_a_mute_server_holds_up_no_other_call() {
        let secret = ClusterSecret::generate();
        let live = fake_server(secret.clone(), |_, _| Status::Ok);
        let mut info = table(mute_server());
        info.servers.push(server_info(2, live));
        for r in 8..16 {
            info.regions[r] = 2;
        }
        let mut cfg = ClientConfig::new("127.0.0.1:1")
            .secret(secret)
            .op_timeout(Duration::from_secs(20));
        cfg.connect_timeout = Duration::from_millis(1500);
        let cache = Cache::new(CacheShared::new(ClientShared::for_test(cfg), info, None));
        let t = Instant::now();
        let mut b = cache.batch();
        b.read(0, 8);
        let mute = b.submit();
        assert_eq!(&cache.read(8 << 16, 4).expect("live server")[..], &[7; 4]);
        assert!(
            t.elapsed() < Duration::from_millis(1000),
            "held up for {:?}",
            t.elapsed()
        );
        let r = mute.wait();
        assert!(
            matches!(r.error(0), Some(OpError::ServerUnavailable { .. })),
            "{:?}",
            r.error(0)
        );
        assert!(t.elapsed() >= Duration::from_millis(1500));
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    /// A ticket dropped unfinished still has its writes applied, though most of them
    /// were waiting in the backlog and the caller never touches the client again:
    /// the async driver takes over the lane's orphaned work.
    #[test]
    fn writes_of_a_dropped_ticket_all_land_without_a_caller() {
        let secret = ClusterSecret::generate();
        let seen = Arc::new(AtomicU32::new(0));
        let counter = seen.clone();
        let addr = fake_server(secret.clone(), move |_, op| {
            if let Op::Write { .. } = op {
                // A slow server: frames queue up behind each other.
                std::thread::sleep(Duration::from_millis(5));
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Status::Ok
        });
        let cfg = ClientConfig::new("127.0.0.1:1")
            .secret(secret)
            .batch_size(1)
            .queue_depth(1)
            .op_timeout(Duration::from_secs(20));
        let info = table(addr);
        let cache = Cache::new(CacheShared::new(ClientShared::for_test(cfg), info, None));
        let mut b = cache.batch();
        for i in 0..40 {
            b.write(i * 8, b"12345678");
        }
        drop(b.submit());
        let t = Instant::now();
        while seen.load(Ordering::Relaxed) < 40 && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(seen.load(Ordering::Relaxed), 40, "writes left unsent");
    }

    #[test]
    fn a_pause_longer_than_the_op_timeout_fails_the_op() {
        let secret = ClusterSecret::generate();
        let addr = fake_server(secret.clone(), |_, _| Status::Paused);
        let cache = cache_on(addr, secret, Duration::from_millis(50));
        let t = Instant::now();
        let e = cache.write(0, b"x").expect_err("stays paused");
        assert!(t.elapsed() >= Duration::from_millis(50));
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(
            matches!(e, ClientError::Op(OpError::Status(Status::Paused))),
            "{e}"
        );
    }

    #[test]
    fn lost_bytes_fail_with_their_range() {
        let secret = ClusterSecret::generate();
        let addr = fake_server(secret.clone(), |_, op| match op {
            Op::Read { .. } => Status::DataLost,
            _ => Status::Ok,
        });
        let cache = cache_on(addr, secret, Duration::from_secs(10));
        // Two regions: each part reports its own range, the first failure wins.
        let e = cache.read((1 << 16) - 8, 16).expect_err("lost");
        assert!(
            matches!(
                e,
                ClientError::Op(OpError::DataLost {
                    addr: 0xfff8,
                    len: 8
                })
            ),
            "{e}"
        );
        cache.write(0, b"ok").expect("writes still work");
    }
}
