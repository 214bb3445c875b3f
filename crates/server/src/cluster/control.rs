//! Control requests a server answers — region placement, capacity, routes and
//! procedures (from the manager only), and stats — on a small pool of threads, never on
//! a worker: compiling a WebAssembly module or resolving a peer's name can take long.
//!
//! A worker hands a request over as a [`Job`] and stops reading from that connection;
//! the pool sends the reply frame back to the worker, which resumes the connection.

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::Duration;

use farcache_proto::control::{ControlErrorCode, ControlRequest, ControlResponse, ServerStats};
use farcache_proto::frame::encode_frame;
use farcache_proto::{Access, FrameKind, Role};
use parking_lot::Mutex;
use tracing::{info, warn};

use crate::cluster::Shared;
use crate::cluster::mailbox::WorkerMsg;
use crate::error::StoreError;
use crate::metrics::GuardCounters;

/// Threads answering control requests: one may compile a module while the other
/// places regions.
const POOL_THREADS: usize = 2;
/// Longest a migration status request waits for the copy to end (it holds one of
/// the pool's threads meanwhile).
const MAX_STATUS_WAIT_MS: u32 = 1000;

/// A control request from one connection of one worker.
pub struct Job {
    pub worker: usize,
    pub conn: usize,
    pub serial: u64,
    pub seq: u64,
    pub role: Role,
    pub access: Access,
    pub req: ControlRequest,
}

/// The workers' end of the pool.
pub struct Queue {
    tx: Mutex<Option<Sender<Job>>>,
}

impl Queue {
    pub fn new() -> (Self, Receiver<Job>) {
        let (tx, rx) = channel();
        (
            Self {
                tx: Mutex::new(Some(tx)),
            },
            rx,
        )
    }

    /// Queues a job; false once the server is stopping.
    pub fn submit(&self, job: Job) -> bool {
        self.tx
            .lock()
            .as_ref()
            .is_some_and(|tx| tx.send(job).is_ok())
    }

    /// Lets the pool threads finish.
    pub fn close(&self) {
        self.tx.lock().take();
    }
}

pub fn spawn_pool(sh: &Arc<Shared>, rx: Receiver<Job>) -> std::io::Result<Vec<JoinHandle<()>>> {
    let rx = Arc::new(Mutex::new(rx));
    (0..POOL_THREADS)
        .map(|i| {
            let (sh, rx) = (sh.clone(), rx.clone());
            std::thread::Builder::new()
                .name(format!("fc-control-{i}"))
                .spawn(move || serve(&sh, &rx))
        })
        .collect()
}

fn serve(sh: &Arc<Shared>, rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = match rx.lock().recv_timeout(Duration::from_millis(200)) {
            Ok(j) => j,
            Err(RecvTimeoutError::Timeout) if !sh.shutdown.load(Ordering::Acquire) => continue,
            Err(_) => return,
        };
        let reply = handle(sh, job.role, job.access, job.req);
        let mut frame = Vec::new();
        encode_frame(
            &mut frame,
            FrameKind::ControlReply,
            job.seq,
            &reply.encode(),
        );
        sh.mailboxes.post(
            job.worker,
            WorkerMsg::ControlReply {
                conn: job.conn,
                serial: job.serial,
                frame,
            },
        );
    }
}

fn forbidden(sh: &Shared, what: &str, role: Role, who: &str) -> ControlResponse {
    GuardCounters::bump(&sh.metrics.guard.forbidden);
    ControlResponse::error(
        ControlErrorCode::Forbidden,
        format!("{what} is only accepted from {who}; this connection authenticated as {role:?}"),
    )
}

