//! Copies to and from any shared buffer (one that Python lends us, which other
//! threads — numpy releasing the GIL, say — may write meanwhile). Unlike
//! [`crate::words`] nothing outside the buffer is touched: its unaligned edges are
//! copied byte by byte (`AtomicU8`), the aligned words in between as `AtomicU64`.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};

const W: usize = 8;

/// Bytes from `p` up to the next 8-aligned address, at most `n`.
#[inline(always)]
fn head(p: *const u8, n: usize) -> usize {
    ((W - p as usize % W) % W).min(n)
}

/// Copies `n` bytes from shared `src` to private `dst`.
///
/// # Safety
///
/// `src` must be valid for `n` bytes of reads that other threads may race with only
/// through atomic accesses (or code outside Rust); `dst` valid for `n` bytes of
/// writes, not overlapping `src`.
pub unsafe fn load_raw(src: *const u8, dst: *mut u8, n: usize) {
    let h = head(src, n);
    let words = (n - h) / W;
    // SAFETY (whole body): every access is inside `src..src + n` or `dst..dst + n`;
    // word accesses are 8-aligned (`src + h` is).
    unsafe {
        for i in 0..h {
            *dst.add(i) = AtomicU8::from_ptr(src.add(i).cast_mut()).load(Relaxed);
        }
        let w = src.add(h).cast::<AtomicU64>();
        for i in 0..words {
            let v = (*w.add(i)).load(Relaxed);
            dst.add(h + i * W).cast::<u64>().write_unaligned(v);
        }
        for i in h + words * W..n {
            *dst.add(i) = AtomicU8::from_ptr(src.add(i).cast_mut()).load(Relaxed);
        }
    }
}

/// Copies shared `src` (`n` bytes) into a new vector.
///
/// # Safety
///
/// As for [`load_raw`]'s `src`.
pub unsafe fn to_vec(src: *const u8, n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n);
    // SAFETY: `v`'s capacity is private and at least `n`; every byte is written
    // before the length covers it.
    unsafe {
        load_raw(src, v.as_mut_ptr(), n);
        v.set_len(n);
    }
    v
}

/// Copies private `src` into shared `dst`.
///
/// # Safety
///
/// `dst` must be valid for `src.len()` bytes of writes that other threads may race
/// with only through atomic accesses (or code outside Rust), not overlapping `src`.
pub unsafe fn store(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    let h = head(dst, n);
    let words = (n - h) / W;
    // SAFETY (whole body): as in `load_raw`, with the roles swapped.
    unsafe {
        for (i, &b) in src[..h].iter().enumerate() {
            AtomicU8::from_ptr(dst.add(i)).store(b, Relaxed);
        }
        let w = dst.add(h).cast::<AtomicU64>();
        for i in 0..words {
            let v = src.as_ptr().add(h + i * W).cast::<u64>().read_unaligned();
            (*w.add(i)).store(v, Relaxed);
        }
        for (i, &b) in src.iter().enumerate().skip(h + words * W) {
            AtomicU8::from_ptr(dst.add(i)).store(b, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Round trips at every alignment and length, touching nothing outside.
        #[test]
        fn copies_stay_inside_the_buffer(
            at in 0usize..16,
            data in proptest::collection::vec(any::<u8>(), 0..100),
        ) {
            let mut buf = vec![0xAAu8; 140];
            let n = data.len();
            unsafe { store(buf.as_mut_ptr().add(at + 8), &data) };
            prop_assert!(buf[..at + 8].iter().all(|&b| b == 0xAA));
            prop_assert!(buf[at + 8 + n..].iter().all(|&b| b == 0xAA));
            prop_assert_eq!(&buf[at + 8..at + 8 + n], &data[..]);
            let got = unsafe { to_vec(buf.as_ptr().add(at + 8), n) };
            prop_assert_eq!(got, data);
        }
    }
}
