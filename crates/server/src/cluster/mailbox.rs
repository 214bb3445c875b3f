//! How other threads reach a worker: its inbox and the messages it takes. The
//! cluster side (control pool, replication links) and the acceptor post here; only the
//! worker reads. Posting never blocks: the channel is unbounded and the waker makes
//! the worker's poll return.

use std::sync::{Arc, OnceLock};

use farcache_net::Stream;
use mio::Waker;

/// What other threads hand a worker.
pub enum WorkerMsg {
    /// A new connection (from the acceptor).
    Conn(Stream),
    /// A peer message for a ticket this worker owns (from another worker).
    Peer(Vec<u8>),
    /// Backups acknowledged writes of these held responses (one part each): every
    /// copy holds them, so they are acknowledged even if the lease ran out meanwhile
    /// (the write ran under the lease; a promoted backup holds it).
    Replicated(Vec<Waiter>),
    /// A backup was dropped from the table before acknowledging these: they count as
    /// replicated, but only under a lease (without one, this server may have lost
    /// the region, and its copy may be the only one holding them).
    Released(Vec<Waiter>),
    /// Held responses whose writes can never be acknowledged: their connections close.
    ReplicationFailed(Vec<Waiter>),
    /// The control pool's reply for one of this worker's connections.
    ControlReply {
        conn: usize,
        serial: u64,
        frame: Vec<u8>,
    },
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

/// A response held on a worker's connection until backups acknowledge its writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiter {
    pub worker: usize,
    pub conn: usize,
    pub serial: u64,
    pub resp: u64,
}

/// Every worker's inbox, set once all workers exist: what the cluster side and the
/// acceptor need of the workers, and nothing else.
#[derive(Default)]
pub struct Mailboxes(OnceLock<Vec<WorkerInbox>>);

impl Mailboxes {
    /// Installs the inboxes (once; a second call is ignored).
    pub fn set(&self, inboxes: Vec<WorkerInbox>) {
        let _ = self.0.set(inboxes);
    }

    /// The inboxes, or none before the workers exist.
    pub fn all(&self) -> &[WorkerInbox] {
        self.0.get().map_or(&[], Vec::as_slice)
    }

    /// Posts `m` to worker `worker`; false if there is no such worker (yet).
    pub fn post(&self, worker: usize, m: WorkerMsg) -> bool {
        match self.all().get(worker) {
            Some(inbox) => {
                inbox.send(m);
                true
            }
            None => false,
        }
    }

    /// Posts each worker its own waiters, as one message built by `msg`.
    pub fn post_waiters(&self, waiters: Vec<Waiter>, msg: fn(Vec<Waiter>) -> WorkerMsg) {
        let inboxes = self.all();
        if waiters.is_empty() || inboxes.is_empty() {
            return;
        }
        let mut by_worker: Vec<Vec<Waiter>> = vec![Vec::new(); inboxes.len()];
        for w in waiters {
            if let Some(v) = by_worker.get_mut(w.worker) {
                v.push(w);
            }
        }
        for (inbox, v) in inboxes.iter().zip(by_worker) {
            if !v.is_empty() {
                inbox.send(msg(v));
            }
        }
    }
}
