//! Recent migrations, promotions and losses, for `status`.
//!
//! Not persisted: they describe this manager's run. Each list keeps the last
//! [`KEEP`] entries, so a long run cannot grow them without bound.

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
