//! Live migration of regions away from this server (the source side).
//!
//! The manager places the region on the target, then asks this server to copy it
//! there server to server ([`source`]). Reads keep being served here throughout. With
//! dirty tracking, writes also go on during the copy and the chunks they touch are sent
//! again; writes pause only while the last dirty chunks go and the owner switches.
//! With `PauseRegion` (Redy's scheme) writes to the region pause for the whole copy.
//! Either way only the region being copied is affected.
//!
//! After `HandedOff` the region takes no writes until the manager either switches
//! the owner (`FreeRegion` with `moved_to`, or a region table naming the target) or
//! gives up (`AbortMigration`, or a table that still names this server: a restarted
//! manager that never committed the move). From then on the region's tombstone
//! answers requests for it with the new owner.

mod source;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use farcache_proto::CacheId;
use farcache_proto::control::{MigrationMode, MigrationPhase, MigrationReport};
use parking_lot::{Condvar, Mutex};

use crate::cluster::Shared;

/// How long a gate change waits for batches that started before it to end.
pub(crate) const DRAIN: Duration = Duration::from_secs(2);

struct Progress {
    phase: MigrationPhase,
    bytes: u64,
    rounds: u32,
    /// Completion records sent with the region.
    records: u64,
    started: Instant,
    copied: Option<Instant>,
    /// When writes to the region began to be refused.
    paused_at: Option<Instant>,
    error: Option<String>,
    /// The dirty set while writes are tracked (for its throttle's count).
    dirty: Option<Arc<crate::engine::dirty::DirtyChunks>>,
}

/// One region's migration.
pub struct Task {
    cache: CacheId,
    region: u32,
    to: String,
    mode: MigrationMode,
    /// The target becomes a backup; this server keeps the region.
    replicate: bool,
    /// The region table's epoch when the copy began: a later table that still names
    /// this server means the move was abandoned.
    pub start_epoch: u64,
    cancel: AtomicBool,
    progress: Mutex<Progress>,
    /// Signalled when the copy ends (handed off or failed).
    ended: Condvar,
    /// Other regions whose writes this migration paused (`PauseAll`).
    others: Mutex<Vec<u32>>,
}

impl Task {
    /// Lifts the pauses this migration put on other regions.
    fn release_others(&self, sh: &Shared) {
        for r in std::mem::take(&mut *self.others.lock()) {
            sh.store.set_gate(self.cache, r, None, DRAIN);
        }
    }
}

impl Task {
    fn report(&self) -> MigrationReport {
        let p = self.progress.lock();
        let now = Instant::now();
        MigrationReport {
            phase: p.phase,
            bytes: p.bytes,
            rounds: p.rounds,
            elapsed_us: micros(p.copied.unwrap_or(now) - p.started),
            max_pause_us: p.paused_at.map_or(0, |t| micros(now - t)),
            error: p.error.clone(),
            throttled_writes: p.dirty.as_ref().map_or(0, |d| d.refused()),
        }
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Acquire)
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Migrations from this server, by (cache, region).
#[derive(Default)]
pub struct Migrations {
    tasks: Mutex<HashMap<(CacheId, u32), Arc<Task>>>,
}

impl Migrations {
    /// Starts copying a held region to `to` on a thread of its own. Asking again for
    /// a migration in progress to the same target is a retry and changes nothing.
    pub fn start(
        &self,
        sh: &Arc<Shared>,
        cache: CacheId,
        region: u32,
        to: &str,
        mode: MigrationMode,
        replicate: bool,
    ) -> Result<(), String> {
        if to == sh.advertise {
            return Err("a region cannot migrate to the server holding it".into());
        }
        let snap = sh.store.snapshot();
        let Some(c) = snap.caches.get(&cache) else {
            return Err(format!("cache {cache} has no region here"));
        };
        if !c.regions.get(region as usize).is_some_and(Option::is_some) {
            return Err(format!("region {region} of cache {cache} is not held here"));
        }
        let start_epoch = c.routes_epoch;
        drop(snap);
        let mut tasks = self.tasks.lock();
        if let Some(t) = tasks.get(&(cache, region))
            && !t.cancelled()
            && t.progress.lock().phase != MigrationPhase::Failed
        {
            return if t.to == to {
                Ok(())
            } else {
                Err(format!(
                    "region {region} of cache {cache} is already moving to {}",
                    t.to
                ))
            };
        }
        let task = Arc::new(Task {
            cache,
            region,
            to: to.to_owned(),
            mode,
            replicate,
            start_epoch,
            cancel: AtomicBool::new(false),
            ended: Condvar::new(),
            others: Mutex::new(Vec::new()),
            progress: Mutex::new(Progress {
                phase: MigrationPhase::Copying,
                bytes: 0,
                rounds: 0,
                records: 0,
                started: Instant::now(),
                copied: None,
                paused_at: None,
                error: None,
                dirty: None,
            }),
        });
        let (sh2, t2) = (sh.clone(), task.clone());
        std::thread::Builder::new()
            .name(format!("fc-migrate-{cache}-{region}"))
            .spawn(move || source::run(&sh2, &t2))
            .map_err(|e| format!("cannot start a migration thread: {e}"))?;
        tasks.insert((cache, region), task);
        Ok(())
    }

