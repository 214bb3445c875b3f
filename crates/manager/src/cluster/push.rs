//! What servers are told so they can serve a cache without asking the manager: its
//! region table (`SetRoutes`) and its procedures (`LoadProc`). Table pushes are best
//! effort (a server without the table returns continuations to the client); a
//! procedure a server refuses fails the change that needed it.

use farcache_proto::blocking::RpcError;
use farcache_proto::control::{CacheInfo, ControlRequest, ServerState};
use farcache_proto::{CacheId, ServerId};

use super::{Cluster, Target};
use crate::catalogue::ProcDef;
use crate::error::Reject;
use crate::server_link::LinkError;

impl Cluster {
    /// Sends `procs` to every live server in `targets`.
    pub(crate) fn load_procs(
        &self,
        cache: CacheId,
        targets: &[Target],
        procs: &[ProcDef],
    ) -> Result<(), Reject> {
        for t in targets {
            if t.state == ServerState::Dead {
                continue;
            }
            for p in procs {
                let req = ControlRequest::LoadProc {
                    cache,
                    proc_name: p.name.clone(),
                    code: p.code.clone(),
                };
                if let Err(e) = self.links.call(t.server, &t.addr, &req) {
                    let why = format!(
                        "server {} ({}) refused procedure {}: {e}",
                        t.server, t.addr, p.name
                    );
                    return Err(match e {
                        LinkError::Rpc(RpcError::Remote { .. }) => Reject::invalid(why),
                        _ => Reject::unavailable(why),
                    });
                }
            }
        }
        Ok(())
    }

    /// Tells every server of a cache who holds each region, so procedures can move
    /// between servers without the client. Best effort: a server without the table
    /// returns continuations to the client instead.
    pub(crate) fn push_routes(&self, info: &CacheInfo) {
        let mut ids: Vec<ServerId> = info
            .regions
            .iter()
            .chain(info.backups.iter().flatten())
            .copied()
            .collect();
        ids.sort_unstable();
        ids.dedup();
        self.push_routes_to(info, &ids);
    }

    /// Sends a cache's region table to the servers `ids`, best effort.
    pub(crate) fn push_routes_to(&self, info: &CacheInfo, ids: &[ServerId]) {
        let addr_of = |id: ServerId| info.server(id).map(|s| s.addr.clone()).unwrap_or_default();
        let owners: Vec<String> = info.regions.iter().map(|&id| addr_of(id)).collect();
        let backups: Vec<Vec<String>> = info
            .backups
            .iter()
            .map(|b| b.iter().map(|&id| addr_of(id)).collect())
            .collect();
        let req = ControlRequest::SetRoutes {
            cache: info.id,
            epoch: info.epoch,
            owners,
            capacity: info.capacity,
            backups,
        };
        let targets = {
            let st = self.state.lock();
            self.targets(&st.catalogue, ids)
        };
        // In parallel: a server cut off from the manager costs one call timeout, not
        // one per server (a failover pushes tables to every holder).
        match targets.as_slice() {
            [] => {}
            [t] => self.best_effort(t, &req, "send region table"),
            many => std::thread::scope(|s| {
                for t in many {
                    let req = &req;
                    s.spawn(move || self.best_effort(t, req, "send region table"));
                }
            }),
        }
    }

    /// Pushes the region table of every cache with a region on server `id`.
    pub(crate) fn push_tables_of(&self, id: ServerId) {
        let _changes = self.changes.lock();
        let infos: Vec<CacheInfo> = {
            let st = self.state.lock();
            st.catalogue
                .status()
                .caches
                .into_iter()
                .filter(|c| c.regions.contains(&id) || c.backups.iter().flatten().any(|&b| b == id))
                .collect()
        };
        for info in &infos {
            self.push_routes(info);
        }
    }
}
