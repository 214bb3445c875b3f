//! The control plane under chaos: leader kills (with several managers on etcd) and
//! a prober that measures how long no manager answered.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use super::*;

/// How often the prober asks for the cluster's status.
const PROBE_EVERY: Duration = Duration::from_millis(50);
/// How long a leader kill waits for another manager to lead.
const TAKEOVER_LIMIT: Duration = Duration::from_secs(30);

/// Asks the manager for the cluster's status, through failovers (up to 30 s).
pub(super) fn status(client: &Client) -> Result<ClusterStatus> {
    let t0 = Instant::now();
    loop {
        match client.status() {
            Ok(st) => return Ok(st),
            Err(e) if t0.elapsed() > TAKEOVER_LIMIT => {
                return Err(e).context("no manager answered a status call for 30 s");
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Asks for the status every [`PROBE_EVERY`] on a client of its own and keeps the
/// longest gap between two answers.
pub(super) struct Prober {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(u64, u64)>,
}

pub(super) struct ProbeReport {
    pub(super) max_unavailable_ms: u64,
    pub(super) probes: u64,
}

impl Prober {
    pub(super) fn start(cluster: &ProcessCluster) -> Result<Self> {
        let mut cfg = ClientConfig::new("").op_timeout(Duration::from_secs(2));
        // A frozen manager accepts and never answers: do not wait long on it.
        cfg.connect_timeout = Duration::from_secs(1);
        let client = cluster.client_with(cfg)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("chaos-control-probe".into())
            .spawn(move || {
                let (mut last_ok, mut max_gap, mut probes) = (Instant::now(), Duration::ZERO, 0);
                while !flag.load(Ordering::Relaxed) {
                    probes += 1;
                    if client.status().is_ok() {
                        max_gap = max_gap.max(last_ok.elapsed());
                        last_ok = Instant::now();
                    }
                    std::thread::sleep(PROBE_EVERY);
                }
                max_gap = max_gap.max(last_ok.elapsed());
                (max_gap.as_millis() as u64, probes)
            })?;
        Ok(Self { stop, thread })
    }

    pub(super) fn stop(self) -> ProbeReport {
        self.stop.store(true, Ordering::Relaxed);
        let (max_unavailable_ms, probes) = self.thread.join().unwrap_or((u64::MAX, 0));
        ProbeReport {
            max_unavailable_ms,
            probes,
        }
    }
}

/// Leader kills so far, and what the killed leaders had recorded (migrations,
/// promotions and losses live in the leading manager's memory only).
#[derive(Default)]
pub(super) struct Failovers {
    pub(super) count: u32,
    pub(super) max_ms: u64,
    before: Vec<ClusterStatus>,
}

impl Failovers {
    /// SIGKILLs the leading manager, waits until another leads, and starts the
    /// killed one again as a standby.
    pub(super) fn kill_leader(
        &mut self,
        cluster: &mut ProcessCluster,
        client: &Client,
        at_ms: u64,
    ) -> Result<Event> {
        let old = wait_leader(cluster, None)?;
        self.before.push(status(client)?);
        cluster.kill_manager(old)?;
        let t0 = Instant::now();
        let new = wait_leader(cluster, Some(old))?;
        let ms = t0.elapsed().as_millis() as u64;
        self.count += 1;
        self.max_ms = self.max_ms.max(ms);
        cluster.start_manager_again(old)?;
        Ok(Event {
            at_ms,
            kind: "leader_kill",
            server: u32::try_from(old).unwrap_or(u32::MAX),
            what: format!("manager {old} -> manager {new} in {ms} ms"),
        })
    }

    /// Adds what earlier leaders recorded to the last leader's status.
    pub(super) fn merge_into(&self, st: &mut ClusterStatus) {
        for b in &self.before {
            st.migrations.extend(b.migrations.iter().cloned());
            st.promotions.extend(b.promotions.iter().cloned());
            st.lost.extend(b.lost.iter().cloned());
        }
    }
}

/// The manager that leads, once one does (other than `not`).
fn wait_leader(cluster: &mut ProcessCluster, not: Option<usize>) -> Result<usize> {
    let t0 = Instant::now();
    loop {
        if let Some(i) = cluster.leader().filter(|&i| Some(i) != not) {
            return Ok(i);
        }
        if t0.elapsed() > TAKEOVER_LIMIT {
            bail!("no manager took the lead within {TAKEOVER_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
