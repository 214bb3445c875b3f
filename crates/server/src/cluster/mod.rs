//! The cluster layer: what makes one server part of many. It answers the manager
//! and other servers, and moves data between servers:
//!
//! - [`control`]: control requests (create, free, tables, stats) on a small pool;
//! - [`manager_link`]: registration, heartbeats and the lease they renew;
//! - [`migration`]: copying regions away live (the source side);
//! - [`replication`]: the owner's links to its backups, and the backup's streams;
//! - [`flow`]: procedures that continue on other servers (FFlow, DFlow, sessions);
//! - [`source_file`]: loading a region's bytes from its backing file;
//! - [`mailbox`]: how these reach a worker thread.
//!
//! [`Shared`] is the state every thread of a server shares. Layering: the runtime
//! layer calls into this layer for cluster frames; this layer uses the
//! engine (`crate::engine`) and never names the runtime: it reaches workers only by
//! posting to their mailboxes.

pub mod control;
pub mod dial;
pub mod flow;
pub mod mailbox;
pub mod manager_link;
pub mod migration;
pub mod replication;
pub mod source_file;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use farcache_proto::{Authority, ServerId};
use parking_lot::{Condvar, Mutex};

use crate::config::ServerConfig;
use crate::engine::store::RegionStore;
use crate::metrics::Metrics;
use mailbox::Mailboxes;

/// State every thread of a server shares.
pub struct Shared {
    pub config: ServerConfig,
    pub advertise: String,
    /// Where clients reach this server over TLS, if it serves TLS.
    pub tls_advertise: Option<String>,
    /// Checks the proofs in peers' Hellos against the cluster secret.
    pub authority: Authority,
    pub store: RegionStore,
    pub metrics: Metrics,
    /// Stored procedures this server can run.
    pub procs: crate::engine::procs::ProcTable,
    pub shutdown: AtomicBool,
    /// Every worker's inbox (set once all workers exist).
    pub mailboxes: Mailboxes,
    /// How this server dials other servers and the manager.
    pub dialer: dial::Dialer,
    /// Every worker's run queue, for idle workers to steal from.
    pub sched: std::sync::OnceLock<crate::cluster::flow::sched::Board>,
    /// The other servers this one may talk to, by advertised address, resolved off
    /// the workers (see [`crate::cluster::control`]): a peer message naming any other address
    /// is refused, and no worker ever waits for DNS.
    pub peers: ArcSwap<HashMap<String, SocketAddr>>,
    /// Control requests go to a small pool, so a slow one (compiling WebAssembly)
    /// never stalls a worker.
    pub control: crate::cluster::control::Queue,
    /// Response bytes queued and not yet sent, over all connections.
    pub output_total: AtomicUsize,
    /// Regions being copied away from this server.
    pub migrations: crate::cluster::migration::Migrations,
    /// Links to the backups of regions this server owns.
    pub replicator: crate::cluster::replication::Replicator,
    /// The manager's lease: clients' ops are served only while it runs.
    pub lease: crate::lease::Lease,
    /// Each owner's newest replication stream (this server as a backup).
    pub streams: crate::cluster::replication::Streams,
    /// Answers of tagged ops, for clients' retries after a failover.
    pub completions: crate::engine::completions::Completions,
    pub(crate) server_id: AtomicU32,
    pub(crate) nap: (Mutex<()>, Condvar),
}

impl Shared {
    pub fn server_id(&self) -> ServerId {
        self.server_id.load(Ordering::Acquire)
    }

    pub fn set_server_id(&self, id: ServerId) {
        self.server_id.store(id, Ordering::Release);
    }

    /// Sleeps up to `d`, returning early on shutdown.
    pub fn sleep(&self, d: Duration) {
        let mut g = self.nap.0.lock();
        if !self.shutdown.load(Ordering::Acquire) {
            self.nap.1.wait_for(&mut g, d);
        }
    }
}
