//! A worker's side of cross-server procedure execution: invocations it shipped and
//! waits for (FFlow), invocations parked until pulled bytes arrive (DFlow), and the
//! messages it exchanges with other servers.
//!
//! A parked invocation costs the worker nothing: it is a map entry, and the worker
//! serves other requests until the answer (or the deadline) comes. An invocation that
//! can run again (handed over, or its pulled bytes arrived) goes on the worker's queue,
//! from which idle workers of this server may steal it (see [`super::sched`]).

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use crossbeam_deque::Worker as Deque;
use farcache_proto::control::region_split;
use farcache_proto::peer::PeerMsg;
use farcache_proto::reply::{self, MAX_HOPS};
use farcache_proto::{CacheId, Status};
use farcache_sproc::{Memory, Miss, SprocError};
use mio::Registry;
use tracing::{debug, warn};

use super::pending::HoleRef;
use super::sessions::{Fallout, Sessions};
use crate::cluster::Shared;
use crate::engine::memory::{FlowMemory, MAX_PULLED, Pulled};
use crate::engine::step::{self, Step};
use crate::engine::store::CacheRegions;
use crate::metrics::{GuardCounters, PeerCounters};

/// Where an invocation's answer goes.
pub enum Target {
    /// A reply this worker owes one of its client connections.
    Local(HoleRef),
    /// The server (data address) waiting for it under `ticket`.
    Remote { origin: String, ticket: u64 },
}

pub struct Invocation {
    pub cache: CacheId,
    pub proc_name: String,
    /// Where the procedure runs next, and its state (its arguments there).
    pub addr: u64,
    pub state: Vec<u8>,
    pub hops: u32,
    pub pulled: Pulled,
    pub target: Target,
}

enum Wait {
    /// Shipped from here to `via`; the answer comes back as a RESULT.
    Result { hole: HoleRef, via: String },
    /// Parked until every FETCH sent for it is answered.
    Data {
        inv: Invocation,
        outstanding: u32,
        sources: Vec<String>,
        /// Every piece asked for, to ask again where a `wrong server` answer points.
        pieces: Vec<(u64, u32)>,
        redirects: u32,
    },
}

/// `wrong server` answers one parked invocation follows before it fails: region
/// tables that disagree for longer than this are not converging.
const MAX_REDIRECTS: u32 = 16;

/// The server this one believes holds `addr` of cache `c` (see [`CacheRegions::hint`]).
fn owner_hint<'c>(c: &'c CacheRegions, addr: u64, me: &str) -> Option<&'c str> {
    if addr >= c.capacity {
        return None;
    }
    c.hint(region_split(addr, c.region_size).0, me)
}

pub struct Engine {
    worker: usize,
    next: u64,
    waits: HashMap<u64, Wait>,
    /// Every wait gets the same timeout, so deadlines arrive in insertion order.
    deadlines: VecDeque<(Instant, u64)>,
    /// Answers for this worker's client connections.
    pub completions: Vec<(HoleRef, Vec<u8>)>,
    /// Messages for tickets another worker of this server owns: (worker, message).
    pub foreign: Vec<(usize, Vec<u8>)>,
    pub sessions: Sessions,
    fallout: Fallout,
    /// Invocations ready to run again; other workers steal from its far end.
    queue: Deque<Invocation>,
}

fn worker_of(ticket: u64) -> usize {
    (ticket >> 56) as usize
}

fn failure(e: &SprocError) -> Vec<u8> {
    reply::failed(&e.to_string())
}

impl Engine {
    pub fn new(worker: usize, batching: bool, queue: Deque<Invocation>) -> Self {
        Self {
            queue,
            worker,
            next: 0,
            waits: HashMap::new(),
            deadlines: VecDeque::new(),
            completions: Vec::new(),
            foreign: Vec::new(),
            sessions: Sessions::new(batching),
            fallout: Fallout::default(),
        }
    }

    pub fn has_waits(&self) -> bool {
        !self.waits.is_empty()
    }

