//! Starting and stopping a server: binds, spawns acceptor, workers, the control pool
//! and the manager link.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use arc_swap::ArcSwap;
use farcache_proto::control::ServerStats;
use farcache_proto::{Authority, ServerId};
use mio::{Poll, Waker};
use parking_lot::{Condvar, Mutex};
use tracing::info;

use crate::cluster::Shared;
use crate::cluster::mailbox::WorkerInbox;
use crate::config::ServerConfig;
use crate::engine::store::RegionStore;
use crate::error::ServerError;
use crate::metrics::Metrics;
use crate::runtime::worker::{WAKER, Worker};

pub struct Server;

pub struct ServerHandle {
    addr: SocketAddr,
    tls_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    wakers: Vec<Arc<Waker>>,
    threads: Vec<JoinHandle<()>>,
}

impl Server {
    pub fn start(config: ServerConfig) -> Result<ServerHandle, ServerError> {
        if config.threads == 0 {
            return Err(ServerError::Config("--threads must be at least 1".into()));
        }
        let std_listener =
            std::net::TcpListener::bind(config.listen).map_err(|source| ServerError::Bind {
                addr: config.listen.to_string(),
                source,
            })?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let listener = mio::net::TcpListener::from_std(std_listener);
        let advertise = config.advertise.clone().unwrap_or_else(|| addr.to_string());
        let (tls_listener, tls_addr) = match (config.tls_listen, &config.tls) {
            (Some(at), Some(_)) => {
                let l = std::net::TcpListener::bind(at).map_err(|source| ServerError::Bind {
                    addr: at.to_string(),
                    source,
                })?;
                l.set_nonblocking(true)?;
                let a = l.local_addr()?;
                (Some(mio::net::TcpListener::from_std(l)), Some(a))
            }
            (Some(_), None) => {
                return Err(ServerError::Config(
                    "--tls-listen needs a certificate and key (--tls-cert, --tls-key)".into(),
                ));
            }
            _ => (None, None),
        };
        let tls_advertise = tls_addr.map(|a| {
            config
                .tls_advertise
                .clone()
                .unwrap_or_else(|| a.to_string())
        });
        let fds = farcache_net::guard::raise_fd_limit();
        let (control, jobs) = crate::cluster::control::Queue::new();
        let shared = Arc::new(Shared {
            store: RegionStore::new(config.memory),
            metrics: Metrics::default(),
            procs: crate::engine::procs::ProcTable::new(Default::default(), config.fault_injection),
            shutdown: AtomicBool::new(false),
            mailboxes: Default::default(),
            dialer: crate::cluster::dial::Dialer::new(config.secret.clone(), advertise.clone()),
            sched: std::sync::OnceLock::new(),
            peers: ArcSwap::from_pointee(HashMap::new()),
            control,
            output_total: AtomicUsize::new(0),
            server_id: AtomicU32::new(0),
            migrations: crate::cluster::migration::Migrations::default(),
            replicator: crate::cluster::replication::Replicator::default(),
            lease: if config.manager.is_some() {
                crate::lease::Lease::pending()
            } else {
                crate::lease::Lease::unbounded()
            },
            streams: crate::cluster::replication::Streams::default(),
            completions: crate::engine::completions::Completions::default(),
            nap: (Mutex::new(()), Condvar::new()),
            authority: Authority::new(config.secret.clone()),
            advertise,
            tls_advertise,
            config,
        });

        let mut threads = Vec::new();
        let mut wakers = Vec::new();
        let mut inboxes = Vec::new();
        let mut workers = Vec::new();
        let clients = Arc::new(crate::runtime::peer_budget::ClientActivity::default());
        let (board, queues) = crate::cluster::flow::sched::Board::new(shared.config.threads);
        let _ = shared.sched.set(board);
        for (id, queue) in queues.into_iter().enumerate() {
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
            let (tx, rx) = std::sync::mpsc::channel();
            inboxes.push(WorkerInbox {
                tx,
                waker: waker.clone(),
            });
            wakers.push(waker);
            workers.push(Worker {
                id,
                poll,
                incoming: rx,
                queue,
                shared: shared.clone(),
                clients: clients.clone(),
            });
        }
        shared.mailboxes.set(inboxes);
        for w in workers {
            let id = w.id;
            threads.push(
                std::thread::Builder::new()
                    .name(format!("fc-worker-{id}"))
                    .spawn(move || w.run())?,
            );
        }
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(
            poll.registry(),
            crate::runtime::acceptor::WAKER,
        )?);
        wakers.push(waker);
        let sh = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("fc-acceptor".into())
                .spawn(move || crate::runtime::acceptor::run(poll, listener, tls_listener, sh))?,
        );
        threads.extend(crate::cluster::control::spawn_pool(&shared, jobs)?);
        let mut metrics_addr = None;
        if let Some(at) = shared.config.metrics_listen {
            let l = crate::runtime::metrics_http::bind(at).map_err(|source| ServerError::Bind {
                addr: at.to_string(),
                source,
            })?;
            metrics_addr = l.local_addr().ok();
            let sh = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("fc-metrics".into())
                    .spawn(move || crate::runtime::metrics_http::run(l, sh))?,
            );
        }
        if let Some(manager) = shared.config.manager.clone() {
            let sh = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("fc-manager-link".into())
                    .spawn(move || crate::cluster::manager_link::run(sh, manager))?,
            );
        }
        if let Some(id) = crate::identity::load(&shared.config)? {
            info!(
                server_id = id,
                "rejoining under the id in the data directory"
            );
            shared.set_server_id(id);
        }
        info!(%addr, ?tls_addr, threads = shared.config.threads, memory = shared.config.memory, fds, "server listening");
        Ok(ServerHandle {
            addr,
            tls_addr,
            metrics_addr,
            shared,
            wakers,
            threads,
        })
    }
}

