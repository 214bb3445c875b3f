//! The server's table (cache, region) → local memory, and its memory budget.
//!
//! Readers (workers, once per batch) load an immutable snapshot through `ArcSwap`;
//! writers (control requests, rare) copy, modify and publish under a mutex.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use farcache_proto::CacheId;
use farcache_proto::control::region_split;
use parking_lot::Mutex;

use crate::error::StoreError;
use crate::region::Region;

#[derive(Clone, Default)]
pub struct CacheRegions {
    pub region_size: u64,
    /// Latest capacity the manager announced; addresses beyond it are out of range.
    pub capacity: u64,
    pub regions: Vec<Option<Arc<Region>>>,
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

    /// The data address of the server holding `addr`, per the last region table.
    pub fn owner(&self, addr: u64) -> Option<&str> {
        if addr >= self.capacity {
            return None;
        }
        self.owners
            .get(region_split(addr, self.region_size).0 as usize)
            .map(String::as_str)
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

    /// Places region `region` of `cache`. Idempotent for an identical request, so a
    /// manager may retry after a lost reply.
    pub fn alloc(
        &self,
        cache: CacheId,
        region: u32,
        region_size: u64,
        capacity: u64,
    ) -> Result<(), StoreError> {
        if region_size == 0 || !region_size.is_multiple_of(4096) {
            return Err(StoreError::BadRegionSize(region_size));
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
        entry.capacity = capacity;
        let idx = region as usize;
        if entry.regions.get(idx).is_some_and(Option::is_some) {
            self.map.store(Arc::new(next));
            return Ok(());
        }
        if *used + region_size > self.memory {
            return Err(StoreError::NoMemory {
                requested: region_size,
                free: self.memory - *used,
                total: self.memory,
            });
        }
        let mem = Region::new(region_size)?;
        if entry.regions.len() <= idx {
            entry.regions.resize(idx + 1, None);
        }
        entry.regions[idx] = Some(Arc::new(mem));
        entry.moved.remove(&region);
        *used += region_size;
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
            *used -= entry.region_size;
        }
        if let Some(to) = moved_to {
            entry.moved.insert(region, to);
        }
        while entry.regions.last().is_some_and(Option::is_none) {
            entry.regions.pop();
        }
        self.map.store(Arc::new(next));
        freed
    }

    /// Replaces a cache's region table unless a newer one is already here.
    pub fn set_routes(&self, cache: CacheId, epoch: u64, owners: Vec<String>) {
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
        self.map.store(Arc::new(next));
    }

    pub fn drop_cache(&self, cache: CacheId) -> bool {
        let mut used = self.write.lock();
        let mut next = StoreMap::clone(&self.map.load());
        let Some(entry) = next.caches.remove(&cache) else {
            return false;
        };
        *used -= entry.region_size * entry.regions.iter().flatten().count() as u64;
        self.map.store(Arc::new(next));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_enforced_and_returned() {
        let s = RegionStore::new(3 * 4096);
        s.alloc(1, 0, 4096, 8192).unwrap();
        s.alloc(1, 1, 4096, 8192).unwrap();
        s.alloc(1, 1, 4096, 8192).unwrap(); // idempotent
        s.alloc(2, 0, 4096, 4096).unwrap();
        assert!(matches!(
            s.alloc(2, 1, 4096, 8192),
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
            s.alloc(3, 0, 100, 100),
            Err(StoreError::BadRegionSize(100))
        ));
    }
}
