//! A worker thread: one mio event loop owning its connections and its sessions to other
//! servers. Every request runs to completion on the thread that read it; a procedure
//! that continues elsewhere is parked in the worker's flow engine, not on the thread.
//! Invocations that can run again wait on the worker's queue; a worker about to sleep
//! steals from the others' queues first, and a worker with a backlog wakes a sleeper.
//!
//! The worker also keeps its peers in bounds: it serves each connection a few reads per
//! turn, holds at most its share of connections that have not authenticated (a new one
//! evicts the oldest), and sweeps for deadlines (handshake, stalled frame, unread
//! replies). If the thread panics, its connections are told and closed and the loop
//! starts over on the same thread: the server's memory, and so every cache, stays.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use farcache_proto::peer::PeerMsg;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use tracing::{debug, error, warn};

use crate::cluster::Shared;
use crate::cluster::flow::sched::SHARE_AT;
use crate::cluster::flow::sessions::PEER_BASE;
use crate::cluster::flow::{Engine, Invocation};
use crate::cluster::mailbox::WorkerMsg;
use crate::metrics::GuardCounters;
use crate::runtime::conn::{Conn, Expiry, Turn, WorkerCtx};

pub const WAKER: Token = Token(usize::MAX);
/// How often parked invocations' deadlines are checked while the worker is idle.
const DEADLINE_TICK: Duration = Duration::from_millis(10);
/// How often connections' deadlines are checked.
const SWEEP_EVERY: Duration = Duration::from_millis(250);
/// How soon connections held back by the server-wide output cap are retried.
const BLOCKED_RETRY: Duration = Duration::from_millis(1);
/// Queued invocations run per loop turn before the worker looks at its sockets again.
const RUN_BUDGET: usize = 256;
/// The worker's read buffer: connections read into it and are served in place.
const SCRATCH: usize = 256 << 10;
/// While busy polling, a spin reads the connection that last had data directly instead
/// of polling, except every this many spins (see `Loop::hot`).
const POLL_EVERY: u32 = 8;
/// Spins that poll after two connections were seen busy in turn (see `Loop::shared_for`).
const SHARED_POLLS: u32 = 256;

pub struct Worker {
    pub id: usize,
    pub poll: Poll,
    pub incoming: Receiver<WorkerMsg>,
    pub queue: crossbeam_deque::Worker<Invocation>,
    pub shared: Arc<Shared>,
    /// Shared by the server's workers (see `peer_budget`).
    pub clients: Arc<crate::runtime::peer_budget::ClientActivity>,
}

type ConnRef = (usize, u64);

struct Loop {
    conns: Slab<Conn>,
    engine: Engine,
    serial: u64,
    scratch: Vec<u8>,
    /// Connections that may have more to read: served again next turn.
    again: Vec<ConnRef>,
    /// Connections waiting for the server's unsent replies to drain.
    blocked: Vec<ConnRef>,
    /// Connections not yet authenticated, oldest first (entries may be stale).
    unauth: VecDeque<ConnRef>,
    unauth_count: usize,
    next_sweep: Instant,
    /// The client connection that last had data. A spin with nothing else to do reads
    /// it directly: one `recv` notices and takes its next request, where `epoll_wait`
    /// and then `recv` put two system calls on every round trip. The other
    /// connections are polled every [`POLL_EVERY`] spins, and after any spin that
    /// found work.
    hot: Option<ConnRef>,
    spins: u32,
    /// Spins left that poll rather than probe: set when a poll finds another
    /// connection than the hot one busy, so several active peers are served as
    /// promptly as before (none waits out the probes of another's).
    shared_for: u32,
    peer_budget: crate::runtime::peer_budget::PeerBudget,
}

