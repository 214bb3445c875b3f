//! The listener: one accepting thread (`farcache_net::accept`, as the server's and
//! the manager's) that deals connections to the event loops, a cap on connections,
//! and the counters `INFO` reports.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use farcache_net::{Accepted, Stream, accept_next};
use farcache_store::Store;

use crate::auth::AuthPolicy;
use crate::error::RespError;
use crate::shared::Shared;
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
    /// A connection that has not authenticated this long after it was accepted is
    /// closed (only when `auth` requires `AUTH`; `Duration::MAX`: never).
    pub auth_timeout: Duration,
}

/// The core server's handshake timeout (`farcache_net::GuardConfig`), so a stranger
/// holds a front end's connection no longer than a server's.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(5);

impl FrontendConfig {
    pub fn new(listen: impl Into<String>, auth: AuthPolicy) -> Self {
        Self {
            listen: listen.into(),
            auth,
            max_clients: 1024,
            threads: 1,
            auth_timeout: AUTH_TIMEOUT,
        }
    }
}

/// A running front end; dropping it stops accepting (open sessions end when their
/// clients leave).
pub struct Frontend {
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    /// The offload pool (ends once the workers, its only senders, are gone).
    pool: Vec<JoinHandle<()>>,
}

impl Frontend {
    /// Listens on `cfg.listen` and serves `store`.
    pub fn start(store: Store, cfg: FrontendConfig) -> Result<Self, RespError> {
        let listener = TcpListener::bind(&cfg.listen).map_err(|source| RespError::Bind {
            addr: cfg.listen.clone(),
            source,
        })?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new(store, cfg.auth, addr));
        let mut handoff = Vec::new();
        let mut workers = Vec::new();
        let (jobs, pending) = std::sync::mpsc::channel();
        // As many as event loops, at least two: one big command does not wait on another.
        // Pool threads mostly wait on the store (a script's calls, a big DEL's
        // batches): several per event loop keep that waiting from queueing.
        let pool = crate::offload::start((4 * cfg.threads).max(8), pending)?;
        for i in 0..cfg.threads.max(1) {
            let (tx, rx) = std::sync::mpsc::channel();
            let (w, waker) = Worker::new(shared.clone(), rx, jobs.clone(), cfg.auth_timeout)?;
            workers.push(
                std::thread::Builder::new()
                    .name(format!("resp-worker-{i}"))
                    .spawn(move || w.run())?,
            );
            handoff.push((tx, waker));
        }
        let sh = shared.clone();
        let max = cfg.max_clients;
        listener.set_nonblocking(true)?;
        let poll = mio::Poll::new()?;
        let accept = std::thread::Builder::new()
            .name("resp-accept".into())
            .spawn(move || accept_loop(listener, poll, sh, max, handoff))?;
        tracing::info!(%addr, "RESP front end listening");
        Ok(Self {
            shared,
            accept: Some(accept),
            workers,
            pool,
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
        self.shared.request_stop();
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.shared.addr, Duration::from_millis(200));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        for p in self.pool.drain(..) {
            let _ = p.join();
        }
    }
}

type Handoff = (
    std::sync::mpsc::Sender<mio::net::TcpStream>,
    Arc<mio::Waker>,
);

/// After a failed accept (out of descriptors), retry this soon.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

fn accept_loop(
    listener: TcpListener,
    mut poll: mio::Poll,
    shared: Arc<Shared>,
    max_clients: usize,
    workers: Vec<Handoff>,
) {
    let mut listener = mio::net::TcpListener::from_std(listener);
    if let Err(e) = poll
        .registry()
        .register(&mut listener, mio::Token(0), mio::Interest::READABLE)
    {
        tracing::error!(error = %e, "cannot register the RESP listener");
        return;
    }
    let mut events = mio::Events::with_capacity(16);
    let mut next = 0;
    let mut retry = false;
    loop {
        if let Err(e) = poll.poll(&mut events, retry.then_some(ACCEPT_RETRY))
            && e.kind() != std::io::ErrorKind::Interrupted
        {
            tracing::error!(error = %e, "RESP accept poll failed");
            return;
        }
        retry = false;
        if shared.stopping() {
            for (_, waker) in &workers {
                let _ = waker.wake();
            }
            return;
        }
        loop {
            let admit = |_| shared.connected.load(Ordering::SeqCst) < max_clients as u64;
            let stream = match accept_next(&listener, None, admit) {
                Accepted::Conn { stream, .. } => stream,
                Accepted::Refused { stream, .. } => {
                    shared.rejected.fetch_add(1, Ordering::Relaxed);
                    // Best effort, as Redis: a fresh socket takes a short line.
                    if let Stream::Plain(mut tcp) = stream {
                        let _ = std::io::Write::write_all(
                            &mut tcp,
                            b"-ERR max number of clients reached\r\n",
                        );
                    }
                    continue;
                }
                Accepted::Drained => break,
                Accepted::TlsFailed { .. } => continue,
                Accepted::Failed(e) => {
                    // Out of descriptors and the like: existing clients go on.
                    tracing::warn!(error = %e, "accept failed");
                    retry = true;
                    break;
                }
            };
            let Stream::Plain(tcp) = stream else { continue };
            shared.connected.fetch_add(1, Ordering::SeqCst);
            shared.connections_total.fetch_add(1, Ordering::Relaxed);
            let (tx, waker) = &workers[next % workers.len()];
            next += 1;
            if tx.send(tcp).is_err() || waker.wake().is_err() {
                tracing::warn!("a RESP worker is gone; connection dropped");
                shared.connected.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}
