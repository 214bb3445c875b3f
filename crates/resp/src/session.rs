//! What a connection is to the command handlers: its id, protocol version, access
//! and name. The sockets and the batching live in [`crate::worker`].

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use crate::auth::Access;
use crate::parse::Args;
use crate::reply::Proto;
use crate::shared::Shared;

pub struct Session {
    pub shared: Arc<Shared>,
    pub id: u64,
    pub proto: Proto,
    pub access: Option<Access>,
    pub name: Option<Bytes>,
    /// `QUIT` was read: reply, then close.
    pub quit: bool,
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
        }
    }

    /// `GET key` or `MGET key...` from a connection allowed to read: batched with
    /// other connections'.
    pub fn batched_read(&self, a: &Args) -> bool {
        self.access.is_some()
            && ((a.len() == 2 && a[0].eq_ignore_ascii_case(b"get"))
                || (a.len() >= 2 && a[0].eq_ignore_ascii_case(b"mget")))
    }

    /// `SET key value` from a connection allowed to write: batched likewise.
    pub fn plain_set(&self, a: &Args) -> bool {
        self.access == Some(Access::ReadWrite) && a.len() == 3 && a[0].eq_ignore_ascii_case(b"set")
    }
}
