//! The memory a writing procedure runs on (`Procedure::writes`, the store's `kv_put`):
//! the one region its address is in, read and changed in place. Every change is
//! noted, so the executor tells the region's backups and a migration copying it, as
//! it does for a client's write or atomic.

use std::cell::RefCell;

use farcache_sproc::{Memory, Miss, Steps, WriteMemory};

use crate::engine::region::Region;

/// A change a run made: (cache address, length, whether it overwrote every byte).
pub type Change = (u64, u64, bool);

pub struct RegionMemory<'a> {
    region: &'a Region,
    /// Cache address of the region's first byte.
    base: u64,
    steps: Steps,
    changes: RefCell<Vec<Change>>,
}

impl<'a> RegionMemory<'a> {
    pub fn new(region: &'a Region, base: u64) -> Self {
        Self {
            region,
            base,
            steps: Steps::default(),
            changes: RefCell::new(Vec::new()),
        }
    }

    /// What the run changed, in order.
    pub fn into_changes(self) -> Vec<Change> {
        self.changes.into_inner()
    }

    /// The region offset of `[addr, addr+len)`, if the region holds all of it.
    fn offset(&self, addr: u64, len: usize) -> Result<usize, Miss> {
        let off = addr.checked_sub(self.base).ok_or(Miss::OutOfRange)?;
        let off = usize::try_from(off).map_err(|_| Miss::OutOfRange)?;
        match off.checked_add(len) {
            Some(end) if end <= self.region.len() => Ok(off),
            _ => Err(Miss::OutOfRange),
        }
    }

    fn note(&self, addr: u64, len: u64, overwrote: bool) {
        self.changes.borrow_mut().push((addr, len, overwrote));
    }
}

impl Memory for RegionMemory<'_> {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), Miss> {
        self.steps.charge()?;
        let off = self.offset(addr, out.len())?;
        if self.region.read_into(off, out) {
            Ok(())
        } else {
            Err(Miss::OutOfRange)
        }
    }

    fn step_limit(&self) -> u64 {
        self.steps.limit()
    }
}

impl WriteMemory for RegionMemory<'_> {
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), Miss> {
        self.steps.charge()?;
        let off = self.offset(addr, data.len())?;
        if !self.region.write_from(off, data) {
            return Err(Miss::OutOfRange);
        }
        self.note(addr, data.len() as u64, true);
        Ok(())
    }

    fn cas(&self, addr: u64, expected: u64, new: u64) -> Result<u64, Miss> {
        self.steps.charge()?;
        let off = self.offset(addr, 8)?;
        let seen = self
            .region
            .cas(off, expected, new)
            .ok_or(Miss::OutOfRange)?;
        if seen == expected {
            self.note(addr, 8, false);
        }
        Ok(seen)
    }

    fn fetch_add(&self, addr: u64, delta: u64) -> Result<u64, Miss> {
        self.steps.charge()?;
        let off = self.offset(addr, 8)?;
        let before = self.region.fetch_add(off, delta).ok_or(Miss::OutOfRange)?;
        self.note(addr, 8, false);
        Ok(before)
    }
}
