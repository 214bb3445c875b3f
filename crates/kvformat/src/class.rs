//! Size classes: items are carved in sizes growing by about 1.25×, so a freed item
//! serves any later item of its class and internal waste stays under 20 %.

/// Smallest item (a 24-byte header and 8 bytes of key and value).
pub const MIN_CLASS: u32 = 32;
/// Classes in the table (6 bits of a slot word); the largest exceeds any item a
/// store accepts.
pub const CLASSES: usize = 64;

const fn table() -> [u32; CLASSES] {
    let mut t = [0u32; CLASSES];
    t[0] = MIN_CLASS;
    let mut i = 1;
    while i < CLASSES {
        let prev = t[i - 1] as u64;
        let mut next = prev * 5 / 4;
        if next < prev + 8 {
            next = prev + 8;
        }
        next = next.div_ceil(8) * 8;
        if next > u32::MAX as u64 {
            next = u32::MAX as u64 & !7;
        }
        t[i] = next as u32;
        i += 1;
    }
    t
}

/// Item size of each class, ascending, multiples of 8.
pub const SIZES: [u32; CLASSES] = table();

/// The bytes an item of class `c` occupies, or `None` for a class outside the table.
#[inline]
pub fn size(c: u8) -> Option<u32> {
    SIZES.get(c as usize).copied()
}

/// The smallest class holding `bytes`.
#[inline]
pub fn for_len(bytes: u64) -> Option<u8> {
    let i = SIZES.partition_point(|&s| u64::from(s) < bytes);
    (i < CLASSES).then_some(i as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_grow_and_fit() {
        for w in SIZES.windows(2) {
            assert!(w[1] > w[0]);
            assert_eq!(w[1] % 8, 0);
            // At most 25 % (plus alignment) of an item is waste.
            assert!(u64::from(w[1]) * 4 <= u64::from(w[0]) * 5 + 32);
        }
        assert!(SIZES[CLASSES - 1] > 8 << 20);
        assert_eq!(for_len(1), Some(0));
        assert_eq!(for_len(32), Some(0));
        assert_eq!(for_len(33), Some(1));
        for n in [1u64, 100, 4096, 70_000, 1 << 20] {
            let c = for_len(n).expect("class");
            assert!(u64::from(SIZES[c as usize]) >= n);
            if c > 0 {
                assert!(u64::from(SIZES[c as usize - 1]) < n);
            }
        }
        assert_eq!(for_len(u64::MAX), None);
        assert_eq!(size(200), None);
    }
}
