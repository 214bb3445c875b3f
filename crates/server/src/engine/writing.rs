//! The memory a writing procedure runs on (`Procedure::writes`: the store's `kv_put`
//! and `kv_mput`): the regions of its cache held here, read and changed in place, one
//! region per access. An access to a region that is not this server's to write now
//! (held elsewhere, arriving, paused for a migration's last copy) or to lost bytes is
//! refused. Every change is noted, so the executor tells the region's backups and a
//! migration copying it, as it does for a client's write or atomic.

use std::cell::RefCell;

use farcache_proto::control::region_split;
use farcache_sproc::{Memory, Miss, Steps, WriteMemory};

use crate::engine::region::Region;
use crate::engine::store::CacheRegions;

/// A change a run made: (cache address, length, whether it overwrote every byte).
pub type Change = (u64, u64, bool);

pub struct CacheMemory<'a> {
    c: &'a CacheRegions,
    steps: Steps,
    changes: RefCell<Vec<Change>>,
}

impl<'a> CacheMemory<'a> {
    pub fn new(c: &'a CacheRegions) -> Self {
        Self {
            c,
            steps: Steps::default(),
            changes: RefCell::new(Vec::new()),
        }
    }

    /// What the run changed, in order.
    pub fn into_changes(self) -> Vec<Change> {
        self.changes.into_inner()
    }

    /// The region and offset of `[addr, addr+len)`, which must lie in one region
    /// this server may write now.
    fn region(&self, addr: u64, len: usize) -> Result<(&'a Region, usize), Miss> {
        let c = self.c;
        let end = addr.checked_add(len as u64).ok_or(Miss::OutOfRange)?;
        let (idx, off) = region_split(addr, c.region_size);
        if end > c.capacity || off + len as u64 > c.region_size {
            return Err(Miss::OutOfRange);
        }
        if c.guarded {
            if c.arriving(addr) || c.write_paused(addr) {
                return Err(Miss::Remote);
            }
            if c.lost_in(addr, len as u64) {
                return Err(Miss::Lost);
            }
        }
        match c.regions.get(idx as usize) {
            Some(Some(r)) => Ok((r, off as usize)),
            _ => Err(Miss::Remote),
        }
    }

    fn note(&self, addr: u64, len: u64, overwrote: bool) {
        self.changes.borrow_mut().push((addr, len, overwrote));
    }
}

impl Memory for CacheMemory<'_> {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), Miss> {
        self.steps.charge()?;
        let (r, off) = self.region(addr, out.len())?;
        if r.read_into(off, out) {
            Ok(())
        } else {
            Err(Miss::OutOfRange)
        }
    }

    fn prefetch(&self, addr: u64) {
        let (idx, off) = region_split(addr, self.c.region_size);
        if let Some(Some(r)) = self.c.regions.get(idx as usize) {
            r.prefetch(off as usize, false);
        }
    }

    fn step_limit(&self) -> u64 {
        self.steps.limit()
    }
}

impl WriteMemory for CacheMemory<'_> {
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), Miss> {
        self.steps.charge()?;
        let (r, off) = self.region(addr, data.len())?;
        if !r.write_from(off, data) {
            return Err(Miss::OutOfRange);
        }
        self.note(addr, data.len() as u64, true);
        Ok(())
    }

    fn cas(&self, addr: u64, expected: u64, new: u64) -> Result<u64, Miss> {
        self.steps.charge()?;
        let (r, off) = self.region(addr, 8)?;
        let seen = r.cas(off, expected, new).ok_or(Miss::OutOfRange)?;
        if seen == expected {
            self.note(addr, 8, false);
        }
        Ok(seen)
    }

    fn fetch_add(&self, addr: u64, delta: u64) -> Result<u64, Miss> {
        self.steps.charge()?;
        let (r, off) = self.region(addr, 8)?;
        let before = r.fetch_add(off, delta).ok_or(Miss::OutOfRange)?;
        self.note(addr, 8, false);
        Ok(before)
    }
}
