//! Servers that leave: reclaimed with notice (their regions migrate live, see
//! [`reclaim`]) or lost without notice (their regions are re-placed empty and marked
//! lost, see [`recovery`]), and the upkeep that follows (new backups, cheaper
//! placement, regions a restarted server no longer holds). All of it extends
//! [`Cluster`](crate::cluster::Cluster); the service dispatches to it, never the other
//! way round.
//!
//! Every change of a region's owner holds the cluster's `changes` lock while it
//! decides and commits, so region tables are pushed in order. A live copy (a move or
//! a new backup) does not hold it while the bytes travel, so a failover never waits
//! behind a copy; copies run one at a time (the cluster's `copies` lock), and a copy's
//! commit checks that the cache's record did not change meanwhile (else the copy is
//! undone and counts as failed).

mod rebalance;
mod reclaim;
mod reconcile;
mod recovery;
mod repair;
mod stalled;
