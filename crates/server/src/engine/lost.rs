//! Byte ranges of a region whose only copy died with a server.
//!
//! The region is re-placed empty and these ranges answer `DATA_LOST` until they are
//! overwritten or the loss is acknowledged, so zeros never pass for data. Only lost
//! regions pay for this (a mutex and a small interval map); others never reach it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

/// Disjoint, non-adjacent `[start, end)` ranges of region offsets.
#[derive(Debug, Default)]
pub struct LostRanges {
    ranges: Mutex<BTreeMap<u64, u64>>,
    /// Nothing is lost any more: readers skip the lock.
    empty: AtomicBool,
}

impl LostRanges {
    /// The whole region `[0, len)` lost.
    pub fn whole(len: u64) -> Self {
        let mut m = BTreeMap::new();
        if len > 0 {
            m.insert(0, len);
        }
        Self {
            empty: AtomicBool::new(m.is_empty()),
            ranges: Mutex::new(m),
        }
    }

    /// Whether any byte of `[start, start+len)` is lost.
    pub fn overlaps(&self, start: u64, len: u64) -> bool {
        if self.empty.load(Ordering::Acquire) {
            return false;
        }
        let end = start.saturating_add(len.max(1));
        let m = self.ranges.lock();
        // The last range starting before `end` is the only one that can overlap.
        m.range(..end).next_back().is_some_and(|(_, &e)| e > start)
    }

    /// `[start, start+len)` holds data again (overwritten, or the loss acknowledged).
    pub fn clear(&self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        if len == 0 || self.empty.load(Ordering::Acquire) {
            return;
        }
        let mut m = self.ranges.lock();
        let hit: Vec<(u64, u64)> = m
            .range(..end)
            .rev()
            .take_while(|(_, e)| **e > start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in hit {
            m.remove(&s);
            if s < start {
                m.insert(s, start);
            }
            if e > end {
                m.insert(end, e);
            }
        }
        if m.is_empty() {
            self.empty.store(true, Ordering::Release);
        }
    }

    /// The parts of `[start, start+len)` that are not lost, as (start, len).
    pub fn gaps(&self, start: u64, len: u64) -> Vec<(u64, u64)> {
        let end = start.saturating_add(len);
        if self.empty.load(Ordering::Acquire) {
            return vec![(start, len)];
        }
        let m = self.ranges.lock();
        let mut out = Vec::new();
        let mut at = start;
        let first = m.range(..=start).next_back().map_or(start, |(&s, _)| s);
        for (&s, &e) in m.range(first..end) {
            if e <= at {
                continue;
            }
            if s > at {
                out.push((at, s - at));
            }
            at = at.max(e);
        }
        if at < end {
            out.push((at, end - at));
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.empty.load(Ordering::Acquire)
    }

    /// Bytes still lost.
    pub fn bytes(&self) -> u64 {
        self.ranges.lock().iter().map(|(s, e)| e - s).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn overwrites_carve_the_lost_range() {
        let l = LostRanges::whole(100);
        assert!(l.overlaps(0, 1) && l.overlaps(99, 1));
        l.clear(10, 20);
        assert!(!l.overlaps(10, 20));
        assert!(l.overlaps(9, 2) && l.overlaps(29, 2));
        l.clear(0, 10);
        l.clear(30, 70);
        assert!(l.is_empty());
        assert_eq!(l.bytes(), 0);
    }

    proptest! {
        /// Against a byte model: after any clears, a range overlaps iff a byte of it
        /// is still lost.
        #[test]
        fn matches_a_byte_model(
            clears in proptest::collection::vec((0u64..256, 0u64..64), 0..20),
            probe in (0u64..256, 1u64..32),
        ) {
            let l = LostRanges::whole(256);
            let mut model = [true; 256];
            for (s, n) in clears {
                l.clear(s, n);
                for b in model.iter_mut().skip(s as usize).take(n as usize) {
                    *b = false;
                }
            }
            let (s, n) = probe;
            let want = model.iter().skip(s as usize).take(n as usize).any(|&b| b);
            prop_assert_eq!(l.overlaps(s, n), want);
            // The gaps are exactly the bytes of the probe that are not lost.
            let mut gap_model = [false; 256];
            for (gs, gn) in l.gaps(s, n) {
                prop_assert!(gn > 0);
                for b in gap_model.iter_mut().skip(gs as usize).take(gn as usize) {
                    *b = true;
                }
            }
            for i in 0..256usize {
                let in_probe = (i as u64) >= s && (i as u64) < s + n;
                prop_assert_eq!(gap_model[i], in_probe && !model[i], "byte {}", i);
            }
            prop_assert_eq!(l.bytes(), model.iter().filter(|&&b| b).count() as u64);
        }
    }
}