    /// The run queue, for a worker starting over after a panic.
    pub fn into_queue(self) -> Deque<Invocation> {
        self.queue
    }

    /// Invocations waiting on this worker's queue.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Puts a runnable invocation on the queue. Any worker may end up running it, so
    /// an answer owed to one of this worker's clients becomes a ticket this worker
    /// waits on, like a hand-off to another server.
    fn enqueue(&mut self, sh: &Shared, mut inv: Invocation) {
        if let Target::Local(hole) = inv.target {
            let via = sh.advertise.clone();
            let ticket = self.ticket(sh, Wait::Result { hole, via });
            inv.target = Target::Remote {
                origin: sh.advertise.clone(),
                ticket,
            };
        }
        PeerCounters::add(&sh.metrics.peer.queued, 1);
        self.queue.push(inv);
    }

    fn run_one(&mut self, sh: &Shared, reg: &Registry, inv: Invocation) {
        let step = Self::rerun(sh, &inv);
        self.advance(sh, reg, inv, step);
    }

    /// Runs up to `budget` queued invocations; true if some are left.
    pub fn run_queue(&mut self, sh: &Shared, reg: &Registry, budget: usize) -> bool {
        for _ in 0..budget {
            let Some(inv) = self.queue.pop() else {
                break;
            };
            self.run_one(sh, reg, inv);
        }
        self.settle(sh, reg);
        !self.queue.is_empty()
    }

    /// Takes part of another worker's queue and runs one of it; false if every other
    /// queue was empty.
    pub fn steal(&mut self, sh: &Shared, reg: &Registry) -> bool {
        let Some(board) = sh.sched.get() else {
            return false;
        };
        let before = self.queue.len();
        let Some(first) = board.steal(self.worker, &self.queue) else {
            return false;
        };
        let n = 1 + self.queue.len().saturating_sub(before);
        PeerCounters::add(&sh.metrics.peer.stolen, n as u64);
        self.run_one(sh, reg, first);
        self.settle(sh, reg);
        true
    }

    /// Drops the deadlines of answered waits once nothing is waiting any more.
    pub fn forget_deadlines(&mut self) {
        if self.waits.is_empty() {
            self.deadlines.clear();
        }
    }

    fn ticket(&mut self, sh: &Shared, w: Wait) -> u64 {
        self.next = (self.next + 1) & ((1 << 56) - 1);
        let t = ((self.worker as u64) << 56) | self.next;
        self.waits.insert(t, w);
        self.deadlines
            .push_back((Instant::now() + sh.config.flow_timeout, t));
        t
    }

    fn send(&mut self, sh: &Shared, reg: &Registry, dest: &str, msg: &PeerMsg<'_>) {
        self.sessions
            .send(sh, reg, dest, msg.to_vec(), &mut self.fallout);
    }

    /// Continues an invocation whose first run (by an EXECUTE) asked for `step`.
    pub fn start(&mut self, sh: &Shared, reg: &Registry, inv: Invocation, step: Step) {
        self.advance(sh, reg, inv, step);
        self.settle(sh, reg);
    }

    fn rerun(sh: &Shared, inv: &Invocation) -> Step {
        let Some(p) = sh.procs.get(inv.cache, &inv.proc_name) else {
            return Step::Fail(SprocError::Flow(format!(
                "no procedure named {} on server {}",
                inv.proc_name, sh.advertise
            )));
        };
        let map = sh.store.snapshot();
        let Some(c) = map.caches.get(&inv.cache) else {
            return Step::Fail(SprocError::Flow(format!(
                "cache {} is not on server {} any more",
                inv.cache, sh.advertise
            )));
        };
        step::run(&*p, c, Some(&inv.pulled), inv.addr, &inv.state)
    }