pub fn handle(
    sh: &Arc<Shared>,
    role: Role,
    access: Access,
    req: ControlRequest,
) -> ControlResponse {
    let manager_only = matches!(
        req,
        ControlRequest::AllocRegion { .. }
            | ControlRequest::FreeRegion { .. }
            | ControlRequest::DropCache { .. }
            | ControlRequest::LoadProc { .. }
            | ControlRequest::SetRoutes { .. }
            | ControlRequest::ResizeCache { .. }
            | ControlRequest::ListRegions
            | ControlRequest::MigrateRegion { .. }
            | ControlRequest::MigrationStatus { .. }
            | ControlRequest::AbortMigration { .. }
            | ControlRequest::ForgetLost { .. }
    );
    if manager_only && role != Role::Manager {
        return forbidden(sh, &req.name(), role, "the manager");
    }
    match req {
        ControlRequest::AllocRegion {
            cache,
            region,
            region_size,
            capacity,
            epoch,
            lost,
            incoming,
            load,
        } => {
            let arrival = crate::engine::store::Arrival {
                // A region loaded from a file reads as lost until the load is done.
                lost: lost || load.is_some(),
                incoming,
                read_only: load.is_some(),
            };
            match sh
                .store
                .alloc(cache, region, region_size, capacity, epoch, arrival)
            {
                Ok(()) => {
                    if let Some(slice) = load {
                        return match crate::cluster::source_file::load(sh, cache, region, &slice) {
                            Ok(()) => {
                                info!(cache, region, path = %slice.path, offset = slice.offset, len = slice.len, "region loaded from file");
                                ControlResponse::Ok
                            }
                            Err(e) => {
                                sh.store.free(cache, region, None);
                                ControlResponse::error(
                                    ControlErrorCode::InvalidArgument,
                                    e.to_string(),
                                )
                            }
                        };
                    }
                    if lost {
                        warn!(
                            cache,
                            region, region_size, epoch, "region placed empty: its data was lost"
                        );
                    } else {
                        info!(cache, region, region_size, epoch, incoming, "region placed");
                    }
                    ControlResponse::Ok
                }
                Err(e @ StoreError::NoMemory { .. }) => {
                    ControlResponse::error(ControlErrorCode::InsufficientMemory, e.to_string())
                }
                Err(e) => ControlResponse::error(ControlErrorCode::InvalidArgument, e.to_string()),
            }
        }
        ControlRequest::FreeRegion {
            cache,
            region,
            moved_to,
        } => {
            if moved_to.is_some() {
                sh.migrations.finish(sh, cache, region);
            } else {
                sh.migrations.abort(sh, cache, region, "region freed");
            }
            let freed = sh.store.free(cache, region, moved_to);
            info!(cache, region, freed, "region freed");
            refresh_peers(sh);
            ControlResponse::Ok
        }
        ControlRequest::DropCache { cache } => {
            let dropped = sh.store.drop_cache(cache);
            sh.procs.drop_cache(cache);
            info!(cache, dropped, "cache dropped");
            refresh_peers(sh);
            ControlResponse::Ok
        }
        ControlRequest::LoadProc {
            cache,
            proc_name,
            code,
        } => match sh.procs.load(cache, &proc_name, &code) {
            Ok(()) => {
                info!(cache, proc_name, bytes = code.len(), "procedure loaded");
                ControlResponse::Ok
            }
            Err(e) => ControlResponse::error(ControlErrorCode::InvalidArgument, e.to_string()),
        },
        ControlRequest::SetRoutes {
            cache,
            epoch,
            owners,
            capacity,
            backups,
        } => {
            let regions = owners.len();
            settle_migrations(sh, cache, epoch, &owners);
            sh.store
                .set_routes(cache, epoch, owners, &backups, capacity, &sh.advertise);
            // After the table: a new backup gets writes before its copy's pause lifts.
            settle_new_backups(sh, cache, epoch, &backups);
            sh.replicator.retain_used(sh);
            refresh_peers(sh);
            info!(cache, epoch, regions, "routes updated");
            ControlResponse::Ok
        }
        ControlRequest::ResizeCache {
            cache,
            capacity,
            epoch,
        } => {
            let held = sh.store.resize(cache, capacity, epoch);
            info!(cache, capacity, epoch, held, "capacity updated");
            ControlResponse::Ok
        }
        ControlRequest::ListRegions => ControlResponse::Regions {
            regions: sh.store.held(),
        },
        ControlRequest::MigrateRegion {
            cache,
            region,
            to,
            mode,
            replicate,
        } => match sh.migrations.start(sh, cache, region, &to, mode, replicate) {
            Ok(()) => {
                info!(cache, region, %to, ?mode, replicate, "migration started");
                ControlResponse::Ok
            }
            Err(e) => ControlResponse::error(ControlErrorCode::InvalidArgument, e),
        },
        ControlRequest::MigrationStatus {
            cache,
            region,
            wait_ms,
        } => {
            let wait = Duration::from_millis(u64::from(wait_ms.min(MAX_STATUS_WAIT_MS)));
            ControlResponse::Migration(sh.migrations.report(cache, region, wait))
        }
        ControlRequest::AbortMigration { cache, region } => {
            sh.migrations
                .abort(sh, cache, region, "the manager gave it up");
            ControlResponse::Ok
        }
        ControlRequest::ForgetLost { cache, addr, len } => {
            let cleared = sh.store.forget_lost(cache, addr, len);
            info!(cache, addr, len, cleared, "loss acknowledged");
            ControlResponse::Ok
        }
        ControlRequest::ServerStats => {
            if role == Role::Client && !access.is_cluster() {
                return forbidden(
                    sh,
                    "ServerStats",
                    role,
                    "cluster members and cluster-secret clients",
                );
            }
            ControlResponse::Stats(stats(sh))
        }
        other => ControlResponse::error(
            ControlErrorCode::InvalidArgument,
            format!(
                "a cache server does not serve '{}'; send it to the manager",
                other.name()
            ),
        ),
    }
}

