//! Primary–backup replication of writes (the owner's side).
//!
//! A region whose table lists backups is written here first; the ranges a batch wrote
//! are then read back from the region and sent to every backup as WRITEs, and the
//! batch's response waits until each backup acknowledged them. Each backup has one
//! [`link`] — one ordered connection — shared by all workers: a range is read and
//! queued under the link's lock, so the backup applies the snapshots of a location in
//! the order they were taken, and the last one it applies is at least as new as every
//! write acknowledged before it. Atomics replicate the same way (their result word).
//!
//! A backup that does not answer keeps the writes waiting (they are sent again when
//! the link reconnects) until the manager drops it from the region table; then the
//! writes count as replicated without it. Nothing is acknowledged that a surviving
//! copy does not hold. Each connection is a new *stream* with a higher generation,
//! and the backup refuses frames of older streams ([`streams`]), so frames sent
//! again never land before frames of the connection they replace. A backup that
//! answers `WRONG_SERVER` owns the region now (this server is a stale owner): the
//! waiting writes fail, never acknowledged; other refusals are sent again, at most
//! `MAX_REFUSALS` rounds in a row (about 4 s), then fail too.

mod link;
mod streams;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use farcache_proto::control::{ReplicationStats, region_split};
use parking_lot::Mutex;

use crate::cluster::Shared;
use crate::engine::store::StoreMap;

pub use link::Link;
pub use streams::Streams;

pub use super::mailbox::Waiter;
pub use crate::engine::exec::Written;

#[derive(Default)]
pub struct Counters {
    pub frames: AtomicU64,
    pub bytes: AtomicU64,
    pub held: AtomicU64,
    pub link_failures: AtomicU64,
}

/// The links to every backup this server forwards writes to.
#[derive(Default)]
pub struct Replicator {
    links: Mutex<HashMap<String, Arc<Link>>>,
    pub counters: Arc<Counters>,
}

/// Ranges of one batch bound for one backup.
pub struct Part<'a> {
    link: Arc<Link>,
    ranges: Vec<&'a Written>,
}

