//! The server's table (cache, region) → local memory, and its memory budget.
//!
//! Readers (workers, once per batch) load an immutable snapshot through `ArcSwap`;
//! writers (control requests, rare) copy, modify and publish under a mutex.
//!
//! Capacity and region placements carry the region table's epoch: a message about a
//! newer (or the same) epoch wins, an older one is ignored, so messages the manager
//! retries or that arrive late cannot undo a later change.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use farcache_proto::CacheId;
use farcache_proto::control::{AckWindow, HeldRegion, region_split};
use parking_lot::Mutex;

use crate::engine::dirty::DirtyChunks;
use crate::engine::lost::LostRanges;
use crate::engine::region::Region;
use crate::error::StoreError;

/// How a newly placed region starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Arrival {
    /// Its bytes were lost: reads answer `DATA_LOST` until overwritten.
    pub lost: bool,
    /// A migration is copying it here: served only once a table names this server.
    pub incoming: bool,
    /// Its cache is read-only (loaded from a file).
    pub read_only: bool,
}

/// What a write to a region being migrated away does.
#[derive(Clone)]
pub enum WriteGate {
    /// It goes through and marks its chunks for another copy round.
    Track(Arc<DirtyChunks>),
    /// It is refused with `PAUSED` (the client sends it again shortly).
    Pause,
}

#[derive(Clone, Default)]
pub struct CacheRegions {
    pub region_size: u64,
    /// Latest capacity the manager announced; addresses beyond it are out of range.
    pub capacity: u64,
    /// The epoch `capacity` came with.
    cap_epoch: u64,
    pub regions: Vec<Option<Arc<Region>>>,
    /// The epoch each held region was placed under (same index as `regions`).
    placed: Vec<u64>,
    /// Regions that left this server and where they went (for `wrong server` hints).
    pub moved: HashMap<u32, String>,
    /// The manager's region table (`owners[i]` holds region `i`), for procedures that
    /// continue at another server. Empty until the manager sends one.
    pub owners: Arc<Vec<String>>,
    pub routes_epoch: u64,
    /// Regions being copied to another server, and what writes to them do.
    pub gates: HashMap<u32, WriteGate>,
    /// Regions whose bytes were (partly) lost with a failed server.
    pub lost: HashMap<u32, Arc<LostRanges>>,
    /// Regions being copied here by a migration: not served until a region table
    /// names this server their owner.
    pub incoming: std::collections::HashSet<u32>,
    /// Regions this server owns that have backups, and their data addresses: every
    /// write to them is applied there before it is acknowledged.
    pub backups: HashMap<u32, Arc<[String]>>,
    /// The cache was loaded from a file: only servers (migrations, backups) write it.
    pub read_only: bool,
    /// `gates`, `lost`, `incoming` or `backups` is non-empty: ops must consult them
    /// (one flag on the hot path).
    pub guarded: bool,
}

impl CacheRegions {
    /// Whether this server serves `addr` (a region still arriving is not served).
    pub fn holds(&self, addr: u64) -> bool {
        addr < self.capacity
            && !self.arriving(addr)
            && matches!(
                self.regions
                    .get(region_split(addr, self.region_size).0 as usize),
                Some(Some(_))
            )
    }

    /// The server this one believes holds region `idx`: where the region went if it
    /// left this server, else the manager's table; never `me` itself.
    pub fn hint(&self, idx: u64, me: &str) -> Option<&str> {
        let i = u32::try_from(idx).ok()?;
        self.moved
            .get(&i)
            .map(String::as_str)
            .or_else(|| self.owners.get(idx as usize).map(String::as_str))
            .filter(|o| !o.is_empty() && *o != me)
    }

