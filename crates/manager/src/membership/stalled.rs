//! A backup cut off from its owner only. The manager still hears its heartbeats, so
//! nothing declares it dead, yet its owner cannot get a write acknowledged by it:
//! every write to the regions it backs would wait until the link heals. The owner
//! reports such a backup once its writes have waited a lease; the manager drops it
//! from the regions that owner owns (as Kafka's leader shrinks its in-sync replica
//! set), commits the table, and pushes it to the owner. The owner's link to it closes and the
//! waiting writes are acknowledged with the copies left; `repair` adds a backup
//! again later (on the same server once the link works).

use farcache_proto::ServerId;
use farcache_proto::control::{ControlErrorCode, ControlResponse};

use crate::cluster::Cluster;
use crate::error::Reject;
use crate::store::Write;

impl Cluster {
    /// Server `owner` cannot replicate to the server at `backup` (its writes have
    /// waited `stalled_ms`): drops that backup from every region `owner` owns.
    pub(crate) fn backup_stalled(
        &self,
        owner: ServerId,
        backup: &str,
        stalled_ms: u64,
    ) -> Result<ControlResponse, Reject> {
        let _changes = self.changes.lock();
        let (backup_id, caches) = {
            let st = self.state.lock();
            if !st
                .catalogue
                .server_state(owner)
                .is_some_and(crate::catalogue::up)
            {
                return Err(Reject::new(
                    ControlErrorCode::Fenced,
                    format!("server {owner} is not alive: it owns nothing to keep writing"),
                ));
            }
            let Some(b) = st.catalogue.alive_at(backup) else {
                // Dead already (its copies were dropped then), or unknown.
                return Ok(ControlResponse::Ok);
            };
            let caches: Vec<crate::catalogue::CacheRecord> = st
                .catalogue
                .status()
                .caches
                .iter()
                .filter_map(|c| st.catalogue.cache(c.id).cloned())
                .filter(|c| {
                    let h = c.holders();
                    h.contains(&owner) && h.contains(&b)
                })
                .collect();
            (b, caches)
        };
        for rec in caches {
            let mut next = rec.clone();
            let mut dropped = Vec::new();
            for (i, &o) in rec.regions.iter().enumerate() {
                if o != owner {
                    continue;
                }
                if let Some(b) = next.backups.get_mut(i)
                    && b.contains(&backup_id)
                {
                    b.retain(|&s| s != backup_id);
                    dropped.push(i);
                }
            }
            if dropped.is_empty() {
                continue;
            }
            next.epoch = rec.epoch + 1;
            let info = {
                let mut st = self.state.lock();
                st.commit(&[Write::Cache(&next)]).map_err(|e| {
                    Reject::new(
                        ControlErrorCode::Internal,
                        format!("cannot record a dropped backup: {}", e.message),
                    )
                })?;
                st.catalogue.insert_cache(next.clone());
                st.catalogue.cache_info(&next)
            };
            tracing::warn!(
                cache = rec.id,
                owner,
                backup = backup_id,
                regions = ?dropped,
                stalled_ms,
                epoch = next.epoch,
                "owner cannot reach its backup: backup dropped from its regions"
            );
            // To the owner only: it is the one server that reads a region's backups
            // from its table, and its writes wait for this one. The others learn
            // the epoch with the next push; pushing to all of them here would
            // wait out the call timeout of any that vanished (the stalled backup
            // may be one) while holding `changes`, and so delay its failover.
            self.push_routes_to(&info, &[owner]);
        }
        Ok(ControlResponse::Ok)
    }
}
