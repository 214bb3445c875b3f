//! Baselines measured on the same machine: Redis with its stock load
//! generator (`redis-server` + `redis-benchmark`), raw TCP with `sockperf`,
//! and the peers at their best: Redis and memcached driven by our spinning
//! closed-loop drivers, and a spinning raw-TCP floor.

pub mod driver;
pub mod eval_script;
pub mod memcached;
pub mod peer_run;
pub mod peers;
pub mod rawtcp;
pub mod rdb;
pub mod redis;
pub mod redis_eval;
pub mod redis_eval_spin;
pub mod redis_tool_batch;
pub mod resp;
pub(crate) mod resp_conn;
pub mod sockperf;

use std::fs::File;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::error::{BenchError, Result};

/// Picks a currently free TCP port on 127.0.0.1 (bind port 0, then drop).
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind(("127.0.0.1", 0))?;
    Ok(l.local_addr()?.port())
}

/// A child server process whose stdout/stderr go to a temp log file; it is
/// killed (and the log removed) on drop.
#[derive(Debug)]
pub(crate) struct ChildServer {
    what: &'static str,
    child: Child,
    port: u16,
    log: PathBuf,
}

impl ChildServer {
    /// Spawns `cmd` (which must listen on `port`) and waits until `ready`
    /// returns `Ok(true)`, for at most `timeout`.
    pub(crate) fn spawn(
        what: &'static str,
        mut cmd: Command,
        port: u16,
        timeout: Duration,
        mut ready: impl FnMut(u16) -> bool,
    ) -> Result<Self> {
        let log = std::env::temp_dir().join(format!(
            "farcache-bench-{what}-{}-{port}.log",
            std::process::id()
        ));
        let out = File::create(&log)?;
        let err = out.try_clone()?;
        let cmd_str = render(&cmd);
        eprintln!("[farcache-bench] starting: {cmd_str}");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|source| BenchError::Spawn {
                cmd: cmd_str,
                source,
            })?;
        let mut server = ChildServer {
            what,
            child,
            port,
            log,
        };
        let start = Instant::now();
        loop {
            if let Some(status) = server.child.try_wait()? {
                return Err(BenchError::NotReady {
                    what,
                    port,
                    waited: start.elapsed(),
                    detail: format!("exited with {status}; log: {}", server.log_tail()),
                });
            }
            if ready(port) {
                tracing::debug!(what, port, elapsed = ?start.elapsed(), "child server ready");
                return Ok(server);
            }
            if start.elapsed() > timeout {
                return Err(BenchError::NotReady {
                    what,
                    port,
                    waited: start.elapsed(),
                    detail: format!("log: {}", server.log_tail()),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Whether the process is still running.
    pub(crate) fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub(crate) fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let s = strip_ansi(&s);
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(10)..].join(" | ")
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            tracing::debug!(
                what = self.what,
                pid = self.child.id(),
                "killing child server"
            );
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Runs a command to completion, failing on non-zero exit; prints the command.
pub(crate) fn run_checked(mut cmd: Command) -> Result<Output> {
    let cmd_str = render(&cmd);
    eprintln!("[farcache-bench] running: {cmd_str}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| BenchError::Spawn {
            cmd: cmd_str.clone(),
            source,
        })?;
    if !out.status.success() {
        let mut output = String::from_utf8_lossy(&out.stderr).into_owned();
        output.push_str(&String::from_utf8_lossy(&out.stdout));
        return Err(BenchError::CommandFailed {
            cmd: cmd_str,
            status: out.status,
            output: strip_ansi(output.trim()),
        });
    }
    Ok(out)
}

fn render(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        let a = a.to_string_lossy();
        s.push(' ');
        if a.is_empty() || a.contains(' ') {
            s.push_str(&format!("{a:?}"));
        } else {
            s.push_str(&a);
        }
    }
    s
}

/// Removes ANSI CSI escape sequences (`ESC [ ... letter`), as printed by sockperf.
pub(crate) fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c2 in chars.by_ref() {
                    if c2.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_ansi() {
        assert_eq!(
            strip_ansi("sockperf: \u{1b}[2;35m====> avg-latency=1.5\u{1b}[0m x"),
            "sockperf: ====> avg-latency=1.5 x"
        );
    }

    #[test]
    fn free_port_nonzero() {
        assert_ne!(free_port().expect("port"), 0);
    }
}