/// A region table decides migrations still waiting for their switch: if it names
/// another owner for a region being copied away, the move happened (the region
/// leaves, forwarding to the new owner); if it still names this server and is not
/// older than the copy, the manager that started the move is gone (a restarted one
/// pushes the table it knows): the move is abandoned and writes resume here.
fn settle_migrations(sh: &Shared, cache: farcache_proto::CacheId, epoch: u64, owners: &[String]) {
    for (region, start_epoch, to, replicate) in sh.migrations.of_cache(cache) {
        if replicate {
            continue; // see `settle_new_backups`
        }
        let Some(owner) = owners.get(region as usize) else {
            continue;
        };
        if *owner == sh.advertise {
            if epoch >= start_epoch {
                sh.migrations.abort(
                    sh,
                    cache,
                    region,
                    "the region table still names this server",
                );
            }
        } else if !owner.is_empty() {
            if *owner != to {
                warn!(cache, region, %owner, %to, "region moved to another server than the copy's target");
            }
            sh.migrations.finish(sh, cache, region);
            sh.store.free(cache, region, Some(owner.clone()));
        }
    }
}

/// Copies to new backups waiting for their switch: a table listing the target among
/// the region's backups completes the copy (this server keeps the region, and its
/// writes resume, now forwarded there too); a table without it, not older than the
/// copy, abandons it.
fn settle_new_backups(
    sh: &Shared,
    cache: farcache_proto::CacheId,
    epoch: u64,
    backups: &[Vec<String>],
) {
    for (region, start_epoch, to, replicate) in sh.migrations.of_cache(cache) {
        if !replicate {
            continue;
        }
        let listed = backups
            .get(region as usize)
            .is_some_and(|b| b.contains(&to));
        if listed {
            sh.migrations.finish(sh, cache, region);
            sh.store
                .set_gate(cache, region, None, crate::cluster::migration::DRAIN);
        } else if epoch >= start_epoch {
            // Not older than the copy and without the target: the manager that
            // started it is gone (a restarted one pushes what it committed).
            sh.migrations.abort(
                sh,
                cache,
                region,
                "the region table does not list the new backup",
            );
        }
    }
}

/// Rebuilds the set of servers this one may talk to from every region table and
/// forwarding address it holds, resolving new names here (on the pool, not a worker).
pub(crate) fn refresh_peers(sh: &Shared) {
    let map = sh.store.snapshot();
    let old = sh.peers.load();
    let mut next: HashMap<String, SocketAddr> = HashMap::new();
    let named = map.caches.values().flat_map(|c| {
        c.owners
            .iter()
            .chain(c.moved.values())
            .chain(c.backups.values().flat_map(|b| b.iter()))
    });
    for addr in named {
        if addr.is_empty() || *addr == sh.advertise || next.contains_key(addr) {
            continue;
        }
        let resolved = match old.get(addr) {
            Some(a) => Some(*a),
            None => resolve(addr),
        };
        match resolved {
            Some(a) => {
                next.insert(addr.clone(), a);
            }
            None => warn!(peer = %addr, "cannot resolve a server named in a region table"),
        }
    }
    sh.peers.store(Arc::new(next));
}

fn resolve(addr: &str) -> Option<SocketAddr> {
    addr.parse()
        .ok()
        .or_else(|| addr.to_socket_addrs().ok()?.next())
}

pub fn stats(sh: &Shared) -> ServerStats {
    use std::sync::atomic::Ordering::Relaxed;
    ServerStats {
        server_id: sh.server_id(),
        memory: sh.store.memory(),
        used: sh.store.used(),
        regions: sh.store.region_count(),
        connections: sh.metrics.connections.load(Relaxed),
        ops: sh.metrics.ops(),
        protocol_errors: sh.metrics.protocol_errors.load(Relaxed),
        peer: sh.metrics.peer.snapshot(),
        guard: sh.metrics.guard.snapshot(),
        ack_windows: sh.store.ack_windows(),
        worker_panics: sh.metrics.worker_panics.load(Relaxed),
        migrations: sh.migrations.busy() as u64,
        lost_bytes: sh.store.lost_bytes(),
        replication: sh.replicator.stats(),
        completions: farcache_proto::control::CompletionStats {
            records: sh.completions.len() as u64,
            repeats: sh.completions.repeats.load(Relaxed),
            evicted: sh.completions.evicted.load(Relaxed),
            unrecorded: sh.completions.unrecorded.load(Relaxed),
        },
    }
}
