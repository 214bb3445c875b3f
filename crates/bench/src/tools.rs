//! Locating (and, when running as root, installing) the external tools the
//! baselines need: `redis-server`, `redis-benchmark`, `sockperf`, `memcached`
//! and the DejaVu font used for chart text.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{BenchError, Result};

/// An external dependency of the baseline benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tool {
    /// `redis-server` binary (Debian package `redis-server`).
    RedisServer,
    /// `redis-benchmark` binary (Debian package `redis-tools`, pulled in by `redis-server`).
    RedisBenchmark,
    /// `sockperf` binary (Debian package `sockperf`).
    Sockperf,
    /// DejaVu Sans TTF for chart labels (Debian package `fonts-dejavu-core`).
    DejaVuFont,
    /// `memcached` binary (Debian package `memcached`), a peer of the io bench.
    Memcached,
}

/// Candidate locations of a sans-serif TTF usable for chart text.
pub const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

impl Tool {
    /// Every tool the baselines and charts use.
    pub const ALL: [Tool; 5] = [
        Tool::RedisServer,
        Tool::RedisBenchmark,
        Tool::Sockperf,
        Tool::DejaVuFont,
        Tool::Memcached,
    ];

    /// Human-readable name (binary name, or "DejaVuSans.ttf").
    pub fn name(self) -> &'static str {
        match self {
            Tool::RedisServer => "redis-server",
            Tool::RedisBenchmark => "redis-benchmark",
            Tool::Sockperf => "sockperf",
            Tool::DejaVuFont => "DejaVuSans.ttf",
            Tool::Memcached => "memcached",
        }
    }

    /// Debian packages providing this tool.
    pub fn apt_packages(self) -> &'static [&'static str] {
        match self {
            Tool::RedisServer => &["redis-server"],
            Tool::RedisBenchmark => &["redis-server", "redis-tools"],
            Tool::Sockperf => &["sockperf"],
            Tool::DejaVuFont => &["fonts-dejavu-core"],
            Tool::Memcached => &["memcached"],
        }
    }

    /// Where the tool is, if installed.
    pub fn locate(self) -> Option<PathBuf> {
        match self {
            Tool::DejaVuFont => find_font(),
            _ => which(self.name()),
        }
    }
}

/// Looks `bin` up on `$PATH` (executable regular files only).
pub fn which(bin: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(bin))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// First existing font in [`FONT_CANDIDATES`].
pub fn find_font() -> Option<PathBuf> {
    FONT_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// Whether the effective user id is 0 (read from `/proc/self/status`).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|rest| rest.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Makes sure every tool in `tools` is available.
///
/// Missing tools are installed with `apt-get install -y` (retrying after
/// `apt-get update` if the first attempt fails) when running as root;
/// otherwise a [`BenchError::ToolMissing`] explains what to install.
/// Progress is printed to stderr.
pub fn ensure_tools(tools: &[Tool]) -> Result<()> {
    // One install at a time in this process: two tests installing at once failed on
    // dpkg's lock (the second one finds the tool once the first is done).
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    let missing: Vec<Tool> = tools
        .iter()
        .copied()
        .filter(|t| t.locate().is_none())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut packages: Vec<&str> = Vec::new();
    for t in &missing {
        for p in t.apt_packages() {
            if !packages.contains(p) {
                packages.push(p);
            }
        }
    }
    let names: Vec<&str> = missing.iter().map(|t| t.name()).collect();
    let hint = format!(
        "install it with `sudo apt-get install -y {}`",
        packages.join(" ")
    );
    if !is_root() {
        return Err(BenchError::ToolMissing {
            tool: names.join(", "),
            hint: format!("not running as root, so not installing automatically; {hint}"),
        });
    }
    if which("apt-get").is_none() {
        return Err(BenchError::ToolMissing {
            tool: names.join(", "),
            hint: format!("apt-get not found; {hint}"),
        });
    }
    eprintln!(
        "[farcache-bench] {} not found; installing apt packages: {}",
        names.join(", "),
        packages.join(" ")
    );
    if let Err(first) = apt(&["install", "-y"], &packages) {
        eprintln!(
            "[farcache-bench] apt-get install failed ({first}); running apt-get update and retrying"
        );
        apt(&["update"], &[])?;
        apt(&["install", "-y"], &packages)?;
    }
    let still: Vec<&str> = missing
        .iter()
        .filter(|t| t.locate().is_none())
        .map(|t| t.name())
        .collect();
    if still.is_empty() {
        eprintln!("[farcache-bench] installed {}", packages.join(" "));
        Ok(())
    } else {
        Err(BenchError::ToolMissing {
            tool: still.join(", "),
            hint: format!("still missing after apt-get install; {hint}"),
        })
    }
}

fn apt(args: &[&str], packages: &[&str]) -> Result<()> {
    let cmd_str = format!("apt-get {} {}", args.join(" "), packages.join(" "));
    eprintln!("[farcache-bench] running: {}", cmd_str.trim_end());
    let status = Command::new("apt-get")
        .args(args)
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .status()
        .map_err(|source| BenchError::Spawn {
            cmd: cmd_str.clone(),
            source,
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(BenchError::CommandFailed {
            cmd: cmd_str,
            status,
            output: "see apt-get output above".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_finds_sh() {
        assert!(which("sh").is_some());
        assert!(which("definitely-not-a-real-binary-xyz").is_none());
    }

    #[test]
    fn ensure_nothing_is_ok() {
        ensure_tools(&[]).expect("empty tool list");
    }
}
