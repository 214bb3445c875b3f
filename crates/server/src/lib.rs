//! The farcache cache server as a library; `farcache server` is a thin `main` over it.
//!
//! Layout: [`store`] holds region memory and the (cache, region) → memory table;
//! [`exec`] runs a request batch against it; [`conn`] is one client connection's
//! buffers and frame handling; [`worker`] is a thread's event loop (each worker owns
//! its connections and runs every request to completion in place); [`acceptor`] hands
//! new connections to workers; [`manager_link`] registers and heartbeats; [`metrics`]
//! counts ops and [`metrics_http`] serves them to Prometheus; [`flow`] carries stored
//! procedures across servers (FFlow hand-offs, DFlow pulls, sessions between servers).

mod acceptor;
pub mod config;
mod conn;
mod control;
pub mod error;
mod exec;
mod flow;
mod manager_link;
pub mod metrics;
mod metrics_http;
mod procs;
mod region;
mod server;
pub mod store;
mod worker;

pub use config::ServerConfig;
pub use error::ServerError;
pub use server::{Server, ServerHandle};
