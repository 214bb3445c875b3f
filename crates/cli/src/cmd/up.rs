//! `farcache up`: a manager and N servers on 127.0.0.1 as child processes that start,
//! run and stop together.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use farcache_client::{ClientConfig, ClusterSecret, ServerState};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 3)]
    servers: usize,
    /// Memory per server.
    #[arg(long, default_value = "1GiB")]
    memory: String,
    /// Default region size for new caches.
    #[arg(long, default_value = "64MiB")]
    region_size: String,
    /// Worker threads per server.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Manager port; servers take the following ports.
    #[arg(long, default_value_t = 7400)]
    port: u16,
    /// Holds the catalogue and the cluster's secret key (created on first start).
    #[arg(long, default_value = "farcache-data")]
    data_dir: PathBuf,
    /// Servers may load files under this directory into read-only caches
    /// (`farcache create --from-file`); none without it.
    #[arg(long)]
    load_dir: Option<String>,
    /// The manager answers `farcache create --slo-throughput ...` from this model
    /// (`farcache calibrate` writes one).
    #[arg(long)]
    slo_model: Option<String>,
}

/// How long the manager and every server get to be up.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a child gets to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the children and the signal flag are looked at.
const POLL: Duration = Duration::from_millis(50);

pub fn run(a: Args) -> Result<()> {
    // First: a signal while the cluster starts still stops what started.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("cannot handle SIGTERM / SIGINT")?;
    }
    let server_ports = (1..=a.servers)
        .map(|i| {
            u16::try_from(usize::from(a.port) + i).map_err(|_| {
                anyhow::anyhow!("--port {} leaves no room for {} servers", a.port, a.servers)
            })
        })
        .collect::<Result<Vec<u16>>>()?;

    // Conflicts with another cluster are found before anything starts or is created.
    let lock = if a.data_dir.is_dir() {
        Some(lock_data_dir(&a.data_dir)?)
    } else {
        None
    };
    check_ports_free(a.port, &server_ports)?;
    std::fs::create_dir_all(&a.data_dir)
        .with_context(|| format!("creating --data-dir {}", a.data_dir.display()))?;
    let _lock = match lock {
        Some(l) => l,
        None => lock_data_dir(&a.data_dir)?,
    };

    let exe = std::env::current_exe().context("cannot find the farcache binary")?;
    let manager = format!("127.0.0.1:{}", a.port);
    let secret_path = a.data_dir.join("cluster.secret");
    let secret = ClusterSecret::load_or_create(&secret_path)?;
    let mut cluster = Cluster::default();
    let mut manager_cmd = Command::new(&exe);
    manager_cmd.arg("manager");
    if let Some(m) = &a.slo_model {
        manager_cmd.args(["--slo-model", m]);
    }
    manager_cmd
        .args(["--listen", &manager, "--region-size", &a.region_size])
        .arg("--data-dir")
        .arg(&a.data_dir)
        .arg("--secret-file")
        .arg(&secret_path);
    cluster.spawn(format!("the manager ({manager})"), manager_cmd)?;
    let mut server_addrs = Vec::new();
    for (i, port) in server_ports.iter().enumerate() {
        let listen = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(&exe);
        cmd.args(["server", "--listen", &listen, "--manager", &manager])
            .args(["--memory", &a.memory, "--threads", &a.threads.to_string()])
            // The whole cluster stops together: its regions have nowhere to move.
            .args(["--on-sigterm", "exit"])
            .arg("--secret-file")
            .arg(&secret_path)
            // Each server keeps its id there: a restarted one rejoins as itself.
            .arg("--data-dir")
            .arg(a.data_dir.join(format!("server{i}")))
            .args(
                a.load_dir
                    .iter()
                    .flat_map(|d| ["--load-dir".to_string(), d.clone()]),
            );
        cluster.spawn(format!("server {i} ({listen})"), cmd)?;
        server_addrs.push(listen);
    }

    if !wait_until_up(&mut cluster, &manager, &secret, &server_addrs, &stop)? {
        cluster.stop();
        outln!("farcache stopped before it was up.")?;
        return Ok(());
    }
    let servers = match (server_ports.first(), server_ports.last()) {
        (Some(f), Some(l)) if f == l => format!("1 server on 127.0.0.1:{f}"),
        (Some(f), Some(l)) => format!("{} servers on 127.0.0.1:{f}-{l}", a.servers),
        _ => "no servers".to_string(),
    };
    outln!("\nfarcache is up: manager {manager}, {servers}.")?;
    outln!(
        "  key:     export FARCACHE_SECRET_FILE={}",
        secret_path.display()
    )?;
    outln!("  status:  farcache status --manager {manager}")?;
    outln!(
        "  connect: farcache_client::Client::connect(\"{manager}\")  (reads FARCACHE_SECRET_FILE)"
    )?;
    outln!("  python:  farcache.Client(\"{manager}\")  (reads FARCACHE_SECRET_FILE too)")?;
    outln!(
        "Press Ctrl-C (or kill -TERM {}) to stop the manager and the servers.",
        std::process::id()
    )?;

    while !stop.load(Ordering::Acquire) {
        if let Some((what, status)) = cluster.exited()? {
            if !stop_follows(&stop) {
                cluster.stop();
                bail!(
                    "{what} exited unexpectedly ({status}; its log is above); stopped the \
                     rest of the cluster"
                );
            }
            break;
        }
        std::thread::sleep(POLL);
    }
    cluster.stop();
    outln!(
        "farcache stopped: the manager and {} server(s) exited.",
        a.servers
    )?;
    Ok(())
}

