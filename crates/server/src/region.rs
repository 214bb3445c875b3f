//! One region of cache memory: a page-aligned anonymous mapping.
//!
//! Bytes are accessed through raw pointers by many worker threads at once. Concurrent
//! overlapping plain writes from different clients have no defined interleaving (as
//! with RDMA); 8-byte atomics are linearizable among themselves.

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

    /// Copies `dst.len()` bytes from offset `off`. Caller checked bounds.
    #[inline]
    pub fn read_into(&self, off: usize, dst: &mut [u8]) {
        debug_assert!(off + dst.len() <= self.len);
        if dst.len() == 8 {
            // Records of one word are the common case: a load, not a memcpy call.
            // SAFETY: bounds checked by the caller; unaligned reads are allowed here.
            let v = unsafe { std::ptr::read_unaligned(self.ptr.add(off).cast::<[u8; 8]>()) };
            dst.copy_from_slice(&v);
            return;
        }
        // SAFETY: bounds checked by the caller; src and dst never overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), dst.as_mut_ptr(), dst.len()) }
    }

    pub fn write_from(&self, off: usize, src: &[u8]) {
        debug_assert!(off + src.len() <= self.len);
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) }
    }

    /// The 8-byte word at an 8-aligned offset, as an atomic.
    pub fn atomic(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= self.len);
        // SAFETY: in bounds, 8-aligned (mapping is page aligned), lives as long as &self.
        unsafe { AtomicU64::from_ptr(self.ptr.add(off).cast::<u64>()) }
    }

    pub fn cas(&self, off: usize, expected: u64, new: u64) -> u64 {
        match self
            .atomic(off)
            .compare_exchange(expected, new, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(v) | Err(v) => v,
        }
    }

    pub fn fetch_add(&self, off: usize, delta: u64) -> u64 {
        self.atomic(off).fetch_add(delta, Ordering::AcqRel)
    }
}
