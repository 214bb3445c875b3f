use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use farcache_client::{Client, ClientConfig, TlsConnector};
use farcache_proto::ClusterSecret;

use std::sync::Arc;

use crate::etcd::{EtcdCluster, free_port};
use crate::{ClusterOptions, Lab, TestkitError, wait_for_alive};

/// Manager and servers as child processes of the `farcache` binary, sharing a cluster
/// secret written to a key file in the cluster's directory.
pub struct ProcessCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    opts: ClusterOptions,
    secret: ClusterSecret,
    /// The self-signed certificate and key, when the cluster serves TLS.
    tls_files: Option<(PathBuf, PathBuf)>,
    /// One, or several on etcd (index 0 is started first and leads at the start).
    managers: Vec<Option<Child>>,
    /// Where each manager listens (fixed ports with several: a standby binds only
    /// once it leads, and servers and clients know the whole list beforehand).
    manager_listens: Vec<String>,
    etcd: Option<EtcdCluster>,
    /// What servers and clients are given: the address, or the comma-separated list.
    manager_addr: String,
    manager_tls_addr: Option<String>,
    servers: Vec<Option<Child>>,
    server_addrs: Vec<String>,
    /// Extra arguments of each server beyond `opts.server_args` (see `add_server`).
    server_extra: Vec<Vec<String>>,
    /// Per server: variables of `ClusterOptions::server_env` it runs without.
    server_env_off: Vec<Vec<String>>,
    /// With a lab, manager `i` runs on host [`Self::manager_host`] and server `i` on
    /// `s{i}`.
    lab: Option<Arc<Lab>>,
}

