//! Request handling: turns each `ControlRequest` into a `ControlResponse`, after
//! checking that the caller's proven role and credential allow it ([`auth`]).
//!
//! [`Service::handle`] is the one entry: it authorises, then dispatches to the concern
//! that owns the request: server membership ([`servers`]), a cache's life
//! ([`caches`]), procedures ([`procedures`]), or servers leaving (`membership`, on the
//! shared [`Cluster`]). The state every concern works on, and its locks, live in the
//! cluster; the service adds what only requests need (tokens, defaults, the SLO
//! planner).

mod auth;
mod caches;
mod procedures;
mod servers;

use std::sync::Arc;
use std::time::Duration;

use farcache_proto::Authority;
use farcache_proto::control::{ClusterStatus, ControlRequest, ControlResponse};

use crate::catalogue::{Catalogue, ServerRecord};
use crate::cluster::Cluster;
use crate::config::ManagerConfig;
use crate::error::Reject;
use crate::events::Events;
use crate::leadership::Leadership;
use crate::slo::Planner;
use crate::store::Store;

use auth::role_name;

pub use auth::Caller;
pub use procedures::MAX_PROC_CODE;

/// Answers control requests; one per manager, shared by the listener's request pools.
pub struct Service {
    /// What every concern works on; membership's threads hold it too.
    pub(crate) cluster: Arc<Cluster>,
    authority: Authority,
    region_size: u64,
    heartbeat_ms: u64,
    heartbeat_timeout: Duration,
    /// Answers caches created from an SLO.
    slo: Planner,
}

impl Service {
    pub(crate) fn new(
        config: &ManagerConfig,
        catalogue: Catalogue,
        events: Events,
        store: Store,
        slo: Planner,
        leadership: Arc<Leadership>,
    ) -> Self {
        Self {
            slo,
            region_size: config.region_size,
            heartbeat_ms: u64::try_from(config.heartbeat_interval.as_millis()).unwrap_or(u64::MAX),
            heartbeat_timeout: config.heartbeat_timeout,
            cluster: Cluster::new(catalogue, events, store, config.secret.clone(), leadership),
            authority: Authority::new(config.secret.clone()),
        }
    }

    pub fn status(&self) -> ClusterStatus {
        self.cluster.status()
    }

    /// Releases the store and server connections; later requests get `Unavailable`.
    pub fn close(&self) {
        self.cluster.close();
    }

    /// The one entry for requests: refuses what `caller` may not ask, then hands the
    /// request to the concern that owns it. Refusals and failures become error replies.
    pub fn handle(&self, caller: &Caller, req: ControlRequest) -> ControlResponse {
        if !self.cluster.leadership.holds() {
            // A deposed manager's view may be stale: it neither answers nor grants
            // leases. Callers with several manager addresses try the next.
            return Reject::new(
                farcache_proto::control::ControlErrorCode::NotLeader,
                "this manager no longer leads; ask another",
            )
            .into();
        }
        if let Err(r) = self.authorize(caller, &req) {
            tracing::warn!(
                who = %role_name(caller.role, &caller.access),
                request = %req.name(),
                "request refused: {}",
                r.message
            );
            return r.into();
        }
        let result = match req {
            ControlRequest::RegisterServer {
                server_id,
                addr,
                memory,
                cores,
                threads,
                price_class,
                price_per_gib_hour,
                tls_addr,
            } => self.register(
                ServerRecord {
                    id: server_id.unwrap_or(0),
                    addr,
                    memory,
                    cores,
                    threads,
                    price_class,
                    price_per_gib_hour,
                    tls_addr,
                    reclaim: None,
                },
                server_id.is_some(),
            ),
            ControlRequest::Heartbeat {
                server_id,
                used,
                regions,
                digest,
            } => self.heartbeat(server_id, used, (regions, digest)),
            ControlRequest::BackupStalled {
                server_id,
                backup,
                stalled_ms,
            } => self.cluster.backup_stalled(server_id, &backup, stalled_ms),
            ControlRequest::CreateCache {
                name,
                capacity,
                region_size,
                replicas,
                from_file,
                slo,
            } => self.create(name, capacity, region_size, replicas, from_file, slo),
            ControlRequest::SetSlo { name, slo } => {
                self.set_slo(&name, slo).map(ControlResponse::Cache)
            }
            ControlRequest::OpenCache { name } => self.open(&name).map(ControlResponse::Cache),
            ControlRequest::ReshapeCache { name, capacity } => {
                self.reshape(&name, capacity).map(ControlResponse::Cache)
            }
            ControlRequest::DeleteCache { name } => {
                self.delete(&name).map(|()| ControlResponse::Ok)
            }
            ControlRequest::IssueToken { name, rights } => self.issue_token(&name, rights),
            ControlRequest::Status => Ok(ControlResponse::Status(self.status())),
            ControlRequest::ReclaimServer {
                server_id,
                grace_ms,
                mode,
            } => self
                .cluster
                .reclaim(server_id, Duration::from_millis(grace_ms), mode)
                .map(|()| ControlResponse::Ok),
            ControlRequest::MoveRegion {
                name,
                region,
                to,
                mode,
            } => self
                .cluster
                .move_region(&name, region, to, mode)
                .map(|()| ControlResponse::Ok),
            ControlRequest::ClearLost { name, addr, len } => self
                .cluster
                .clear_lost(&name, addr, len)
                .map(|()| ControlResponse::Ok),
            ControlRequest::RegisterProc {
                cache,
                proc_name,
                code,
            } => self
                .register_proc(&cache, &proc_name, code)
                .map(|()| ControlResponse::Ok),
            other => Err(server_only(&other.name())),
        };
        result.unwrap_or_else(ControlResponse::from)
    }
}

fn server_only(what: &str) -> Reject {
    Reject::invalid(format!(
        "{what} is a server request; the manager does not serve it"
    ))
}