/// How a reclaimed server left.
#[derive(Debug, Clone)]
pub struct Leave {
    /// Regions still here when the grace ended (the manager reports them lost).
    pub regions_left: u64,
    pub took: Duration,
}

impl ServerHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the TLS listener bound, if TLS is on.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_addr
    }

    /// Where `--metrics-listen` bound, if set.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// 0 until the manager has assigned an id.
    pub fn server_id(&self) -> ServerId {
        self.shared.server_id()
    }

    pub fn stats(&self) -> ServerStats {
        crate::cluster::control::stats(&self.shared)
    }

    pub fn prometheus(&self) -> String {
        crate::runtime::metrics_http::prometheus_text(&self.shared)
    }

    /// Waits until the manager has assigned an id, up to `timeout`.
    pub fn wait_registered(&self, timeout: Duration) -> Option<ServerId> {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            let id = self.server_id();
            if id != 0 {
                return Some(id);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// Announces this server's reclamation to the manager and waits, up to `grace`,
    /// until every region has moved away; then the caller may stop the server.
    pub fn leave(
        &self,
        grace: Duration,
        mode: farcache_proto::control::MigrationMode,
    ) -> Result<Leave, ServerError> {
        let started = std::time::Instant::now();
        let deadline = started + grace;
        crate::cluster::manager_link::announce_reclaim(&self.shared, grace, mode)
            .map_err(|e| ServerError::Manager(e.to_string()))?;
        loop {
            let held = self.shared.store.region_count();
            let moving = self.shared.migrations.busy();
            if held == 0 && moving == 0 {
                break;
            }
            if std::time::Instant::now() >= deadline {
                return Ok(Leave {
                    regions_left: held,
                    took: started.elapsed(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Leave {
            regions_left: 0,
            took: started.elapsed(),
        })
    }

    /// Stops accepting, closes all connections and joins every thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    /// Blocks until the server stops (for `farcache server`).
    pub fn join(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    fn stop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.nap.1.notify_all();
        self.shared.control.close();
        self.shared.replicator.close_all(&self.shared);
        for w in &self.wakers {
            let _ = w.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}
