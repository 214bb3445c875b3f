//! The 8-byte words the index and the free lists are made of; every change to them
//! is one compare-and-swap.

/// A slot never used. Slots never return to it (see the crate invariants).
pub const EMPTY: u64 = 0;
/// A slot whose item was deleted, replaced elsewhere or evicted.
pub const TOMB: u64 = 1;

const OFFSET_BITS: u32 = 40;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
/// Bits of a slot word's item offset (/8): shards below 32 GiB.
pub const ITEM_OFFSET_BITS: u32 = 32;
/// The largest item offset a slot word holds, over 8.
pub const ITEM_OFFSET_MASK: u64 = (1 << ITEM_OFFSET_BITS) - 1;
const STAMP_MASK: u64 = 0xff << ITEM_OFFSET_BITS;

/// An index slot pointing at an item: `tag:16 | flags:2 | class:6 | stamp:8 |
/// offset/8:32`, the offset relative to the shard. [`SlotWord::MANIFEST`] marks an
/// erasure-coded object's manifest (whoever replaces it retires its chunks);
/// [`SlotWord::HOT`] a key with a second copy. The stamp counts the rewrites of the
/// slot ([`SlotWord::after`]): an item reused for the key it just held gets a word
/// unlike the one it had, so a writer guarding on a word it read (a
/// read-modify-write) cannot mistake a slot rewritten since for an unchanged one
/// (ABA), short of 256 rewrites landing on the same item in between. Items start
/// past the shard header, so a live word is never [`EMPTY`] or [`TOMB`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotWord(pub u64);

impl SlotWord {
    /// Flag bit (in the class byte) of a manifest item.
    pub const MANIFEST: u8 = 0x80;
    /// Flag bit of a hot key with a second copy (`farcache-store`'s hot-key layer):
    /// writers keep it and wait out the copy's lease.
    pub const HOT: u8 = 0x40;

    /// `w` with the hot flag set.
    #[inline]
    pub fn with_hot(w: u64) -> u64 {
        w | u64::from(Self::HOT) << 40
    }

    /// `w` without the hot flag.
    #[inline]
    pub fn without_hot(w: u64) -> u64 {
        w & !(u64::from(Self::HOT) << 40)
    }

    #[inline]
    pub fn is_hot(self) -> bool {
        (self.0 >> 40) as u8 & Self::HOT != 0
    }

    /// `offset` must be a multiple of 8 below 32 GiB (the layout guarantees both).
    pub fn new(tag: u16, class: u8, offset: u64) -> Self {
        debug_assert!(offset.is_multiple_of(8) && offset >> 3 <= ITEM_OFFSET_MASK);
        Self(u64::from(tag) << 48 | u64::from(class) << 40 | (offset >> 3) & ITEM_OFFSET_MASK)
    }

    /// This word as the successor of `prev` in its slot: one stamp past `prev`'s
    /// when `prev` names an item.
    #[inline]
    pub fn after(self, prev: u64) -> Self {
        if !Self::is_item(prev) {
            return self;
        }
        let stamp = (prev & STAMP_MASK).wrapping_add(1 << ITEM_OFFSET_BITS) & STAMP_MASK;
        Self(self.0 & !STAMP_MASK | stamp)
    }

    #[inline]
    pub fn stamp(self) -> u8 {
        ((self.0 & STAMP_MASK) >> ITEM_OFFSET_BITS) as u8
    }

    /// Whether `w` points at an item (neither empty nor a tombstone).
    #[inline]
    pub fn is_item(w: u64) -> bool {
        w > TOMB
    }

    #[inline]
    pub fn tag(self) -> u16 {
        (self.0 >> 48) as u16
    }

    /// The item's size class.
    #[inline]
    pub fn class(self) -> u8 {
        (self.0 >> 40) as u8 & 0x3f
    }

    #[inline]
    pub fn is_manifest(self) -> bool {
        (self.0 >> 40) as u8 & Self::MANIFEST != 0
    }

    /// Offset of the item from the start of its shard.
    #[inline]
    pub fn offset(self) -> u64 {
        (self.0 & ITEM_OFFSET_MASK) << 3
    }
}

