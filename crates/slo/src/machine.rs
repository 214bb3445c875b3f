//! Which machine a model was measured on: a model only predicts the hardware and
//! network it was measured on.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    pub hostname: String,
    pub cpu_model: String,
    pub cores: u32,
    pub kernel: String,
}

impl Machine {
    /// This machine, from Linux `/proc` (empty strings where unreadable).
    pub fn detect() -> Self {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let mut hostname = read("/proc/sys/kernel/hostname");
        if hostname.is_empty() {
            hostname = read("/etc/hostname");
        }
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_default();
        Self {
            hostname,
            cpu_model,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            kernel: read("/proc/sys/kernel/osrelease"),
        }
    }

    /// Same host, CPU and core count (a kernel update keeps the model).
    pub fn same_machine(&self, other: &Machine) -> bool {
        self.hostname == other.hostname
            && self.cpu_model == other.cpu_model
            && self.cores == other.cores
    }
}

impl std::fmt::Display for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "host '{}', {} core(s) of '{}'",
            self.hostname, self.cores, self.cpu_model
        )
    }
}
