//! What a connection is to the command handlers: its id, protocol version, access
//! and name. The sockets and the batching live in the `worker` module.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use crate::auth::Access;
use crate::parse::Args;
use crate::reply::Proto;
use crate::shared::Shared;

/// Past this many arguments a multi-key command leaves the event loop.
pub const HEAVY_ARGS: usize = 256;

pub struct Session {
    pub shared: Arc<Shared>,
    pub id: u64,
    pub proto: Proto,
    pub access: Option<Access>,
    pub name: Option<Bytes>,
    /// `QUIT` was read: reply, then close.
    pub quit: bool,
    /// Commands queued since `MULTI` (none: not in a transaction).
    pub tx: Option<Transaction>,
    /// Keys `WATCH`ed, with their stripes' versions then.
    pub watched: Vec<(Bytes, u64)>,
}

/// A transaction being queued.
#[derive(Default)]
pub struct Transaction {
    pub queued: Vec<Args>,
    /// A command was refused while queuing: `EXEC` fails and applies nothing.
    pub aborted: bool,
}

impl Session {
    pub fn new(shared: Arc<Shared>) -> Self {
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let access = shared.auth.initial();
        Self {
            shared,
            id,
            proto: Proto::Resp2,
            access,
            name: None,
            quit: false,
            tx: None,
            watched: Vec::new(),
        }
    }

    /// Whether the connection may run commands: it authenticated, or the front end
    /// needs no `AUTH` (then it starts so). Until then the parser's limits are small.
    pub fn authenticated(&self) -> bool {
        self.access.is_some()
    }

    /// Stands in for this session while a command of its connection runs on the
    /// offload pool (nothing reads it meanwhile: the connection is busy). It keeps
    /// the access, so the auth timeout does not take a busy connection for a stranger.
    pub fn placeholder(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            id: 0,
            proto: self.proto,
            access: self.access,
            name: None,
            quit: false,
            tx: None,
            watched: Vec::new(),
        }
    }

    /// A command that would hold an event loop for long: a multi-key command of more
    /// than [`HEAVY_ARGS`] arguments, a full pass over the keyspace, or a script; in a
    /// transaction (where queuing costs nothing), the `EXEC` that runs such a command or
    /// more than [`HEAVY_ARGS`] commands. It runs on the offload pool.
    pub fn heavy(&self, a: &Args) -> bool {
        match &self.tx {
            Some(tx) => {
                a[0].eq_ignore_ascii_case(b"exec")
                    && !tx.aborted
                    && (tx.queued.len() > HEAVY_ARGS || tx.queued.iter().any(heavy_alone))
            }
            None => heavy_alone(a),
        }
    }

    /// `GET key` or `MGET key...` (not [`Session::heavy`]) from a connection allowed
    /// to read, outside a transaction: batched with other connections'.
    pub fn batched_read(&self, a: &Args) -> bool {
        self.access.is_some()
            && self.tx.is_none()
            && a.len() <= HEAVY_ARGS
            && ((a.len() == 2 && a[0].eq_ignore_ascii_case(b"get"))
                || (a.len() >= 2 && a[0].eq_ignore_ascii_case(b"mget")))
    }

    /// A counter's step, `APPEND` or `SETRANGE` with valid arguments
    /// ([`crate::edit::edit_of`]) from a connection allowed to write,
    /// outside a transaction: batched by key with other connections'.
    pub fn batched_edit(&self, a: &Args) -> bool {
        self.access == Some(Access::ReadWrite)
            && self.tx.is_none()
            && crate::edit::edit_of(a).is_some()
    }

    /// `SET key value` or `MSET key value...` (not [`Session::heavy`]) from a
    /// connection allowed to write, outside a transaction: batched likewise.
    pub fn plain_set(&self, a: &Args) -> bool {
        self.access == Some(Access::ReadWrite)
            && self.tx.is_none()
            && a.len() <= HEAVY_ARGS
            && ((a.len() == 3 && a[0].eq_ignore_ascii_case(b"set"))
                || (a.len() >= 3 && a.len() % 2 == 1 && a[0].eq_ignore_ascii_case(b"mset")))
    }
}

/// [`Session::heavy`] for a command run on its own.
fn heavy_alone(a: &Args) -> bool {
    let name = &a[0];
    let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
    (a.len() > HEAVY_ARGS
        && ["del", "unlink", "exists", "mget", "mset", "msetnx"]
            .into_iter()
            .any(is))
        || ["keys", "dbsize", "flushdb", "flushall"]
            .into_iter()
            .any(is)
        // A script waits on the store once per call it makes, and may run for
        // seconds: on the pool, other connections of its loop are not held up.
        || ["eval", "evalsha", "eval_ro", "evalsha_ro"]
            .into_iter()
            .any(is)
}
