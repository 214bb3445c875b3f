//! The manager's in-memory state: registered servers, caches and their region tables.
//!
//! Pure data with no I/O, so every rule here is unit tested; the service persists each
//! change (see `store`) before applying it here.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use farcache_proto::control::{
    CacheInfo, ClusterStatus, HeldRegion, PriceClass, ServerInfo, ServerState, region_digest,
};
use farcache_proto::{CacheId, ServerId};
use serde::{Deserialize, Serialize};

use crate::placement::Candidate;

/// What the store keeps about a server: everything but liveness, which is only
/// meaningful within one manager run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerRecord {
    pub id: ServerId,
    pub addr: String,
    pub memory: u64,
    pub cores: u32,
    /// Worker threads (0: not reported).
    #[serde(default)]
    pub threads: u32,
    pub price_class: PriceClass,
    pub price_per_gib_hour: f64,
    /// Where clients reach the server over TLS, if it serves TLS.
    #[serde(default)]
    pub tls_addr: Option<String>,
    /// A reclamation under way: kept so that a manager taking over resumes the drain
    /// within what is left of the grace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<ReclaimRecord>,
}

/// A server's announced reclamation, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReclaimRecord {
    /// When the grace ends, in milliseconds since the Unix epoch (wall clock, so
    /// that another manager can tell what is left of it).
    pub until_unix_ms: u64,
    pub mode: farcache_proto::control::MigrationMode,
}

impl ReclaimRecord {
    /// A grace of `grace` from now.
    pub fn from_now(grace: Duration, mode: farcache_proto::control::MigrationMode) -> Self {
        let until = std::time::SystemTime::now() + grace;
        let until_unix_ms = until
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        ReclaimRecord {
            until_unix_ms,
            mode,
        }
    }

    /// What is left of the grace now (zero once it ended).
    pub fn left(&self) -> Duration {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Duration::from_millis(self.until_unix_ms.saturating_sub(now))
    }
}

/// What the store keeps about a cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheRecord {
    pub id: CacheId,
    pub name: String,
    pub capacity: u64,
    pub region_size: u64,
    pub epoch: u64,
    pub regions: Vec<ServerId>,
    /// Stored procedures registered on this cache (loaded on every server holding it).
    #[serde(default)]
    pub procs: Vec<ProcDef>,
    /// Copies kept of every region (the owner plus `replicas - 1` backups).
    #[serde(default = "one")]
    pub replicas: u32,
    /// `backups[i]`: servers holding an up-to-date backup of region `i` (empty when
    /// the cache has no backups, else one list per region).
    #[serde(default)]
    pub backups: Vec<Vec<ServerId>>,
    /// The file a read-only cache was loaded from.
    #[serde(default)]
    pub from_file: Option<String>,
    /// The SLO the cache was created with and the transport chosen for it.
    #[serde(default)]
    pub slo: Option<farcache_proto::slo::SloChoice>,
}

fn one() -> u32 {
    1
}

impl CacheRecord {
    /// A cache of one copy per region, epoch 1, no procedures, file or SLO, whose
    /// capacity is its regions: what tests and the scale measure start from.
    pub fn plain(id: CacheId, name: String, region_size: u64, regions: Vec<ServerId>) -> Self {
        Self {
            id,
            name,
            capacity: regions.len() as u64 * region_size,
            region_size,
            epoch: 1,
            regions,
            procs: Vec::new(),
            replicas: 1,
            backups: Vec::new(),
            from_file: None,
            slo: None,
        }
    }

    /// The backups of region `i` (none if it has none).
    pub fn backups_of(&self, i: usize) -> &[ServerId] {
        self.backups.get(i).map_or(&[], Vec::as_slice)
    }

    /// Every server holding a copy of region `i`: its owner first.
    pub fn copies(&self, i: usize) -> impl Iterator<Item = ServerId> + '_ {
        self.regions
            .get(i)
            .copied()
            .into_iter()
            .chain(self.backups_of(i).iter().copied())
    }

    /// Every server holding any copy of any region, once each.
    pub fn holders(&self) -> Vec<ServerId> {
        let mut ids: Vec<ServerId> = self
            .regions
            .iter()
            .chain(self.backups.iter().flatten())
            .copied()
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Regions with fewer up-to-date copies than `replicas`.
    pub fn short_of_copies(&self) -> Vec<u32> {
        let want = self.replicas.max(1) as usize;
        (0..self.regions.len())
            .filter(|&i| 1 + self.backups_of(i).len() < want)
            .map(|i| i as u32)
            .collect()
    }
}

/// A registered procedure's code, kept so servers that join the cache later get it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcDef {
    pub name: String,
    pub code: Vec<u8>,
}

