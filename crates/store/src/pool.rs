//! The small pool of store threads a handle's async writes run on (started on first
//! use, stopped when the handle is dropped).

use std::sync::mpsc;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

/// Threads running async writes (per store handle, started on first use).
const POOL_THREADS: usize = 2;

pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// The pool's queue; its threads stop when the store handle (and this) is dropped.
pub(crate) struct Pool {
    tx: Mutex<mpsc::Sender<Job>>,
}

impl Pool {
    fn start() -> Self {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..POOL_THREADS {
            let rx = rx.clone();
            let _ = std::thread::Builder::new()
                .name(format!("farcache-store-{i}"))
                .spawn(move || {
                    loop {
                        let job = rx.lock().recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    }
                });
        }
        Self { tx: Mutex::new(tx) }
    }

    /// Queues `job`. A send fails only if every pool thread died; the caller's future
    /// then says so.
    pub(crate) fn run(&self, job: Job) {
        let _ = self.tx.lock().send(job);
    }
}

/// The pool a store handle's async writes run on.
#[derive(Default)]
pub(crate) struct PoolCell(OnceLock<Pool>);

impl PoolCell {
    /// The pool, started on first use.
    pub(crate) fn get(&self) -> &Pool {
        self.0.get_or_init(Pool::start)
    }
}
