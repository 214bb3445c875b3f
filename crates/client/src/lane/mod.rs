//! A lane: one connection per server plus the tickets whose ops travel on them.
//! Whoever holds the lane's lock drives its sockets (see the crate docs).
//!
//! The transport: it knows a cache only by its [`RouteTable`] and a caller only by a
//! ticket's key and id, and names none of the API's `Client`, `Cache` or `Batch`. By
//! what they do: `shared` the handles the API holds (a client's [`Transport`], a
//! cache's [`RouteTable`]); `submit` a batch's ops into parts on connections; `route`
//! one part onto its server's connection (or backlog); `dial` connections dialled off
//! the caller's thread; `drive` one round of socket I/O and deadlines; `complete` a
//! response frame's replies to their ops; `retry` parts sent again (redirects, pauses,
//! unreachable servers); `tickets` a ticket's progress and what its handle asks.
//!
//! Invariant: each part of an unanswered op is in exactly one place (an open batch, a
//! frame in flight, a connection's backlog, a dial's queue, the retries, the hops or
//! the parking), so every op is answered once, and a lane with all of them empty has
//! nothing left to wait for (`LaneInner::stuck`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use farcache_proto::ServerId;
use mio::{Events, Poll, Token};
use parking_lot::Mutex;
use slab::Slab;

use crate::config::ClientConfig;
use crate::conn::ServerConn;
use crate::error::OpError;
use crate::idmap::{ConnTable, IdMap};
use crate::op::PartRef;
use crate::routing::Part;

mod complete;
mod dial;
mod drive;
mod retry;
mod route;
mod shared;
mod submit;
mod tickets;

use dial::Dialing;
use retry::{Parking, Retry};
pub(crate) use shared::{RouteTable, Transport};
use tickets::TicketState;

/// Reply-size guess for an EXECUTE when packing frames (the server enforces the limit).
const EXECUTE_REPLY_GUESS: usize = 64;
/// The token of the lane's waker (dialing threads report through it); connections
/// use their server's id.
const WAKE: Token = Token(usize::MAX);

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
    /// Spinning rounds of `drive_once`, for `drive::POLL_EVERY`.
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
fn lane_for_thread(lanes: usize) -> usize {
    THREAD_SEED.with(|s| *s % lanes)
}