#[derive(Debug, Clone)]
struct ServerEntry {
    record: ServerRecord,
    state: ServerState,
    last_seen: Option<Instant>,
    /// Bytes of regions placed here; derived from the caches, never persisted.
    used: u64,
    /// The regions the server last said it holds: (count, digest).
    reported: Option<(u64, u64)>,
}

/// Heard from and registered: alive, or alive and leaving.
pub fn up(state: ServerState) -> bool {
    matches!(state, ServerState::Alive | ServerState::Leaving)
}

/// How a server's state changed when it was heard from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    New,
    /// It had been dead or unknown and is alive again.
    Back(ServerState),
    StillAlive,
    /// A heartbeat from a server declared dead: it stays dead until it registers
    /// again (and drops the copies it held, which are stale).
    Fenced,
}

#[derive(Debug)]
pub struct Catalogue {
    servers: BTreeMap<ServerId, ServerEntry>,
    caches: BTreeMap<CacheId, CacheRecord>,
    names: BTreeMap<String, CacheId>,
    /// Per server: how many regions the caches place there and their digest (the
    /// heartbeat's pair), kept in step with every cache change so that comparing
    /// heartbeats costs the number of servers, not the number of regions.
    placed: BTreeMap<ServerId, (u64, u64)>,
    /// Caches with a region short of copies (what re-replication looks at).
    short: std::collections::BTreeSet<CacheId>,
    next_server_id: ServerId,
    next_cache_id: CacheId,
}

impl Default for Catalogue {
    /// Empty; ids start at 1 so 0 never names anything.
    fn default() -> Self {
        Self {
            servers: BTreeMap::new(),
            caches: BTreeMap::new(),
            names: BTreeMap::new(),
            placed: BTreeMap::new(),
            short: std::collections::BTreeSet::new(),
            next_server_id: 1,
            next_cache_id: 1,
        }
    }
}

impl Catalogue {
    /// Rebuilds state from the store. Loaded servers start `Unknown` until they speak.
    /// Next ids are raised past any id in use, so a damaged counter cannot cause reuse.
    pub fn from_parts(
        servers: Vec<ServerRecord>,
        caches: Vec<CacheRecord>,
        next_server_id: ServerId,
        next_cache_id: CacheId,
    ) -> Self {
        let mut cat = Self {
            next_server_id: next_server_id.max(1),
            next_cache_id: next_cache_id.max(1),
            ..Self::default()
        };
        for record in servers {
            cat.next_server_id = cat.next_server_id.max(record.id.saturating_add(1));
            let entry = ServerEntry {
                record,
                state: ServerState::Unknown,
                last_seen: None,
                used: 0,
                reported: None,
            };
            cat.servers.insert(entry.record.id, entry);
        }
        for cache in caches {
            cat.next_cache_id = cat.next_cache_id.max(cache.id.saturating_add(1));
            cat.insert_cache(cache);
        }
        cat
    }

    pub fn next_server_id(&self) -> ServerId {
        self.next_server_id
    }

    pub fn next_cache_id(&self) -> CacheId {
        self.next_cache_id
    }

    /// Hands out a cache id; ids are never reused, even if the create then fails.
    pub fn take_cache_id(&mut self) -> CacheId {
        let id = self.next_cache_id;
        self.next_cache_id = self.next_cache_id.saturating_add(1);
        id
    }

    pub fn server_record(&self, id: ServerId) -> Option<&ServerRecord> {
        self.servers.get(&id).map(|e| &e.record)
    }

    /// Records (or clears) server `id`'s reclamation in its record.
    pub fn set_reclaim(&mut self, id: ServerId, reclaim: Option<ReclaimRecord>) {
        if let Some(e) = self.servers.get_mut(&id) {
            e.record.reclaim = reclaim;
        }
    }

    /// Loaded servers not heard from since this manager started (not yet declared
    /// dead either).
    pub fn not_heard_from(&self) -> usize {
        self.servers
            .values()
            .filter(|e| e.state == ServerState::Unknown)
            .count()
    }

    pub fn server_state(&self, id: ServerId) -> Option<ServerState> {
        self.servers.get(&id).map(|e| e.state)
    }

    /// Adds or updates a server (from `RegisterServer`) and marks it alive.
    pub fn upsert_server(&mut self, record: ServerRecord, now: Instant) -> Seen {
        self.next_server_id = self.next_server_id.max(record.id.saturating_add(1));
        match self.servers.get_mut(&record.id) {
            Some(e) => {
                e.record = record;
                // A registration is a (re)started process: whatever was leaving is gone.
                if e.state == ServerState::Leaving {
                    e.state = ServerState::Dead;
                }
                Self::mark_alive(e, now)
            }
            None => {
                let entry = ServerEntry {
                    record,
                    state: ServerState::Alive,
                    last_seen: Some(now),
                    used: 0,
                    reported: None,
                };
                self.servers.insert(entry.record.id, entry);
                Seen::New
            }
        }
    }

