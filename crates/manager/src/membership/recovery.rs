//! A server that died takes its copies with it. A region it owned that has a backup
//! on a live server is served by that backup from the next region table on (promotion,
//! with an epoch bump); its other backups stay. Regions whose every copy is gone are
//! placed again: reloaded from the source file of a read-only cache, or else empty and
//! marked lost, so reads fail with `DATA_LOST` until the application overwrites them
//! or acknowledges the loss, and never return zeros as if they were data. Regions left
//! with fewer copies than their cache asks for get new backups later ([`repair`]).

use std::collections::BTreeMap;

use farcache_proto::control::{ControlRequest, HeldRegion, LostRegion};
use farcache_proto::{CacheId, ServerId};

use crate::cluster::Cluster;
use crate::error::Reject;
use crate::events::Event;
use crate::placement;
use crate::store::Write;

impl Cluster {
    /// Server `id` died: backups take over the regions it owned, its backups are
    /// dropped, and regions without a surviving copy are re-placed as lost.
    pub(crate) fn recover_dead(&self, id: ServerId) {
        let _changes = self.changes.lock();
        let orphans = self.promote_backups(id, None);
        if !orphans.is_empty() {
            tracing::warn!(
                server = id,
                regions = orphans.len(),
                "server died holding the only copy of these regions: re-placing them"
            );
            self.replace_lost(id, &orphans, "killed", false);
        }
    }

    /// Drops server `id` from every region's copies: a region it owned passes to its
    /// first backup on a live server. Returns the regions it owned with no such backup.
    /// The caller holds `changes`.
    /// With `only`, just those regions' copies on `id` are dropped (a server that
    /// lost some regions).
    pub(crate) fn promote_backups(
        &self,
        id: ServerId,
        only: Option<&[HeldRegion]>,
    ) -> Vec<HeldRegion> {
        let picked = |cache: CacheId, region: usize| {
            only.is_none_or(|o| {
                o.contains(&HeldRegion {
                    cache,
                    region: region as u32,
                })
            })
        };
        let caches: Vec<crate::catalogue::CacheRecord> = {
            let st = self.state.lock();
            st.catalogue
                .status()
                .caches
                .iter()
                .filter_map(|c| st.catalogue.cache(c.id).cloned())
                .filter(|c| c.holders().contains(&id))
                .collect()
        };
        let mut orphans = Vec::new();
        for rec in caches {
            let mut next = rec.clone();
            let mut promoted: Vec<(u32, ServerId)> = Vec::new();
            {
                let st = self.state.lock();
                for (i, owner) in next.regions.iter_mut().enumerate() {
                    if !picked(rec.id, i) {
                        continue;
                    }
                    let Some(b) = next.backups.get_mut(i) else {
                        if *owner == id {
                            orphans.push(HeldRegion {
                                cache: rec.id,
                                region: i as u32,
                            });
                        }
                        continue;
                    };
                    b.retain(|&s| s != id);
                    if *owner != id {
                        continue;
                    }
                    let live = b.iter().position(|&s| {
                        st.catalogue
                            .server_state(s)
                            .is_some_and(crate::catalogue::up)
                    });
                    match live {
                        Some(k) => {
                            *owner = b.remove(k);
                            promoted.push((i as u32, *owner));
                        }
                        None => orphans.push(HeldRegion {
                            cache: rec.id,
                            region: i as u32,
                        }),
                    }
                }
            }
            if next == rec {
                continue;
            }
            next.epoch = rec.epoch + 1;
            let info = {
                let mut st = self.state.lock();
                let events = promoted
                    .iter()
                    .map(|&(region, to)| {
                        Event::Promoted(farcache_proto::control::Promotion {
                            cache: rec.id,
                            region,
                            from: id,
                            to,
                            epoch: next.epoch,
                        })
                    })
                    .collect();
                if let Err(e) = st.commit_with_events(&[Write::Cache(&next)], events) {
                    tracing::error!(cache = rec.id, "cannot record a promotion: {}", e.message);
                    continue;
                }
                st.catalogue.insert_cache(next.clone());
                st.catalogue.cache_info(&next)
            };
            for (region, to) in &promoted {
                tracing::warn!(
                    cache = rec.id,
                    region,
                    dead = id,
                    now_owner = to,
                    epoch = next.epoch,
                    "owner died: a backup took the region over"
                );
            }
            // The new owners first, so the servers they are told about already serve.
            let mut first: Vec<ServerId> = promoted.iter().map(|p| p.1).collect();
            first.sort_unstable();
            first.dedup();
            self.push_routes_to(&info, &first);
            self.push_routes(&info);
        }
        orphans
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
            // A read-only cache loaded from a file reloads the region from it.
            let load = rec.from_file.as_deref().map(|path| {
                crate::cluster::file_slice(path, rec.capacity, rec.region_size, *region)
            });
            let req = ControlRequest::AllocRegion {
                cache,
                region: *region,
                region_size: rec.region_size,
                capacity: rec.capacity,
                epoch,
                lost: load.is_none(),
                incoming: false,
                load,
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
                        reloaded: rec.from_file.is_some(),
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
            let events = placed.iter().cloned().map(Event::Lost).collect();
            st.commit_with_events(&[Write::Cache(&next)], events)?;
            st.catalogue.insert_cache(next.clone());
            for p in &placed {
                let now = if p.reloaded {
                    "reloaded from the cache's source file"
                } else {
                    "placed again empty, reads answer DATA_LOST"
                };
                tracing::warn!(
                    cache,
                    region = p.region,
                    was_on,
                    now_on = p.now_on,
                    reason,
                    "region's copies lost: {now}"
                );
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
            // Backups too: a backup promoted later must not report the loss again.
            let mut ids: Vec<ServerId> = if len == 0 {
                Vec::new()
            } else {
                ((addr / rs) as usize..=((end - 1) / rs) as usize)
                    .flat_map(|i| rec.copies(i).collect::<Vec<_>>())
                    .collect()
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
