//! Heartbeat monitor: a thread that periodically declares silent servers dead, and
//! every few ticks frees regions servers hold that no cache places there
//! ([`Service::reconcile`]).

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::service::Service;

/// The running monitor; dropping `stop` (or sending on it) ends the thread.
pub struct Liveness {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Liveness {
    pub fn spawn(service: Arc<Service>, timeout: Duration) -> std::io::Result<Self> {
        // Check several times per timeout so a death is noticed soon after it is due.
        let tick = (timeout / 8).clamp(Duration::from_millis(5), Duration::from_millis(250));
        let (stop, rx) = channel();
        let thread = thread::Builder::new()
            .name("manager-liveness".into())
            .spawn(move || run(&service, &rx, tick))?;
        Ok(Self { stop, thread })
    }

    pub fn stop(self) {
        // A send error only means the thread already ended.
        let _ = self.stop.send(());
        if self.thread.join().is_err() {
            tracing::warn!("liveness thread panicked");
        }
    }
}

/// Longest a tick spends giving regions new backups before checking liveness again.
const REPAIR_BUDGET: Duration = Duration::from_millis(500);

/// How often heartbeats' region reports are compared with the catalogue.
const RECONCILE_EVERY: Duration = Duration::from_secs(1);

fn run(service: &Service, stop: &Receiver<()>, tick: Duration) {
    let mut next_reconcile = Instant::now() + RECONCILE_EVERY;
    loop {
        match stop.recv_timeout(tick) {
            Err(RecvTimeoutError::Timeout) => {
                let now = Instant::now();
                service.check_liveness(now);
                // Regions short of copies get new backups soon after a failure.
                service.repair(REPAIR_BUDGET);
                if now >= next_reconcile {
                    service.reconcile();
                    service.rebalance_once();
                    next_reconcile = Instant::now() + RECONCILE_EVERY;
                }
            }
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}
