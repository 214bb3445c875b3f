use std::net::SocketAddr;
use std::time::Duration;

use farcache_client::{Client, ClientConfig};
use farcache_manager::{Manager, ManagerConfig, ManagerHandle};
use farcache_proto::ClusterSecret;
use farcache_server::{Server, ServerConfig, ServerHandle};

use crate::{ClusterOptions, TestkitError, wait_for_alive};

/// Manager and servers as threads of this process, on 127.0.0.1 ephemeral ports.
pub struct LocalCluster {
    servers: Vec<ServerHandle>,
    manager: Option<ManagerHandle>,
    manager_addr: SocketAddr,
    secret: ClusterSecret,
    _dir: tempfile::TempDir,
}

/// The heartbeat timeout of an in-process cluster left at the default. Its servers
/// cannot die alone, so a short timeout only ever declares a server dead whose
/// heartbeat thread a loaded machine starved (a test failed so at load 15).
pub const IN_PROCESS_HEARTBEAT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `asked`, or [`IN_PROCESS_HEARTBEAT_TIMEOUT`] where it is the default.
fn in_process_timeout(asked: std::time::Duration) -> std::time::Duration {
    match asked == ClusterOptions::default().heartbeat_timeout {
        true => IN_PROCESS_HEARTBEAT_TIMEOUT,
        false => asked,
    }
}

impl LocalCluster {
    pub fn start(opts: &ClusterOptions) -> Result<Self, TestkitError> {
        let dir = tempfile::tempdir()?;
        let loopback: SocketAddr = ([127, 0, 0, 1], 0).into();
        let secret = ClusterSecret::generate();
        let mut mc = ManagerConfig::new(loopback, dir.path(), secret.clone());
        mc.region_size = opts.region_size;
        mc.heartbeat_interval = opts.heartbeat_interval;
        mc.heartbeat_timeout = in_process_timeout(opts.heartbeat_timeout);
        let manager = Manager::start(mc)?;
        let manager_addr = manager.addr();
        let mut servers = Vec::new();
        for _ in 0..opts.servers {
            let mut sc = ServerConfig::new(loopback, opts.server_memory, secret.clone());
            sc.threads = opts.server_threads;
            sc.peer_batching = opts.peer_batching;
            sc.manager = Some(manager_addr.to_string());
            servers.push(Server::start(sc)?);
        }
        for s in &servers {
            s.wait_registered(Duration::from_secs(10)).ok_or_else(|| {
                TestkitError::Timeout(format!("server {} did not register", s.addr()))
            })?;
        }
        let c = Self {
            servers,
            manager: Some(manager),
            manager_addr,
            secret,
            _dir: dir,
        };
        wait_for_alive(&c.client()?, opts.servers, Duration::from_secs(10))?;
        Ok(c)
    }

    pub fn manager_addr(&self) -> SocketAddr {
        self.manager_addr
    }

    pub fn servers(&self) -> &[ServerHandle] {
        &self.servers
    }

    /// The cluster's secret (clients from [`LocalCluster::client`] hold it).
    pub fn secret(&self) -> &ClusterSecret {
        &self.secret
    }

    /// A client holding the cluster secret.
    pub fn client(&self) -> Result<Client, TestkitError> {
        self.client_with(ClientConfig::new(""))
    }

    /// A client with `cfg`'s transport settings, this cluster's manager, and the
    /// cluster secret unless `cfg` names a credential.
    pub fn client_with(&self, mut cfg: ClientConfig) -> Result<Client, TestkitError> {
        cfg.manager = self.manager_addr.to_string();
        if cfg.credential.is_none() {
            cfg = cfg.secret(self.secret.clone());
        }
        Ok(Client::with_config(cfg)?)
    }

    /// Stops servers, then the manager.
    pub fn shutdown(mut self) {
        for s in self.servers.drain(..) {
            s.shutdown();
        }
        if let Some(m) = self.manager.take() {
            m.shutdown();
        }
    }
}
