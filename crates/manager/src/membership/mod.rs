//! Servers that leave: reclaimed with notice (their regions migrate live, see
//! [`reclaim`]) or lost without notice (their regions are re-placed empty and marked
//! lost, see [`recovery`]). Every change of a region's owner holds the service's
//! `changes` lock while it decides and commits, so region tables are pushed in order.
//! A live copy (a move or a new backup) does not hold it while the bytes travel,
//! so a failover never waits behind a copy; copies run one at a time (the service's
//! `copies` lock), and a copy's commit checks that the cache's record did not change
//! meanwhile (else the copy is undone and counts as failed).

mod rebalance;
mod reclaim;
mod recovery;
mod repair;
mod stalled;

use std::collections::VecDeque;

use farcache_proto::control::{LostRegion, MigrationRecord, Promotion};

/// How many recent migrations and losses `status` shows.
const KEEP: usize = 1024;

/// Recent migrations and losses (not persisted: they describe this manager's run).
#[derive(Debug, Default)]
pub struct Events {
    pub migrations: VecDeque<MigrationRecord>,
    pub lost: VecDeque<LostRegion>,
    pub promotions: VecDeque<Promotion>,
}

impl Events {
    pub fn migrated(&mut self, r: MigrationRecord) {
        if self.migrations.len() == KEEP {
            self.migrations.pop_front();
        }
        self.migrations.push_back(r);
    }

    pub fn promoted(&mut self, p: Promotion) {
        if self.promotions.len() == KEEP {
            self.promotions.pop_front();
        }
        self.promotions.push_back(p);
    }

    pub fn lost(&mut self, r: LostRegion) {
        if self.lost.len() == KEEP {
            self.lost.pop_front();
        }
        self.lost.push_back(r);
    }
}
