//! Control requests a server answers: region placement (from the manager) and stats.

use farcache_proto::Role;
use farcache_proto::control::{ControlErrorCode, ControlRequest, ControlResponse, ServerStats};
use tracing::info;

use crate::conn::forbidden;
use crate::error::StoreError;
use crate::server::Shared;

pub fn handle(sh: &Shared, role: Role, req: ControlRequest) -> ControlResponse {
    match req {
        ControlRequest::AllocRegion {
            cache,
            region,
            region_size,
            capacity,
        } => {
            if role != Role::Manager {
                return forbidden("AllocRegion");
            }
            match sh.store.alloc(cache, region, region_size, capacity) {
                Ok(()) => {
                    info!(cache, region, region_size, "region placed");
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
            if role != Role::Manager {
                return forbidden("FreeRegion");
            }
            let freed = sh.store.free(cache, region, moved_to);
            info!(cache, region, freed, "region freed");
            ControlResponse::Ok
        }
        ControlRequest::DropCache { cache } => {
            if role != Role::Manager {
                return forbidden("DropCache");
            }
            let dropped = sh.store.drop_cache(cache);
            sh.procs.drop_cache(cache);
            info!(cache, dropped, "cache dropped");
            ControlResponse::Ok
        }
        ControlRequest::LoadProc {
            cache,
            proc_name,
            code,
        } => {
            if role != Role::Manager {
                return forbidden("LoadProc");
            }
            match sh.procs.load(cache, &proc_name, &code) {
                Ok(()) => {
                    info!(cache, proc_name, bytes = code.len(), "procedure loaded");
                    ControlResponse::Ok
                }
                Err(e) => ControlResponse::error(ControlErrorCode::InvalidArgument, e.to_string()),
            }
        }
        ControlRequest::SetRoutes {
            cache,
            epoch,
            owners,
        } => {
            if role != Role::Manager {
                return forbidden("SetRoutes");
            }
            let regions = owners.len();
            sh.store.set_routes(cache, epoch, owners);
            info!(cache, epoch, regions, "routes updated");
            ControlResponse::Ok
        }
        ControlRequest::ServerStats => ControlResponse::Stats(stats(sh)),
        other => ControlResponse::error(
            ControlErrorCode::InvalidArgument,
            format!(
                "a cache server does not serve '{}'; send it to the manager",
                request_name(&other)
            ),
        ),
    }
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
    }
}

fn request_name(req: &ControlRequest) -> String {
    serde_json::to_value(req)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned))
        .unwrap_or_default()
}
