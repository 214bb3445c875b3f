//! One region of cache memory: a page-aligned anonymous mapping.
//!
//! Bytes are accessed through raw pointers by many worker threads at once. Concurrent
//! overlapping plain writes from different clients have no defined interleaving (as
//! with RDMA); 8-byte atomics are linearizable among themselves. Every access checks
//! its own bounds (one compare next to a memcpy), so no caller can reach outside the
//! mapping.
//!
//! Memory is never reused between regions: a new region is a new anonymous mapping,
//! which the kernel hands out zeroed, and a dropped region is unmapped. So bytes a
//! server frees are never readable by another cache, or another tenant.

use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapMut;

use crate::error::StoreError;

pub struct Region {
    // Kept only to own (and unmap on drop) the memory `ptr` points into.
    _map: MmapMut,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping lives as long as the Region; access is through raw pointers with
// the cache's documented (RDMA-like) semantics, and atomics use aligned AtomicU64.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

const PAGE: usize = 4096;

impl Region {
    pub fn new(len: u64) -> Result<Self, StoreError> {
        let len = usize::try_from(len).map_err(|_| StoreError::Map("region too large".into()))?;
        let mut map = MmapMut::map_anon(len).map_err(|e| StoreError::Map(e.to_string()))?;
        let ptr = map.as_mut_ptr();
        Ok(Self {
            _map: map,
            ptr,
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn fits(&self, off: usize, len: usize) -> bool {
        off <= self.len && len <= self.len - off
    }

    /// Copies `dst.len()` bytes from offset `off`; false (and nothing copied) if the
    /// range leaves the region.
    #[inline]
    #[must_use]
    pub fn read_into(&self, off: usize, dst: &mut [u8]) -> bool {
        if !self.fits(off, dst.len()) {
            return false;
        }
        if dst.len() == 8 {
            // Records of one word are the common case: a load, not a memcpy call.
            // SAFETY: in bounds (checked above); unaligned reads are allowed here.
            let v = unsafe { std::ptr::read_unaligned(self.ptr.add(off).cast::<[u8; 8]>()) };
            dst.copy_from_slice(&v);
            return true;
        }
        // SAFETY: in bounds (checked above); src and dst never overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), dst.as_mut_ptr(), dst.len()) }
        true
    }

    /// Copies `src` to offset `off`; false (and nothing written) if it leaves the region.
    #[inline]
    #[must_use]
    pub fn write_from(&self, off: usize, src: &[u8]) -> bool {
        if !self.fits(off, src.len()) {
            return false;
        }
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) }
        true
    }

    /// The 8-byte word at an 8-aligned offset inside the region, as an atomic.
    #[inline]
    fn atomic(&self, off: usize) -> Option<&AtomicU64> {
        if !off.is_multiple_of(8) || !self.fits(off, 8) {
            return None;
        }
        // SAFETY: in bounds, 8-aligned (the mapping is page aligned), lives as long as
        // &self.
        Some(unsafe { AtomicU64::from_ptr(self.ptr.add(off).cast::<u64>()) })
    }

    /// Compare-and-swap; returns the word before. None if `off` is misaligned or out
    /// of the region.
    pub fn cas(&self, off: usize, expected: u64, new: u64) -> Option<u64> {
        let a = self.atomic(off)?;
        Some(
            match a.compare_exchange(expected, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(v) | Err(v) => v,
            },
        )
    }

    pub fn fetch_add(&self, off: usize, delta: u64) -> Option<u64> {
        Some(self.atomic(off)?.fetch_add(delta, Ordering::AcqRel))
    }

    /// Zeroes the region from `off` to its end: bytes a shrink cut off must read as
    /// zeros if a later grow brings the addresses back. Whole pages are handed back to
    /// the kernel (they read as zeros and stop counting in RSS); the partial page is
    /// cleared in place.
    pub fn zero_from(&self, off: usize) {
        if off >= self.len {
            return;
        }
        let page_start = off.next_multiple_of(PAGE).min(self.len);
        // SAFETY: [off, page_start) is inside the mapping.
        unsafe { std::ptr::write_bytes(self.ptr.add(off), 0, page_start - off) };
        let rest = self.len - page_start;
        if rest == 0 {
            return;
        }
        // SAFETY: a page-aligned range inside a private anonymous mapping this Region
        // owns; MADV_DONTNEED makes its pages read as zeros afterwards. Concurrent
        // readers see either the old bytes or zeros, as with any racing write.
        let r =
            unsafe { libc::madvise(self.ptr.add(page_start).cast(), rest, libc::MADV_DONTNEED) };
        if r != 0 {
            // Not expected on Linux; fall back to clearing every byte.
            // SAFETY: inside the mapping.
            unsafe { std::ptr::write_bytes(self.ptr.add(page_start), 0, rest) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_access_checks_its_bounds() {
        let r = Region::new(8192).unwrap();
        assert!(r.write_from(8190, b"ab"));
        assert!(!r.write_from(8191, b"ab"));
        assert!(!r.write_from(usize::MAX, b"a"));
        let mut b = [0u8; 2];
        assert!(r.read_into(8190, &mut b));
        assert_eq!(&b, b"ab");
        assert!(!r.read_into(8191, &mut b));
        let mut w = [0u8; 8];
        assert!(!r.read_into(8188, &mut w));
        assert_eq!(r.fetch_add(8176, 5), Some(0));
        assert_eq!(r.fetch_add(8192, 5), None);
        assert_eq!(r.cas(3, 0, 1), None, "misaligned");
        assert_eq!(r.cas(8176, 5, 9), Some(5));
    }

    #[test]
    fn zero_from_clears_the_tail_only() {
        let r = Region::new(4 * 4096).unwrap();
        let data = vec![0xAB; 4 * 4096];
        assert!(r.write_from(0, &data));
        r.zero_from(5000);
        let mut all = vec![0u8; 4 * 4096];
        assert!(r.read_into(0, &mut all));
        assert!(all[..5000].iter().all(|&b| b == 0xAB));
        assert!(all[5000..].iter().all(|&b| b == 0));
        r.zero_from(1 << 20);
    }
}