    fn advance(&mut self, sh: &Shared, reg: &Registry, mut inv: Invocation, mut step: Step) {
        loop {
            let (addr, state) = match step {
                Step::Done(r) => {
                    let mut body = Vec::new();
                    reply::push_done(&mut body, &r);
                    return self.deliver(sh, reg, inv.target, inv.hops, body);
                }
                Step::Fail(e) => return self.deliver(sh, reg, inv.target, inv.hops, failure(&e)),
                Step::Ship { addr, state } => (addr, state),
                Step::Pull { at, ranges, state } => {
                    inv.addr = at;
                    inv.state = state;
                    match self.pull(sh, reg, inv, &ranges) {
                        Some((i, s)) => {
                            (inv, step) = (i, s);
                            continue;
                        }
                        None => return,
                    }
                }
            };
            inv.hops += 1;
            if inv.hops > MAX_HOPS {
                let e = SprocError::Flow(format!(
                    "{} made more than {MAX_HOPS} hand-offs and pulls",
                    inv.proc_name
                ));
                return self.deliver(sh, reg, inv.target, inv.hops, failure(&e));
            }
            let map = sh.store.snapshot();
            let owner = map
                .caches
                .get(&inv.cache)
                .and_then(|c| owner_hint(c, addr, &sh.advertise))
                .map(str::to_owned);
            let Some(owner) = owner else {
                // No region table here (or a stale one): the client library continues it.
                let mut body = Vec::new();
                reply::push_continue(&mut body, addr, &state);
                return self.deliver(sh, reg, inv.target, inv.hops, body);
            };
            let (origin, ticket) = match inv.target {
                Target::Remote { origin, ticket } => {
                    // A queued invocation of this worker's own client: its wait now
                    // depends on the server it goes to (a broken session fails it).
                    if origin == sh.advertise
                        && let Some(Wait::Result { via, .. }) = self.waits.get_mut(&ticket)
                    {
                        via.clone_from(&owner);
                    }
                    (origin, ticket)
                }
                Target::Local(hole) => {
                    let via = owner.clone();
                    let t = self.ticket(sh, Wait::Result { hole, via });
                    (sh.advertise.clone(), t)
                }
            };
            PeerCounters::add(&sh.metrics.peer.forwards, 1);
            let msg = PeerMsg::Forward {
                ticket,
                origin: &origin,
                cache: inv.cache,
                addr,
                hops: inv.hops,
                proc_name: &inv.proc_name,
                state: &state,
            };
            return self.send(sh, reg, &owner, &msg);
        }
    }

    /// Serves what it can of `ranges` from local regions and sends a FETCH for the
    /// rest. Returns the invocation's next step if nothing had to be fetched.
    fn pull(
        &mut self,
        sh: &Shared,
        reg: &Registry,
        mut inv: Invocation,
        ranges: &[(u64, u32)],
    ) -> Option<(Invocation, Step)> {
        inv.hops += 1;
        let map = sh.store.snapshot();
        let fail = |why: String| Step::Fail(SprocError::Flow(why));
        let Some(c) = map.caches.get(&inv.cache) else {
            let s = fail(format!(
                "cache {} is not on this server any more",
                inv.cache
            ));
            return Some((inv, s));
        };
        if inv.hops > MAX_HOPS {
            let s = fail(format!(
                "{} pulled more than {MAX_HOPS} times",
                inv.proc_name
            ));
            return Some((inv, s));
        }
        let want: u64 = ranges.iter().map(|r| u64::from(r.1)).sum();
        if inv.pulled.bytes() as u64 + want > MAX_PULLED as u64 {
            let s = fail(format!(
                "{} would pull more than {MAX_PULLED} bytes",
                inv.proc_name
            ));
            return Some((inv, s));
        }
        let mut fetches: Vec<(String, u64, u32)> = Vec::new();
        let rs = c.region_size;
        for &(addr, len) in ranges {
            let Some(end) = addr.checked_add(len.into()).filter(|&e| e <= c.capacity) else {
                let s = Step::Fail(SprocError::OutOfRange {
                    proc: "pull",
                    addr,
                    len: len.into(),
                });
                return Some((inv, s));
            };
            // One piece per region (each may live on a different server) and per
            // MAX_FETCH bytes. Local pieces are read in place when the procedure runs
            // again.
            let mut at = addr;
            while at < end {
                let n = (rs - at % rs)
                    .min(end - at)
                    .min(u64::from(farcache_proto::peer::MAX_FETCH));
                match c.holds(at) {
                    true => {}
                    false => match owner_hint(c, at, &sh.advertise) {
                        Some(o) => fetches.push((o.to_owned(), at, n as u32)),
                        None => {
                            let s = fail(format!(
                                "no server known for address {at} of cache {} (region table missing or stale)",
                                inv.cache
                            ));
                            return Some((inv, s));
                        }
                    },
                }
                at += n;
            }
        }
        if fetches.is_empty() {
            let s = Self::rerun(sh, &inv);
            return Some((inv, s));
        }
        let cache = inv.cache;
        let mut sources: Vec<String> = fetches.iter().map(|f| f.0.clone()).collect();
        sources.sort_unstable();
        sources.dedup();
        let ticket = self.ticket(
            sh,
            Wait::Data {
                inv,
                outstanding: fetches.len() as u32,
                sources,
                pieces: fetches.iter().map(|f| (f.1, f.2)).collect(),
                redirects: 0,
            },
        );
        for (dest, addr, len) in fetches {
            self.fetch(sh, reg, &dest, ticket, cache, (addr, len));
        }
        None
    }