impl Loop {
    fn new(
        id: usize,
        sh: &Shared,
        queue: crossbeam_deque::Worker<Invocation>,
        clients: Arc<crate::runtime::peer_budget::ClientActivity>,
    ) -> Self {
        Self {
            conns: Slab::new(),
            engine: Engine::new(id, sh.config.peer_batching, queue),
            serial: 0,
            scratch: vec![0; SCRATCH],
            again: Vec::new(),
            blocked: Vec::new(),
            unauth: VecDeque::new(),
            unauth_count: 0,
            next_sweep: Instant::now() + SWEEP_EVERY,
            hot: None,
            spins: 0,
            shared_for: 0,
            peer_budget: crate::runtime::peer_budget::PeerBudget::new(clients),
        }
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

impl Worker {
    pub fn run(mut self) {
        let queue = std::mem::replace(&mut self.queue, crossbeam_deque::Worker::new_fifo());
        let mut st = Loop::new(self.id, &self.shared, queue, self.clients.clone());
        loop {
            match catch_unwind(AssertUnwindSafe(|| self.turns(&mut st))) {
                Ok(()) => break,
                Err(p) => {
                    let what = panic_text(&*p);
                    error!(
                        worker = self.id,
                        "worker thread panicked: {what}; closing its connections and starting over"
                    );
                    self.shared
                        .metrics
                        .worker_panics
                        .fetch_add(1, Ordering::Relaxed);
                    st = self.recover(st);
                }
            }
        }
        for key in st.conns.iter().map(|(k, _)| k).collect::<Vec<_>>() {
            self.close(&mut st, key);
        }
    }

    /// After a panic: every connection gets an error and is closed (its state may be
    /// half-updated), parked invocations are dropped (their callers time out), and a
    /// fresh loop starts with the same queue.
    fn recover(&self, mut st: Loop) -> Loop {
        let keys: Vec<usize> = st.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            if let Some(c) = st.conns.get_mut(key) {
                c.abort(
                    "internal error: the server thread serving this connection failed; reconnect",
                );
            }
            self.close(&mut st, key);
        }
        let queue = st.engine.into_queue();
        while queue.pop().is_some() {}
        Loop::new(self.id, &self.shared, queue, self.clients.clone())
    }

    fn turns(&mut self, st: &mut Loop) {
        let mut events = Events::with_capacity(1024);
        let spin = self.shared.config.busy_poll;
        let mut last_work = Instant::now();
        loop {
            let sh = &*self.shared;
            let mut timeout =
                (!spin.is_zero() && last_work.elapsed() < spin).then_some(Duration::ZERO);
            if st.engine.queued() > 0 || !st.again.is_empty() {
                timeout = Some(Duration::ZERO);
            } else if st.engine.has_waits() {
                timeout = Some(timeout.unwrap_or(DEADLINE_TICK));
            }
            if !st.blocked.is_empty() {
                timeout = Some(timeout.unwrap_or(BLOCKED_RETRY).min(BLOCKED_RETRY));
            }
            if !st.conns.is_empty() {
                timeout = Some(timeout.unwrap_or(SWEEP_EVERY).min(SWEEP_EVERY));
            }
            // About to sleep: help a busier worker first. The idle bit goes up before
            // the last look, so a worker queueing work after it wakes this one.
            let sleeping = timeout != Some(Duration::ZERO);
            if sleeping && let Some(board) = sh.sched.get() {
                board.set_idle(self.id);
                if st.engine.steal(sh, self.poll.registry()) {
                    board.clear_idle(self.id);
                    self.settle(st);
                    continue;
                }
            }
            let probe = match st.hot {
                Some(_) if st.shared_for > 0 => {
                    st.shared_for -= 1;
                    None
                }
                Some(hot) if timeout == Some(Duration::ZERO) && st.again.is_empty() => {
                    st.spins = st.spins.wrapping_add(1);
                    (!st.spins.is_multiple_of(POLL_EVERY) && st.engine.queued() == 0).then_some(hot)
                }
                _ => None,
            };
            let polled = match probe {
                Some(_) => {
                    events.clear();
                    Ok(())
                }
                None => self.poll.poll(&mut events, timeout),
            };
            if sleeping && let Some(board) = sh.sched.get() {
                board.clear_idle(self.id);
            }
            if let Err(e) = polled {
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                warn!(worker = self.id, "poll failed: {e}");
                return;
            }
            if sh.shutdown.load(Ordering::Acquire) {
                return;
            }
            for ev in events.iter() {
                let t = ev.token();
                if t == WAKER {
                    self.adopt(st);
                } else if t.0 >= PEER_BASE {
                    st.engine.on_session_event(sh, self.poll.registry(), t, ev);
                } else {
                    self.serve(st, t.0);
                    let now = st.conns.get(t.0).map(|c| (t.0, c.serial));
                    if st.hot.is_some() && now != st.hot {
                        st.shared_for = SHARED_POLLS;
                    }
                    st.hot = now;
                }
            }
            let mut worked = !events.is_empty();
            if let Some((key, serial)) = probe
                && self.probe(st, key, serial)
            {
                worked = true;
                // Something came: look at everyone next round.
                st.spins = POLL_EVERY - 1;
            }
            for (key, serial) in std::mem::take(&mut st.again) {
                worked = true;
                self.serve_if(st, key, serial);
            }
            // Held back by the server's output cap or a full session to another
            // server: each connection checks its own condition again.
            for (key, serial) in std::mem::take(&mut st.blocked) {
                self.serve_if(st, key, serial);
            }
            if worked {
                // The window runs from the end of the work, not its start: a batch
                // that takes longer to serve must not eat the time its successor has
                // to arrive without waking this thread.
                last_work = Instant::now();
            }
            self.share(st);
            if st.engine.queued() > 0 {
                st.engine.run_queue(sh, self.poll.registry(), RUN_BUDGET);
            } else if !worked && events.is_empty() && !sleeping {
                // Spinning with nothing to do (busy polling): look for work elsewhere,
                // and give the core to any thread waiting for one. On a host with
                // more busy threads than cores (another server, the client) a thread
                // woken by a message otherwise waits until this spin runs out.
                if !st.engine.steal(sh, self.poll.registry()) {
                    std::thread::yield_now();
                }
            }
            if st.engine.has_waits() {
                st.engine.expire(sh, self.poll.registry(), Instant::now());
            }
            self.settle(st);
            st.engine.forget_deadlines();
            {
                let now = Instant::now();
                if now >= st.next_sweep {
                    st.next_sweep = now + SWEEP_EVERY;
                    self.sweep(st, now);
                }
            }
        }
    }

    /// Wakes one sleeping worker when this one has more queued than it should run alone.
    fn share(&self, st: &Loop) {
        if st.engine.queued() < SHARE_AT {
            return;
        }
        let sh = &*self.shared;
        if let Some(board) = sh.sched.get()
            && let Some(w) = board.claim_idle(self.id)
            && let Some(inbox) = sh.mailboxes.all().get(w)
        {
            let _ = inbox.waker.wake();
        }
    }

    fn serve_if(&self, st: &mut Loop, key: usize, serial: u64) {
        if st.conns.get(key).is_some_and(|c| c.serial == serial) {
            self.serve(st, key);
        }
    }

    /// Serves a live connection without an event; true if it read anything.
    fn probe(&self, st: &mut Loop, key: usize, serial: u64) -> bool {
        let before = match st.conns.get(key) {
            Some(c) if c.serial == serial => c.reads_with_data,
            _ => {
                st.hot = None;
                return false;
            }
        };
        self.serve(st, key);
        st.conns
            .get(key)
            .is_some_and(|c| c.serial == serial && c.reads_with_data != before)
    }

    fn serve(&self, st: &mut Loop, key: usize) {
        let Loop {
            conns,
            engine,
            scratch,
            peer_budget,
            ..
        } = st;
        let Some(conn) = conns.get_mut(key) else {
            return;
        };
        let was_authenticated = conn.is_authenticated();
        let mut ctx = WorkerCtx {
            shared: &self.shared,
            worker: self.id,
            key,
            engine,
            reg: self.poll.registry(),
            peer_budget,
        };
        let turn = conn.on_ready(&self.shared, &mut ctx, scratch);
        let (serial, closed) = (conn.serial, conn.closed);
        if !was_authenticated && conn.is_authenticated() {
            st.unauth_count = st.unauth_count.saturating_sub(1);
        }
        if closed {
            self.close(st, key);
            return;
        }
        match turn {
            Turn::Again => st.again.push((key, serial)),
            Turn::Blocked => st.blocked.push((key, serial)),
            Turn::Idle => {}
        }
    }

    /// Closes the connections holding these responses: their writes were applied
    /// here but cannot be acknowledged, so their clients see an unknown outcome.
    fn fail_held(&self, st: &mut Loop, waiters: &[crate::cluster::replication::Waiter]) {
        for w in waiters {
            if st.conns.get(w.conn).is_some_and(|c| c.serial == w.serial) {
                warn!(
                    worker = self.id,
                    "closing a connection whose writes cannot be acknowledged"
                );
                self.close(st, w.conn);
            }
        }
    }

    /// Drops a connection and its accounting.
    fn close(&self, st: &mut Loop, key: usize) {
        let Some(mut c) = st.conns.try_remove(key) else {
            return;
        };
        let _ = c.stream.deregister(self.poll.registry());
        c.release(&self.shared);
        if !c.is_authenticated() {
            st.unauth_count = st.unauth_count.saturating_sub(1);
        }
        self.shared
            .metrics
            .connections
            .fetch_sub(1, Ordering::Relaxed);
        debug!(worker = self.id, peer = %c.peer, "connection closed");
    }

    /// Closes connections (and fails sessions) whose handshake, frame or replies are
    /// overdue.
    fn sweep(&self, st: &mut Loop, now: Instant) {
        st.engine
            .sweep_sessions(&self.shared, self.poll.registry(), now);
        let g = &self.shared.config.guard;
        let overdue: Vec<(usize, Expiry)> = st
            .conns
            .iter()
            .filter_map(|(k, c)| c.expired(now, g).map(|e| (k, e)))
            .collect();
        for (key, why) in overdue {
            let counter = match why {
                Expiry::NotReading => &self.shared.metrics.guard.cut_off,
                _ => &self.shared.metrics.guard.timed_out,
            };
            GuardCounters::bump(counter);
            if let Some(c) = st.conns.get_mut(key) {
                debug!(worker = self.id, peer = %c.peer, "closing connection: {}", why.why());
                c.abort(why.why());
            }
            self.close(st, key);
        }
        // Forget entries of connections that authenticated or closed since.
        if st.unauth.len() > 2 * st.unauth_count + 64 {
            let conns = &st.conns;
            st.unauth.retain(|&(k, s)| {
                conns
                    .get(k)
                    .is_some_and(|c| c.serial == s && !c.is_authenticated())
            });
        }
    }

    /// Closes the oldest connection still waiting to authenticate.
    fn evict_oldest(&self, st: &mut Loop) {
        while let Some((key, serial)) = st.unauth.pop_front() {
            let live = st
                .conns
                .get(key)
                .is_some_and(|c| c.serial == serial && !c.is_authenticated());
            if !live {
                continue;
            }
            GuardCounters::bump(&self.shared.metrics.guard.evicted);
            if let Some(c) = st.conns.get_mut(key) {
                c.abort("too many connections waiting to authenticate; the oldest is closed");
            }
            self.close(st, key);
            return;
        }
    }

    /// After a turn: sends peer messages, hands other workers theirs, and delivers
    /// answers to client connections (which may read more requests, so it repeats).
    fn settle(&self, st: &mut Loop) {
        loop {
            st.engine.flush(&self.shared, self.poll.registry());
            for (w, msg) in st.engine.foreign.drain(..) {
                if !self.shared.mailboxes.post(w, WorkerMsg::Peer(msg)) {
                    debug!(worker = w, "peer message for an unknown worker dropped");
                }
            }
            if st.engine.completions.is_empty() {
                return;
            }
            for (hole, body) in std::mem::take(&mut st.engine.completions) {
                match st.conns.get_mut(hole.conn) {
                    Some(c) if c.serial == hole.serial => c.fill(&self.shared, hole, &body),
                    _ => continue, // the client left; nobody waits for this answer
                }
                self.serve(st, hole.conn);
            }
        }
    }

    fn adopt(&self, st: &mut Loop) {
        let sh = &*self.shared;
        let cap = (sh.config.guard.max_unauthenticated / sh.config.threads.max(1)).max(1);
        while let Ok(msg) = self.incoming.try_recv() {
            let mut stream = match msg {
                WorkerMsg::Conn(s) => s,
                WorkerMsg::Peer(raw) => {
                    match PeerMsg::decode(&raw) {
                        Ok(m) => st.engine.on_msg(sh, self.poll.registry(), m),
                        Err(e) => warn!(worker = self.id, "bad internal peer message: {e}"),
                    }
                    continue;
                }
                WorkerMsg::ReplicationFailed(waiters) => {
                    self.fail_held(st, &waiters);
                    continue;
                }
                // Without a lease this server may have lost its regions to others:
                // what it did not acknowledge yet, it never will.
                WorkerMsg::Released(waiters) if !sh.lease.valid() => {
                    self.fail_held(st, &waiters);
                    continue;
                }
                WorkerMsg::Replicated(waiters) | WorkerMsg::Released(waiters) => {
                    for w in waiters {
                        if let Some(c) = st.conns.get_mut(w.conn).filter(|c| c.serial == w.serial) {
                            c.replicated(sh, w.resp);
                            st.again.push((w.conn, w.serial));
                        }
                    }
                    continue;
                }
                WorkerMsg::ControlReply {
                    conn,
                    serial,
                    frame,
                } => {
                    if let Some(c) = st.conns.get_mut(conn).filter(|c| c.serial == serial) {
                        c.control_done(sh, frame);
                        self.serve(st, conn);
                    }
                    continue;
                }
            };
            let peer = stream
                .peer_addr()
                .unwrap_or_else(|_| ([0, 0, 0, 0], 0).into());
            let entry = st.conns.vacant_entry();
            let key = entry.key();
            if let Err(e) = stream.register(
                self.poll.registry(),
                Token(key),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                warn!(worker = self.id, "register failed: {e}");
                sh.metrics.connections.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            debug!(worker = self.id, %peer, "connection adopted");
            st.serial += 1;
            let serial = st.serial;
            entry.insert(Conn::new(stream, peer, serial, sh));
            st.unauth.push_back((key, serial));
            st.unauth_count += 1;
            if st.unauth_count > cap {
                self.evict_oldest(st);
            }
            // Sends the challenge; data may also have arrived before registration.
            self.serve(st, key);
        }
    }
}
