//! Regions whose only copy is gone (its server died, restarted, or left before they
//! could move) are placed again, empty and marked lost: reads of them fail with
//! `DATA_LOST` until the application overwrites them or acknowledges the loss, and
//! never return zeros as if they were data.

use std::collections::BTreeMap;

use farcache_proto::control::{ControlRequest, HeldRegion, LostRegion};
use farcache_proto::{CacheId, ServerId};

use crate::error::Reject;
use crate::placement;
use crate::service::Service;
use crate::store::Write;

impl Service {
    /// Server `id` died: its regions are re-placed as lost.
    pub(crate) fn recover_dead(&self, id: ServerId) {
        let _changes = self.changes.lock();
        let placed = self.state.lock().catalogue.placed_on(id);
        if !placed.is_empty() {
            tracing::warn!(
                server = id,
                regions = placed.len(),
                "server died holding the only copy of these regions: re-placing them as lost"
            );
            self.replace_lost(id, &placed, "killed", false);
        }
    }

    /// Places `regions` (each on server `was_on` in the catalogue) again, empty and lost.
    /// `same_server`: the server is alive but lost them (a restart), and takes them
    /// back; otherwise they go to other live servers. The caller holds `changes`.
    pub(crate) fn replace_lost(
        &self,
        was_on: ServerId,
        regions: &[HeldRegion],
        reason: &str,
        same_server: bool,
    ) {
        let mut by_cache: BTreeMap<CacheId, Vec<u32>> = BTreeMap::new();
        for r in regions {
            by_cache.entry(r.cache).or_default().push(r.region);
        }
        for (cache, lost) in by_cache {
            if let Err(e) = self.replace_lost_in(cache, was_on, &lost, reason, same_server) {
                tracing::error!(cache, server = was_on, regions = ?lost, "lost regions could not be placed again (ops on them fail until a server has room): {}", e.message);
            }
        }
    }

    fn replace_lost_in(
        &self,
        cache: CacheId,
        was_on: ServerId,
        lost: &[u32],
        reason: &str,
        same_server: bool,
    ) -> Result<(), Reject> {
        let (rec, plan) = {
            let st = self.state.lock();
            let Some(rec) = st.catalogue.cache(cache).cloned() else {
                return Ok(()); // deleted meanwhile
            };
            let lost: Vec<u32> = lost
                .iter()
                .copied()
                .filter(|&r| rec.regions.get(r as usize) == Some(&was_on))
                .collect();
            let chosen = if same_server {
                vec![was_on; lost.len()]
            } else {
                let cands: Vec<_> = st
                    .catalogue
                    .candidates()
                    .into_iter()
                    .filter(|c| c.id != was_on)
                    .collect();
                placement::place(&cands, lost.len(), rec.region_size).map_err(|s| {
                    Reject::new(
                        farcache_proto::control::ControlErrorCode::InsufficientMemory,
                        s.to_string(),
                    )
                })?
            };
            let targets = self.targets(&st.catalogue, &chosen);
            (rec, lost.into_iter().zip(targets).collect::<Vec<_>>())
        };
        if plan.is_empty() {
            return Ok(());
        }
        let epoch = rec.epoch + 1;
        let mut next = rec.clone();
        let mut placed = Vec::new();
        for (region, t) in &plan {
            let req = ControlRequest::AllocRegion {
                cache,
                region: *region,
                region_size: rec.region_size,
                capacity: rec.capacity,
                epoch,
                lost: true,
                incoming: false,
            };
            match self.links.call(t.server, &t.addr, &req) {
                Ok(()) => {
                    next.regions[*region as usize] = t.server;
                    placed.push(LostRegion {
                        cache,
                        region: *region,
                        was_on,
                        now_on: t.server,
                        reason: reason.to_owned(),
                    });
                }
                Err(e) => {
                    tracing::warn!(
                        cache,
                        region,
                        server = t.server,
                        "cannot place a lost region: {e}"
                    );
                }
            }
        }
        if placed.is_empty() {
            return Err(Reject::unavailable("no server took the lost regions"));
        }
        next.epoch = epoch;
        let info = {
            let mut st = self.state.lock();
            st.commit(&[Write::Cache(&next)])?;
            st.catalogue.insert_cache(next.clone());
            for p in &placed {
                tracing::warn!(
                    cache,
                    region = p.region,
                    was_on,
                    now_on = p.now_on,
                    reason,
                    "region lost: placed again empty, reads answer DATA_LOST"
                );
                st.events.lost(p.clone());
            }
            st.catalogue.cache_info(&next)
        };
        // A server that is still up (it is leaving) must stop serving its stale copy:
        // it forwards to the new owner instead.
        if !same_server {
            let source = {
                let st = self.state.lock();
                self.targets(&st.catalogue, &[was_on]).pop()
            };
            if let Some(src) = source.filter(|s| crate::catalogue::up(s.state)) {
                for p in &placed {
                    let to = info.server(p.now_on).map(|s| s.addr.clone());
                    let free = ControlRequest::FreeRegion {
                        cache,
                        region: p.region,
                        moved_to: to,
                    };
                    self.best_effort(&src, &free, "retire a lost region's old copy");
                }
            }
        }
        self.push_routes(&info);
        Ok(())
    }

    /// Acknowledges the loss of `[addr, addr+len)` of cache `name` on every server
    /// holding part of it.
    pub(crate) fn clear_lost(&self, name: &str, addr: u64, len: u64) -> Result<(), Reject> {
        let _changes = self.changes.lock();
        let (rec, holders) = {
            let st = self.state.lock();
            let rec = st
                .catalogue
                .cache_by_name(name)
                .cloned()
                .ok_or_else(|| Reject::not_found(name))?;
            let end = addr
                .checked_add(len)
                .filter(|&e| e <= rec.capacity)
                .ok_or_else(|| {
                    Reject::invalid(format!(
                        "[{addr}, {addr}+{len}) is outside the cache (capacity {})",
                        rec.capacity
                    ))
                })?;
            let rs = rec.region_size.max(1);
            let mut ids: Vec<ServerId> = if len == 0 {
                Vec::new()
            } else {
                rec.regions[(addr / rs) as usize..=((end - 1) / rs) as usize].to_vec()
            };
            ids.sort_unstable();
            ids.dedup();
            let holders = self.targets(&st.catalogue, &ids);
            (rec, holders)
        };
        for t in &holders {
            let req = ControlRequest::ForgetLost {
                cache: rec.id,
                addr,
                len,
            };
            self.links.call(t.server, &t.addr, &req).map_err(|e| {
                Reject::unavailable(format!("server {} ({}): {e}", t.server, t.addr))
            })?;
        }
        tracing::info!(cache = rec.id, addr, len, "loss acknowledged");
        Ok(())
    }
}