    /// Asks `dest` for the bytes `piece` = (addr, len) of `cache` on behalf of `ticket`.
    fn fetch(
        &mut self,
        sh: &Shared,
        reg: &Registry,
        dest: &str,
        ticket: u64,
        cache: CacheId,
        piece: (u64, u32),
    ) {
        PeerCounters::add(&sh.metrics.peer.fetches, 1);
        let msg = PeerMsg::Fetch {
            ticket,
            origin: &sh.advertise,
            cache,
            addr: piece.0,
            len: piece.1,
        };
        self.send(sh, reg, dest, &msg);
    }

    fn deliver(&mut self, sh: &Shared, reg: &Registry, target: Target, hops: u32, body: Vec<u8>) {
        match target {
            Target::Local(hole) => self.completions.push((hole, body)),
            Target::Remote { origin, ticket } => {
                PeerCounters::add(&sh.metrics.peer.results, 1);
                let msg = PeerMsg::Result {
                    ticket,
                    hops,
                    body: &body,
                };
                if origin == sh.advertise {
                    self.on_msg(sh, reg, msg);
                } else {
                    self.send(sh, reg, &origin, &msg);
                }
            }
        }
    }

    /// Handles one message that arrived on a session from the server `from` (its
    /// proven advertised address). Answers go only where they may: a FETCH's bytes to
    /// the server that asked, a hand-off's result to a server the region tables name.
    pub fn on_peer_msg(&mut self, sh: &Shared, reg: &Registry, from: &str, msg: PeerMsg<'_>) {
        let refused = match msg {
            PeerMsg::Fetch { origin, .. } if origin != from => Some(format!(
                "a FETCH from {from} names {origin} as the server to answer"
            )),
            PeerMsg::Forward { origin, .. }
                if origin != sh.advertise && !sh.peers.load().contains_key(origin) =>
            {
                Some(format!(
                    "a hand-off from {from} names {origin}, which no region table here names, as its origin"
                ))
            }
            _ => None,
        };
        match refused {
            Some(why) => {
                GuardCounters::bump(&sh.metrics.guard.forbidden);
                warn!(peer = from, "peer message refused: {why}");
            }
            None => self.on_msg(sh, reg, msg),
        }
    }

