//! The farcache cache server as a library; `farcache server` is a thin `main` over it.
//!
//! Layout, in three layers with one direction of use (runtime → cluster → engine):
//!
//! - `engine`: region memory, the op executor, procedures' memory, dirty tracking,
//!   completion records; no sockets, no other servers;
//! - `cluster`: control requests, the manager link and its [`lease`], live migration,
//!   replication to backups, and procedures that continue on other servers (FFlow,
//!   DFlow); [`cluster::Shared`] is the state every thread shares;
//! - `runtime`: the acceptor, the workers' event loops and connections, and the
//!   Prometheus endpoint.
//!
//! `server` starts and stops them all; it alone sees every layer. [`metrics`] counts
//! ops, [`inproc`] runs batches through the executor without sockets.
//!
//! Every connection proves its role first (cluster secret or cache token, see
//! `farcache_proto::auth`); a cache token reaches its own cache only.

mod cluster;
pub mod config;
mod engine;
pub mod error;
pub mod failpoints;
mod identity;
pub mod lease;
pub mod metrics;
mod runtime;
mod server;

pub use config::ServerConfig;
pub use engine::{completions, inproc};
pub use error::ServerError;
pub use server::{Leave, Server, ServerHandle};
