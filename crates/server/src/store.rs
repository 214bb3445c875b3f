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
use farcache_proto::control::{HeldRegion, region_split};
use parking_lot::Mutex;

use crate::error::StoreError;
use crate::region::Region;

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
}

impl CacheRegions {
    pub fn holds(&self, addr: u64) -> bool {
        addr < self.capacity
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
    pub caches: HashMap<CacheId, CacheRegions>,
}

pub struct RegionStore {
    map: ArcSwap<StoreMap>,
    write: Mutex<u64>, // bytes promised; guards writers
    memory: u64,
}

impl RegionStore {
    pub fn new(memory: u64) -> Self {
        Self {
            map: ArcSwap::from_pointee(StoreMap::default()),
            write: Mutex::new(0),
            memory,
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
    ) -> Result<(), StoreError> {
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
        let entry = next.caches.entry(cache).or_insert_with(|| CacheRegions {
            region_size,
            ..Default::default()
        });
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
        entry.set_capacity(capacity, epoch);
        self.map.store(Arc::new(next));
        Ok(())
    }

    /// Releases a region; memory returns once in-flight batches drop their snapshot.
    pub fn free(&self, cache: CacheId, region: u32, moved_to: Option<String>) -> bool {
        let mut used = self.write.lock();
        let mut next = StoreMap::clone(&self.map.load());
        let Some(entry) = next.caches.get_mut(&cache) else {
            return false;
        };
        let freed = entry
            .regions
            .get_mut(region as usize)
            .and_then(Option::take)
            .is_some();
        if freed {
            *used = used.saturating_sub(entry.region_size);
        }
        if let Some(to) = moved_to {
            entry.moved.insert(region, to);
        }
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
        let Some(entry) = next.caches.get_mut(&cache) else {
            return false;
        };
        entry.set_capacity(capacity, epoch);
        self.map.store(Arc::new(next));
        true
    }

    /// Replaces a cache's region table unless a newer one is already here.
    pub fn set_routes(&self, cache: CacheId, epoch: u64, owners: Vec<String>, capacity: u64) {
        let _guard = self.write.lock();
        let mut next = StoreMap::clone(&self.map.load());
        let Some(entry) = next.caches.get_mut(&cache) else {
            return;
        };
        if epoch < entry.routes_epoch {
            return;
        }
        entry.routes_epoch = epoch;
        entry.owners = Arc::new(owners);
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
        let held = entry.regions.iter().flatten().count() as u64;
        *used = used.saturating_sub(entry.region_size.saturating_mul(held));
        self.map.store(Arc::new(next));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(s: &RegionStore, cache: CacheId, addr: u64, len: usize) -> Vec<u8> {
        let m = s.snapshot();
        let c = &m.caches[&cache];
        let (idx, off) = region_split(addr, c.region_size);
        let mut b = vec![0u8; len];
        let r = c.regions[idx as usize].as_ref().unwrap();
        assert!(r.read_into(off as usize, &mut b));
        b
    }

    fn write(s: &RegionStore, cache: CacheId, addr: u64, data: &[u8]) {
        let m = s.snapshot();
        let c = &m.caches[&cache];
        let (idx, off) = region_split(addr, c.region_size);
        assert!(
            c.regions[idx as usize]
                .as_ref()
                .unwrap()
                .write_from(off as usize, data)
        );
    }

    #[test]
    fn budget_is_enforced_and_returned() {
        let s = RegionStore::new(3 * 4096);
        s.alloc(1, 0, 4096, 8192, 1).unwrap();
        s.alloc(1, 1, 4096, 8192, 1).unwrap();
        s.alloc(1, 1, 4096, 8192, 1).unwrap(); // a retry
        s.alloc(2, 0, 4096, 4096, 1).unwrap();
        assert!(matches!(
            s.alloc(2, 1, 4096, 8192, 1),
            Err(StoreError::NoMemory { .. })
        ));
        assert_eq!(s.used(), 3 * 4096);
        assert!(s.free(1, 1, Some("x:1".into())));
        assert_eq!(s.used(), 2 * 4096);
        assert_eq!(
            s.snapshot().caches[&1].moved.get(&1).map(String::as_str),
            Some("x:1")
        );
        assert!(s.drop_cache(1));
        assert_eq!(s.used(), 4096);
        assert!(!s.drop_cache(1));
        assert!(matches!(
            s.alloc(3, 0, 100, 100, 1),
            Err(StoreError::BadRegionSize(100))
        ));
        // A region size the budget cannot hold does not overflow the arithmetic.
        assert!(s.alloc(4, 0, u64::MAX - 4095, u64::MAX, 1).is_err());
        assert_eq!(s.used(), 4096);
        // A region index past the capacity would size the table, not place memory.
        assert!(matches!(
            s.alloc(5, u32::MAX, 4096, 8192, 1),
            Err(StoreError::RegionOutOfRange { .. })
        ));
    }

    #[test]
    fn a_retry_keeps_bytes_and_a_newer_epoch_zeroes_them() {
        let s = RegionStore::new(1 << 20);
        s.alloc(1, 0, 4096, 4096, 1).unwrap();
        write(&s, 1, 10, b"keep");
        s.alloc(1, 0, 4096, 4096, 1).unwrap();
        assert_eq!(read(&s, 1, 10, 4), b"keep");
        // The region's free was lost; a later table places it here again.
        s.alloc(1, 0, 4096, 4096, 3).unwrap();
        assert_eq!(read(&s, 1, 10, 4), [0; 4]);
        assert_eq!(s.used(), 4096);
        assert_eq!(
            s.held(),
            vec![HeldRegion {
                cache: 1,
                region: 0
            }]
        );
    }

    #[test]
    fn shrinking_zeroes_the_tail_and_old_epochs_are_ignored() {
        let s = RegionStore::new(1 << 20);
        s.alloc(1, 0, 8192, 8192, 1).unwrap();
        write(&s, 1, 6000, &[9; 2000]);
        assert!(s.resize(1, 7000, 2));
        assert_eq!(s.snapshot().caches[&1].capacity, 7000);
        assert!(s.resize(1, 8192, 3));
        let tail = read(&s, 1, 6000, 2000);
        assert!(tail[..1000].iter().all(|&b| b == 9), "kept below the cut");
        assert!(tail[1000..].iter().all(|&b| b == 0), "zeros past the cut");
        // A late message from before the grow changes nothing.
        assert!(s.resize(1, 100, 2));
        assert_eq!(s.snapshot().caches[&1].capacity, 8192);
        s.set_routes(1, 4, vec!["a:1".into()], 6000);
        assert_eq!(s.snapshot().caches[&1].capacity, 6000);
        assert!(!s.resize(9, 1, 1), "no such cache here");
    }
}