    /// Handles one message from another server (or another worker of this one).
    pub fn on_msg(&mut self, sh: &Shared, reg: &Registry, msg: PeerMsg<'_>) {
        let ticket = msg.ticket();
        let mine = worker_of(ticket) == self.worker;
        match msg {
            PeerMsg::Forward {
                ticket,
                origin,
                cache,
                addr,
                hops,
                proc_name,
                state,
            } => {
                let inv = Invocation {
                    cache,
                    proc_name: proc_name.to_owned(),
                    addr,
                    state: state.to_vec(),
                    hops,
                    pulled: Pulled::default(),
                    target: Target::Remote {
                        origin: origin.to_owned(),
                        ticket,
                    },
                };
                self.enqueue(sh, inv);
            }
            PeerMsg::Fetch {
                ticket,
                origin,
                cache,
                addr,
                len,
            } => {
                let map = sh.store.snapshot();
                let c = map.caches.get(&cache);
                let too_large = len > farcache_proto::peer::MAX_FETCH;
                let len = if too_large { 0 } else { len as usize };
                // The bytes go straight from the region into the answer.
                let mut msg = Vec::with_capacity(32 + len);
                farcache_proto::peer::push_fetched_with(
                    &mut msg,
                    ticket,
                    addr,
                    len,
                    |data| match c {
                        None => Status::NoSuchCache,
                        Some(_) if too_large => Status::TooLarge,
                        Some(c) => match FlowMemory::new(c, None).read(addr, data) {
                            Ok(()) => Status::Ok,
                            Err(Miss::Remote) => Status::WrongServer,
                            Err(Miss::OutOfRange) => Status::OutOfRange,
                            Err(Miss::Lost) => Status::DataLost,
                            // One read cannot exhaust a fresh budget; if it ever did,
                            // that is this server's fault, not the range's.
                            Err(Miss::Budget) => Status::Internal,
                        },
                    },
                    // A stale table sent the FETCH here: say who holds the bytes.
                    || {
                        c.and_then(|c| owner_hint(c, addr, &sh.advertise))
                            .map(str::to_owned)
                    },
                );
                self.sessions.send(sh, reg, origin, msg, &mut self.fallout);
            }
            _ if !mine => self.foreign.push((worker_of(ticket), msg.to_vec())),
            PeerMsg::Result { ticket, body, .. } => match self.waits.remove(&ticket) {
                Some(Wait::Result { hole, .. }) => self.completions.push((hole, body.to_vec())),
                Some(other) => {
                    self.waits.insert(ticket, other);
                }
                None => debug!(ticket, "result after its deadline, dropped"),
            },
            PeerMsg::Fetched {
                ticket,
                addr,
                status,
                data,
            } => {
                let Some(Wait::Data {
                    inv,
                    outstanding,
                    sources,
                    pieces,
                    redirects,
                }) = self.waits.get_mut(&ticket)
                else {
                    return debug!(ticket, "pulled data after its deadline, dropped");
                };
                // Asked a server that no longer holds the bytes: ask the one it names.
                let hint = std::str::from_utf8(data).ok().filter(|h| !h.is_empty());
                if status == Status::WrongServer
                    && *redirects < MAX_REDIRECTS
                    && let Some(owner) = hint.filter(|h| *h != sh.advertise)
                    && let Some(&(_, len)) = pieces.iter().find(|p| p.0 == addr)
                {
                    *redirects += 1;
                    if !sources.iter().any(|s| s == owner) {
                        sources.push(owner.to_owned());
                    }
                    let (cache, owner) = (inv.cache, owner.to_owned());
                    self.fetch(sh, reg, &owner, ticket, cache, (addr, len));
                    return self.settle(sh, reg);
                }
                if status != Status::Ok {
                    if let Some(Wait::Data { inv, .. }) = self.waits.remove(&ticket) {
                        let e = SprocError::Flow(format!(
                            "{}: pulling bytes at {addr} failed: {}",
                            inv.proc_name,
                            status.as_str()
                        ));
                        self.deliver(sh, reg, inv.target, inv.hops, failure(&e));
                    }
                    return;
                }
                inv.pulled.insert(addr, data.to_vec());
                *outstanding -= 1;
                if *outstanding == 0
                    && let Some(Wait::Data { inv, .. }) = self.waits.remove(&ticket)
                {
                    self.enqueue(sh, inv);
                }
            }
        }
        self.settle(sh, reg);
    }

