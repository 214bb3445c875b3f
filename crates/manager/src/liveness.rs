//! Heartbeat monitor: a thread that periodically declares silent servers dead.

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

fn run(service: &Service, stop: &Receiver<()>, tick: Duration) {
    loop {
        match stop.recv_timeout(tick) {
            Err(RecvTimeoutError::Timeout) => service.check_liveness(Instant::now()),
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}