/// The addresses a process wrote once listening: its address, then its TLS address
/// if it serves TLS.
fn read_addr_file(
    path: &Path,
    child: &mut Child,
    timeout: Duration,
) -> Result<(String, Option<String>), TestkitError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            let mut it = s.split_whitespace().map(str::to_owned);
            let addr = it.next().unwrap_or_default();
            return Ok((addr, it.next()));
        }
        if let Some(status) = child.try_wait()? {
            return Err(TestkitError::Other(format!(
                "process exited early with {status}"
            )));
        }
        if Instant::now() > deadline {
            return Err(TestkitError::Timeout(format!(
                "no address in {}",
                path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl ProcessCluster {
    /// Starts `farcache manager` and `opts.servers` × `farcache server` from `bin`.
    pub fn start(bin: impl Into<PathBuf>, opts: &ClusterOptions) -> Result<Self, TestkitError> {
        Self::start_with(bin.into(), opts, None)
    }

    /// Starts the cluster in `lab`: manager `i` on lab host
    /// [`manager_host(i)`](Self::manager_host) (several share an etcd whose members run
    /// on hosts `etcd{j}`), server `i` on host `s{i}` (hosts are added as needed). The calling thread must be inside a
    /// lab host ([`Lab::run_on`]): it waits for the servers through a client.
    pub fn start_in_lab(
        bin: impl Into<PathBuf>,
        opts: &ClusterOptions,
        lab: Arc<Lab>,
    ) -> Result<Self, TestkitError> {
        if opts.tls {
            return Err(TestkitError::Other(
                "TLS clusters in the lab are not supported yet (the certificate names 127.0.0.1)"
                    .into(),
            ));
        }
        Self::start_with(bin.into(), opts, Some(lab))
    }

    fn start_with(
        bin: PathBuf,
        opts: &ClusterOptions,
        lab: Option<Arc<Lab>>,
    ) -> Result<Self, TestkitError> {
        let dir = tempfile::tempdir()?;
        let several = opts.managers > 1;
        let manager_listens: Vec<String> = match (&lab, several) {
            // Each manager on a host of its own: a fixed port there.
            (Some(lab), true) => (0..opts.managers)
                .map(|i| Ok(format!("{}:7400", lab.add_host(&Self::manager_host(i))?.ip)))
                .collect::<Result<_, TestkitError>>()?,
            (Some(lab), false) => vec![format!("{}:0", lab.add_host("manager")?.ip)],
            (None, true) => (0..opts.managers)
                .map(|_| Ok(format!("127.0.0.1:{}", free_port()?)))
                .collect::<Result<_, TestkitError>>()?,
            (None, false) => vec!["127.0.0.1:0".into()],
        };
        let etcd = match (&lab, several) {
            (_, false) => None,
            (Some(lab), true) => Some(EtcdCluster::start_in_lab(dir.path(), 3, lab.clone())?),
            (None, true) => Some(EtcdCluster::start(dir.path(), 3)?),
        };
        let manager_addr = manager_listens.join(",");
        let secret = ClusterSecret::create(&dir.path().join("cluster.secret"))
            .map_err(|e| TestkitError::Other(e.to_string()))?;
        let tls_files = if opts.tls {
            let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
            Some(
                farcache_net::tls::ensure_self_signed(dir.path(), &names)
                    .map_err(|e| TestkitError::Other(e.to_string()))?,
            )
        } else {
            None
        };
        let mut c = Self {
            bin,
            dir,
            opts: opts.clone(),
            secret,
            tls_files,
            managers: Vec::new(),
            manager_listens,
            etcd,
            manager_addr,
            manager_tls_addr: None,
            servers: Vec::new(),
            server_addrs: Vec::new(),
            server_extra: Vec::new(),
            server_env_off: Vec::new(),
            lab,
        };
        c.managers.resize_with(opts.managers.max(1), || None);
        c.start_manager(0, true)?;
        for i in 1..c.managers.len() {
            c.start_manager(i, false)?;
        }
        for i in 0..opts.servers {
            c.start_server(i)?;
        }
        wait_for_alive(&c.client()?, opts.servers, Duration::from_secs(20))?;
        Ok(c)
    }

    /// The lab, when the cluster runs in one.
    pub fn lab(&self) -> Option<&Arc<Lab>> {
        self.lab.as_ref()
    }

    /// The lab host manager `i` runs on (etcd member `j` runs on `etcd{j}`).
    pub fn manager_host(i: usize) -> String {
        match i {
            0 => "manager".into(),
            _ => format!("manager{i}"),
        }
    }

    /// The lab host server `i` runs on.
    pub fn server_host(i: usize) -> String {
        format!("s{i}")
    }

    /// A command running the `farcache` binary on lab host `host` (here, without a lab).
    fn command_on(&self, host: &str) -> Result<Command, TestkitError> {
        let mut cmd = match &self.lab {
            Some(lab) => {
                lab.add_host(host)?;
                lab.command(host, &self.bin)?
            }
            None => Command::new(&self.bin),
        };
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        if std::env::var_os("FARCACHE_TEST_LOGS").is_none() {
            cmd.stderr(Stdio::null());
        }
        Ok(cmd)
    }

    /// The key file every process of the cluster reads.
    pub fn secret_path(&self) -> PathBuf {
        self.dir.path().join("cluster.secret")
    }

    pub fn secret(&self) -> &ClusterSecret {
        &self.secret
    }

    /// The certificate clients trust, when the cluster serves TLS.
    pub fn tls_cert(&self) -> Option<&Path> {
        self.tls_files.as_ref().map(|(c, _)| c.as_path())
    }

    fn tls_args(&self, cmd: &mut Command) {
        if let Some((cert, key)) = &self.tls_files {
            cmd.arg("--tls-listen")
                .arg("127.0.0.1:0")
                .arg("--tls-cert")
                .arg(cert)
                .arg("--tls-key")
                .arg(key);
        }
    }

    /// Starts manager `i`. The only manager is waited for until it listens, and so is
    /// one of several when `wait_lead` (no other leads); otherwise it may stand by.
    fn start_manager(&mut self, i: usize, wait_lead: bool) -> Result<(), TestkitError> {
        let (addr_file, data_dir) = if self.etcd.is_some() {
            (
                self.dir.path().join(format!("manager{i}.addr")),
                self.dir.path().join(format!("manager{i}")),
            )
        } else {
            (
                self.dir.path().join("manager.addr"),
                self.dir.path().join("manager"),
            )
        };
        let _ = std::fs::remove_file(&addr_file);
        let mut cmd = self.command_on(&Self::manager_host(i))?;
        cmd.arg("manager");
        for (k, v) in &self.opts.manager_env {
            cmd.env(k, v);
        }
        self.tls_args(&mut cmd);
        if let Some(etcd) = &self.etcd {
            cmd.arg("--etcd")
                .arg(etcd.endpoints())
                .arg("--etcd-lease-secs")
                .arg("1");
        }
        let mut child = cmd
            .arg("--secret-file")
            .arg(self.secret_path())
            .arg("--listen")
            .arg(&self.manager_listens[i])
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--region-size")
            .arg(self.opts.region_size.to_string())
            .arg("--heartbeat-ms")
            .arg(self.opts.heartbeat_interval.as_millis().to_string())
            .arg("--dead-after-ms")
            .arg(self.opts.heartbeat_timeout.as_millis().to_string())
            .arg("--addr-file")
            .arg(&addr_file)
            .args(&self.opts.manager_args)
            .spawn()?;
        if self.etcd.is_none() {
            let (addr, tls) = read_addr_file(&addr_file, &mut child, Duration::from_secs(20))?;
            // A restart binds the same address again.
            self.manager_listens[i].clone_from(&addr);
            self.manager_addr = addr;
            self.manager_tls_addr = tls;
        } else if wait_lead {
            read_addr_file(&addr_file, &mut child, Duration::from_secs(20))?;
        }
        self.managers[i] = Some(child);
        Ok(())
    }

    fn start_server(&mut self, i: usize) -> Result<(), TestkitError> {
        let addr_file = self.dir.path().join(format!("server{i}.addr"));
        let _ = std::fs::remove_file(&addr_file);
        let listen = self
            .server_addrs
            .get(i)
            .cloned()
            .unwrap_or_else(|| self.fresh_server_listen(i));
        let mut cmd = self.command_on(&Self::server_host(i))?;
        cmd.arg("server");
        self.tls_args(&mut cmd);
        if !self.opts.peer_batching {
            cmd.arg("--no-peer-batching");
        }
        cmd.args(&self.opts.server_args);
        if let Some(extra) = self.server_extra.get(i) {
            cmd.args(extra);
        }
        // Each server keeps its id in a directory of its own: a restart rejoins as
        // the same server.
        cmd.arg("--data-dir")
            .arg(self.dir.path().join(format!("server{i}")));
        let off = self.server_env_off.get(i);
        for (k, v) in &self.opts.server_env {
            if !off.is_some_and(|o| o.contains(k)) {
                cmd.env(k, v);
            }
        }
        // Extra arguments may name the managers themselves.
        let own_manager = self
            .server_extra
            .get(i)
            .is_some_and(|e| e.iter().any(|a| a == "--manager"));
        if !own_manager {
            cmd.arg("--manager").arg(&self.manager_addr);
        }
        let mut child = cmd
            .arg("--secret-file")
            .arg(self.secret_path())
            .arg("--listen")
            .arg(listen)
            .arg("--memory")
            .arg(self.opts.server_memory.to_string())
            .arg("--threads")
            .arg(self.opts.server_threads.to_string())
            .arg("--addr-file")
            .arg(&addr_file)
            .spawn()?;
        let (addr, _) = read_addr_file(&addr_file, &mut child, Duration::from_secs(20))?;
        if i < self.servers.len() {
            self.servers[i] = Some(child);
            self.server_addrs[i] = addr;
        } else {
            self.servers.push(Some(child));
            self.server_addrs.push(addr);
        }
        Ok(())
    }

    /// Where a new server `i` listens: a free port on its lab host, else loopback.
    fn fresh_server_listen(&self, i: usize) -> String {
        match &self.lab {
            Some(lab) => lab
                .add_host(&Self::server_host(i))
                .map(|h| format!("{}:0", h.ip))
                .unwrap_or_else(|_| "127.0.0.1:0".into()),
            None => "127.0.0.1:0".into(),
        }
    }

    pub fn manager_addr(&self) -> &str {
        &self.manager_addr
    }

    /// Where manager `i` listens (with several, whether it leads or stands by).
    pub fn manager_listen(&self, i: usize) -> &str {
        &self.manager_listens[i]
    }

    pub fn server_addr(&self, i: usize) -> &str {
        &self.server_addrs[i]
    }

    /// The manager's TLS address, when the cluster serves TLS.
    pub fn manager_tls_addr(&self) -> Option<&str> {
        self.manager_tls_addr.as_deref()
    }

    /// A client holding the cluster secret (over TLS if the cluster serves it).
    pub fn client(&self) -> Result<Client, TestkitError> {
        self.client_with(ClientConfig::new(""))
    }

    /// A client with `cfg`'s transport settings and this cluster's manager; it holds
    /// the cluster secret unless `cfg` names a credential, and speaks TLS when the
    /// cluster serves it.
    pub fn client_with(&self, mut cfg: ClientConfig) -> Result<Client, TestkitError> {
        cfg.manager = self.manager_addr.clone();
        if cfg.credential.is_none() {
            cfg = cfg.secret(self.secret.clone());
        }
        if let (Some(cert), Some(tls_addr)) = (self.tls_cert(), &self.manager_tls_addr) {
            let t =
                TlsConnector::from_ca_file(cert).map_err(|e| TestkitError::Other(e.to_string()))?;
            cfg = cfg.tls(t);
            cfg.manager = tls_addr.clone();
        }
        Ok(Client::with_config(cfg)?)
    }

    /// OS process id of server `i`, while it runs (for tests that stop or signal it).
    pub fn server_pid(&self, i: usize) -> Option<u32> {
        self.servers.get(i)?.as_ref().map(Child::id)
    }

    /// OS process id of the (first running) manager.
    pub fn manager_pid(&self) -> Option<u32> {
        self.managers.iter().flatten().next().map(Child::id)
    }

    /// Each manager's OS process id, while it runs.
    pub fn manager_pids(&self) -> Vec<Option<u32>> {
        self.managers
            .iter()
            .map(|m| m.as_ref().map(Child::id))
            .collect()
    }

    /// Number of managers (one, or several on etcd).
    pub fn manager_count(&self) -> usize {
        self.managers.len()
    }

    /// The manager that leads now: the one that answers a status call (a standby
    /// answers with a redirect to the leader, and a manager still starting not at all).
    pub fn leader(&mut self) -> Option<usize> {
        (0..self.managers.len()).find(|&i| {
            let running = self.managers[i]
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
            running && self.answers_status(&self.manager_listens[i])
        })
    }

    /// Whether the manager at `addr` answers a status call itself.
    fn answers_status(&self, addr: &str) -> bool {
        use farcache_proto::blocking::{control_call, handshake};
        use farcache_proto::control::{ControlRequest, ControlResponse};
        let limit = Duration::from_millis(500);
        let Ok(a) = addr.parse() else { return false };
        let Ok(mut s) = std::net::TcpStream::connect_timeout(&a, limit) else {
            return false;
        };
        if s.set_read_timeout(Some(limit)).is_err() {
            return false;
        }
        let cred = farcache_proto::Credential::Cluster(self.secret.clone());
        handshake(&mut s, farcache_proto::Role::Client, 0, "", &cred).is_ok()
            && matches!(
                control_call(&mut s, &ControlRequest::Status),
                Ok(ControlResponse::Status(_))
            )
    }

    /// The etcd the managers share (with several managers).
    pub fn etcd(&self) -> Option<&EtcdCluster> {
        self.etcd.as_ref()
    }

    /// Whether manager process `i` still runs (a standby runs without listening).
    pub fn manager_running(&mut self, i: usize) -> bool {
        self.managers
            .get_mut(i)
            .and_then(Option::as_mut)
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGKILLs manager `i` and reaps it.
    pub fn kill_manager(&mut self, i: usize) -> Result<(), TestkitError> {
        if let Some(mut m) = self.managers.get_mut(i).and_then(Option::take) {
            m.kill()?;
            m.wait()?;
        }
        Ok(())
    }

    /// Starts manager `i` again after it was killed (with several, it stands by
    /// until the leader goes).
    pub fn start_manager_again(&mut self, i: usize) -> Result<(), TestkitError> {
        self.kill_manager(i)?;
        let wait = self.etcd.is_none();
        self.start_manager(i, wait)
    }

    /// SIGKILLs server `i` (no chance to say goodbye) and reaps it.
    pub fn kill_server(&mut self, i: usize) -> Result<(), TestkitError> {
        if let Some(mut c) = self.servers.get_mut(i).and_then(Option::take) {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }

    /// Starts one more server with `extra` arguments (e.g. `--price-class spot`) and
    /// returns its index.
    pub fn add_server(&mut self, extra: &[&str]) -> Result<usize, TestkitError> {
        let i = self.servers.len();
        self.server_extra.resize(i + 1, Vec::new());
        self.server_extra[i] = extra.iter().map(|s| (*s).to_owned()).collect();
        self.start_server(i)?;
        Ok(i)
    }

    /// [`add_server`](Self::add_server) without the named variables of
    /// `ClusterOptions::server_env` (e.g. a server without the others' failpoints).
    pub fn add_server_without_env(
        &mut self,
        extra: &[&str],
        without: &[&str],
    ) -> Result<usize, TestkitError> {
        let i = self.servers.len();
        self.server_env_off.resize(i + 1, Vec::new());
        self.server_env_off[i] = without.iter().map(|s| (*s).to_owned()).collect();
        self.add_server(extra)
    }

    /// Number of servers started so far (running or not).
    pub fn server_count(&self) -> usize {
        self.servers.len()
    }

    /// Whether server `i` runs (started and not yet exited).
    pub fn server_running(&mut self, i: usize) -> bool {
        match self.servers.get_mut(i).and_then(Option::as_mut) {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Sends SIGTERM to server `i`: a reclamation notice (it moves its regions away,
    /// then exits within its `--grace`).
    pub fn terminate_server(&mut self, i: usize) -> Result<(), TestkitError> {
        let Some(c) = self.servers.get_mut(i).and_then(Option::as_mut) else {
            return Ok(());
        };
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status()?;
        if !status.success() {
            return Err(TestkitError::Other(format!("kill -TERM failed: {status}")));
        }
        Ok(())
    }

    /// Waits up to `timeout` for server `i` to exit; true if it did (and is reaped).
    pub fn wait_server_exit(&mut self, i: usize, timeout: Duration) -> Result<bool, TestkitError> {
        let deadline = Instant::now() + timeout;
        loop {
            let Some(c) = self.servers.get_mut(i).and_then(Option::as_mut) else {
                return Ok(true);
            };
            if c.try_wait()?.is_some() {
                self.servers[i] = None;
                return Ok(true);
            }
            if Instant::now() > deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts server `i` again (after it was killed or exited) on its old address and
    /// data directory, so it rejoins under its old id.
    pub fn restart_server(&mut self, i: usize) -> Result<(), TestkitError> {
        self.kill_server(i)?;
        self.start_server(i)
    }

    /// SIGKILLs the manager and starts a new one on the same address and data dir.
    pub fn restart_manager(&mut self) -> Result<(), TestkitError> {
        self.kill_manager(0)?;
        self.start_manager(0, true)
    }
}

impl Drop for ProcessCluster {
    fn drop(&mut self) {
        for c in self
            .servers
            .iter_mut()
            .filter_map(Option::as_mut)
            .chain(self.managers.iter_mut().filter_map(Option::as_mut))
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