/// A free-list head: `tag:24 | offset/8:40`. The tag changes on every successful
/// swap, so a head popped and pushed back between a reader's two looks (ABA) no
/// longer compares equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreeHead(pub u64);

impl FreeHead {
    pub const EMPTY: FreeHead = FreeHead(0);

    #[inline]
    pub fn offset(self) -> u64 {
        (self.0 & OFFSET_MASK) << 3
    }

    #[inline]
    pub fn is_empty(self) -> bool {
        self.offset() == 0
    }

    /// The head after a swap to `offset` (0: empty list).
    #[inline]
    pub fn next(self, offset: u64) -> FreeHead {
        let tag = (self.0 >> OFFSET_BITS).wrapping_add(1) & ((1 << 24) - 1);
        FreeHead(tag << OFFSET_BITS | (offset >> 3) & OFFSET_MASK)
    }
}

/// A bucket lock word: `holder:16 | lease expiry in ms since the epoch:48`, 0 when
/// free. A holder that dies leaves a lease that others may break once it expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockWord(pub u64);

impl LockWord {
    pub const FREE: LockWord = LockWord(0);

    pub fn held(holder: u16, until_ms: u64) -> Self {
        Self(u64::from(holder) << 48 | until_ms & ((1 << 48) - 1))
    }

    pub fn expires_ms(self) -> u64 {
        self.0 & ((1 << 48) - 1)
    }

    /// Free, or held past its lease at `now_ms`.
    pub fn takeable(self, now_ms: u64) -> bool {
        self.0 == 0 || self.expires_ms() < now_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_words_round_trip() {
        let w = SlotWord::new(0xbeef, 47, 1 << 34);
        assert_eq!((w.tag(), w.class(), w.offset()), (0xbeef, 47, 1 << 34));
        // A rewrite into the same item differs by its stamp, and only by it.
        let again = SlotWord::new(0xbeef, 47, 1 << 34).after(w.0);
        assert_ne!(again, w);
        assert_eq!(
            (again.tag(), again.class(), again.offset(), again.stamp()),
            (0xbeef, 47, 1 << 34, 1)
        );
        let hot = SlotWord(SlotWord::with_hot(again.0));
        assert_eq!((hot.stamp(), hot.offset(), hot.class()), (1, 1 << 34, 47));
        let mut x = w;
        for _ in 0..256 {
            x = SlotWord::new(0xbeef, 47, 1 << 34).after(x.0);
        }
        assert_eq!(x, w, "the stamp wraps after 256 rewrites");
        assert_eq!(SlotWord::new(1, 2, 64).after(EMPTY).stamp(), 0);
        assert_eq!(SlotWord::new(1, 2, 64).after(TOMB).stamp(), 0);
        assert!(!w.is_manifest());
        let m = SlotWord::new(0xbeef, 47 | SlotWord::MANIFEST, 64);
        assert_eq!((m.class(), m.is_manifest(), m.is_hot()), (47, true, false));
        let h = SlotWord(SlotWord::with_hot(m.0));
        assert_eq!(
            (h.class(), h.is_manifest(), h.is_hot(), h.offset()),
            (47, true, true, 64)
        );
        assert_eq!(SlotWord::without_hot(h.0), m.0);
        assert!(SlotWord::is_item(w.0));
        assert!(SlotWord::is_item(SlotWord::new(0, 0, 1024).0));
        assert!(!SlotWord::is_item(EMPTY) && !SlotWord::is_item(TOMB));
    }

    #[test]
    fn free_heads_change_tag_on_every_swap() {
        let h = FreeHead::EMPTY;
        assert!(h.is_empty());
        let a = h.next(4096);
        assert_eq!(a.offset(), 4096);
        let b = a.next(0).next(4096);
        assert_eq!(b.offset(), 4096);
        assert_ne!(a, b, "same offset, different tag");
        let mut x = FreeHead(((1 << 24) - 1) << 40);
        x = x.next(8);
        assert_eq!(x.offset(), 8);
    }

    #[test]
    fn locks_expire() {
        let l = LockWord::held(7, 1000);
        assert!(!l.takeable(999) && !l.takeable(1000) && l.takeable(1001));
        assert!(LockWord::FREE.takeable(0));
    }
}
