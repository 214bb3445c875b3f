//! A worker thread: one mio event loop owning its connections and its sessions to other
//! servers. Every request runs to completion on the thread that read it; a procedure
//! that continues elsewhere is parked in the worker's flow engine, not on the thread.
//! Invocations that can run again wait on the worker's queue; a worker about to sleep
//! steals from the others' queues first, and a worker with a backlog wakes a sleeper.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use farcache_proto::peer::PeerMsg;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;
use tracing::{debug, warn};

use crate::conn::{Conn, WorkerCtx};
use crate::flow::sched::SHARE_AT;
use crate::flow::sessions::PEER_BASE;
use crate::flow::{Engine, Invocation};
use crate::server::Shared;

pub const WAKER: Token = Token(usize::MAX);
/// How often parked invocations' deadlines are checked while the worker is idle.
const DEADLINE_TICK: Duration = Duration::from_millis(10);
/// Queued invocations run per loop turn before the worker looks at its sockets again.
const RUN_BUDGET: usize = 256;

/// What other threads hand a worker.
pub enum WorkerMsg {
    /// A new connection (from the acceptor).
    Conn(TcpStream),
    /// A peer message for a ticket this worker owns (from another worker).
    Peer(Vec<u8>),
}

pub struct Worker {
    pub id: usize,
    pub poll: Poll,
    pub incoming: Receiver<WorkerMsg>,
    pub queue: crossbeam_deque::Worker<Invocation>,
    pub shared: Arc<Shared>,
}

/// The handle other threads keep to reach a worker.
pub struct WorkerInbox {
    pub tx: std::sync::mpsc::Sender<WorkerMsg>,
    pub waker: Arc<Waker>,
}

impl WorkerInbox {
    pub fn send(&self, m: WorkerMsg) {
        if self.tx.send(m).is_ok() {
            let _ = self.waker.wake();
        }
    }
}

struct Loop {
    conns: Slab<Conn>,
    engine: Engine,
    serial: u64,
}

impl Worker {
    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let queue = std::mem::replace(&mut self.queue, crossbeam_deque::Worker::new_fifo());
        let mut st = Loop {
            conns: Slab::new(),
            engine: Engine::new(self.id, self.shared.config.peer_batching, queue),
            serial: 0,
        };
        let spin = self.shared.config.busy_poll;
        let mut last_work = Instant::now();
        loop {
            let sh = &*self.shared;
            let mut timeout =
                (!spin.is_zero() && last_work.elapsed() < spin).then_some(Duration::ZERO);
            if st.engine.queued() > 0 {
                timeout = Some(Duration::ZERO);
            } else if st.engine.has_waits() {
                timeout = Some(timeout.unwrap_or(DEADLINE_TICK));
            }
            // About to sleep: help a busier worker first. The idle bit goes up before
            // the last look, so a worker queueing work after it wakes this one.
            let sleeping = timeout != Some(Duration::ZERO);
            if sleeping && let Some(board) = sh.sched.get() {
                board.set_idle(self.id);
                if st.engine.steal(sh, self.poll.registry()) {
                    board.clear_idle(self.id);
                    self.settle(&mut st);
                    continue;
                }
            }
            let polled = self.poll.poll(&mut events, timeout);
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
                    self.adopt(&mut st);
                } else if t.0 >= PEER_BASE {
                    st.engine.on_session_event(sh, self.poll.registry(), t, ev);
                } else {
                    self.serve(&mut st, t.0);
                }
            }
            if !events.is_empty() {
                // The window runs from the end of the work, not its start: a batch
                // that takes longer to serve must not eat the time its successor has
                // to arrive without waking this thread.
                last_work = Instant::now();
            }
            self.share(&st);
            if st.engine.queued() > 0 {
                st.engine.run_queue(sh, self.poll.registry(), RUN_BUDGET);
            } else if events.is_empty() && !sleeping {
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
            self.settle(&mut st);
            st.engine.forget_deadlines();
        }
    }

    /// Wakes one sleeping worker when this one has more queued than it should run alone.
    fn share(&self, st: &Loop) {
        if st.engine.queued() < SHARE_AT {
            return;
        }
        let sh = &*self.shared;
        if let (Some(board), Some(inboxes)) = (sh.sched.get(), sh.inboxes.get())
            && let Some(w) = board.claim_idle(self.id)
            && let Some(inbox) = inboxes.get(w)
        {
            let _ = inbox.waker.wake();
        }
    }

    fn serve(&self, st: &mut Loop, key: usize) {
        let Some(conn) = st.conns.get_mut(key) else {
            return;
        };
        let mut ctx = WorkerCtx {
            key,
            engine: &mut st.engine,
            reg: self.poll.registry(),
        };
        conn.on_ready(&self.shared, &mut ctx);
        if conn.closed {
            let mut c = st.conns.remove(key);
            let _ = self.poll.registry().deregister(&mut c.stream);
            self.shared
                .metrics
                .connections
                .fetch_sub(1, Ordering::Relaxed);
            debug!(worker = self.id, peer = %c.peer, "connection closed");
        }
    }

    /// After a turn: sends peer messages, hands other workers theirs, and delivers
    /// answers to client connections (which may read more requests, so it repeats).
    fn settle(&self, st: &mut Loop) {
        loop {
            st.engine.flush(&self.shared, self.poll.registry());
            if let Some(inboxes) = self.shared.inboxes.get() {
                for (w, msg) in st.engine.foreign.drain(..) {
                    match inboxes.get(w) {
                        Some(inbox) => inbox.send(WorkerMsg::Peer(msg)),
                        None => debug!(worker = w, "peer message for an unknown worker dropped"),
                    }
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
        while let Ok(msg) = self.incoming.try_recv() {
            let mut stream = match msg {
                WorkerMsg::Conn(s) => s,
                WorkerMsg::Peer(raw) => {
                    match PeerMsg::decode(&raw) {
                        Ok(m) => st.engine.on_msg(&self.shared, self.poll.registry(), m),
                        Err(e) => warn!(worker = self.id, "bad internal peer message: {e}"),
                    }
                    continue;
                }
            };
            let peer = stream
                .peer_addr()
                .unwrap_or_else(|_| ([0, 0, 0, 0], 0).into());
            let entry = st.conns.vacant_entry();
            let key = entry.key();
            if let Err(e) = self.poll.registry().register(
                &mut stream,
                Token(key),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                warn!(worker = self.id, "register failed: {e}");
                continue;
            }
            self.shared
                .metrics
                .connections
                .fetch_add(1, Ordering::Relaxed);
            debug!(worker = self.id, %peer, "connection adopted");
            st.serial += 1;
            entry.insert(Conn::new(stream, peer, st.serial));
            // Data may have arrived before registration; edges raised then are lost.
            self.serve(st, key);
        }
    }
}
