//! A server reclaimed with notice: it takes no new regions and its regions move, one
//! at a time, to the cheapest servers with room, before its grace period ends.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use farcache_proto::control::{
    ControlErrorCode, ControlRequest, HeldRegion, MigrationMode, MigrationPhase, MigrationRecord,
    MigrationReport, ServerState,
};
use farcache_proto::{CacheId, ServerId};

use crate::catalogue::ReclaimRecord;
use crate::cluster::{Cluster, Target};
use crate::error::Reject;
use crate::placement;
use crate::store::Write;

/// The manager gives up on regions this long before the grace ends, so the losses are
/// announced (and the regions re-placed) while the server is still there.
const MARGIN: Duration = Duration::from_millis(500);
/// How long the source holds each migration status request until the copy ends.
const STATUS_WAIT_MS: u32 = 200;
/// A region whose move failed is tried again after this, doubling up to
/// `RETRY_MAX`, until the grace runs out.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(2);
/// Longest grace accepted (a notice longer than this is not a reclamation).
const MAX_GRACE: Duration = Duration::from_secs(3600);
/// Transfer rate assumed before any migration was measured (for the early warning).
const ASSUMED_BYTES_PER_S: f64 = 1e9;

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Stores server `id`'s reclamation in its record, durably first.
fn store_reclaim(
    st: &mut crate::cluster::State,
    id: ServerId,
    grace: Duration,
    mode: MigrationMode,
) -> Result<(), Reject> {
    let reclaim = ReclaimRecord::from_now(grace, mode);
    let Some(mut rec) = st.catalogue.server_record(id).cloned() else {
        return Err(Reject::new(
            ControlErrorCode::UnknownServer,
            format!("no server {id}"),
        ));
    };
    rec.reclaim = Some(reclaim);
    st.commit(&[Write::Server(&rec)])?;
    st.catalogue.set_reclaim(id, Some(reclaim));
    Ok(())
}

impl Cluster {
    /// After server `id` registered with this manager for the first time (it took
    /// over, or restarted): push the tables it knows (rolling back a move the
    /// previous leader left uncommitted), then go on with a stored reclamation.
    pub(crate) fn rejoin(&self, id: ServerId, push: bool, resume: Option<ReclaimRecord>) {
        if push {
            self.push_tables_of(id);
        }
        if let Some(r) = resume {
            let left = r.left();
            tracing::info!(
                server = id,
                left_ms = left.as_millis() as u64,
                "resuming the reclamation a previous manager started"
            );
            if let Err(e) = self.reclaim(id, left, r.mode) {
                tracing::warn!(server = id, "cannot resume its reclamation: {}", e.message);
            }
        }
    }

    /// Starts draining server `id`; returns at once (the moves go on in the background).
    pub(crate) fn reclaim(
        &self,
        id: ServerId,
        grace: Duration,
        mode: MigrationMode,
    ) -> Result<(), Reject> {
        let grace = grace.min(MAX_GRACE);
        {
            let mut st = self.state.lock();
            match st.catalogue.server_state(id) {
                None => {
                    return Err(Reject::new(
                        ControlErrorCode::UnknownServer,
                        format!("no server {id}"),
                    ));
                }
                Some(ServerState::Leaving) => return Ok(()), // already draining
                Some(ServerState::Unknown) => {
                    // Loaded but not heard from since this manager took over: the
                    // drain starts when the server registers (see `register`).
                    store_reclaim(&mut st, id, grace, mode)?;
                    tracing::info!(
                        server = id,
                        grace_ms = grace.as_millis() as u64,
                        "server reclaimed before it reported to this manager: it drains once it does"
                    );
                    return Ok(());
                }
                Some(ServerState::Alive) => {
                    // Stored first: a manager that takes over resumes the drain.
                    store_reclaim(&mut st, id, grace, mode)?;
                    st.catalogue.set_leaving(id);
                }
                Some(s) => {
                    return Err(Reject::invalid(format!(
                        "server {id} is {s:?}: only a live server can be reclaimed"
                    )));
                }
            }
        }
        let this = self
            .this
            .upgrade()
            .ok_or_else(|| Reject::unavailable("the manager is shutting down"))?;
        let deadline = Instant::now() + grace.saturating_sub(MARGIN);
        tracing::info!(
            server = id,
            grace_ms = grace.as_millis() as u64,
            ?mode,
            "server reclaimed: moving its regions"
        );
        std::thread::Builder::new()
            .name(format!("manager-drain-{id}"))
            .spawn(move || this.drain(id, deadline, mode))
            .map_err(|e| Reject::unavailable(format!("cannot start draining: {e}")))?;
        Ok(())
    }

