//! Opportunistic moves: when cheaper capacity (spot servers) has room, regions on
//! dearer servers migrate onto it in the background, one region per tick, so a
//! cache's $/hour falls without a burst of copying.

use farcache_proto::ServerId;
use farcache_proto::control::{HeldRegion, MigrationMode};

use crate::cluster::Cluster;

impl Cluster {
    /// Moves at most one region to a strictly cheaper server with room. Returns true
    /// if one moved.
    pub(crate) fn rebalance_once(&self) -> bool {
        let Some((region, from)) = self.dearest_movable() else {
            return false;
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        match self.migrate_region(
            region.cache,
            region.region,
            from,
            MigrationMode::DirtyTracking,
            deadline,
        ) {
            Ok(rec) => {
                tracing::info!(
                    cache = rec.cache,
                    region = rec.region,
                    from = rec.from,
                    to = rec.to,
                    "region moved to cheaper capacity"
                );
                self.state.lock().events.migrated(rec);
                true
            }
            Err(e) => {
                tracing::debug!("opportunistic move skipped: {}", e.message);
                false
            }
        }
    }

    /// A region on the dearest alive server that some alive, strictly cheaper server
    /// has room for.
    fn dearest_movable(&self) -> Option<(HeldRegion, ServerId)> {
        let st = self.state.lock();
        let cands = st.catalogue.candidates();
        let mut by_price: Vec<_> = cands.iter().collect();
        by_price.sort_by(|a, b| b.price_per_gib_hour.total_cmp(&a.price_per_gib_hour));
        for dear in by_price {
            // Most ticks end here (no cheaper server has room), before any region is
            // looked at.
            let room = cands
                .iter()
                .filter(|c| c.price_per_gib_hour < dear.price_per_gib_hour)
                .map(|c| c.free)
                .max()
                .unwrap_or(0);
            if room == 0 {
                continue;
            }
            let Some(r) = st.catalogue.first_placed_on(dear.id) else {
                continue;
            };
            let size = st
                .catalogue
                .cache(r.cache)
                .map_or(u64::MAX, |c| c.region_size);
            if room >= size {
                return Some((r, dear.id));
            }
        }
        None
    }
}
