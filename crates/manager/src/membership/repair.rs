//! Re-replication: a region left with fewer copies than its cache asks for (a backup
//! died, or took over from a dead owner) gets a new backup, copied live from its owner
//! to a server holding no copy of it.

use std::time::{Duration, Instant};

use farcache_proto::control::HeldRegion;

use crate::catalogue::up;
use crate::cluster::Cluster;

/// Longest a single copy may take before it is given up (and tried again later).
const COPY_DEADLINE: Duration = Duration::from_secs(120);

impl Cluster {
    /// Gives regions short of copies new backups, one after another, for about
    /// `budget` (then the caller's other duties come first). Returns how many.
    pub(crate) fn repair(&self, budget: Duration) -> usize {
        let t0 = Instant::now();
        let mut n = 0;
        while t0.elapsed() < budget && self.repair_once() {
            n += 1;
        }
        n
    }

    /// Gives at most one region short of copies a new backup. Returns true if one
    /// got it.
    pub(crate) fn repair_once(&self) -> bool {
        let Some(r) = self.short_region() else {
            return false;
        };
        match self.add_backup(r.cache, r.region, Instant::now() + COPY_DEADLINE) {
            Ok(rec) => {
                tracing::info!(
                    cache = rec.cache,
                    region = rec.region,
                    owner = rec.from,
                    new_backup = rec.to,
                    copy_ms = rec.copy_us / 1000,
                    "region has a new backup"
                );
                self.state.lock().events.migrated(rec);
                true
            }
            Err(e) => {
                tracing::debug!(
                    cache = r.cache,
                    region = r.region,
                    "cannot add a backup yet: {}",
                    e.message
                );
                false
            }
        }
    }

    /// A region with fewer copies than its cache's `replicas` whose owner is alive.
    fn short_region(&self) -> Option<HeldRegion> {
        let st = self.state.lock();
        // Only caches with a region short of copies are looked at: a tick costs what
        // changed, not the size of the catalogue.
        for rec in st.catalogue.short_caches() {
            for region in rec.short_of_copies() {
                let owner = rec.regions[region as usize];
                if st.catalogue.server_state(owner).is_some_and(up) {
                    return Some(HeldRegion {
                        cache: rec.id,
                        region,
                    });
                }
            }
        }
        None
    }
}
