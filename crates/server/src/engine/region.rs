//! One region of cache memory: a page-aligned anonymous mapping.
//!
//! Bytes are accessed through raw pointers by many worker threads at once. Concurrent
//! overlapping writes from different clients have no defined interleaving (as with
//! RDMA); 8-byte atomics are linearizable among themselves. Every access is atomic
//! at the level of aligned 8-byte words (`farcache_sharedmem::words`), so racing
//! copies, compare-and-swaps and fetch-adds are not data races in Rust's memory
//! model. Every access checks its own bounds, so no caller can reach outside the
//! mapping (rounded up to whole words, so a range's covering words are inside it).
//!
//! Memory is never reused between regions: a new region is a new anonymous mapping,
//! which the kernel hands out zeroed, and a dropped region is unmapped. So bytes a
//! server frees are never readable by another cache, or another tenant.

use std::sync::atomic::{AtomicU64, Ordering};

use farcache_sharedmem::words;
use memmap2::MmapMut;

use crate::error::StoreError;

pub struct Region {
    // Kept only to own (and unmap on drop) the memory `ptr` points into.
    _map: MmapMut,
    ptr: *mut u8,
    len: usize,
    /// First and last acknowledgement of a client's write to it, wall-clock µs
    /// (0: none yet).
    ack_first: AtomicU64,
    ack_last: AtomicU64,
}

// SAFETY: the mapping lives as long as the Region; every access to it is an atomic
// access to aligned 8-byte words (relaxed copies, or AcqRel read-modify-writes).
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

const PAGE: usize = 4096;

impl Region {
    pub fn new(len: u64) -> Result<Self, StoreError> {
        let len = usize::try_from(len).map_err(|_| StoreError::Map("region too large".into()))?;
        // Whole words: a copy touches every word its range overlaps.
        let mut map = MmapMut::map_anon(len.next_multiple_of(8).max(8))
            .map_err(|e| StoreError::Map(e.to_string()))?;
        // Cache lookups land anywhere in a region: 2 MiB pages spare most of the TLB
        // misses (a keyed store's GETs ran ~1.6x faster). Only a hint: kernels
        // without transparent huge pages keep 4 KiB pages.
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage);
        let ptr = map.as_mut_ptr();
        Ok(Self {
            _map: map,
            ptr,
            len,
            ack_first: AtomicU64::new(0),
            ack_last: AtomicU64::new(0),
        })
    }

    /// A batch that wrote this region was acknowledged at `now_us` (wall clock).
    pub fn note_ack(&self, now_us: u64) {
        let _ = self
            .ack_first
            .compare_exchange(0, now_us, Ordering::Relaxed, Ordering::Relaxed);
        self.ack_last.fetch_max(now_us, Ordering::Relaxed);
    }

    /// (first, last) acknowledgement, if any.
    pub fn ack_window(&self) -> Option<(u64, u64)> {
        match self.ack_first.load(Ordering::Relaxed) {
            0 => None,
            f => Some((f, self.ack_last.load(Ordering::Relaxed))),
        }
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
        // SAFETY: in bounds (checked above), and the mapping holds every word the
        // range overlaps; dst is a private buffer.
        unsafe { words::load(self.ptr.add(off), dst) }
        true
    }

    /// Appends the `len` bytes at offset `off` to `out`; false (and nothing appended)
    /// if the range leaves the region. Unlike [`Region::read_into`] the bytes land in
    /// `out`'s spare capacity directly: no zeroing of a destination first.
    #[inline]
    #[must_use]
    pub fn append_to(&self, off: usize, len: usize, out: &mut Vec<u8>) -> bool {
        if !self.fits(off, len) {
            return false;
        }
        // SAFETY: in bounds (checked above), and the mapping holds every word the
        // range overlaps.
        unsafe { words::load_append(self.ptr.add(off), len, out) }
        true
    }

    /// Copies `src` to offset `off`; false (and nothing written) if it leaves the region.
    #[inline]
    #[must_use]
    pub fn write_from(&self, off: usize, src: &[u8]) -> bool {
        if !self.fits(off, src.len()) {
            return false;
        }
        // SAFETY: in bounds (checked above), and the mapping holds every word the
        // range overlaps; a frame's bytes are never region memory.
        unsafe { words::store(self.ptr.add(off), src) }
        true
    }

    /// Hints the CPU to start loading the cache line holding offset `off` (for a
    /// write, in a state that can be written), so that an access a few ops later does
    /// not wait for memory. Never touches memory: an offset outside the region is
    /// ignored, and a prefetch of a page not yet faulted in is dropped by the CPU.
    #[inline(always)]
    pub fn prefetch(&self, off: usize, write: bool) {
        if off >= self.len {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_ET0, _MM_HINT_T0, _mm_prefetch};
            // SAFETY: `off < len`, so the address is inside the mapping; a prefetch
            // reads nothing architecturally and never faults. SSE is part of the
            // x86_64 baseline.
            unsafe {
                let p = self.ptr.add(off).cast::<i8>().cast_const();
                if write {
                    _mm_prefetch::<_MM_HINT_ET0>(p);
                } else {
                    _mm_prefetch::<_MM_HINT_T0>(p);
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = write;
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
        unsafe { words::zero(self.ptr.add(off), page_start - off) };
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
            unsafe { words::zero(self.ptr.add(page_start), rest) };
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
    fn appends_and_writes_of_every_small_size_copy_exactly() {
        let r = Region::new(8192).unwrap();
        let src: Vec<u8> = (0..100u8).collect();
        for n in (0..=40).chain([64, 99, 100]) {
            for off in [0, 1, 7, 8192 - n] {
                assert!(r.write_from(0, &[0xEE; 128]));
                assert!(r.write_from(8192 - 128, &[0xEE; 128]));
                assert!(r.write_from(off, &src[..n]));
                let mut all = vec![0u8; 8192];
                assert!(r.read_into(0, &mut all));
                assert_eq!(&all[off..off + n], &src[..n], "n {n} off {off}");
                // Nothing around the range moved.
                assert!(all[off.saturating_sub(8)..off].iter().all(|&b| b == 0xEE));
                assert!(
                    all[off + n..(off + n + 8).min(8192)]
                        .iter()
                        .all(|&b| b == 0xEE)
                );
                let mut out = vec![1, 2, 3];
                assert!(r.append_to(off, n, &mut out));
                assert_eq!(&out[..3], &[1, 2, 3]);
                assert_eq!(&out[3..], &src[..n], "n {n} off {off}");
            }
        }
        let mut out = vec![9];
        assert!(!r.append_to(8190, 3, &mut out));
        assert!(!r.append_to(usize::MAX, 1, &mut out));
        assert_eq!(out, [9], "nothing appended out of bounds");
        r.prefetch(0, false);
        r.prefetch(8191, true);
        r.prefetch(8192, false);
        r.prefetch(usize::MAX, true);
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