    /// Fails the waits of `ticket` with `why`.
    fn fail_wait(&mut self, sh: &Shared, reg: &Registry, ticket: u64, why: &str) {
        PeerCounters::add(&sh.metrics.peer.failures, 1);
        match self.waits.remove(&ticket) {
            Some(Wait::Result { hole, .. }) => {
                let e = SprocError::Flow(why.to_string());
                self.completions.push((hole, failure(&e)));
            }
            Some(Wait::Data { inv, .. }) => {
                let e = SprocError::Flow(format!("{}: {why}", inv.proc_name));
                self.deliver(sh, reg, inv.target, inv.hops, failure(&e));
            }
            None => {}
        }
    }

    /// Fails invocations whose answer can no longer come: messages that could not be
    /// sent, and waits on a server whose session broke.
    fn settle(&mut self, sh: &Shared, reg: &Registry) {
        while !self.fallout.is_empty() {
            let Fallout { bounced, down } = std::mem::take(&mut self.fallout);
            for (why, raw) in bounced {
                match PeerMsg::decode(&raw) {
                    Ok(PeerMsg::Forward { ticket, origin, .. })
                        if origin == sh.advertise && worker_of(ticket) == self.worker =>
                    {
                        self.fail_wait(sh, reg, ticket, &why)
                    }
                    // Another server's invocation, or one of another worker's here
                    // (stolen from its queue): the failure goes to whoever waits.
                    Ok(PeerMsg::Forward {
                        ticket,
                        origin,
                        hops,
                        ..
                    }) => {
                        PeerCounters::add(&sh.metrics.peer.failures, 1);
                        let body = failure(&SprocError::Flow(why));
                        let target = Target::Remote {
                            origin: origin.to_owned(),
                            ticket,
                        };
                        self.deliver(sh, reg, target, hops, body);
                    }
                    Ok(PeerMsg::Fetch { ticket, .. }) => self.fail_wait(sh, reg, ticket, &why),
                    Ok(_) | Err(_) => debug!("undeliverable answer dropped: {why}"),
                }
            }
            for (addr, why) in down {
                let lost: Vec<u64> = self
                    .waits
                    .iter()
                    .filter(|(_, w)| match w {
                        Wait::Result { via, .. } => *via == addr,
                        Wait::Data { sources, .. } => sources.contains(&addr),
                    })
                    .map(|(t, _)| *t)
                    .collect();
                for t in lost {
                    self.fail_wait(sh, reg, t, &why);
                }
            }
        }
    }

    /// Fails waits whose deadline passed.
    pub fn expire(&mut self, sh: &Shared, reg: &Registry, now: Instant) {
        while let Some(&(at, ticket)) = self.deadlines.front() {
            let waiting = self.waits.contains_key(&ticket);
            // Answered waits leave at once, so the queue stays about as long as the
            // number of invocations in flight.
            if waiting && at > now {
                break;
            }
            self.deadlines.pop_front();
            if waiting {
                let why = format!(
                    "no answer from the servers it was handed to within {:?}",
                    sh.config.flow_timeout
                );
                self.fail_wait(sh, reg, ticket, &why);
            }
        }
        self.settle(sh, reg);
    }

    /// Sends what was queued this turn, then deals with sessions that failed.
    pub fn flush(&mut self, sh: &Shared, reg: &Registry) {
        self.sessions.flush(sh, &mut self.fallout);
        self.settle(sh, reg);
    }

    /// Fails sessions whose handshake or writes are overdue.
    pub fn sweep_sessions(&mut self, sh: &Shared, reg: &Registry, now: Instant) {
        let g = &sh.config.guard;
        self.sessions.sweep(
            now,
            g.handshake_timeout,
            g.write_stall_timeout,
            &mut self.fallout,
        );
        self.settle(sh, reg);
    }

    pub fn on_session_event(
        &mut self,
        sh: &Shared,
        reg: &Registry,
        token: mio::Token,
        ev: &mio::event::Event,
    ) {
        self.sessions.on_event(sh, token, ev, &mut self.fallout);
        self.settle(sh, reg);
    }
}
