//! Servers whose regions disagree with the catalogue (their heartbeat digest says
//! so). A region a server holds that no cache places there (left by a manager that
//! died between placing and committing, or by a lost free) is freed; a region the
//! catalogue places there that the server no longer holds (it restarted) is lost and
//! goes the way of a dead server's regions. Decisions are made under `changes`,
//! against the catalogue as it is then, and never while a copy runs.

use farcache_proto::CacheId;
use farcache_proto::control::{ControlRequest, HeldRegion};

use crate::cluster::{Cluster, Target};

impl Cluster {
    /// Frees regions servers hold that no cache in the catalogue places there (left by
    /// a manager that died between placing regions and committing the cache, or by a
    /// free that never arrived), for every alive server whose heartbeat disagrees with
    /// the catalogue. Each suspect is asked what it holds with no lock held (a server
    /// that went silent must not hold promotions up behind its connect timeout); the
    /// decisions are then made under the change lock, against the catalogue as it is
    /// by then.
    pub(crate) fn reconcile(&self) {
        let suspects: Vec<(Target, Vec<HeldRegion>)> = {
            let st = self.state.lock();
            st.catalogue
                .disagreeing()
                .into_iter()
                .filter_map(|id| {
                    let t = self.targets(&st.catalogue, &[id]).pop()?;
                    Some((t, st.catalogue.placed_on(id)))
                })
                .collect()
        };
        if suspects.is_empty() {
            return;
        }
        let answers: Vec<(Target, Vec<HeldRegion>, Vec<HeldRegion>)> = suspects
            .into_iter()
            .filter_map(|(t, placed_then)| match self.links.list_regions(t.server, &t.addr) {
                Ok(held) => Some((t, placed_then, held)),
                Err(e) => {
                    tracing::warn!(server = t.server, error = %e, "cannot list the regions a server holds");
                    None
                }
            })
            .collect();
        // Not while a copy runs: its target holds a region the catalogue does not
        // place there yet, which must not be freed as an orphan.
        let _copies = self.copies.lock();
        let _changes = self.changes.lock();
        for (t, placed_then, held) in answers {
            let (placed, known) = {
                let st = self.state.lock();
                // Died, or agrees again, since it answered: nothing to do here.
                if !st.catalogue.disagreeing().contains(&t.server) {
                    continue;
                }
                let placed = st.catalogue.placed_on(t.server);
                // Only the caches this server holds regions of are looked up.
                let known: std::collections::HashSet<CacheId> = held
                    .iter()
                    .map(|r| r.cache)
                    .filter(|&c| st.catalogue.cache(c).is_some())
                    .collect();
                (placed, known)
            };
            let mut dropped: Vec<CacheId> = Vec::new();
            for r in held.iter().filter(|r| !placed.contains(r)) {
                if !known.contains(&r.cache) {
                    if !dropped.contains(&r.cache) {
                        dropped.push(r.cache);
                        tracing::info!(
                            server = t.server,
                            cache = r.cache,
                            "dropping a cache the catalogue does not know"
                        );
                        self.best_effort(
                            &t,
                            &ControlRequest::DropCache { cache: r.cache },
                            "drop orphan cache",
                        );
                    }
                    continue;
                }
                tracing::info!(
                    server = t.server,
                    cache = r.cache,
                    region = r.region,
                    "freeing a region no cache places there"
                );
                let req = ControlRequest::FreeRegion {
                    cache: r.cache,
                    region: r.region,
                    moved_to: None,
                };
                self.best_effort(&t, &req, "free orphan region");
            }
            // Missing only if placed there before it answered as well as now: a
            // region placed since (a copy finished) may have arrived after the answer.
            let missing: Vec<HeldRegion> = placed
                .iter()
                .filter(|r| placed_then.contains(r) && !held.contains(r))
                .copied()
                .collect();
            if !missing.is_empty() {
                tracing::warn!(
                    server = t.server,
                    regions = missing.len(),
                    "server does not hold regions the catalogue places there (it restarted): they are lost"
                );
                // Backups take over what they can; the rest is placed again here.
                let orphans = self.promote_backups(t.server, Some(&missing));
                self.replace_lost(t.server, &orphans, "restarted", true);
            }
        }
    }
}