    fn drain(&self, id: ServerId, deadline: Instant, mode: MigrationMode) {
        self.warn_if_late(id, deadline);
        // Regions whose move failed: attempts so far, and when to try again. A region
        // is given up only when the grace runs out: failures are often passing (just
        // after a manager took over, the other servers have not reported to it yet
        // and no target is known).
        let mut failed: HashMap<(CacheId, u32), (u32, Instant)> = HashMap::new();
        loop {
            let (state, placed) = {
                let st = self.state.lock();
                (st.catalogue.server_state(id), st.catalogue.placed_on(id))
            };
            if !self.leadership.holds() {
                tracing::warn!(
                    server = id,
                    "no longer leading: the next leader resumes the drain"
                );
                return;
            }
            if state != Some(ServerState::Leaving) {
                tracing::warn!(
                    server = id,
                    ?state,
                    "server stopped leaving (it died or registered again): drain ends"
                );
                return;
            }
            let now = Instant::now();
            if placed.is_empty() || now >= deadline {
                break;
            }
            let waiting = |r: &HeldRegion| failed.get(&(r.cache, r.region)).map(|&(_, at)| at);
            let Some(r) = placed
                .iter()
                .find(|r| waiting(r).is_none_or(|at| at <= now))
                .copied()
            else {
                // Every region left waits for its next try.
                let wake = placed
                    .iter()
                    .filter_map(waiting)
                    .min()
                    .unwrap_or(now)
                    .min(deadline);
                std::thread::sleep(wake.saturating_duration_since(now).max(RETRY_FIRST / 4));
                continue;
            };
            match self.migrate_region(r.cache, r.region, id, mode, deadline) {
                Ok(rec) => {
                    failed.remove(&(r.cache, r.region));
                    self.state.lock().events.migrated(rec);
                }
                Err(e) => {
                    let n = failed.get(&(r.cache, r.region)).map_or(1, |&(n, _)| n + 1);
                    let backoff = RETRY_FIRST
                        .saturating_mul(1 << (n - 1).min(5))
                        .min(RETRY_MAX);
                    tracing::warn!(
                        server = id,
                        cache = r.cache,
                        region = r.region,
                        attempt = n,
                        retry_in = ?backoff,
                        "migration failed: {}",
                        e.message
                    );
                    failed.insert((r.cache, r.region), (n, Instant::now() + backoff));
                }
            }
        }
        let _changes = self.changes.lock();
        if !self.leadership.holds() {
            return;
        }
        let (left, owned) = {
            let st = self.state.lock();
            (st.catalogue.placed_on(id), st.catalogue.owned_by(id))
        };
        if left.is_empty() {
            tracing::info!(server = id, "server drained: every region moved");
            return;
        }
        // Copies that did not move: backups take over what this server owned, and
        // only regions with no other copy are lost.
        let orphans = self.promote_backups(id, None);
        let leaving = {
            let st = self.state.lock();
            self.targets(&st.catalogue, &[id]).pop()
        };
        for r in owned.iter().filter(|r| !orphans.contains(r)) {
            let to = {
                let st = self.state.lock();
                st.catalogue.cache(r.cache).and_then(|c| {
                    let owner = *c.regions.get(r.region as usize)?;
                    st.catalogue.server_record(owner).map(|s| s.addr.clone())
                })
            };
            if let Some(src) = &leaving {
                let free = ControlRequest::FreeRegion {
                    cache: r.cache,
                    region: r.region,
                    moved_to: to,
                };
                self.best_effort(src, &free, "retire a copy a backup took over");
            }
        }
        if orphans.is_empty() {
            tracing::warn!(
                server = id,
                regions = left.len(),
                "grace over: regions that did not move stay with their backups"
            );
            return;
        }
        tracing::warn!(
            server = id,
            regions = orphans.len(),
            "grace over: regions that did not move and have no backup are lost"
        );
        self.replace_lost(id, &orphans, "grace", false);
    }

