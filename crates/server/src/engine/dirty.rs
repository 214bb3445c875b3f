//! Which chunks of a region were written while it was being copied.
//!
//! Writers set a chunk's bit after writing; the copier clears a bit before copying the
//! chunk. A write that lands after the copy read its chunk therefore leaves the bit
//! set, and the chunk goes again in a later round.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Bytes per tracked chunk. Small, so that small writes spread over a region dirty
/// little of it per round and the rounds shrink (with 4 KiB pages, 1.4 M uniform 8 B
/// writes/s dirtied a whole 64 MiB region within one round); the bitmap stays small
/// (32 KiB for 64 MiB).
pub const CHUNK: u64 = 256;

pub struct DirtyChunks {
    bits: Box<[AtomicU64]>,
    chunks: u64,
    /// Chunks marked and not yet taken (signed: a take may run between a mark's
    /// bit and its count).
    marked: AtomicI64,
    /// Once this many chunks are dirty, writes that would dirty another are refused
    /// until the copier takes the set ([`DirtyChunks::admits`]); `u64::MAX` never.
    limit: AtomicU64,
    /// Writes [`DirtyChunks::admits`] turned away.
    refused: AtomicU64,
}

impl DirtyChunks {
    pub fn new(region_len: u64) -> Self {
        let chunks = region_len.div_ceil(CHUNK);
        Self {
            bits: (0..chunks.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            chunks,
            marked: AtomicI64::new(0),
            limit: AtomicU64::new(u64::MAX),
            refused: AtomicU64::new(0),
        }
    }

    /// From now on, at most about `chunks` chunks are dirty at a time: writers that
    /// dirty a region faster than it copies are slowed down, so the set left for the
    /// final pause stays small whatever the write rate.
    pub fn throttle(&self, chunks: u64) {
        self.limit.store(chunks, Ordering::Release);
    }

    /// Whether a write of `[off, off+len)` may go ahead now: always below the limit,
    /// and above it only if every chunk it touches is dirty already (it adds nothing
    /// to send).
    #[inline]
    pub fn admits(&self, off: u64, len: u64) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        if limit == u64::MAX || self.marked.load(Ordering::Relaxed) < limit as i64 {
            return true;
        }
        let admitted = self.words(off, len).all(|(w, mask)| {
            self.bits
                .get(w as usize)
                .is_none_or(|b| b.load(Ordering::Acquire) & mask == mask)
        });
        if !admitted {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }

    /// Writes refused by the throttle so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The bitmap words `[off, off+len)` touches, each with the mask of its chunks
    /// (nothing past the region's end).
    fn words(&self, off: u64, len: u64) -> impl Iterator<Item = (u64, u64)> {
        let first = off / CHUNK;
        let last = ((off + len.max(1) - 1) / CHUNK).min(self.chunks.saturating_sub(1));
        let empty = self.chunks == 0 || first > last;
        let words = if empty {
            0..0
        } else {
            first / 64..last / 64 + 1
        };
        words.map(move |w| {
            let lo = if w == first / 64 { first % 64 } else { 0 };
            let hi = if w == last / 64 { last % 64 } else { 63 };
            (w, (u64::MAX >> (63 - hi)) & (u64::MAX << lo))
        })
    }

    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// Marks every chunk `[off, off+len)` touches (one atomic OR per 64 chunks).
    #[inline]
    pub fn mark(&self, off: u64, len: u64) {
        for (w, mask) in self.words(off, len) {
            if let Some(word) = self.bits.get(w as usize) {
                let before = word.fetch_or(mask, Ordering::Release);
                let new = (mask & !before).count_ones();
                if new > 0 {
                    self.marked.fetch_add(i64::from(new), Ordering::Relaxed);
                }
            }
        }
    }

    /// Takes (and clears) the dirty chunk indexes, in order.
    pub fn take(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for (i, w) in self.bits.iter().enumerate() {
            let mut v = w.swap(0, Ordering::AcqRel);
            self.marked
                .fetch_sub(i64::from(v.count_ones()), Ordering::Relaxed);
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

    #[test]
    fn long_writes_mark_across_words() {
        let d = DirtyChunks::new(300 * CHUNK);
        d.mark(60 * CHUNK + 1, 70 * CHUNK);
        assert_eq!(d.take(), (60..=130).collect::<Vec<u64>>());
        d.mark(0, 300 * CHUNK + 5);
        assert_eq!(d.take(), (0..300).collect::<Vec<u64>>());
        d.mark(299 * CHUNK, 0);
        assert_eq!(d.take(), vec![299]);
        d.mark(400 * CHUNK, 8);
        assert!(d.take().is_empty());
    }

    #[test]
    fn a_throttled_set_admits_only_writes_that_dirty_nothing_new() {
        let d = DirtyChunks::new(1000 * CHUNK);
        assert!(d.admits(0, 8));
        d.throttle(3);
        d.mark(0, 8);
        d.mark(CHUNK, 2 * CHUNK);
        assert!(!d.admits(10 * CHUNK, 8), "a fourth chunk waits");
        assert!(
            d.admits(CHUNK + 5, CHUNK),
            "chunks 1 and 2 are dirty already"
        );
        assert!(!d.admits(2 * CHUNK, 2 * CHUNK), "chunk 3 is not");
        assert_eq!(d.take(), vec![0, 1, 2]);
        assert_eq!(d.refused(), 2);
        assert!(d.admits(10 * CHUNK, 8), "the copier took the set");
        d.mark(0, 1000 * CHUNK);
        assert!(d.admits(999 * CHUNK, 8));
        assert_eq!(d.take().len(), 1000);
    }
}