    /// Applies a capacity announced with `epoch`; a smaller capacity zeroes the held
    /// bytes past it, so a later grow exposes zeros, never the old bytes.
    fn set_capacity(&mut self, capacity: u64, epoch: u64) {
        if epoch < self.cap_epoch {
            return;
        }
        if capacity < self.capacity {
            let rs = self.region_size;
            for (i, r) in self.regions.iter().enumerate() {
                let Some(r) = r else { continue };
                let start = (i as u64).saturating_mul(rs);
                let end = start.saturating_add(rs);
                if end <= capacity || start >= self.capacity {
                    continue;
                }
                r.zero_from(capacity.saturating_sub(start) as usize);
            }
        }
        self.capacity = capacity;
        self.cap_epoch = epoch;
    }

    /// Whether any byte of `[addr, addr+len)` (inside one region) is lost.
    #[inline]
    pub fn lost_in(&self, addr: u64, len: u64) -> bool {
        if !self.guarded {
            return false;
        }
        let (idx, off) = region_split(addr, self.region_size);
        u32::try_from(idx)
            .ok()
            .and_then(|i| self.lost.get(&i))
            .is_some_and(|l| l.overlaps(off, len))
    }

    /// Whether writes at `addr` are refused for now (the region is being handed off).
    #[inline]
    pub fn write_paused(&self, addr: u64) -> bool {
        self.guarded
            && matches!(
                self.gate(region_split(addr, self.region_size).0),
                Some(WriteGate::Pause)
            )
    }

    /// Whether a write of `[addr, addr+len)` must wait because its region is being
    /// copied away and its writers dirty it faster than it copies (see
    /// `DirtyChunks::throttle`).
    #[inline]
    pub fn write_throttled(&self, addr: u64, len: u64) -> bool {
        if !self.guarded {
            return false;
        }
        let (idx, off) = region_split(addr, self.region_size);
        matches!(self.gate(idx), Some(WriteGate::Track(d)) if !d.admits(off, len))
    }

    fn gate(&self, idx: u64) -> Option<&WriteGate> {
        u32::try_from(idx).ok().and_then(|i| self.gates.get(&i))
    }

    /// After a write of `[addr, addr+len)`: marks its chunks dirty if the region is
    /// being copied, and (`overwrote`) makes lost bytes there data again.
    #[inline]
    pub fn wrote(&self, addr: u64, len: u64, overwrote: bool) {
        if !self.guarded {
            return;
        }
        let (idx, off) = region_split(addr, self.region_size);
        if let Some(WriteGate::Track(d)) = self.gate(idx) {
            d.mark(off, len);
        }
        if overwrote && let Some(l) = u32::try_from(idx).ok().and_then(|i| self.lost.get(&i)) {
            l.clear(off, len);
        }
    }

    fn update_guarded(&mut self) {
        self.guarded = !self.gates.is_empty()
            || !self.lost.is_empty()
            || !self.incoming.is_empty()
            || !self.backups.is_empty();
    }

    /// The backups of the region holding `addr`, if this server owns it and it has any.
    #[inline]
    pub fn backups_at(&self, addr: u64) -> Option<&Arc<[String]>> {
        if !self.guarded || self.backups.is_empty() {
            return None;
        }
        u32::try_from(region_split(addr, self.region_size).0)
            .ok()
            .and_then(|i| self.backups.get(&i))
    }

    /// Which held regions this server owns with backups, from the region table.
    fn derive_backups(&mut self, backups: &[Vec<String>], me: &str) {
        self.backups.clear();
        for (i, b) in backups.iter().enumerate() {
            let owned = self.owners.get(i).is_some_and(|o| o == me)
                && self.regions.get(i).is_some_and(Option::is_some)
                && !self.incoming.contains(&(i as u32));
            if owned && !b.is_empty() {
                let list: Vec<String> = b.iter().filter(|a| *a != me).cloned().collect();
                if !list.is_empty() {
                    self.backups.insert(i as u32, list.into());
                }
            }
        }
    }

    /// Whether the region holding `addr` is still arriving (see `incoming`).
    #[inline]
    pub fn arriving(&self, addr: u64) -> bool {
        self.guarded
            && u32::try_from(region_split(addr, self.region_size).0)
                .is_ok_and(|i| self.incoming.contains(&i))
    }

