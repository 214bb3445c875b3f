//! A network lab on one machine: every host (manager, each server, each client) in a
//! network namespace of its own, joined by a veth pair to a bridge that lives in a
//! switch namespace of its own. The host's own interfaces, routes and firewall are
//! never touched, and every address lies in 198.18.0.0/24 (the benchmarking range,
//! RFC 2544) inside the lab's namespaces, so nothing the lab sends can leave it.
//!
//! Faults are made in the switch, where neither end sees them as anything but
//! silence: [`Lab::cut`] drops one direction between two hosts (an nftables bridge
//! filter), [`Lab::vanish`] drops everything to and from a host (no RST, no FIN), and
//! [`Lab::heal`] lifts them. [`Lab::shape`] limits a host's link with `tbf`.
//! [`Lab::delay`] delays every frame to and from a host with a delay line of the
//! lab's own ([`delay`]: `netem` is missing on these kernels); the lab reports its
//! own round trip ([`Lab::rtt`]) so results can be stated as ratios on the same lab.
//!
//! It needs root, `ip` (iproute2) and `nft` (nftables); [`Lab::check`] says which is
//! missing. Namespaces are named `fclab-<pid>-<n>-<host>`: a lab removes its own
//! when dropped, and [`Lab::create`] first removes those of processes that no longer
//! run (a crashed test).

pub mod delay;
mod netns;

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::TestkitError;

pub use netns::enter;

const PREFIX: &str = "fclab-";
/// The switch's nftables table and chain.
const TABLE: &str = "lab";
const CHAIN: &str = "faults";

static NEXT_LAB: AtomicU32 = AtomicU32::new(0);

/// One host of the lab: its namespace and address.
#[derive(Debug, Clone)]
pub struct Host {
    pub name: String,
    pub netns: String,
    pub ip: Ipv4Addr,
    /// The veth end in the switch (the host's port).
    port: String,
}

/// A fault in force at the switch.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// Packets from the first host to the second are dropped.
    Cut(String, String),
    /// Every packet to or from the host is dropped.
    Vanish(String),
}

/// A running lab; dropping it removes its namespaces.
pub struct Lab {
    run: String,
    switch: String,
    hosts: Mutex<Vec<Host>>,
    faults: Mutex<BTreeSet<Fault>>,
    /// Delay lines, by host name.
    lines: Mutex<HashMap<String, delay::Line>>,
}