    /// Records a heartbeat and the regions the server says it holds (count, digest);
    /// `None` if the server is not known (it should re-register).
    pub fn heartbeat(&mut self, id: ServerId, now: Instant, held: (u64, u64)) -> Option<Seen> {
        self.servers.get_mut(&id).map(|e| {
            if e.state == ServerState::Dead {
                return Seen::Fenced;
            }
            e.reported = Some(held);
            Self::mark_alive(e, now)
        })
    }

    /// The regions the catalogue places on server `id`.
    pub fn placed_on(&self, id: ServerId) -> Vec<HeldRegion> {
        self.caches
            .values()
            .flat_map(|c| {
                (0..c.regions.len())
                    .filter(move |&i| c.copies(i).any(|s| s == id))
                    .map(move |i| HeldRegion {
                        cache: c.id,
                        region: i as u32,
                    })
            })
            .collect()
    }

    /// The regions server `id` owns (serves), without those it backs up.
    pub fn owned_by(&self, id: ServerId) -> Vec<HeldRegion> {
        self.caches
            .values()
            .flat_map(|c| {
                c.regions
                    .iter()
                    .enumerate()
                    .filter(move |(_, s)| **s == id)
                    .map(move |(i, _)| HeldRegion {
                        cache: c.id,
                        region: i as u32,
                    })
            })
            .collect()
    }

    /// Alive servers whose last report of the regions they hold disagrees with the
    /// catalogue (regions no cache owns, or regions missing).
    pub fn disagreeing(&self) -> Vec<ServerId> {
        self.servers
            .values()
            .filter(|e| up(e.state))
            .filter_map(|e| {
                let reported = e.reported?;
                (reported != self.placed_digest(e.record.id)).then_some(e.record.id)
            })
            .collect()
    }

    /// The alive server registered at `addr`, if any.
    pub fn alive_at(&self, addr: &str) -> Option<ServerId> {
        self.servers
            .values()
            .find(|e| up(e.state) && e.record.addr == addr)
            .map(|e| e.record.id)
    }

    fn mark_alive(e: &mut ServerEntry, now: Instant) -> Seen {
        let before = e.state;
        e.last_seen = Some(now);
        if before == ServerState::Leaving {
            // Heard from while it drains: it stays out of placement.
            return Seen::StillAlive;
        }
        e.state = ServerState::Alive;
        match before {
            ServerState::Alive | ServerState::Leaving => Seen::StillAlive,
            other => Seen::Back(other),
        }
    }

    /// Starts counting silence for servers loaded from the store (state unknown): one
    /// that has not registered a heartbeat timeout after `now` is declared dead.
    pub fn start_clock(&mut self, now: Instant) {
        for e in self.servers.values_mut() {
            if e.state == ServerState::Unknown && e.last_seen.is_none() {
                e.last_seen = Some(now);
            }
        }
    }

    /// Marks alive servers silent for longer than `timeout` dead, and loaded ones that
    /// never came back (see [`Self::start_clock`]); returns them.
    pub fn expire(&mut self, now: Instant, timeout: Duration) -> Vec<ServerId> {
        let mut dead = Vec::new();
        for e in self.servers.values_mut() {
            let silent = e
                .last_seen
                .is_none_or(|t| now.saturating_duration_since(t) > timeout);
            let unknown = e.state == ServerState::Unknown && e.last_seen.is_some();
            if (up(e.state) || unknown) && silent {
                e.state = ServerState::Dead;
                dead.push(e.record.id);
            }
        }
        dead
    }

    /// Alive servers as placement candidates.
    /// Declares an up server dead (it was seen to die); false if it was not up.
    pub fn mark_dead(&mut self, id: ServerId) -> bool {
        match self.servers.get_mut(&id) {
            Some(e) if up(e.state) => {
                e.state = ServerState::Dead;
                true
            }
            _ => false,
        }
    }

    pub fn candidates(&self) -> Vec<Candidate> {
        self.servers
            .values()
            .filter(|e| e.state == ServerState::Alive)
            .map(|e| Candidate {
                id: e.record.id,
                price_per_gib_hour: e.record.price_per_gib_hour,
                free: e.record.memory.saturating_sub(e.used),
            })
            .collect()
    }