    fn held(&self) -> impl Iterator<Item = u32> + '_ {
        self.regions
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_some())
            .map(|(i, _)| i as u32)
    }
}

#[derive(Clone, Default)]
pub struct StoreMap {
    /// Behind `Arc`s so a change copies the table of the cache it changes, not of
    /// every cache (a server holding many caches places regions in O(its cache)).
    pub caches: HashMap<CacheId, Arc<CacheRegions>>,
}

pub struct RegionStore {
    map: ArcSwap<StoreMap>,
    write: Mutex<u64>, // bytes promised; guards writers
    memory: u64,
    /// Acknowledgement windows of regions that left this server (newest last).
    ack_log: Mutex<std::collections::VecDeque<AckWindow>>,
}

/// How many windows of departed regions are kept.
const ACK_LOG: usize = 4096;

impl RegionStore {
    pub fn new(memory: u64) -> Self {
        Self {
            map: ArcSwap::from_pointee(StoreMap::default()),
            write: Mutex::new(0),
            memory,
            ack_log: Mutex::new(Default::default()),
        }
    }

    /// Acknowledgement windows: of the regions held now, then of those that left.
    pub fn ack_windows(&self) -> Vec<AckWindow> {
        let map = self.map.load();
        let mut v: Vec<AckWindow> = map
            .caches
            .iter()
            .flat_map(|(&cache, c)| {
                c.regions.iter().enumerate().filter_map(move |(i, r)| {
                    let (first_us, last_us) = r.as_ref()?.ack_window()?;
                    Some(AckWindow {
                        cache,
                        region: i as u32,
                        first_us,
                        last_us,
                    })
                })
            })
            .collect();
        v.extend(self.ack_log.lock().iter().copied());
        v
    }

    fn log_acks(&self, cache: CacheId, region: u32, r: &Region) {
        if let Some((first_us, last_us)) = r.ack_window() {
            let mut log = self.ack_log.lock();
            if log.len() == ACK_LOG {
                log.pop_front();
            }
            log.push_back(AckWindow {
                cache,
                region,
                first_us,
                last_us,
            });
        }
    }

    pub fn snapshot(&self) -> arc_swap::Guard<Arc<StoreMap>> {
        self.map.load()
    }

    pub fn memory(&self) -> u64 {
        self.memory
    }

    pub fn used(&self) -> u64 {
        *self.write.lock()
    }

    pub fn region_count(&self) -> u64 {
        let m = self.map.load();
        m.caches
            .values()
            .map(|c| c.regions.iter().flatten().count() as u64)
            .sum()
    }

    /// Every region held here.
    pub fn held(&self) -> Vec<HeldRegion> {
        let m = self.map.load();
        let mut v: Vec<HeldRegion> = m
            .caches
            .iter()
            .flat_map(|(&cache, c)| c.held().map(move |region| HeldRegion { cache, region }))
            .collect();
        v.sort_unstable_by_key(|r| (r.cache, r.region));
        v
    }

