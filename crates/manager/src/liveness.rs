//! Heartbeat monitor: a thread that periodically declares silent servers dead (and
//! promotes their regions' backups), and an upkeep thread that gives regions short of
//! copies new backups, frees regions servers hold that no cache places there
//! (`Cluster::reconcile`, in `membership`) and rebalances. They are apart so a failover
//! never waits behind a copy: copying a large region takes as long as its bytes need.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::service::Service;

/// The running monitor; dropping `stop` (or sending on it) ends the thread.
pub struct Liveness {
    stop: Sender<()>,
    thread: JoinHandle<()>,
    upkeep_stop: Sender<()>,
    upkeep: JoinHandle<()>,
}

impl Liveness {
    pub fn spawn(service: Arc<Service>, timeout: Duration) -> std::io::Result<Self> {
        // Check several times per timeout so a death is noticed soon after it is due.
        let tick = (timeout / 8).clamp(Duration::from_millis(5), Duration::from_millis(250));
        let (stop, rx) = channel();
        let svc = service.clone();
        let thread = thread::Builder::new()
            .name("manager-liveness".into())
            .spawn(move || run(&svc, &rx, tick))?;
        let (upkeep_stop, rx) = channel();
        let upkeep = thread::Builder::new()
            .name("manager-upkeep".into())
            .spawn(move || run_upkeep(&service, &rx, tick))?;
        Ok(Self {
            stop,
            thread,
            upkeep_stop,
            upkeep,
        })
    }

    pub fn stop(self) {
        // A send error only means the thread already ended.
        let _ = self.stop.send(());
        let _ = self.upkeep_stop.send(());
        if self.thread.join().is_err() {
            tracing::warn!("liveness thread panicked");
        }
        if self.upkeep.join().is_err() {
            tracing::warn!("upkeep thread panicked");
        }
    }
}

/// Longest a tick spends giving regions new backups before checking liveness again.
const REPAIR_BUDGET: Duration = Duration::from_millis(500);

/// How often heartbeats' region reports are compared with the catalogue.
const RECONCILE_EVERY: Duration = Duration::from_secs(1);

fn run(service: &Service, stop: &Receiver<()>, tick: Duration) {
    loop {
        match stop.recv_timeout(tick) {
            Err(RecvTimeoutError::Timeout) => service.check_liveness(Instant::now()),
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn run_upkeep(service: &Service, stop: &Receiver<()>, tick: Duration) {
    let mut next_reconcile = Instant::now() + RECONCILE_EVERY;
    loop {
        match stop.recv_timeout(tick) {
            Err(RecvTimeoutError::Timeout) if !service.cluster.leadership.holds() => {}
            Err(RecvTimeoutError::Timeout) => {
                // Regions short of copies get new backups soon after a failure.
                service.cluster.repair(REPAIR_BUDGET);
                if Instant::now() >= next_reconcile {
                    service.cluster.reconcile();
                    service.cluster.rebalance_once();
                    next_reconcile = Instant::now() + RECONCILE_EVERY;
                }
            }
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}
