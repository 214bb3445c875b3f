//! `farcache up` with real processes: SIGTERM and a terminal's Ctrl-C stop the manager
//! and the servers and free their ports; a child that dies stops the rest with the
//! reason; a second `up` on the same data directory or ports fails before it starts
//! anything.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{bin, eventually};
use rand::Rng;

/// A debug build on a busy 2-core machine: generous, and only ever waited for by polling.
const UP_WITHIN: Duration = Duration::from_secs(60);
/// `up` gives each group of children 5 s after SIGTERM before it kills them.
const STOPPED_WITHIN: Duration = Duration::from_secs(20);
const SERVERS: u16 = 2;

/// One cluster at a time: the tests pick ports and count processes.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn port_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A base port with `base ..= base + SERVERS` free, below the ephemeral range (so no
/// client connection takes one meanwhile).
fn free_ports() -> u16 {
    let mut rng = rand::thread_rng();
    for _ in 0..200 {
        let base: u16 = rng.gen_range(20_000..32_000);
        if (base..=base + SERVERS).all(port_free) {
            return base;
        }
    }
    panic!("no run of {} free ports found", SERVERS + 1);
}

/// A `farcache up` in a process group of its own, killed with everything it started
/// if the test fails half-way.
struct Up {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    status: Option<ExitStatus>,
}

fn collect(from: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let t = Arc::clone(&text);
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            let mut g = t.lock().unwrap_or_else(|e| e.into_inner());
            g.push_str(&line);
            g.push('\n');
        }
    });
    text
}

impl Up {
    fn start(port: u16, data_dir: &Path) -> Up {
        let mut child = Command::new(bin())
            .args(["up", "--servers", &SERVERS.to_string()])
            .args(["--memory", "64MiB", "--region-size", "1MiB"])
            .args(["--port", &port.to_string()])
            .arg("--data-dir")
            .arg(data_dir)
            .env("FARCACHE_LOG", "warn")
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn farcache up");
        let stdout = collect(child.stdout.take().expect("stdout piped"));
        let stderr = collect(child.stderr.take().expect("stderr piped"));
        Up {
            child,
            stdout,
            stderr,
            status: None,
        }
    }

    fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid fits i32")
    }

    fn stdout(&self) -> String {
        self.stdout
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status
    }

    /// Waits for the "is up" line; fails if `up` exits or takes too long.
    fn wait_up(&mut self) {
        eventually(
            "farcache up is up",
            UP_WITHIN,
            Duration::from_millis(50),
            || {
                if let Some(st) = self.exited() {
                    panic!(
                        "farcache up exited with {st} before it was up\nstdout:\n{}\nstderr:\n{}",
                        self.stdout(),
                        self.stderr()
                    );
                }
                self.stdout().contains("farcache is up").then_some(())
            },
        );
    }

    fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        eventually(
            "farcache up exits",
            limit,
            Duration::from_millis(20),
            || self.exited(),
        )
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child, which is not reaped yet.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0, "kill up");
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        // The group id is up's pid; whatever of it is left goes.
        // SAFETY: killpg(2) takes plain integers.
        unsafe { libc::killpg(self.pid(), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// A process, told apart from a later one with the same pid by its start time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Proc {
    pid: i32,
    start: u64,
    cmdline: String,
}

/// `(ppid, start time)` from /proc/PID/stat (the fields after the command's ")").
fn stat(pid: i32) -> Option<(i32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime
    // stime cutime cstime priority nice num_threads itrealvalue starttime
    Some((f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

fn children_of(parent: i32) -> Vec<Proc> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if let Some((ppid, start)) = stat(pid)
            && ppid == parent
        {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            out.push(Proc {
                pid,
                start,
                cmdline,
            });
        }
    }
    out.sort_by_key(|p| p.pid);
    out
}

fn running(p: &Proc) -> bool {
    stat(p.pid).is_some_and(|(_, start)| start == p.start)
}

/// Every process whose command line names `dir` (how `up` passes it to its children).
fn using_dir(dir: &Path) -> Vec<i32> {
    let needle = dir.display().to_string();
    let mut out: Vec<i32> = std::fs::read_dir("/proc")
        .expect("read /proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|b| String::from_utf8_lossy(&b).contains(&needle))
        })
        .collect();
    out.sort();
    out
}

/// The running cluster's manager and servers, checked to hold their ports.
fn started_children(up: &Up, port: u16) -> Vec<Proc> {
    let kids = children_of(up.pid());
    let managers = kids
        .iter()
        .filter(|k| k.cmdline.contains(" manager "))
        .count();
    let servers = kids
        .iter()
        .filter(|k| k.cmdline.contains(" server "))
        .count();
    assert_eq!(
        (managers, servers, kids.len()),
        (1, usize::from(SERVERS), usize::from(SERVERS) + 1),
        "children of up: {kids:#?}"
    );
    for p in port..=port + SERVERS {
        assert!(!port_free(p), "port {p} should be held by the cluster");
    }
    kids
}

/// `up` exited 0 after `how`, said it stopped, and left no child or port behind.
fn stopped_cleanly(up: &mut Up, how: &str, kids: &[Proc], port: u16) {
    let st = up.wait_exit(STOPPED_WITHIN);
    assert!(
        st.success(),
        "up after {how}: {st}\nstderr:\n{}",
        up.stderr()
    );
    assert!(
        up.stdout().contains("farcache stopped"),
        "stdout:\n{}",
        up.stdout()
    );
    assert_all_gone(kids, port);
}

fn assert_all_gone(kids: &[Proc], port: u16) {
    eventually(
        "the manager and servers exit",
        STOPPED_WITHIN,
        Duration::from_millis(20),
        || (!kids.iter().any(running)).then_some(()),
    );
    eventually(
        "the cluster's ports are free",
        STOPPED_WITHIN,
        Duration::from_millis(20),
        || (port..=port + SERVERS).all(port_free).then_some(()),
    );
}

#[test]
fn sigterm_stops_the_manager_and_servers() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_ports();
    let mut up = Up::start(port, dir.path());
    up.wait_up();
    let kids = started_children(&up, port);

    up.signal(libc::SIGTERM);
    stopped_cleanly(&mut up, "SIGTERM", &kids, port);
    assert!(
        !up.stderr().contains("killing it"),
        "a child needed SIGKILL:\n{}",
        up.stderr()
    );
}

