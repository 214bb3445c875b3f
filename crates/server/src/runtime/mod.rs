//! The runtime: threads, sockets and event loops.
//!
//! - [`acceptor`]: takes new connections and hands each to a worker;
//! - [`worker`]: a thread's mio event loop; every request runs to completion on the
//!   thread that read it, and a panicking loop restarts on the same thread;
//! - [`conn`]: one connection's handshake, buffers, limits and frames;
//! - [`metrics_http`]: the Prometheus endpoint;
//! - [`peer_budget`]: FETCH work for other servers metered while clients wait.
//!
//! Layering: the runtime runs the engine (`crate::engine`) and hands cluster frames
//! (control, peers, replication) to the cluster layer (`crate::cluster`); neither of
//! those names the runtime.

pub mod acceptor;
pub mod conn;
pub mod metrics_http;
pub mod peer_budget;
pub mod worker;