    /// Marks an alive server as leaving (it takes no new regions); false if it is not
    /// alive or leaving already.
    pub fn set_leaving(&mut self, id: ServerId) -> bool {
        match self.servers.get_mut(&id) {
            Some(e) if e.state == ServerState::Alive => {
                e.state = ServerState::Leaving;
                true
            }
            _ => false,
        }
    }

    pub fn cache(&self, id: CacheId) -> Option<&CacheRecord> {
        self.caches.get(&id)
    }

    pub fn cache_by_name(&self, name: &str) -> Option<&CacheRecord> {
        self.names.get(name).and_then(|id| self.caches.get(id))
    }

    /// Adds a cache, or replaces the one with the same id, keeping `used` in step.
    pub fn insert_cache(&mut self, cache: CacheRecord) {
        if let Some(old) = self.remove_cache(cache.id) {
            tracing::debug!(cache = old.id, "replacing cache record");
        }
        self.account(&cache, true);
        self.names.insert(cache.name.clone(), cache.id);
        self.caches.insert(cache.id, cache);
    }

    pub fn remove_cache(&mut self, id: CacheId) -> Option<CacheRecord> {
        let cache = self.caches.remove(&id)?;
        self.names.remove(&cache.name);
        self.account(&cache, false);
        Some(cache)
    }

    /// Caches with a region short of copies.
    pub fn short_caches(&self) -> impl Iterator<Item = &CacheRecord> {
        self.short.iter().filter_map(|id| self.caches.get(id))
    }

    /// The first region (in cache and region order) placed on server `id`.
    pub fn first_placed_on(&self, id: ServerId) -> Option<HeldRegion> {
        self.caches.values().find_map(|c| {
            (0..c.regions.len())
                .find(|&i| c.copies(i).any(|s| s == id))
                .map(|i| HeldRegion {
                    cache: c.id,
                    region: i as u32,
                })
        })
    }

    /// How many regions the caches place on server `id`, and their digest.
    pub fn placed_digest(&self, id: ServerId) -> (u64, u64) {
        self.placed.get(&id).copied().unwrap_or((0, 0))
    }

    fn account(&mut self, cache: &CacheRecord, add: bool) {
        if add && !cache.short_of_copies().is_empty() {
            self.short.insert(cache.id);
        } else {
            self.short.remove(&cache.id);
        }
        for i in 0..cache.regions.len() {
            let mut on: Vec<ServerId> = cache.copies(i).collect();
            on.sort_unstable();
            on.dedup();
            let one = region_digest([HeldRegion {
                cache: cache.id,
                region: i as u32,
            }]);
            for sid in on {
                let (n, d) = self.placed.entry(sid).or_insert((0, 0));
                if add {
                    *n += 1;
                    *d = d.wrapping_add(one);
                } else {
                    *n = n.saturating_sub(1);
                    *d = d.wrapping_sub(one);
                }
            }
        }
        for sid in cache.regions.iter().chain(cache.backups.iter().flatten()) {
            // A region on a server the store forgot cannot be accounted; it is still
            // reported in the region table.
            if let Some(e) = self.servers.get_mut(sid) {
                e.used = if add {
                    e.used.saturating_add(cache.region_size)
                } else {
                    e.used.saturating_sub(cache.region_size)
                };
            }
        }
    }

    pub fn server_info(&self, id: ServerId) -> Option<ServerInfo> {
        let e = self.servers.get(&id)?;
        Some(ServerInfo {
            id,
            addr: e.record.addr.clone(),
            memory: e.record.memory,
            used: e.used,
            cores: e.record.cores,
            threads: e.record.threads,
            price_class: e.record.price_class,
            price_per_gib_hour: e.record.price_per_gib_hour,
            state: e.state,
            tls_addr: e.record.tls_addr.clone(),
        })
    }

    /// The cache as clients see it: its table plus exactly the servers it names.
    pub fn cache_info(&self, cache: &CacheRecord) -> CacheInfo {
        let ids = cache.holders();
        CacheInfo {
            id: cache.id,
            name: cache.name.clone(),
            capacity: cache.capacity,
            region_size: cache.region_size,
            epoch: cache.epoch,
            regions: cache.regions.clone(),
            servers: ids
                .into_iter()
                .filter_map(|id| self.server_info(id))
                .collect(),
            replicas: cache.replicas.max(1),
            backups: cache.backups.clone(),
            from_file: cache.from_file.clone(),
            slo: cache.slo.clone(),
        }
    }

    pub fn status(&self) -> ClusterStatus {
        ClusterStatus {
            servers: self
                .servers
                .keys()
                .filter_map(|&id| self.server_info(id))
                .collect(),
            caches: self.caches.values().map(|c| self.cache_info(c)).collect(),
            migrations: Vec::new(),
            lost: Vec::new(),
            promotions: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests;
