//! The cache as a procedure on this server sees it: the regions held here, plus byte
//! ranges pulled from other servers for this invocation (DFlow).

use std::cell::Cell;
use std::collections::BTreeMap;

use farcache_proto::control::region_split;
use farcache_sproc::memory::DEFAULT_STEP_BUDGET;
use farcache_sproc::{Memory, Miss, Steps};

use crate::engine::store::CacheRegions;

/// Most bytes one invocation may pull before it fails (its copy lives in server memory).
pub const MAX_PULLED: usize = 64 << 20;

/// Ranges pulled for one invocation, by start address.
#[derive(Default)]
pub struct Pulled {
    chunks: BTreeMap<u64, Vec<u8>>,
    bytes: usize,
}

impl Pulled {
    pub fn insert(&mut self, addr: u64, data: Vec<u8>) {
        self.bytes += data.len();
        if let Some(old) = self.chunks.insert(addr, data) {
            self.bytes -= old.len();
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Copies the start of `[addr, addr + out.len())` from the chunk holding `addr`;
    /// returns how many bytes it copied (0 if no chunk holds `addr`).
    fn read_prefix(&self, addr: u64, out: &mut [u8]) -> usize {
        let Some((&start, data)) = self.chunks.range(..=addr).next_back() else {
            return 0;
        };
        let off = (addr - start) as usize;
        let Some(src) = data.get(off..) else {
            return 0;
        };
        let n = src.len().min(out.len());
        out[..n].copy_from_slice(&src[..n]);
        n
    }
}

pub struct FlowMemory<'m> {
    pub c: &'m CacheRegions,
    pub pulled: Option<&'m Pulled>,
    /// The last range a read could not serve because another server holds part of it:
    /// what DFlow pulls when a procedure continues at an address held here.
    pub last_miss: Cell<Option<(u64, u64)>>,
    /// This run's step budget: one `FlowMemory` serves one run of one procedure.
    steps: Steps,
}

impl<'m> FlowMemory<'m> {
    pub fn new(c: &'m CacheRegions, pulled: Option<&'m Pulled>) -> Self {
        Self::with_budget(c, pulled, DEFAULT_STEP_BUDGET)
    }

    /// Like [`FlowMemory::new`], serving at most `limit` reads.
    pub fn with_budget(c: &'m CacheRegions, pulled: Option<&'m Pulled>, limit: u64) -> Self {
        Self {
            c,
            pulled,
            last_miss: Cell::new(None),
            steps: Steps::new(limit),
        }
    }

    /// `read` without charging a step.
    fn read_uncharged(&self, addr: u64, out: &mut [u8]) -> Result<(), Miss> {
        let end = addr.checked_add(out.len() as u64).ok_or(Miss::OutOfRange)?;
        if end > self.c.capacity {
            return Err(Miss::OutOfRange);
        }
        if self.c.guarded && self.touches_lost(addr, out.len() as u64) {
            return Err(Miss::Lost);
        }
        if self.gather(addr, out) {
            return Ok(());
        }
        self.last_miss.set(Some((addr, out.len() as u64)));
        Err(Miss::Remote)
    }

    /// Whether a held region's part of `[addr, addr+len)` is lost.
    #[cold]
    fn touches_lost(&self, addr: u64, len: u64) -> bool {
        let rs = self.c.region_size;
        let (mut at, end) = (addr, addr.saturating_add(len));
        while at < end {
            let off = region_split(at, rs).1;
            let n = (rs - off).min(end - at);
            // A region still arriving is read where it comes from, not here.
            if !self.c.arriving(at) && self.c.lost_in(at, n) {
                return true;
            }
            at += n;
        }
        false
    }

