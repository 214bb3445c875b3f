use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use farcache_client::{Client, ClientConfig};

use crate::{ClusterOptions, TestkitError, wait_for_alive};

/// Manager and servers as child processes of the `farcache` binary.
pub struct ProcessCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    opts: ClusterOptions,
    manager: Option<Child>,
    manager_addr: String,
    servers: Vec<Option<Child>>,
    server_addrs: Vec<String>,
}

fn read_addr_file(
    path: &Path,
    child: &mut Child,
    timeout: Duration,
) -> Result<String, TestkitError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return Ok(s.trim().to_string());
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
        let mut c = Self {
            bin: bin.into(),
            dir: tempfile::tempdir()?,
            opts: opts.clone(),
            manager: None,
            manager_addr: "127.0.0.1:0".into(),
            servers: Vec::new(),
            server_addrs: Vec::new(),
        };
        c.start_manager()?;
        for i in 0..opts.servers {
            c.start_server(i)?;
        }
        wait_for_alive(&c.client()?, opts.servers, Duration::from_secs(20))?;
        Ok(c)
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        if std::env::var_os("FARCACHE_TEST_LOGS").is_none() {
            cmd.stderr(Stdio::null());
        }
        cmd
    }

    fn start_manager(&mut self) -> Result<(), TestkitError> {
        let addr_file = self.dir.path().join("manager.addr");
        let _ = std::fs::remove_file(&addr_file);
        let mut child = self
            .command()
            .arg("manager")
            .arg("--listen")
            .arg(&self.manager_addr)
            .arg("--data-dir")
            .arg(self.dir.path().join("manager"))
            .arg("--region-size")
            .arg(self.opts.region_size.to_string())
            .arg("--heartbeat-ms")
            .arg(self.opts.heartbeat_interval.as_millis().to_string())
            .arg("--dead-after-ms")
            .arg(self.opts.heartbeat_timeout.as_millis().to_string())
            .arg("--addr-file")
            .arg(&addr_file)
            .spawn()?;
        self.manager_addr = read_addr_file(&addr_file, &mut child, Duration::from_secs(20))?;
        self.manager = Some(child);
        Ok(())
    }

    fn start_server(&mut self, i: usize) -> Result<(), TestkitError> {
        let addr_file = self.dir.path().join(format!("server{i}.addr"));
        let _ = std::fs::remove_file(&addr_file);
        let listen = self
            .server_addrs
            .get(i)
            .cloned()
            .unwrap_or_else(|| "127.0.0.1:0".into());
        let mut cmd = self.command();
        cmd.arg("server");
        if !self.opts.peer_batching {
            cmd.arg("--no-peer-batching");
        }
        let mut child = cmd
            .arg("--listen")
            .arg(listen)
            .arg("--manager")
            .arg(&self.manager_addr)
            .arg("--memory")
            .arg(self.opts.server_memory.to_string())
            .arg("--threads")
            .arg(self.opts.server_threads.to_string())
            .arg("--addr-file")
            .arg(&addr_file)
            .spawn()?;
        let addr = read_addr_file(&addr_file, &mut child, Duration::from_secs(20))?;
        if i < self.servers.len() {
            self.servers[i] = Some(child);
            self.server_addrs[i] = addr;
        } else {
            self.servers.push(Some(child));
            self.server_addrs.push(addr);
        }
        Ok(())
    }

    pub fn manager_addr(&self) -> &str {
        &self.manager_addr
    }

    pub fn server_addr(&self, i: usize) -> &str {
        &self.server_addrs[i]
    }

    pub fn client(&self) -> Result<Client, TestkitError> {
        Ok(Client::connect(&self.manager_addr)?)
    }

    pub fn client_with(&self, cfg: ClientConfig) -> Result<Client, TestkitError> {
        Ok(Client::with_config(ClientConfig {
            manager: self.manager_addr.clone(),
            ..cfg
        })?)
    }

    /// OS process id of server `i`, while it runs (for tests that stop or signal it).
    pub fn server_pid(&self, i: usize) -> Option<u32> {
        self.servers.get(i)?.as_ref().map(Child::id)
    }

    /// OS process id of the manager, while it runs.
    pub fn manager_pid(&self) -> Option<u32> {
        self.manager.as_ref().map(Child::id)
    }

    /// SIGKILLs server `i` (no chance to say goodbye) and reaps it.
    pub fn kill_server(&mut self, i: usize) -> Result<(), TestkitError> {
        if let Some(mut c) = self.servers.get_mut(i).and_then(Option::take) {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }

    /// SIGKILLs the manager and starts a new one on the same address and data dir.
    pub fn restart_manager(&mut self) -> Result<(), TestkitError> {
        if let Some(mut m) = self.manager.take() {
            m.kill()?;
            m.wait()?;
        }
        self.start_manager()
    }
}

impl Drop for ProcessCluster {
    fn drop(&mut self) {
        for c in self
            .servers
            .iter_mut()
            .filter_map(Option::as_mut)
            .chain(self.manager.as_mut())
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
