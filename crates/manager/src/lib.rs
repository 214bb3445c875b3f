//! The farcache manager: registry of cache servers, catalogue of caches, region placement.
//!
//! Servers register and heartbeat; clients create, open, reshape and delete caches. The
//! manager decides which server holds each region, tells the servers (`AllocRegion`,
//! `FreeRegion`, `DropCache`) and persists the catalogue in redb so a restart loses
//! nothing. It is only on the control path: data flows directly between clients and
//! servers.
//!
//! Every connection proves its role in the handshake (see `farcache_proto::auth`);
//! the service checks what each role and credential may ask.
//!
//! ```no_run
//! use farcache_manager::{Manager, ManagerConfig};
//! use farcache_proto::ClusterSecret;
//! let secret = ClusterSecret::load("/etc/farcache/cluster.secret".as_ref())?;
//! let handle = Manager::start(ManagerConfig::new("0.0.0.0:7400".parse()?, "/var/lib/farcache", secret))?;
//! println!("manager on {}", handle.addr());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod catalogue;
mod cluster;
mod config;
mod error;
mod events;
mod failpoints;
mod front;
mod leadership;
mod lease;
mod listener;
mod liveness;
mod membership;
mod placement;
pub mod scale;
mod server_link;
mod service;
mod slo;
mod store;

use std::net::{SocketAddr, TcpListener};

use farcache_proto::Authority;
use std::sync::Arc;

use farcache_proto::control::ClusterStatus;

pub use config::{CatalogueBackend, DEFAULT_REGION_SIZE, ManagerConfig, REGION_ALIGN};
pub use error::ManagerError;
pub use lease::LEASE_SHARE;
pub use slo::SloSettings;
pub use store::etcd::EtcdSettings;

use catalogue::Catalogue;
use front::{LeaderAddr, Standby};
use leadership::Leadership;
use listener::{Handler, Listener, ListenerConfig};
use liveness::Liveness;
use service::Service;
use store::Store;
use store::etcd::EtcdStore;
use store::redb::RedbStore;

/// Entry point; see [`Manager::start`].
pub struct Manager;

impl Manager {
    /// Opens the store, binds the listener and starts serving in background threads.
    ///
    /// On etcd this first waits until this manager leads (another one may for ever):
    /// run it on a thread of its own, or as its own process.
    pub fn start(config: ManagerConfig) -> Result<ManagerHandle, ManagerError> {
        config.validate()?;
        std::fs::create_dir_all(&config.data_dir)?;
        let authority = Authority::new(config.secret.clone());
        let (store, loaded, leadership, listen, tls_listen): (Store, _, _, _, _) =
            match &config.catalogue {
                CatalogueBackend::Redb => {
                    let (s, l) = RedbStore::open(&config.store_path())?;
                    let tls = config.tls_listen;
                    (Box::new(s), l, Leadership::sole(), config.listen, tls)
                }
                CatalogueBackend::Etcd(e) => {
                    // Standing by, it listens already and names the leader to whoever
                    // asks; it frees the addresses just before it serves them itself.
                    let standby = Standby::new();
                    let front = Listener::spawn(
                        ListenerConfig {
                            listener: TcpListener::bind(config.listen)?,
                            tls: match (config.tls_listen, config.tls.clone()) {
                                (Some(at), Some(t)) => Some((TcpListener::bind(at)?, t)),
                                _ => None,
                            },
                            authority: authority.clone(),
                            guard: config.guard.clone(),
                        },
                        standby.clone(),
                    )?;
                    let (at, tls_at) = (front.addr(), front.tls_addr());
                    let me = LeaderAddr::new(at, tls_at).encode();
                    let won = EtcdStore::campaign(e, &me, &|l| standby.set_leader(l));
                    front.stop();
                    let (s, l, lead) = won?;
                    (Box::new(s), l, lead, at, tls_at)
                }
            };
        let mut catalogue = Catalogue::from_parts(
            loaded.servers,
            loaded.caches,
            loaded.next_server_id,
            loaded.next_cache_id,
        );
        // Servers it knows of but has not heard from yet are declared dead if they stay
        // silent a heartbeat timeout from now (longer than any lease a previous
        // manager granted them).
        catalogue.start_clock(std::time::Instant::now());
        let status = catalogue.status();
        let backend = store.name();
        let planner = slo::Planner::load(&config.slo)?;
        let service = Arc::new(Service::new(
            &config,
            catalogue,
            events::Events::from_stored(loaded.events),
            store,
            planner,
            Arc::clone(&leadership),
        ));
        let listener = TcpListener::bind(listen)?;
        let tls = match (tls_listen, config.tls.clone()) {
            (Some(at), Some(t)) => Some((TcpListener::bind(at)?, t)),
            _ => None,
        };
        farcache_net::guard::raise_fd_limit();
        let liveness = Liveness::spawn(Arc::clone(&service), config.heartbeat_timeout)?;
        tracing::info!(
            lease = ?lease::lease_for(config.heartbeat_timeout),
            dead_after = ?config.heartbeat_timeout,
            clock_rate_margin = lease::CLOCK_RATE_MARGIN,
            "servers serve under leases; a silent server is declared dead once its lease has ended"
        );
        let cfg = ListenerConfig {
            listener,
            tls,
            authority,
            guard: config.guard.clone(),
        };
        let listener = match Listener::spawn(cfg, Arc::clone(&service) as Arc<dyn Handler>) {
            Ok(l) => l,
            Err(e) => {
                liveness.stop();
                service.close();
                return Err(e.into());
            }
        };
        tracing::info!(
            addr = %listener.addr(),
            data_dir = %config.data_dir.display(),
            catalogue = backend,
            servers = status.servers.len(),
            caches = status.caches.len(),
            "manager started"
        );
        Ok(ManagerHandle {
            addr: listener.addr(),
            tls_addr: listener.tls_addr(),
            service,
            leadership,
            running: Some((listener, liveness)),
        })
    }
}

/// A running manager. Dropping it shuts it down, like [`ManagerHandle::shutdown`].
pub struct ManagerHandle {
    addr: SocketAddr,
    tls_addr: Option<SocketAddr>,
    service: Arc<Service>,
    leadership: Arc<Leadership>,
    running: Option<(Listener, Liveness)>,
}

impl ManagerHandle {
    /// The bound control address (the real port when the config asked for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bound TLS address, if TLS is on.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_addr
    }

    /// Whether this manager leads (always, on the embedded catalogue).
    pub fn leads(&self) -> bool {
        self.leadership.holds()
    }

    /// Waits up to `timeout` for this manager to lose its leadership; returns why, if
    /// it did. A deposed manager refuses every request (`NotLeader`): shut it down and
    /// start again to stand by.
    pub fn wait_deposed(&self, timeout: std::time::Duration) -> Option<String> {
        self.leadership.wait_deposed(timeout)
    }

    /// Servers and caches, sorted by id (what a `Status` request returns).
    pub fn status(&self) -> ClusterStatus {
        self.service.status()
    }

    /// Stops all threads, closes the listener and every connection, and releases the
    /// store so another manager can open the same directory.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some((listener, liveness)) = self.running.take() else {
            return;
        };
        listener.stop();
        liveness.stop();
        self.service.close();
        tracing::info!(addr = %self.addr, "manager stopped");
    }
}

impl Drop for ManagerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}