    /// Serves each piece of the range from a local region or a pulled chunk.
    fn gather(&self, addr: u64, out: &mut [u8]) -> bool {
        let rs = self.c.region_size;
        let (mut at, mut done) = (addr, 0usize);
        while done < out.len() {
            let (idx, off) = region_split(at, rs);
            let held = self.c.regions.get(idx as usize);
            // A region still arriving by migration is not this server's to read.
            let held = held.filter(|_| !(self.c.guarded && self.c.arriving(at)));
            let n = match held {
                Some(Some(r)) => {
                    let n = ((rs - off) as usize).min(out.len() - done);
                    // A region refusing a range inside it serves nothing: a miss.
                    if r.read_into(off as usize, &mut out[done..done + n]) {
                        n
                    } else {
                        0
                    }
                }
                _ => match self.pulled {
                    Some(p) => p.read_prefix(at, &mut out[done..]),
                    None => 0,
                },
            };
            if n == 0 {
                return false;
            }
            done += n;
            at += n as u64;
        }
        true
    }
}

impl Memory for FlowMemory<'_> {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), Miss> {
        self.steps.charge()?;
        // A range inside one local region of an unguarded cache (the common case):
        // one copy, no walk over pieces.
        let rs = self.c.region_size;
        let (idx, off) = region_split(addr, rs);
        if !self.c.guarded
            && off.saturating_add(out.len() as u64) <= rs
            && addr.saturating_add(out.len() as u64) <= self.c.capacity
            && let Some(Some(r)) = self.c.regions.get(idx as usize)
            && r.read_into(off as usize, out)
        {
            return Ok(());
        }
        self.read_uncharged(addr, out)
    }

    /// One word inside one local region (the common case) is a single load.
    #[inline]
    fn read_u64(&self, addr: u64) -> Result<u64, Miss> {
        self.steps.charge()?;
        let rs = self.c.region_size;
        let (idx, off) = region_split(addr, rs);
        if off + 8 <= rs
            && !self.c.guarded
            && addr < self.c.capacity.saturating_sub(7)
            && let Some(Some(r)) = self.c.regions.get(idx as usize)
        {
            let mut b = [0u8; 8];
            if r.read_into(off as usize, &mut b) {
                return Ok(u64::from_le_bytes(b));
            }
        }
        let mut b = [0u8; 8];
        self.read_uncharged(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Words inside one local region of an unguarded cache: one set of checks and
    /// one budget charge for all of them, then plain loads.
    #[inline]
    fn read_u64s(&self, base: u64, stride: u64, out: &mut [u64]) -> bool {
        let Some(n) = out.len().checked_sub(1) else {
            return true;
        };
        let rs = self.c.region_size;
        let Some(last) = stride
            .checked_mul(n as u64)
            .and_then(|d| base.checked_add(d))
        else {
            return false;
        };
        let (idx, off) = region_split(base, rs);
        let (last_idx, last_off) = region_split(last, rs);
        if self.c.guarded
            || last_idx != idx
            || last_off + 8 > rs
            || last >= self.c.capacity.saturating_sub(7)
        {
            return false;
        }
        let Some(Some(r)) = self.c.regions.get(idx as usize) else {
            return false;
        };
        for (i, w) in out.iter_mut().enumerate() {
            // At most `last_off`: no overflow, whatever the stride of a single word.
            let at = off + i as u64 * stride;
            let mut b = [0u8; 8];
            if !r.read_into(at as usize, &mut b) {
                return false;
            }
            *w = u64::from_le_bytes(b);
        }
        // Charged last, so that a refusal above has charged nothing.
        self.steps.charge_n(out.len() as u64)
    }

    fn step_limit(&self) -> u64 {
        self.steps.limit()
    }

    /// A hint only: nothing is charged, checked or read.
    #[inline]
    fn prefetch(&self, addr: u64) {
        let (idx, off) = region_split(addr, self.c.region_size);
        if let Some(Some(r)) = self.c.regions.get(idx as usize) {
            r.prefetch(off as usize, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::store::Arrival;

    #[test]
    fn pulled_chunks_serve_reads_inside_them_only() {
        let mut p = Pulled::default();
        p.insert(100, vec![1, 2, 3, 4]);
        p.insert(200, vec![9; 8]);
        let mut b = [0u8; 2];
        assert_eq!(p.read_prefix(101, &mut b), 2);
        assert_eq!(b, [2, 3]);
        assert_eq!(
            p.read_prefix(103, &mut b),
            1,
            "the chunk ends after one byte"
        );
        assert_eq!(p.read_prefix(50, &mut b), 0);
        assert_eq!(p.read_prefix(104, &mut b), 0);
        p.insert(200, vec![1]);
        assert_eq!(p.bytes(), 5);
    }

    /// A cache of 8192 bytes in two 4096-byte regions, the first held here.
    fn one_region_of_two() -> std::sync::Arc<crate::engine::store::StoreMap> {
        let store = crate::engine::store::RegionStore::new(1 << 20);
        store
            .alloc(1, 0, 4096, 8192, 1, Arrival::default())
            .expect("region");
        std::sync::Arc::clone(&store.snapshot())
    }

    #[test]
    fn words_read_at_once_stay_in_one_region_and_charge_each_step() {
        let map = one_region_of_two();
        let c = &map.caches[&1];
        let r = c.regions[0].as_ref().expect("held");
        for i in 0..512u64 {
            assert!(r.write_from(i as usize * 8, &(i * 3).to_le_bytes()));
        }
        let m = FlowMemory::with_budget(c, None, 5);
        let mut w = [0u64; 3];
        assert!(m.read_u64s(16, 24, &mut w));
        assert_eq!(w, [6, 15, 24]);
        assert_eq!(m.steps.used(), 3, "one step per word");
        // The last word would cross into region 1, held nowhere here: nothing read.
        let mut w = [7u64; 2];
        assert!(!m.read_u64s(4088, 8, &mut w));
        assert!(
            !m.read_u64s(4000, 96, &mut w),
            "the second word is past the region"
        );
        assert_eq!(w, [7, 7]);
        assert!(!m.read_u64s(8184, 8, &mut [0u64; 1]), "past the capacity");
        assert_eq!(m.steps.used(), 3, "refusals charge nothing");
        // Two steps left: three words are refused whole, two are read.
        assert!(!m.read_u64s(0, 8, &mut [0u64; 3]));
        assert_eq!(m.steps.used(), 3);
        let mut w = [0u64; 2];
        assert!(m.read_u64s(0, 4000, &mut w));
        assert_eq!(w, [0, 1500]);
        assert!(m.read_u64s(0, 8, &mut []), "no words: nothing to refuse");
        // One word with any stride: the stride is never applied.
        let mut one = [0u64; 1];
        assert!(!m.read_u64s(8, u64::MAX, &mut one), "the budget is used up");
        assert!(FlowMemory::new(c, None).read_u64s(8, u64::MAX, &mut one));
        assert_eq!(one, [3]);
        assert_eq!(m.read_u64(0), Err(Miss::Budget));
    }

    #[test]
    fn every_read_charges_one_step_of_the_runs_budget() {
        let map = one_region_of_two();
        let c = &map.caches[&1];
        assert!(
            c.regions[0]
                .as_ref()
                .expect("held")
                .write_from(8, &42u64.to_le_bytes())
        );
        let m = FlowMemory::with_budget(c, None, 4);
        assert_eq!(m.read_u64(8), Ok(42), "fast path");
        let mut b = [0u8; 8];
        assert_eq!(m.read(8, &mut b), Ok(()));
        assert_eq!(
            m.read_u64(4092),
            Err(Miss::Remote),
            "slow path, charged once"
        );
        assert_eq!(m.read_u32(8), Ok(42));
        assert_eq!(m.read_u64(8), Err(Miss::Budget));
        assert_eq!(m.read(8, &mut b), Err(Miss::Budget));
        assert_eq!(m.step_limit(), 4);
        assert_eq!(FlowMemory::new(c, None).step_limit(), DEFAULT_STEP_BUDGET);
    }
}