    /// Places region `region` of `cache`. The same request again (a retry after a lost
    /// reply) keeps the region and its bytes; a request under a newer epoch for a
    /// region still held (its free was lost) gives it fresh, zeroed memory.
    pub fn alloc(
        &self,
        cache: CacheId,
        region: u32,
        region_size: u64,
        capacity: u64,
        epoch: u64,
        kind: Arrival,
    ) -> Result<(), StoreError> {
        let Arrival {
            lost,
            incoming,
            read_only,
        } = kind;
        if region_size == 0 || !region_size.is_multiple_of(4096) {
            return Err(StoreError::BadRegionSize(region_size));
        }
        if u64::from(region) >= capacity.div_ceil(region_size) {
            return Err(StoreError::RegionOutOfRange {
                region,
                capacity,
                region_size,
            });
        }
        let mut used = self.write.lock();
        let mut next = StoreMap::clone(&self.map.load());
        let entry = Arc::make_mut(next.caches.entry(cache).or_insert_with(|| {
            Arc::new(CacheRegions {
                region_size,
                ..Default::default()
            })
        }));
        if entry.region_size != region_size && entry.regions.iter().any(Option::is_some) {
            return Err(StoreError::Conflict {
                cache,
                region,
                existing: entry.region_size,
            });
        }
        entry.region_size = region_size;
        let idx = region as usize;
        let held = entry.regions.get(idx).is_some_and(Option::is_some);
        let same = entry.placed.get(idx).is_some_and(|&e| e == epoch);
        if !held {
            let free = self.memory.saturating_sub(*used);
            if region_size > free {
                return Err(StoreError::NoMemory {
                    requested: region_size,
                    free,
                    total: self.memory,
                });
            }
        }
        if !held || !same {
            let mem = Region::new(region_size)?;
            if entry.regions.len() <= idx {
                entry.regions.resize(idx + 1, None);
                entry.placed.resize(idx + 1, 0);
            }
            entry.regions[idx] = Some(Arc::new(mem));
            entry.placed[idx] = epoch;
            if !held {
                *used = used.saturating_add(region_size);
            }
        }
        entry.moved.remove(&region);
        if !held || !same {
            // Fresh memory: nothing of an earlier migration or loss applies to it.
            entry.gates.remove(&region);
            entry.lost.remove(&region);
            entry.incoming.remove(&region);
            if incoming {
                entry.incoming.insert(region);
            }
            if lost {
                entry
                    .lost
                    .insert(region, Arc::new(LostRanges::whole(region_size)));
            }
        }
        entry.read_only |= read_only;
        entry.update_guarded();
        entry.set_capacity(capacity, epoch);
        self.map.store(Arc::new(next));
        Ok(())
    }