/// Takes `<data_dir>/up.lock`, held while `up` runs (the OS drops it when the process
/// ends, however it ends), and writes this process's id into it.
fn lock_data_dir(data_dir: &Path) -> Result<File> {
    let path = data_dir.join("up.lock");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        // The holder's pid stays readable until the lock is ours.
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match f.try_lock() {
        Ok(()) => {
            f.set_len(0)?;
            writeln!(f, "{}", std::process::id())?;
            Ok(f)
        }
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = f.read_to_string(&mut holder);
            let pid = holder.trim();
            let (who, how) = if pid.is_empty() {
                (String::new(), "Ctrl-C in its terminal".to_string())
            } else {
                (
                    format!(" (pid {pid})"),
                    format!("Ctrl-C in its terminal, or kill {pid}"),
                )
            };
            bail!(
                "another `farcache up`{who} is running on data directory {} (it holds {}); \
                 nothing was started. Stop that one first ({how}), or give this one its own \
                 --data-dir and --port",
                data_dir.display(),
                path.display()
            )
        }
        Err(TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
}

/// Fails unless every port the cluster needs can be bound on 127.0.0.1 right now.
fn check_ports_free(manager: u16, servers: &[u16]) -> Result<()> {
    let last = servers.last().copied().unwrap_or(manager);
    let ports = std::iter::once(("the manager port", manager))
        .chain(servers.iter().map(|p| ("a server port", *p)));
    for (what, port) in ports {
        if let Err(e) = TcpListener::bind(("127.0.0.1", port)) {
            bail!(
                "127.0.0.1:{port} ({what}) is in use ({e}); nothing was started. Another \
                 `farcache up`, or a manager or server it left running, seems to listen \
                 there: stop it, or give this cluster other ports with --port (it needs \
                 {manager}-{last})"
            );
        }
    }
    Ok(())
}

/// Polls until the manager answers and every one of `servers` registered with it.
/// `Ok(false)`: a stop was asked for first.
fn wait_until_up(
    cluster: &mut Cluster,
    manager: &str,
    secret: &ClusterSecret,
    servers: &[String],
    stop: &AtomicBool,
) -> Result<bool> {
    let deadline = Instant::now() + START_TIMEOUT;
    let mut client = None;
    let mut waiting_for = "the manager to answer".to_string();
    loop {
        if stop.load(Ordering::Acquire) {
            return Ok(false);
        }
        if let Some((what, status)) = cluster.exited()? {
            if stop_follows(stop) {
                return Ok(false);
            }
            bail!(
                "{what} exited while the cluster started ({status}; its error is above); \
                 stopped the rest"
            );
        }
        if client.is_none() {
            let cfg = ClientConfig::new(manager).secret(secret.clone());
            match farcache_client::Client::with_config(cfg) {
                Ok(c) => client = Some(c),
                Err(e) => waiting_for = format!("the manager to answer ({e})"),
            }
        }
        if let Some(c) = &client {
            match c.status() {
                Ok(s) => {
                    let alive = servers
                        .iter()
                        .filter(|addr| {
                            s.servers
                                .iter()
                                .any(|v| v.addr == **addr && v.state == ServerState::Alive)
                        })
                        .count();
                    if alive == servers.len() {
                        return Ok(true);
                    }
                    waiting_for = format!("servers: {alive} of {} registered", servers.len());
                }
                Err(e) => waiting_for = format!("the manager's status ({e})"),
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "the cluster was not up within {} s, still waiting for {waiting_for}",
                START_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(POLL);
    }
}

/// A Ctrl-C at the terminal reaches the children too, and one may be seen gone before
/// this process's handler ran: a child's exit is a stop if the signal follows shortly.
fn stop_follows(stop: &AtomicBool) -> bool {
    let until = Instant::now() + Duration::from_millis(200);
    while !stop.load(Ordering::Acquire) {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

struct Member {
    what: String,
    child: Child,
    status: Option<ExitStatus>,
}

impl Member {
    fn poll(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self.child.try_wait()?;
        }
        Ok(self.status)
    }
}

/// The children: the manager first, then the servers. Stopped when dropped.
#[derive(Default)]
struct Cluster {
    members: Vec<Member>,
    stopped: bool,
}

impl Cluster {
    fn spawn(&mut self, what: String, mut cmd: Command) -> Result<()> {
        let child = cmd.spawn().with_context(|| format!("starting {what}"))?;
        self.members.push(Member {
            what,
            child,
            status: None,
        });
        Ok(())
    }

    /// The first child found exited, and how.
    fn exited(&mut self) -> Result<Option<(String, ExitStatus)>> {
        for m in &mut self.members {
            if let Some(st) = m.poll()? {
                return Ok(Some((m.what.clone(), st)));
            }
        }
        Ok(None)
    }

    /// SIGTERM to the servers, then to the manager (so it never sees them vanish one by
    /// one); each group gets STOP_TIMEOUT to exit before it is killed.
    fn stop(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        let split = self.members.len().min(1);
        let (manager, servers) = self.members.split_at_mut(split);
        stop_group(servers);
        stop_group(manager);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

fn stop_group(group: &mut [Member]) {
    for m in group.iter_mut() {
        // A child not yet waited for keeps its pid (at worst as a zombie), so the
        // signal cannot reach another process.
        if matches!(m.poll(), Ok(None)) {
            match libc::pid_t::try_from(m.child.id()) {
                // SAFETY: kill(2) takes plain integers and touches no memory of ours.
                Ok(pid) => unsafe {
                    libc::kill(pid, libc::SIGTERM);
                },
                Err(_) => {
                    let _ = m.child.kill();
                }
            }
        }
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        let mut running = 0;
        for m in group.iter_mut() {
            if !matches!(m.poll(), Ok(Some(_))) {
                running += 1;
            }
        }
        if running == 0 {
            return;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for m in group.iter_mut() {
        if !matches!(m.poll(), Ok(Some(_))) {
            tracing::warn!(
                "{} did not exit within {} s of SIGTERM; killing it",
                m.what,
                STOP_TIMEOUT.as_secs()
            );
            let _ = m.child.kill();
            m.status = m.child.wait().ok();
        }
    }
}
