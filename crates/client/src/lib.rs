//! The farcache client library.
//!
//! ```no_run
//! # fn main() -> Result<(), farcache_client::ClientError> {
//! // The credential comes from FARCACHE_SECRET_FILE or FARCACHE_TOKEN, or from
//! // `ClientConfig::secret` / `ClientConfig::token`.
//! let client = farcache_client::Client::connect("127.0.0.1:7000")?;
//! let cache = client.create("scratch", 1 << 30)?;
//! cache.write(4096, b"hello")?;
//! assert_eq!(&cache.read(4096, 5)?[..], b"hello");
//! # Ok(()) }
//! ```
//!
//! I/O model: a client has `c` *lanes*; each lane holds one connection to every server
//! it talks to. An application thread always uses the same lane, so its ops reach each
//! server in program order. The calling thread drives its lane's sockets itself while
//! it waits (no hand-off to a background thread, which would add two thread wake-ups
//! to every round trip); futures are driven by a helper thread only while they are
//! pending. Ops are packed into batches of up to `b` ops with at most `q` batches in
//! flight per connection; more ops for a server wait in that connection's backlog and
//! go out as replies make room, so a slow or silent server never blocks a call's ops
//! to other servers. Connections are dialled (TCP, TLS, handshake) on a short-lived
//! thread for the same reason; ops for a server being dialled wait for it. Work a
//! caller leaves behind when no call of its lane is pending (the writes of a ticket
//! dropped unfinished, a frame half written) is finished by the helper thread.
//!
//! Migrations: while a region moves to another server its writes pause for a few
//! milliseconds. Ops answered `paused` wait on the lane (100 µs, doubling to 2 ms) and
//! go out again, routed by the current region table, unseen by the application; one
//! still paused after `ClientConfig::op_timeout` fails with `Status::Paused`. Bytes
//! whose only copy died with a server fail with [`OpError::DataLost`] until they are
//! overwritten or [`Cache::clear_lost`] is called.

mod batch;
mod cache;
mod client;
pub mod config;
mod conn;
pub mod error;
mod idmap;
mod lane;
mod manager_link;
mod op;
mod parts;
mod results;
mod routing;
mod ticket;

pub use batch::Batch;
pub use bytes::Bytes;
pub use cache::Cache;
pub use client::{Client, CreateOptions};
pub use config::ClientConfig;
pub use error::{ClientError, OpError};
pub use farcache_net::TlsConnector;
pub use farcache_proto::control::{
    CacheInfo, CacheTokens, ClusterStatus, LostRegion, MigrationMode, MigrationRecord, ServerInfo,
    ServerState,
};
pub use farcache_proto::{CacheId, CacheToken, ClusterSecret, Rights, ServerId, Status};
pub use results::{BatchResults, OpOutput, OpResult};
pub use ticket::{OpFuture, Ticket};

#[cfg(test)]
mod tests;