impl Replicator {
    /// Groups a batch's written ranges by backup, opening links as needed. Each part
    /// becomes one acknowledgement the batch waits for.
    pub fn plan<'a>(
        &self,
        sh: &Arc<Shared>,
        map: &StoreMap,
        written: &'a [Written],
    ) -> Vec<Part<'a>> {
        let mut parts: Vec<Part<'a>> = Vec::new();
        for w in written {
            let Some(backups) = map.caches.get(&w.cache).and_then(|c| c.backups_at(w.addr)) else {
                continue;
            };
            for b in backups.iter() {
                match parts.iter_mut().find(|p| p.link.addr() == b) {
                    Some(p) => p.ranges.push(w),
                    None => parts.push(Part {
                        link: self.link(sh, b),
                        ranges: vec![w],
                    }),
                }
            }
        }
        parts
    }

    /// Queues the parts' ranges on their links; `waiter` hears once per part.
    pub fn send(&self, sh: &Shared, map: &StoreMap, parts: Vec<Part<'_>>, waiter: Waiter) {
        self.counters.held.fetch_add(1, Relaxed);
        for p in parts {
            p.link.queue(sh, map, &p.ranges, waiter);
        }
    }

    fn link(&self, sh: &Arc<Shared>, addr: &str) -> Arc<Link> {
        let mut links = self.links.lock();
        if let Some(l) = links.get(addr).filter(|l| !l.is_closed()) {
            return l.clone();
        }
        let l = Link::open(sh, addr, self.counters.clone());
        links.insert(addr.to_owned(), l.clone());
        l
    }

    /// After a region table changed: links to servers no region lists as a backup any
    /// more are closed, and the writes waiting on them released.
    pub fn retain_used(&self, sh: &Shared) {
        let map = sh.store.snapshot();
        let used: std::collections::HashSet<&str> = map
            .caches
            .values()
            .flat_map(|c| c.backups.values())
            .flat_map(|b| b.iter().map(String::as_str))
            .collect();
        let mut gone = Vec::new();
        self.links.lock().retain(|addr, l| {
            let keep = used.contains(addr.as_str()) && !l.is_closed();
            if !keep {
                gone.push(l.clone());
            }
            keep
        });
        // Outside the map's lock (see `snapshot`).
        for l in gone {
            l.close(sh);
        }
    }

    /// The links, without holding the map's lock while they are used: a link's own
    /// lock may be held across a blocked send, and the heartbeat (`stalled`) must
    /// never wait behind one.
    fn snapshot(&self) -> Vec<(String, Arc<Link>)> {
        self.links
            .lock()
            .iter()
            .map(|(a, l)| (a.clone(), l.clone()))
            .collect()
    }

    /// Waits until every backup acknowledged everything queued before the call (a
    /// region about to change owner, its writes paused: the new owner's writes must
    /// not overtake this one's at the backups). False on timeout.
    pub fn quiesce(&self, within: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + within;
        let marks: Vec<(Arc<Link>, u64)> = self
            .snapshot()
            .into_iter()
            .map(|(_, l)| {
                let m = l.mark();
                (l, m)
            })
            .collect();
        for (l, m) in marks {
            while !l.reached(m) {
                if std::time::Instant::now() >= deadline {
                    return false;
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
        true
    }

    /// Backups (their addresses) whose writes have waited at least `at_least`
    /// without an acknowledgement, and for how long.
    pub fn stalled(&self, at_least: std::time::Duration) -> Vec<(String, std::time::Duration)> {
        let now = std::time::Instant::now();
        self.snapshot()
            .into_iter()
            .filter_map(|(addr, l)| {
                let d = l.stalled(now)?;
                (d >= at_least).then_some((addr, d))
            })
            .collect()
    }

    /// Before a copy of a region to `addr`: frames of an earlier stream to it (from
    /// when it backed the region before, until it was dropped) may still wait in its
    /// buffers, and applied after the copy they would put older bytes over it. A new
    /// stream announced there makes them refused, unless a connected link's stream
    /// is already the newest.
    pub fn fence_old_streams(&self, sh: &Shared, addr: &str) -> Result<(), String> {
        let link = self.links.lock().get(addr).cloned();
        if link.is_some_and(|l| l.connected()) {
            return Ok(());
        }
        link::connect(sh, addr).map(drop)
    }

    pub fn stats(&self) -> ReplicationStats {
        let c = &self.counters;
        ReplicationStats {
            frames: c.frames.load(Relaxed),
            bytes: c.bytes.load(Relaxed),
            held: c.held.load(Relaxed),
            link_failures: c.link_failures.load(Relaxed),
            unacked: self
                .snapshot()
                .iter()
                .map(|(_, l)| l.unacked() as u64)
                .sum(),
        }
    }

    /// This server lost its regions to others (it was fenced): every link stops and
    /// the writes waiting on them fail instead of being acknowledged.
    pub fn fail_all(&self, sh: &Shared, why: &str) {
        let links: Vec<_> = self.links.lock().drain().collect();
        for (_, l) in links {
            l.fail(sh, why);
        }
    }

    pub fn close_all(&self, sh: &Shared) {
        let links: Vec<_> = self.links.lock().drain().collect();
        for (_, l) in links {
            l.close(sh);
        }
    }
}

/// The region holding `w` and the offset of `w` in it.
fn locate<'m>(
    map: &'m StoreMap,
    w: &Written,
) -> Option<(&'m crate::engine::region::Region, usize)> {
    let c = map.caches.get(&w.cache)?;
    let (idx, off) = region_split(w.addr, c.region_size);
    let r = c.regions.get(idx as usize)?.as_deref()?;
    Some((r, off as usize))
}