    /// Sets (or with `None` lifts) the write gate of a held region, then waits until
    /// no batch still runs against a table without it, so every write from then on
    /// sees the gate. False if the region is not held here, or batches did not drain
    /// within `drain`.
    pub fn set_gate(
        &self,
        cache: CacheId,
        region: u32,
        gate: Option<WriteGate>,
        drain: std::time::Duration,
    ) -> bool {
        let old = {
            let _guard = self.write.lock();
            let old = self.map.load_full();
            let mut next = StoreMap::clone(&old);
            let Some(entry) = next.caches.get_mut(&cache).map(Arc::make_mut) else {
                return false;
            };
            if !entry
                .regions
                .get(region as usize)
                .is_some_and(Option::is_some)
            {
                return false;
            }
            match gate {
                Some(g) => entry.gates.insert(region, g),
                None => entry.gates.remove(&region),
            };
            entry.update_guarded();
            self.map.store(Arc::new(next));
            old
        };
        // Storing settles every reader's borrowed reference into a count, so the
        // count falls to ours once the last batch that loaded `old` is done.
        let deadline = std::time::Instant::now() + drain;
        while Arc::strong_count(&old) > 1 {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }

    /// The memory of a held region.
    pub fn region(&self, cache: CacheId, region: u32) -> Option<Arc<Region>> {
        self.map
            .load()
            .caches
            .get(&cache)?
            .regions
            .get(region as usize)?
            .clone()
    }

    /// Makes `[addr, addr+len)` of `cache` data again where it was lost (the loss is
    /// acknowledged: those bytes read as they are, zeros). Returns the bytes cleared.
    pub fn forget_lost(&self, cache: CacheId, addr: u64, len: u64) -> u64 {
        let _guard = self.write.lock();
        let mut next = StoreMap::clone(&self.map.load());
        let Some(entry) = next.caches.get_mut(&cache).map(Arc::make_mut) else {
            return 0;
        };
        let rs = entry.region_size.max(1);
        let end = addr.saturating_add(len);
        let mut cleared = 0;
        entry.lost.retain(|&i, l| {
            let (start, stop) = (u64::from(i) * rs, u64::from(i) * rs + rs);
            let (a, b) = (addr.max(start), end.min(stop));
            if a < b {
                let before = l.bytes();
                l.clear(a - start, b - a);
                cleared += before - l.bytes();
                // A region being copied away must send these bytes as data now.
                if let Some(WriteGate::Track(d)) = entry.gates.get(&i) {
                    d.mark(a - start, b - a);
                }
            }
            !l.is_empty()
        });
        entry.update_guarded();
        self.map.store(Arc::new(next));
        cleared
    }

    /// Bytes still lost in regions held here.
    pub fn lost_bytes(&self) -> u64 {
        let m = self.map.load();
        m.caches
            .values()
            .flat_map(|c| c.lost.values())
            .map(|l| l.bytes())
            .sum()
    }

    /// Releases a region; memory returns once in-flight batches drop their snapshot.
    pub fn free(&self, cache: CacheId, region: u32, moved_to: Option<String>) -> bool {
        let mut used = self.write.lock();
        let mut next = StoreMap::clone(&self.map.load());
        let Some(entry) = next.caches.get_mut(&cache).map(Arc::make_mut) else {
            return false;
        };
        let taken = entry
            .regions
            .get_mut(region as usize)
            .and_then(Option::take);
        if let Some(r) = &taken {
            self.log_acks(cache, region, r);
        }
        let freed = taken.is_some();
        if freed {
            *used = used.saturating_sub(entry.region_size);
        }
        if let Some(to) = moved_to {
            entry.moved.insert(region, to);
        }
        entry.gates.remove(&region);
        entry.lost.remove(&region);
        entry.incoming.remove(&region);
        entry.backups.remove(&region);
        entry.update_guarded();
        while entry.regions.last().is_some_and(Option::is_none) {
            entry.regions.pop();
        }
        entry.placed.truncate(entry.regions.len());
        self.map.store(Arc::new(next));
        freed
    }

    /// A new capacity for a cache held here (see [`CacheRegions::set_capacity`]).
    /// False if no region of the cache is here.
    pub fn resize(&self, cache: CacheId, capacity: u64, epoch: u64) -> bool {
        let _guard = self.write.lock();
        let mut next = StoreMap::clone(&self.map.load());
        let Some(entry) = next.caches.get_mut(&cache).map(Arc::make_mut) else {
            return false;
        };
        entry.set_capacity(capacity, epoch);
        self.map.store(Arc::new(next));
        true
    }

    /// Replaces a cache's region table unless a newer one is already here.
    pub fn set_routes(
        &self,
        cache: CacheId,
        epoch: u64,
        owners: Vec<String>,
        backups: &[Vec<String>],
        capacity: u64,
        me: &str,
    ) {
        let _guard = self.write.lock();
        let mut next = StoreMap::clone(&self.map.load());
        let Some(entry) = next.caches.get_mut(&cache).map(Arc::make_mut) else {
            return;
        };
        if epoch < entry.routes_epoch {
            return;
        }
        entry.routes_epoch = epoch;
        // A region that arrived is served once the table names this server its owner.
        let me = me.to_owned();
        entry
            .incoming
            .retain(|&i| owners.get(i as usize).is_none_or(|o| *o != me));
        entry.owners = Arc::new(owners);
        entry.derive_backups(backups, &me);
        // Regions no longer lost (overwritten, or filled by a migration) stop costing
        // the ops of this cache a lookup.
        entry.lost.retain(|_, l| !l.is_empty());
        entry.update_guarded();
        if capacity > 0 {
            entry.set_capacity(capacity, epoch);
        }
        self.map.store(Arc::new(next));
    }

    pub fn drop_cache(&self, cache: CacheId) -> bool {
        let mut used = self.write.lock();
        let mut next = StoreMap::clone(&self.map.load());
        let Some(entry) = next.caches.remove(&cache) else {
            return false;
        };
        for (i, r) in entry.regions.iter().enumerate() {
            if let Some(r) = r {
                self.log_acks(cache, i as u32, r);
            }
        }
        let held = entry.regions.iter().flatten().count() as u64;
        *used = used.saturating_sub(entry.region_size.saturating_mul(held));
        self.map.store(Arc::new(next));
        true
    }
}

#[cfg(test)]
mod tests;
