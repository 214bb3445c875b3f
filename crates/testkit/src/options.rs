use std::time::Duration;

/// Shape of a local cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub servers: usize,
    pub server_memory: u64,
    pub server_threads: usize,
    pub region_size: u64,
    pub heartbeat_interval: Duration,
    /// Left at the default (1 s), an in-process cluster uses
    /// [`IN_PROCESS_HEARTBEAT_TIMEOUT`](crate::IN_PROCESS_HEARTBEAT_TIMEOUT).
    pub heartbeat_timeout: Duration,
    /// Servers batch messages to each other per destination (see `ServerConfig`).
    pub peer_batching: bool,
    /// Manager and servers also serve TLS (a self-signed certificate for 127.0.0.1);
    /// clients from the cluster use it.
    pub tls: bool,
    /// Extra command-line arguments for every server process (`ProcessCluster`).
    pub server_args: Vec<String>,
    /// Extra environment for every server process (`ProcessCluster`).
    pub server_env: Vec<(String, String)>,
    /// Extra command-line arguments for the manager process (`ProcessCluster`).
    pub manager_args: Vec<String>,
    /// Extra environment for every manager process (`ProcessCluster`).
    pub manager_env: Vec<(String, String)>,
    /// Managers (`ProcessCluster`): more than one keep the catalogue on a 3-member
    /// etcd the cluster starts; one leads, the others stand by.
    pub managers: usize,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            servers: 3,
            server_memory: 256 << 20,
            server_threads: 1,
            region_size: 1 << 20,
            heartbeat_interval: Duration::from_millis(100),
            heartbeat_timeout: Duration::from_millis(1000),
            peer_batching: true,
            tls: false,
            server_args: Vec::new(),
            server_env: Vec::new(),
            manager_args: Vec::new(),
            manager_env: Vec::new(),
            managers: 1,
        }
    }
}

impl ClusterOptions {
    pub fn servers(mut self, n: usize) -> Self {
        self.servers = n;
        self
    }

    pub fn server_memory(mut self, m: u64) -> Self {
        self.server_memory = m;
        self
    }

    pub fn server_threads(mut self, s: usize) -> Self {
        self.server_threads = s.max(1);
        self
    }

    pub fn peer_batching(mut self, on: bool) -> Self {
        self.peer_batching = on;
        self
    }

    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }

    /// Adds `args` to every server's command line (`ProcessCluster`).
    pub fn server_args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.server_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Extra arguments for every manager process (`ProcessCluster`).
    pub fn manager_args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.manager_args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Sets `key=value` in every server's environment (`ProcessCluster`).
    pub fn server_env(mut self, key: &str, value: &str) -> Self {
        self.server_env.push((key.into(), value.into()));
        self
    }

    /// Sets `key=value` in every manager's environment (`ProcessCluster`), e.g.
    /// `FAILPOINTS` of a binary built with them.
    pub fn manager_env(mut self, key: &str, value: &str) -> Self {
        self.manager_env.push((key.into(), value.into()));
        self
    }

    /// Several managers on etcd (see [`Self::managers`](ClusterOptions::managers)).
    pub fn managers(mut self, n: usize) -> Self {
        self.managers = n.max(1);
        self
    }

    pub fn region_size(mut self, r: u64) -> Self {
        self.region_size = r;
        self
    }
}