    /// Where the migration of a region stands; while it copies, waits up to `wait`
    /// for it to end.
    pub fn report(&self, cache: CacheId, region: u32, wait: Duration) -> MigrationReport {
        let task = self.tasks.lock().get(&(cache, region)).cloned();
        match task {
            Some(t) => {
                let deadline = Instant::now() + wait;
                let mut p = t.progress.lock();
                while p.phase == MigrationPhase::Copying
                    && !t.cancelled()
                    && !t.ended.wait_until(&mut p, deadline).timed_out()
                {}
                drop(p);
                t.report()
            }
            None => MigrationReport {
                phase: MigrationPhase::Unknown,
                bytes: 0,
                rounds: 0,
                elapsed_us: 0,
                max_pause_us: 0,
                error: None,
                throttled_writes: 0,
            },
        }
    }

    /// Gives a migration up: the copy stops and the region takes writes again.
    pub fn abort(&self, sh: &Shared, cache: CacheId, region: u32, why: &str) -> bool {
        let Some(t) = self.tasks.lock().remove(&(cache, region)) else {
            return false;
        };
        t.cancel.store(true, Ordering::Release);
        sh.store.set_gate(cache, region, None, DRAIN);
        t.release_others(sh);
        tracing::warn!(cache, region, to = %t.to, "migration abandoned: {why}");
        true
    }

    /// The region left (its owner switched): forget the task.
    pub fn finish(&self, sh: &Shared, cache: CacheId, region: u32) -> Option<MigrationReport> {
        let t = self.tasks.lock().remove(&(cache, region))?;
        t.cancel.store(true, Ordering::Release);
        t.release_others(sh);
        let r = t.report();
        let records = t.progress.lock().records;
        tracing::info!(
            cache,
            region,
            to = %t.to,
            bytes = r.bytes,
            rounds = r.rounds,
            throttled_writes = r.throttled_writes,
            records,
            copy_ms = r.elapsed_us / 1000,
            write_pause_us = r.max_pause_us,
            "region handed over"
        );
        Some(r)
    }

    /// Migrations of `cache` in progress: (region, epoch at start, target, whether
    /// the target becomes a backup).
    pub fn of_cache(&self, cache: CacheId) -> Vec<(u32, u64, String, bool)> {
        self.tasks
            .lock()
            .values()
            .filter(|t| t.cache == cache)
            .map(|t| (t.region, t.start_epoch, t.to.clone(), t.replicate))
            .collect()
    }

    /// Whether any migration is still running or waiting for its switch.
    pub fn busy(&self) -> usize {
        self.tasks.lock().len()
    }
}