    /// Says early which regions will likely not move in time, from the rate of the
    /// last migration (or an assumed 1 GB/s).
    fn warn_if_late(&self, id: ServerId, deadline: Instant) {
        let st = self.state.lock();
        let placed = st.catalogue.placed_on(id);
        let rate = st
            .events
            .migrations
            .back()
            .filter(|m| m.copy_us > 0)
            .map_or(ASSUMED_BYTES_PER_S, |m| {
                m.bytes as f64 / (m.copy_us as f64 / 1e6)
            });
        let left = deadline
            .saturating_duration_since(Instant::now())
            .as_secs_f64();
        let mut t = 0.0;
        let mut late = Vec::new();
        for r in placed {
            let size = st.catalogue.cache(r.cache).map_or(0, |c| c.region_size);
            t += size as f64 / rate;
            if t > left {
                late.push((r.cache, r.region));
            }
        }
        if !late.is_empty() {
            tracing::warn!(
                server = id,
                ?late,
                "these regions will likely not move before the grace ends and would be lost"
            );
        }
    }

    /// Moves region `region` of cache `name` live (the `MoveRegion` request).
    pub(crate) fn move_region(
        &self,
        name: &str,
        region: u32,
        to: Option<ServerId>,
        mode: MigrationMode,
    ) -> Result<(), Reject> {
        let (cache, from) = {
            let st = self.state.lock();
            let rec = st
                .catalogue
                .cache_by_name(name)
                .ok_or_else(|| Reject::not_found(name))?;
            let from = *rec.regions.get(region as usize).ok_or_else(|| {
                Reject::invalid(format!("cache '{name}' has {} regions", rec.regions.len()))
            })?;
            (rec.id, from)
        };
        if to == Some(from) {
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        let rec = self.migrate_region_to(cache, region, from, to, mode, deadline)?;
        self.state.lock().events.migrated(rec);
        Ok(())
    }

    /// Moves one region from `from` to the best other server, live.
    pub(crate) fn migrate_region(
        &self,
        cache: CacheId,
        region: u32,
        from: ServerId,
        mode: MigrationMode,
        deadline: Instant,
    ) -> Result<MigrationRecord, Reject> {
        self.migrate_region_to(cache, region, from, None, mode, deadline)
    }

    /// Moves `from`'s copy of one region (the owner's or a backup's) to `to` (or the
    /// best other server with room that holds no copy of it).
    fn migrate_region_to(
        &self,
        cache: CacheId,
        region: u32,
        from: ServerId,
        to: Option<ServerId>,
        mode: MigrationMode,
        deadline: Instant,
    ) -> Result<MigrationRecord, Reject> {
        self.copy_region(cache, region, Some(from), to, mode, deadline)
    }

    /// Gives a region one more backup, copied live from its owner.
    pub(crate) fn add_backup(
        &self,
        cache: CacheId,
        region: u32,
        deadline: Instant,
    ) -> Result<MigrationRecord, Reject> {
        self.copy_region(
            cache,
            region,
            None,
            None,
            MigrationMode::DirtyTracking,
            deadline,
        )
    }

    /// Copies a region live from its owner to a new server, which then replaces
    /// `from` (the owner itself: a move; a backup: that backup moves) or, with no
    /// `from`, becomes one more backup. The copy always comes from the owner, the one
    /// copy that takes writes; other copies keep receiving writes throughout.
    fn copy_region(
        &self,
        cache: CacheId,
        region: u32,
        from: Option<ServerId>,
        to: Option<ServerId>,
        mode: MigrationMode,
        deadline: Instant,
    ) -> Result<MigrationRecord, Reject> {
        // Copies run one at a time, as they did when they held `changes` throughout.
        let _copies = self.copies.lock();
        let changes = self.changes.lock();
        let t0 = Instant::now();
        let (rec, source, target) = {
            let st = self.state.lock();
            let rec = st
                .catalogue
                .cache(cache)
                .cloned()
                .ok_or_else(|| Reject::not_found(&format!("cache {cache}")))?;
            let i = region as usize;
            let owner = *rec
                .regions
                .get(i)
                .ok_or_else(|| Reject::invalid("no such region"))?;
            if let Some(f) = from
                && !rec.copies(i).any(|s| s == f)
            {
                return Err(Reject::invalid("the region is no longer on that server"));
            }
            let cands: Vec<_> = st
                .catalogue
                .candidates()
                .into_iter()
                .filter(|c| !rec.copies(i).any(|s| s == c.id) && to.is_none_or(|t| t == c.id))
                .collect();
            let to = placement::place(&cands, 1, rec.region_size).map_err(|s| {
                Reject::new(
                    ControlErrorCode::InsufficientMemory,
                    format!(
                        "no server without a copy can take region {region} of cache {cache}: {s}"
                    ),
                )
            })?;
            let mut t = self.targets(&st.catalogue, &to);
            let mut s = self.targets(&st.catalogue, &[owner]);
            match (s.pop(), t.pop()) {
                (Some(s), Some(t)) => (rec, s, t),
                _ => return Err(Reject::invalid("no target")),
            }
        };
        // The owner keeps the region unless it is the copy that moves.
        let replicate = from != Some(source.server);
        let epoch = rec.epoch + 1;
        if !rec.procs.is_empty() && !rec.holders().contains(&target.server) {
            self.load_procs(cache, std::slice::from_ref(&target), &rec.procs)?;
        }
        // The target starts with the region marked lost: the copy makes every byte
        // that was data at the source data again, and bytes lost there stay lost.
        let alloc = ControlRequest::AllocRegion {
            cache,
            region,
            region_size: rec.region_size,
            capacity: rec.capacity,
            epoch,
            lost: true,
            incoming: true,
            // A read-only cache's region loads from its file (and stays read-only).
            load: rec.from_file.as_deref().map(|path| {
                crate::cluster::file_slice(path, rec.capacity, rec.region_size, region)
            }),
        };
        self.links
            .call(target.server, &target.addr, &alloc)
            .map_err(|e| Reject::unavailable(format!("target {}: {e}", target.addr)))?;
        let start = ControlRequest::MigrateRegion {
            cache,
            region,
            to: target.addr.clone(),
            mode,
            replicate,
        };
        // The copy may take minutes: failovers (which promote backups under `changes`)
        // and other table changes go on meanwhile. The commit below checks that the
        // cache's record is still the one the copy started from.
        drop(changes);
        let report = self
            .links
            .call(source.server, &source.addr, &start)
            .map_err(|e| Reject::unavailable(format!("source {}: {e}", source.addr)))
            .and_then(|()| self.await_copy(&source, cache, region, deadline));
        let report = match report {
            Ok(r) => r,
            Err(e) => {
                self.undo_migration(&source, &target, cache, region);
                return Err(e);
            }
        };
        let handed = Instant::now();
        let _changes = self.changes.lock();
        let i = region as usize;
        let info = {
            let mut st = self.state.lock();
            if st.catalogue.cache(cache) != Some(&rec) {
                drop(st);
                self.undo_migration(&source, &target, cache, region);
                return Err(Reject::unavailable(format!(
                    "region {region} of cache {cache} changed owner or copies while it was \
                     copied (a failover or another change came first); the copy is dropped"
                )));
            }
            let mut next = rec.clone();
            if next.backups.len() < next.regions.len() && (replicate || !next.backups.is_empty()) {
                next.backups.resize(next.regions.len(), Vec::new());
            }
            match from {
                Some(f) if f == source.server => next.regions[i] = target.server,
                Some(f) => {
                    for b in &mut next.backups[i] {
                        if *b == f {
                            *b = target.server;
                        }
                    }
                }
                None => next.backups[i].push(target.server),
            }
            next.epoch = epoch;
            if let Err(e) = st.commit(&[Write::Cache(&next)]) {
                drop(st);
                self.undo_migration(&source, &target, cache, region);
                return Err(e);
            }
            st.catalogue.insert_cache(next.clone());
            st.catalogue.cache_info(&next)
        };
        let moved_from = match from {
            // The old owner: clients it redirects find the target serving, because the
            // target hears first that it owns the region.
            Some(f) if f == source.server => {
                self.push_routes_to(&info, &[target.server]);
                Some((source.clone(), target.addr.clone()))
            }
            // A backup that moved: the owner first, so it forwards writes to the new
            // backup (and lifts its pause) before the old one is freed.
            Some(f) => {
                self.push_routes_to(&info, &[source.server]);
                let st = self.state.lock();
                self.targets(&st.catalogue, &[f])
                    .pop()
                    .map(|t| (t, source.addr.clone()))
            }
            None => {
                self.push_routes_to(&info, &[source.server]);
                None
            }
        };
        if let Some((old, to_addr)) = moved_from {
            let free = ControlRequest::FreeRegion {
                cache,
                region,
                moved_to: Some(to_addr),
            };
            self.best_effort(&old, &free, "hand the region over");
        }
        let pause = report.max_pause_us + micros(handed.elapsed());
        self.push_routes(&info);
        let r = MigrationRecord {
            cache,
            region,
            from: from.unwrap_or(source.server),
            to: target.server,
            mode,
            bytes: report.bytes,
            total_us: micros(t0.elapsed()),
            copy_us: report.elapsed_us,
            max_pause_us: pause,
            rounds: report.rounds,
            throttled_writes: report.throttled_writes,
        };
        tracing::info!(
            cache,
            region,
            from = r.from,
            to = target.server,
            backup = replicate,
            mib = report.bytes >> 20,
            copy_ms = report.elapsed_us / 1000,
            write_pause_us = pause,
            rounds = report.rounds,
            "region copied"
        );
        Ok(r)
    }

    /// Asks the source until the copy is handed off, fails, or the deadline passes.
    /// Each request waits at the source for the copy to end (`STATUS_WAIT_MS`), so the
    /// hand-off is seen as it happens: writes to the region are paused until the
    /// switch that follows.
    fn await_copy(
        &self,
        source: &Target,
        cache: CacheId,
        region: u32,
        deadline: Instant,
    ) -> Result<MigrationReport, Reject> {
        let mut errors = 0;
        loop {
            let asked = Instant::now();
            match self
                .links
                .migration(source.server, &source.addr, cache, region, STATUS_WAIT_MS)
            {
                Ok(r) => match r.phase {
                    MigrationPhase::HandedOff => return Ok(r),
                    MigrationPhase::Copying => errors = 0,
                    MigrationPhase::Failed | MigrationPhase::Unknown => {
                        return Err(Reject::unavailable(format!(
                            "copy failed: {}",
                            r.error.unwrap_or_else(|| format!("{:?}", r.phase))
                        )));
                    }
                },
                Err(e) => {
                    errors += 1;
                    if errors >= 5 {
                        return Err(Reject::unavailable(format!("source {}: {e}", source.addr)));
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(Reject::unavailable(
                    "the grace period ran out during the copy",
                ));
            }
            // An answer well before the wait (an error, or a server that answers at
            // once) is not asked again at once.
            let floor = Duration::from_millis(u64::from(STATUS_WAIT_MS) / 10);
            if let Some(rest) = floor.checked_sub(asked.elapsed()) {
                std::thread::sleep(rest);
            }
        }
    }

    fn undo_migration(&self, source: &Target, target: &Target, cache: CacheId, region: u32) {
        self.best_effort(
            source,
            &ControlRequest::AbortMigration { cache, region },
            "abort migration",
        );
        let free = ControlRequest::FreeRegion {
            cache,
            region,
            moved_to: None,
        };
        self.best_effort(target, &free, "free the migration's target");
    }
}
