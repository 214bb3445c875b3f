//! Which chunks of a region were written while it was being copied.
//!
//! Writers set a chunk's bit after writing; the copier clears a bit before copying the
//! chunk. A write that lands after the copy read its chunk therefore leaves the bit
//! set, and the chunk goes again in a later round.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes per tracked chunk: a page, so a hot 8-byte record re-sends little and
/// uniform writes leave most of a region clean between rounds; the bitmap stays small
/// (2 KiB for 64 MiB).
pub const CHUNK: u64 = 4 << 10;

pub struct DirtyChunks {
    bits: Box<[AtomicU64]>,
    chunks: u64,
}

impl DirtyChunks {
    pub fn new(region_len: u64) -> Self {
        let chunks = region_len.div_ceil(CHUNK);
        Self {
            bits: (0..chunks.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            chunks,
        }
    }

    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// Marks every chunk `[off, off+len)` touches.
    #[inline]
    pub fn mark(&self, off: u64, len: u64) {
        let first = off / CHUNK;
        let last = (off + len.max(1) - 1) / CHUNK;
        for c in first..=last.min(self.chunks.saturating_sub(1)) {
            if let Some(w) = self.bits.get((c / 64) as usize) {
                w.fetch_or(1 << (c % 64), Ordering::Release);
            }
        }
    }

    /// Takes (and clears) the dirty chunk indexes, in order.
    pub fn take(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for (i, w) in self.bits.iter().enumerate() {
            let mut v = w.swap(0, Ordering::AcqRel);
            while v != 0 {
                let b = u64::from(v.trailing_zeros());
                out.push(i as u64 * 64 + b);
                v &= v - 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_every_touched_chunk_once() {
        let d = DirtyChunks::new(10 * CHUNK);
        d.mark(CHUNK - 4, 8);
        d.mark(5 * CHUNK, 1);
        d.mark(5 * CHUNK + 7, 1);
        d.mark(10 * CHUNK - 1, 100); // clipped at the region's end
        assert_eq!(d.take(), vec![0, 1, 5, 9]);
        assert!(d.take().is_empty());
        assert_eq!(d.chunks(), 10);
    }
}
