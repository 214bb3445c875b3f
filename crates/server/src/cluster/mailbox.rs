//! How other threads reach a worker: its inbox and the messages it takes. The
//! cluster side (control pool, replication links) and the acceptor post here; only the
//! worker reads. Posting never blocks: the channel is unbounded and the waker makes
//! the worker's poll return.

use std::sync::Arc;

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