#[test]
fn ctrl_c_stops_the_manager_and_servers() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_ports();
    let mut up = Up::start(port, dir.path());
    up.wait_up();
    let kids = started_children(&up, port);

    // What a terminal does on Ctrl-C: SIGINT to the whole foreground process group.
    // SAFETY: killpg(2) takes plain integers; the group is up's.
    assert_eq!(unsafe { libc::killpg(up.pid(), libc::SIGINT) }, 0);
    stopped_cleanly(&mut up, "Ctrl-C", &kids, port);
}

#[test]
fn a_dying_server_stops_the_cluster_with_the_reason() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_ports();
    let mut up = Up::start(port, dir.path());
    up.wait_up();
    let kids = started_children(&up, port);
    let victim = kids
        .iter()
        .find(|k| {
            k.cmdline
                .contains(&format!("--listen 127.0.0.1:{}", port + 2))
        })
        .expect("server 1 among the children");

    // SAFETY: kill(2) takes plain integers; the pid is up's child, checked just above.
    assert_eq!(unsafe { libc::kill(victim.pid, libc::SIGKILL) }, 0);
    let st = up.wait_exit(STOPPED_WITHIN);
    assert!(!st.success(), "up must fail when a server dies, got {st}");
    let err = up.stderr();
    assert!(
        err.contains(&format!("server 1 (127.0.0.1:{})", port + 2))
            && err.contains("exited unexpectedly")
            && err.contains("SIGKILL"),
        "stderr should name the server and why:\n{err}"
    );
    assert_all_gone(&kids, port);
}

/// Runs a second `up` to its end, which must come fast.
fn second_up(port: u16, data_dir: &Path) -> (ExitStatus, String, String, Duration) {
    let t0 = Instant::now();
    let mut up = Up::start(port, data_dir);
    let st = up.wait_exit(Duration::from_secs(30));
    let took = t0.elapsed();
    // The readers finish once the pipes close (with the process and its children).
    eventually(
        "the second up's output",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || (!up.stderr().is_empty()).then_some(()),
    );
    (st, up.stdout(), up.stderr(), took)
}

#[test]
fn a_second_up_fails_before_starting_anything() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let port = free_ports();
    let mut first = Up::start(port, &data);
    first.wait_up();
    let kids = started_children(&first, port);
    let before = using_dir(dir.path());

    // Same data directory and ports: the rerun a user types.
    let (st, out, err, took) = second_up(port, &data);
    assert!(!st.success(), "second up: {st}");
    assert!(!out.contains("farcache is up"), "stdout:\n{out}");
    assert!(
        err.contains("another `farcache up`")
            && err.contains(&format!("pid {}", first.pid()))
            && err.contains("--data-dir")
            && err.contains("nothing was started"),
        "stderr should say what is in the way and what to do:\n{err}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");

    // Another data directory on the same ports.
    let other = dir.path().join("other");
    let (st, out, err, _) = second_up(port, &other);
    assert!(!st.success(), "second up: {st}");
    assert!(!out.contains("farcache is up"), "stdout:\n{out}");
    assert!(
        err.contains(&format!("127.0.0.1:{port} (the manager port) is in use"))
            && err.contains("--port"),
        "stderr should name the port and the way out:\n{err}"
    );
    assert!(!other.exists(), "a refused up created {}", other.display());

    // Nothing new runs, and the first cluster is untouched.
    assert_eq!(
        using_dir(dir.path()),
        before,
        "processes on the data directory"
    );
    assert!(first.exited().is_none(), "the first up exited");
    assert_eq!(children_of(first.pid()), kids, "the first up's children");

    first.signal(libc::SIGTERM);
    assert!(first.wait_exit(STOPPED_WITHIN).success());
    assert_all_gone(&kids, port);
}