impl Lab {
    /// Whether a lab can run here: root, `ip` and `nft`. The error says what is
    /// missing, for tests to print when they skip.
    pub fn check() -> Result<(), TestkitError> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err(TestkitError::LabUnavailable(
                "network namespaces need root (run the tests as root, as CI does)".into(),
            ));
        }
        for (tool, pkg) in [("ip", "iproute2"), ("nft", "nftables")] {
            let found = Command::new(tool)
                .arg("-V")
                .output()
                .is_ok_and(|o| o.status.success());
            if !found {
                return Err(TestkitError::LabUnavailable(format!(
                    "`{tool}` is missing (apt-get install -y {pkg}; scripts/env.sh does it as root)"
                )));
            }
        }
        Ok(())
    }

    /// A lab with a switch and the named hosts (more can be added later).
    pub fn create(hosts: &[&str]) -> Result<Self, TestkitError> {
        Self::check()?;
        remove_stale();
        let run = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            NEXT_LAB.fetch_add(1, Ordering::Relaxed)
        );
        let switch = format!("{run}-sw");
        let lab = Self {
            run,
            switch,
            hosts: Mutex::new(Vec::new()),
            faults: Mutex::new(BTreeSet::new()),
            lines: Mutex::new(HashMap::new()),
        };
        sh(&["ip", "netns", "add", &lab.switch])?;
        lab.ip_in(&lab.switch, &["link", "set", "lo", "up"])?;
        lab.ip_in(&lab.switch, &["link", "add", "br0", "type", "bridge"])?;
        lab.ip_in(&lab.switch, &["link", "set", "br0", "up"])?;
        let table = format!(
            "add table bridge {TABLE}\n\
             add chain bridge {TABLE} {CHAIN} {{ type filter hook forward priority 0; policy accept; }}\n"
        );
        lab.nft(&table)?;
        for h in hosts {
            lab.add_host(h)?;
        }
        Ok(lab)
    }

    /// Adds a host: a namespace with loopback and one link to the switch.
    pub fn add_host(&self, name: &str) -> Result<Host, TestkitError> {
        let mut hosts = self.hosts.lock();
        if let Some(h) = hosts.iter().find(|h| h.name == name) {
            return Ok(h.clone());
        }
        let n = hosts.len();
        if n >= 250 {
            return Err(TestkitError::Other("a lab holds at most 250 hosts".into()));
        }
        let host = Host {
            name: name.to_owned(),
            netns: format!("{}-{name}", self.run),
            ip: Ipv4Addr::new(198, 18, 0, (n + 1) as u8),
            port: format!("p{n}"),
        };
        sh(&["ip", "netns", "add", &host.netns])?;
        let ns = host.netns.as_str();
        self.ip_in(ns, &["link", "set", "lo", "up"])?;
        self.ip_in(
            ns,
            &[
                "link",
                "add",
                "eth0",
                "type",
                "veth",
                "peer",
                "name",
                &host.port,
                "netns",
                &self.switch,
            ],
        )?;
        self.ip_in(
            ns,
            &["addr", "add", &format!("{}/24", host.ip), "dev", "eth0"],
        )?;
        self.ip_in(ns, &["link", "set", "eth0", "up"])?;
        self.ip_in(&self.switch, &["link", "set", &host.port, "master", "br0"])?;
        self.ip_in(&self.switch, &["link", "set", &host.port, "up"])?;
        hosts.push(host.clone());
        Ok(host)
    }

    pub fn host(&self, name: &str) -> Result<Host, TestkitError> {
        self.hosts
            .lock()
            .iter()
            .find(|h| h.name == name)
            .cloned()
            .ok_or_else(|| TestkitError::Other(format!("the lab has no host '{name}'")))
    }

    pub fn hosts(&self) -> Vec<Host> {
        self.hosts.lock().clone()
    }

    /// A command that runs `program` on host `name` (`ip netns exec`, which execs it:
    /// the child's pid is the program's, so signals reach it).
    pub fn command(&self, name: &str, program: &std::path::Path) -> Result<Command, TestkitError> {
        let h = self.host(name)?;
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &h.netns]).arg(program);
        Ok(c)
    }

    /// Runs `f` on a new thread inside host `name`'s namespace and returns what it
    /// returns (a client made there reaches the lab's addresses).
    pub fn run_on<T: Send + 'static>(
        &self,
        name: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, TestkitError> {
        let host = self.add_host(name)?;
        std::thread::Builder::new()
            .name(format!("lab-{name}"))
            .spawn(move || -> Result<T, TestkitError> {
                enter(&host)?;
                Ok(f())
            })?
            .join()
            // The thread's panic carries the test's own assertion: raise it here.
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    }

    /// Drops every packet from host `from` to host `to` (one way).
    pub fn cut(&self, from: &str, to: &str) -> Result<(), TestkitError> {
        self.host(from)?;
        self.host(to)?;
        self.faults
            .lock()
            .insert(Fault::Cut(from.to_owned(), to.to_owned()));
        self.apply()
    }

    /// Cuts both ways between `a` and `b`.
    pub fn partition(&self, a: &str, b: &str) -> Result<(), TestkitError> {
        self.host(a)?;
        self.host(b)?;
        {
            let mut f = self.faults.lock();
            f.insert(Fault::Cut(a.to_owned(), b.to_owned()));
            f.insert(Fault::Cut(b.to_owned(), a.to_owned()));
        }
        self.apply()
    }

    /// The host vanishes: nothing reaches it and nothing it sends arrives. Its peers
    /// see silence, never a reset.
    pub fn vanish(&self, name: &str) -> Result<(), TestkitError> {
        self.host(name)?;
        self.faults.lock().insert(Fault::Vanish(name.to_owned()));
        self.apply()
    }

    /// Lifts every cut and vanish.
    pub fn heal(&self) -> Result<(), TestkitError> {
        self.faults.lock().clear();
        self.apply()
    }

    /// Lifts the faults that involve host `name`.
    pub fn heal_host(&self, name: &str) -> Result<(), TestkitError> {
        self.faults.lock().retain(|f| match f {
            Fault::Cut(a, b) => a != name && b != name,
            Fault::Vanish(h) => h != name,
        });
        self.apply()
    }

    /// Faults in force, as text (for logs and reports).
    pub fn faults(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .faults
            .lock()
            .iter()
            .map(|f| match f {
                Fault::Cut(a, b) => format!("{a} -/-> {b}"),
                Fault::Vanish(h) => format!("{h} vanished"),
            })
            .collect();
        for (h, l) in self.lines.lock().iter() {
            let d = l.settings.delay();
            if !d.is_zero() {
                v.push(format!("{h} delayed {d:?} each way"));
            }
        }
        v
    }

    /// Limits host `name`'s link to `mbit` Mbit/s each way (`tbf` on both veth ends).
    pub fn shape(&self, name: &str, mbit: u32) -> Result<(), TestkitError> {
        let h = self.host(name)?;
        let rate = format!("{mbit}mbit");
        // A burst of at least one 64 KiB GSO segment, and 1 ms of the rate.
        let burst = format!("{}", (u64::from(mbit) * 1_000_000 / 8 / 1000).max(65_536));
        for (ns, dev) in [(h.netns.as_str(), "eth0"), (self.switch.as_str(), &h.port)] {
            self.tc_in(
                ns,
                &[
                    "qdisc", "replace", "dev", dev, "root", "tbf", "rate", &rate, "burst", &burst,
                    "latency", "20ms",
                ],
            )?;
        }
        Ok(())
    }

    /// Holds every frame to and from host `name` for `each_way` plus up to `jitter`
    /// (uniform, never reordering), in both directions: a round trip between it and an
    /// undelayed host grows by at least `2 × each_way`, between two delayed hosts by
    /// the sum of both. The first call puts a delay line between the host's port and
    /// the bridge (see [`delay`]); later calls change it in place; 0 leaves the line
    /// in, costing only its own relaying (measure it with [`rtt`](Self::rtt)).
    pub fn delay(
        &self,
        name: &str,
        each_way: Duration,
        jitter: Duration,
    ) -> Result<(), TestkitError> {
        let h = self.host(name)?;
        let mut lines = self.lines.lock();
        if !lines.contains_key(name) {
            let (relay, bridged) = (format!("{}r", h.port), format!("{}b", h.port));
            let sw = self.switch.as_str();
            self.ip_in(sw, &["link", "set", &h.port, "nomaster"])?;
            self.ip_in(
                sw,
                &[
                    "link", "add", &relay, "type", "veth", "peer", "name", &bridged,
                ],
            )?;
            self.ip_in(sw, &["link", "set", &bridged, "master", "br0"])?;
            for dev in [&relay, &bridged] {
                self.ip_in(sw, &["link", "set", dev, "up"])?;
            }
            let line = delay::Line::start(sw, &h.port, &relay)?;
            lines.insert(name.to_owned(), line);
        }
        if let Some(l) = lines.get(name) {
            l.settings.set(each_way, jitter);
        }
        Ok(())
    }

    /// Frames relayed and dropped (line full) by host `name`'s delay line.
    pub fn delay_counts(&self, name: &str) -> Option<(u64, u64)> {
        let lines = self.lines.lock();
        let s = &lines.get(name)?.settings;
        Some((
            s.frames.load(Ordering::Relaxed),
            s.dropped.load(Ordering::Relaxed),
        ))
    }

    /// Round trip between two hosts over the switch: the median of `n` TCP echo
    /// exchanges of one byte (the lab's own cost, to report beside its results).
    pub fn rtt(&self, from: &str, to: &str, n: usize) -> Result<Duration, TestkitError> {
        netns::tcp_rtt(self, &self.host(from)?, &self.host(to)?, n)
    }

    /// Rebuilds the switch's filter from the faults in force, in one nft transaction.
    fn apply(&self) -> Result<(), TestkitError> {
        let faults = self.faults.lock().clone();
        let hosts = self.hosts.lock().clone();
        let ip = |n: &str| hosts.iter().find(|h| h.name == n).map(|h| h.ip);
        let mut script = format!("flush chain bridge {TABLE} {CHAIN}\n");
        for f in &faults {
            match f {
                Fault::Cut(a, b) => {
                    if let (Some(a), Some(b)) = (ip(a), ip(b)) {
                        script += &format!(
                            "add rule bridge {TABLE} {CHAIN} ip saddr {a} ip daddr {b} drop\n"
                        );
                    }
                }
                Fault::Vanish(h) => {
                    if let Some(x) = ip(h) {
                        script += &format!("add rule bridge {TABLE} {CHAIN} ip saddr {x} drop\n");
                        script += &format!("add rule bridge {TABLE} {CHAIN} ip daddr {x} drop\n");
                    }
                }
            }
        }
        self.nft(&script)
    }

    fn nft(&self, script: &str) -> Result<(), TestkitError> {
        use std::io::Write;
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.switch, "nft", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(script.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(TestkitError::Lab {
                command: format!("nft -f - <<{script}"),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(())
    }

    fn ip_in(&self, ns: &str, args: &[&str]) -> Result<(), TestkitError> {
        let mut a = vec!["ip", "-n", ns];
        a.extend_from_slice(args);
        sh(&a)
    }

    fn tc_in(&self, ns: &str, args: &[&str]) -> Result<(), TestkitError> {
        let mut a = vec!["ip", "netns", "exec", ns, "tc"];
        a.extend_from_slice(args);
        sh(&a)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Lines first: their threads hold sockets on the switch's interfaces.
        self.lines.lock().clear();
        for h in self.hosts.lock().iter() {
            let _ = sh(&["ip", "netns", "del", &h.netns]);
        }
        let _ = sh(&["ip", "netns", "del", &self.switch]);
    }
}

/// Runs a command, turning a failure into an error carrying its stderr.
fn sh(args: &[&str]) -> Result<(), TestkitError> {
    let out = Command::new(args[0]).args(&args[1..]).output()?;
    if !out.status.success() {
        return Err(TestkitError::Lab {
            command: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(())
}

/// Removes the namespaces of labs whose process no longer runs.
fn remove_stale() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let gone = pid.is_some_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists());
        if gone {
            tracing::info!(netns = %name, "removing a namespace left by a lab that crashed");
            let _ = sh(&["ip", "netns", "del", &name]);
        }
    }
}

/// Waits until `f` holds or `timeout` passes; true if it held.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
