use std::net::SocketAddr;
use std::time::Duration;

use farcache_client::{Client, ClientConfig};
use farcache_manager::{Manager, ManagerConfig, ManagerHandle};
use farcache_server::{Server, ServerConfig, ServerHandle};

use crate::{ClusterOptions, TestkitError, wait_for_alive};

/// Manager and servers as threads of this process, on 127.0.0.1 ephemeral ports.
pub struct LocalCluster {
    servers: Vec<ServerHandle>,
    manager: Option<ManagerHandle>,
    manager_addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl LocalCluster {
    pub fn start(opts: &ClusterOptions) -> Result<Self, TestkitError> {
        let dir = tempfile::tempdir()?;
        let loopback: SocketAddr = ([127, 0, 0, 1], 0).into();
        let mut mc = ManagerConfig::new(loopback, dir.path());
        mc.region_size = opts.region_size;
        mc.heartbeat_interval = opts.heartbeat_interval;
        mc.heartbeat_timeout = opts.heartbeat_timeout;
        let manager = Manager::start(mc)?;
        let manager_addr = manager.addr();
        let mut servers = Vec::new();
        for _ in 0..opts.servers {
            let mut sc = ServerConfig::new(loopback, opts.server_memory);
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

    pub fn client(&self) -> Result<Client, TestkitError> {
        Ok(Client::connect(&self.manager_addr.to_string())?)
    }

    pub fn client_with(&self, cfg: ClientConfig) -> Result<Client, TestkitError> {
        Ok(Client::with_config(ClientConfig {
            manager: self.manager_addr.to_string(),
            ..cfg
        })?)
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
