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
mod lease;
mod listener;
mod liveness;
mod membership;
mod placement;
mod server_link;
mod service;
mod slo;
mod store;

use std::net::{SocketAddr, TcpListener};

use farcache_proto::Authority;
use std::sync::Arc;

use farcache_proto::control::ClusterStatus;

pub use config::{DEFAULT_REGION_SIZE, ManagerConfig, REGION_ALIGN};
pub use error::ManagerError;
pub use slo::SloSettings;

use catalogue::Catalogue;
use listener::{Listener, ListenerConfig};
use liveness::Liveness;
use service::Service;
use store::Store;

/// Entry point; see [`Manager::start`].
pub struct Manager;

impl Manager {
    /// Opens the store, binds the listener and starts serving in background threads.
    pub fn start(config: ManagerConfig) -> Result<ManagerHandle, ManagerError> {
        config.validate()?;
        std::fs::create_dir_all(&config.data_dir)?;
        let (store, loaded) = Store::open(&config.store_path())?;
        let catalogue = Catalogue::from_parts(
            loaded.servers,
            loaded.caches,
            loaded.next_server_id,
            loaded.next_cache_id,
        );
        let status = catalogue.status();
        let planner = slo::Planner::load(&config.slo)?;
        let service = Arc::new(Service::new(&config, catalogue, store, planner));
        let listener = TcpListener::bind(config.listen)?;
        let tls = match (config.tls_listen, config.tls.clone()) {
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
            authority: Authority::new(config.secret.clone()),
            guard: config.guard.clone(),
        };
        let listener = match Listener::spawn(cfg, Arc::clone(&service)) {
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
            servers = status.servers.len(),
            caches = status.caches.len(),
            "manager started"
        );
        Ok(ManagerHandle {
            addr: listener.addr(),
            tls_addr: listener.tls_addr(),
            service,
            running: Some((listener, liveness)),
        })
    }
}

/// A running manager. Dropping it shuts it down, like [`ManagerHandle::shutdown`].
pub struct ManagerHandle {
    addr: SocketAddr,
    tls_addr: Option<SocketAddr>,
    service: Arc<Service>,
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
