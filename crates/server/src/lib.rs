//! The farcache cache server as a library; `farcache server` is a thin `main` over it.
//!
//! Layout: `store` holds region memory and the (cache, region) → memory table;
//! `exec` runs a request batch against it; `conn` is one connection's handshake,
//! buffers, limits and frame handling; `worker` is a thread's event loop (each worker
//! owns its connections and runs every request to completion in place, and is
//! restarted if it panics); `acceptor` hands new connections to workers; `control`
//! answers control requests on a small pool; `manager_link` registers and heartbeats, renewing the [`lease`] without which
//! no region is served (and obeying a fence: a server declared dead drops its regions);
//! [`metrics`] counts ops and `metrics_http` serves them to Prometheus; `flow`
//! carries stored procedures across servers (FFlow hand-offs, DFlow pulls, sessions
//! between servers). [`inproc`] runs batches through `exec` in this process, without
//! sockets (the benchmark's ceiling).
//!
//! Every connection proves its role first (cluster secret or cache token, see
//! `farcache_proto::auth`); a cache token reaches its own cache only.

mod acceptor;
pub mod completions;
pub mod config;
mod conn;
mod control;
pub mod error;
mod exec;
pub mod failpoints;
mod flow;
mod identity;
pub mod inproc;
pub mod lease;
mod lost;
mod manager_link;
pub mod metrics;
mod metrics_http;
mod migration;
mod procs;
mod region;
mod replication;
mod server;
mod source_file;
mod store;
mod worker;

pub use config::ServerConfig;
pub use error::ServerError;
pub use server::{Leave, Server, ServerHandle};
