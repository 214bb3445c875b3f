//! The listener: one thread per connection (each drives its own store calls, so a
//! pipelined burst on one connection becomes one batch per server), a cap on
//! connections, and the counters `INFO` reports.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use farcache_store::Store;
use parking_lot::{Mutex, MutexGuard};

use crate::auth::AuthPolicy;
use crate::error::RespError;
use crate::worker::Worker;

/// Settings of a front end.
#[derive(Debug, Clone)]
pub struct FrontendConfig {
    pub listen: String,
    pub auth: AuthPolicy,
    /// Connections beyond this are answered `-ERR max number of clients reached`.
    pub max_clients: usize,
    /// Event-loop threads (connections are spread over them).
    pub threads: usize,
}

impl FrontendConfig {
    pub fn new(listen: impl Into<String>, auth: AuthPolicy) -> Self {
        Self {
            listen: listen.into(),
            auth,
            max_clients: 1024,
            threads: 1,
        }
    }
}

/// Key stripes serialising the front end's writes (see [`Shared::lock_keys`]).
const STRIPES: usize = 4096;

/// What every session of a front end shares.
pub struct Shared {
    pub store: Store,
    pub auth: AuthPolicy,
    pub addr: SocketAddr,
    pub started: Instant,
    pub connected: AtomicU64,
    pub connections_total: AtomicU64,
    pub commands: AtomicU64,
    pub rejected: AtomicU64,
    pub next_id: AtomicU64,
    /// Rounds run, keys and pairs they batched, and µs spent in their store calls
    /// (`INFO stats`: how much batching the load gives and where a round's time goes).
    pub rounds: AtomicU64,
    pub round_ops: AtomicU64,
    pub round_store_us: AtomicU64,
    stripes: Box<[Mutex<()>]>,
    stop: AtomicBool,
}

impl Shared {
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn stripe(key: &[u8]) -> usize {
        (xxhash_rust::xxh3::xxh3_64(key) % STRIPES as u64) as usize
    }

    /// Locks the stripes of `keys` (in stripe order, so two sessions never wait on
    /// each other in a cycle). Every write through the front end holds its keys'
    /// stripes, which makes read-modify-writes (`INCR`, `SETRANGE`, `EXPIRE` ...)
    /// atomic against every other command of this front end.
    pub fn lock_keys<'a, K: AsRef<[u8]> + 'a>(
        &self,
        keys: impl IntoIterator<Item = &'a K>,
    ) -> Vec<MutexGuard<'_, ()>> {
        let mut idx: Vec<usize> = keys.into_iter().map(|k| Self::stripe(k.as_ref())).collect();
        idx.sort_unstable();
        idx.dedup();
        idx.into_iter().map(|i| self.stripes[i].lock()).collect()
    }
}

/// A running front end; dropping it stops accepting (open sessions end when their
/// clients leave).
pub struct Frontend {
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

impl Frontend {
    /// Listens on `cfg.listen` and serves `store`.
    pub fn start(store: Store, cfg: FrontendConfig) -> Result<Self, RespError> {
        let listener = TcpListener::bind(&cfg.listen).map_err(|source| RespError::Bind {
            addr: cfg.listen.clone(),
            source,
        })?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            store,
            auth: cfg.auth,
            addr,
            started: Instant::now(),
            connected: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
            rounds: AtomicU64::new(0),
            round_ops: AtomicU64::new(0),
            round_store_us: AtomicU64::new(0),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            stop: AtomicBool::new(false),
        });
        let mut handoff = Vec::new();
        let mut workers = Vec::new();
        for i in 0..cfg.threads.max(1) {
            let (tx, rx) = std::sync::mpsc::channel();
            let (w, waker) = Worker::new(shared.clone(), rx)?;
            workers.push(
                std::thread::Builder::new()
                    .name(format!("resp-worker-{i}"))
                    .spawn(move || w.run())?,
            );
            handoff.push((tx, waker));
        }
        let sh = shared.clone();
        let max = cfg.max_clients;
        let accept = std::thread::Builder::new()
            .name("resp-accept".into())
            .spawn(move || accept_loop(listener, sh, max, handoff))?;
        tracing::info!(%addr, "RESP front end listening");
        Ok(Self {
            shared,
            accept: Some(accept),
            workers,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.shared.addr
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Blocks until the front end stops (it runs until the process ends).
    pub fn wait(mut self) {
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Frontend {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.shared.addr, Duration::from_millis(200));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

type Handoff = (std::sync::mpsc::Sender<TcpStream>, Arc<mio::Waker>);

fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    max_clients: usize,
    workers: Vec<Handoff>,
) {
    let mut next = 0;
    for conn in listener.incoming() {
        if shared.stopping() {
            for (_, waker) in &workers {
                let _ = waker.wake();
            }
            return;
        }
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if shared.connected.load(Ordering::SeqCst) >= max_clients as u64 {
            shared.rejected.fetch_add(1, Ordering::Relaxed);
            let mut s = stream;
            let _ = std::io::Write::write_all(&mut s, b"-ERR max number of clients reached\r\n");
            continue;
        }
        let _ = stream.set_nodelay(true);
        shared.connected.fetch_add(1, Ordering::SeqCst);
        shared.connections_total.fetch_add(1, Ordering::Relaxed);
        let (tx, waker) = &workers[next % workers.len()];
        next += 1;
        if tx.send(stream).is_err() || waker.wake().is_err() {
            tracing::warn!("a RESP worker is gone; connection dropped");
            shared.connected.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
