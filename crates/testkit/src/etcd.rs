//! An etcd cluster for tests: `members` processes of Debian's `etcd` (package
//! `etcd-server`), tuned to notice a dead member and expire leases fast (50 ms
//! heartbeats, 500 ms elections, so leases of one second are kept as asked). On
//! loopback, or in the network lab with member `i` on host `etcd{i}` (so a manager
//! can be cut off from etcd while it still reaches servers and clients).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Lab, TestkitError};

pub struct EtcdCluster {
    members: Vec<Option<Child>>,
    endpoints: Vec<String>,
    /// The lab the members run in (`etcdctl` runs on a lab host too).
    lab: Option<Arc<Lab>>,
}

/// The ports of a member in the lab (each host has a namespace of its own).
const LAB_CLIENT_PORT: u16 = 2379;
const LAB_PEER_PORT: u16 = 2380;

/// A loopback port free right now (another process may take it before it is used;
/// on loopback in tests that has not been seen to happen).
pub fn free_port() -> Result<u16, TestkitError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl EtcdCluster {
    /// Starts `members` etcd processes on loopback with their data under `dir` and
    /// waits until the cluster answers.
    pub fn start(dir: &Path, members: usize) -> Result<Self, TestkitError> {
        let hosts: Vec<(String, u16, u16)> = (0..members.max(1))
            .map(|_| Ok(("127.0.0.1".to_owned(), free_port()?, free_port()?)))
            .collect::<Result<_, TestkitError>>()?;
        Self::start_on(dir, hosts, None)
    }

    /// Starts `members` etcd processes in `lab`, member `i` on host `etcd{i}`.
    pub fn start_in_lab(dir: &Path, members: usize, lab: Arc<Lab>) -> Result<Self, TestkitError> {
        let hosts: Vec<(String, u16, u16)> = (0..members.max(1))
            .map(|i| {
                let h = lab.add_host(&Self::lab_host(i))?;
                Ok((h.ip.to_string(), LAB_CLIENT_PORT, LAB_PEER_PORT))
            })
            .collect::<Result<_, TestkitError>>()?;
        Self::start_on(dir, hosts, Some(lab))
    }

    /// The lab host member `i` runs on.
    pub fn lab_host(i: usize) -> String {
        format!("etcd{i}")
    }

    /// Members at (ip, client port, peer port).
    fn start_on(
        dir: &Path,
        hosts: Vec<(String, u16, u16)>,
        lab: Option<Arc<Lab>>,
    ) -> Result<Self, TestkitError> {
        let bin = which("etcd").ok_or_else(|| {
            TestkitError::Other(
                "etcd is not installed: apt-get install -y etcd-server etcd-client".into(),
            )
        })?;
        let initial: Vec<String> = hosts
            .iter()
            .enumerate()
            .map(|(i, (ip, _, peer))| format!("e{i}=http://{ip}:{peer}"))
            .collect();
        let mut c = Self {
            members: Vec::new(),
            endpoints: hosts
                .iter()
                .map(|(ip, client, _)| format!("http://{ip}:{client}"))
                .collect(),
            lab,
        };
        for (i, (ip, client, peer)) in hosts.iter().enumerate() {
            let mut cmd = match &c.lab {
                Some(lab) => lab.command(&Self::lab_host(i), &bin)?,
                None => Command::new(&bin),
            };
            cmd.arg("--name")
                .arg(format!("e{i}"))
                .arg("--data-dir")
                .arg(dir.join(format!("etcd{i}")))
                .arg("--listen-client-urls")
                .arg(format!("http://{ip}:{client}"))
                .arg("--advertise-client-urls")
                .arg(format!("http://{ip}:{client}"))
                .arg("--listen-peer-urls")
                .arg(format!("http://{ip}:{peer}"))
                .arg("--initial-advertise-peer-urls")
                .arg(format!("http://{ip}:{peer}"))
                .arg("--initial-cluster")
                .arg(initial.join(","))
                .arg("--initial-cluster-state")
                .arg("new")
                .arg("--initial-cluster-token")
                .arg("farcache-test")
                .arg("--heartbeat-interval")
                .arg("50")
                .arg("--election-timeout")
                .arg("500")
                .stdin(Stdio::null())
                .stdout(Stdio::null());
            if std::env::var_os("FARCACHE_TEST_LOGS").is_none() {
                cmd.stderr(Stdio::null());
            }
            c.members.push(Some(cmd.spawn()?));
        }
        c.wait_healthy(Duration::from_secs(30))?;
        Ok(c)
    }

    /// `etcdctl` against the cluster (on the first member's lab host in a lab).
    fn ctl(&self) -> Command {
        let bin = which("etcdctl").unwrap_or_else(|| "etcdctl".into());
        let mut cmd = match &self.lab {
            Some(lab) => lab
                .command(&Self::lab_host(0), &bin)
                .unwrap_or_else(|_| Command::new(&bin)),
            None => Command::new(&bin),
        };
        cmd.env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(self.endpoints());
        cmd
    }

    /// Client URLs, comma-separated (what `farcache manager --etcd` takes).
    pub fn endpoints(&self) -> String {
        self.endpoints.join(",")
    }

    /// Number of members.
    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// The create revision of `key` (0 if absent, `None` if etcd did not answer):
    /// it changes whenever the key is created again, e.g. a new leader's key.
    pub fn create_revision(&self, key: &str) -> Option<i64> {
        let out = self
            .ctl()
            .arg("--command-timeout=2s")
            .args(["get", key, "-w", "fields"])
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())?;
        let text = String::from_utf8_lossy(&out.stdout);
        Some(
            text.lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    (k.trim() == "\"CreateRevision\"").then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0),
        )
    }

    /// Freezes member `i` (SIGSTOP): to the others and to clients it is gone
    /// without a word, as a host that vanished; two of three take the quorum away.
    pub fn pause_member(&self, i: usize) -> Result<(), TestkitError> {
        self.signal(i, libc::SIGSTOP)
    }

    /// Wakes member `i` (SIGCONT).
    pub fn resume_member(&self, i: usize) -> Result<(), TestkitError> {
        self.signal(i, libc::SIGCONT)
    }

    fn signal(&self, i: usize, sig: libc::c_int) -> Result<(), TestkitError> {
        let m = self
            .members
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| TestkitError::Other(format!("no etcd member {i}")))?;
        let pid = libc::pid_t::try_from(m.id())
            .map_err(|_| TestkitError::Other("etcd pid out of range".into()))?;
        // SAFETY: kill(2) on a child this harness started and has not reaped.
        if unsafe { libc::kill(pid, sig) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(())
    }

    fn wait_healthy(&mut self, timeout: Duration) -> Result<(), TestkitError> {
        let deadline = Instant::now() + timeout;
        loop {
            for m in self.members.iter_mut().flatten() {
                if let Some(status) = m.try_wait()? {
                    return Err(TestkitError::Other(format!(
                        "etcd exited early with {status}"
                    )));
                }
            }
            // A write through the cluster: it needs an elected etcd leader.
            let ok = self
                .ctl()
                .arg("--command-timeout=1s")
                .args(["put", "/farcache-test/ready", "1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(TestkitError::Timeout("etcd did not become healthy".into()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in self.members.iter_mut().flatten() {
            // A paused member dies on SIGKILL too; wake it so nothing lingers stopped.
            if let Ok(pid) = libc::pid_t::try_from(m.id()) {
                // SAFETY: kill(2) on a child not reaped yet.
                unsafe { libc::kill(pid, libc::SIGCONT) };
            }
            let _ = m.kill();
            let _ = m.wait();
        }
    }
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}
