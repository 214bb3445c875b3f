//! Copies to and from word-contained shared memory: every aligned 8-byte word that
//! overlaps a range is accessed whole, as an `AtomicU64`. A write that covers only
//! part of a word merges its bytes with a compare-and-swap loop, so no byte outside
//! the range is ever written back stale.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const W: usize = 8;

/// The aligned word holding `p`, and `p`'s offset in it.
///
/// # Safety
///
/// The aligned word holding `p` must be valid for atomic access while the returned
/// reference lives.
#[inline(always)]
unsafe fn word_of<'a>(p: *const u8) -> (&'a AtomicU64, usize) {
    let at = p as usize % W;
    // SAFETY: the caller guarantees the aligned word around `p` is valid; it is
    // 8-aligned by construction.
    (
        unsafe { AtomicU64::from_ptr(p.sub(at).cast::<u64>().cast_mut()) },
        at,
    )
}

/// Writes `part` into bytes `at..at + part.len()` of `w`, keeping its other bytes as
/// any concurrent writer left them.
#[inline]
fn merge(w: &AtomicU64, at: usize, part: &[u8]) {
    let mut cur = w.load(Relaxed);
    loop {
        let mut b = cur.to_ne_bytes();
        b[at..at + part.len()].copy_from_slice(part);
        match w.compare_exchange_weak(cur, u64::from_ne_bytes(b), Relaxed, Relaxed) {
            Ok(_) => return,
            Err(now) => cur = now,
        }
    }
}

/// Copies `n` bytes from shared `src` to private `dst`.
///
/// # Safety
///
/// Every aligned word overlapping `src..src + n` must be valid for atomic reads, and
/// `dst` valid for `n` bytes of writes, not overlapping them.
#[inline(always)]
pub unsafe fn load_raw(src: *const u8, dst: *mut u8, n: usize) {
    if n == 0 {
        return;
    }
    // SAFETY (whole body): each word read overlaps `src..src + n` (the caller
    // guarantees it valid); each byte written is inside `dst..dst + n`.
    unsafe {
        let (first, at) = word_of(src);
        if at == 0 && n == W {
            // One aligned word (a slot, a counter): the commonest record of all.
            dst.cast::<u64>().write_unaligned(first.load(Relaxed));
            return;
        }
        let first = first as *const AtomicU64;
        if at + n <= 3 * W {
            // Short records (the common case) read their two or three words into
            // a private buffer, then move with fixed-size copies, no memcpy call.
            let mut b = [0u64; 3];
            for (i, v) in b.iter_mut().enumerate().take((at + n).div_ceil(W)) {
                *v = (*first.add(i)).load(Relaxed);
            }
            small_copy(b.as_ptr().cast::<u8>().add(at), dst, n);
            return;
        }
        let mut done = 0;
        if at != 0 {
            let b = (*first).load(Relaxed).to_ne_bytes();
            done = W - at;
            small_copy(b.as_ptr().add(at), dst, done);
        }
        let w = src.add(done).cast::<AtomicU64>();
        let words = (n - done) / W;
        // Four words a turn: the loads are independent, so they overlap.
        let mut i = 0;
        while i + 4 <= words {
            let (a, b, c, d) = (
                (*w.add(i)).load(Relaxed),
                (*w.add(i + 1)).load(Relaxed),
                (*w.add(i + 2)).load(Relaxed),
                (*w.add(i + 3)).load(Relaxed),
            );
            let o = dst.add(done + i * W).cast::<u64>();
            o.write_unaligned(a);
            o.add(1).write_unaligned(b);
            o.add(2).write_unaligned(c);
            o.add(3).write_unaligned(d);
            i += 4;
        }
        while i < words {
            dst.add(done + i * W)
                .cast::<u64>()
                .write_unaligned((*w.add(i)).load(Relaxed));
            i += 1;
        }
        done += words * W;
        if done < n {
            let b = (*w.add(words)).load(Relaxed).to_ne_bytes();
            small_copy(b.as_ptr(), dst.add(done), n - done);
        }
    }
}

/// Copies `n` bytes (short ones especially) between private buffers with a few fixed-size moves.
///
/// # Safety
///
/// `src` valid for `n` bytes of reads, `dst` for `n` bytes of writes, no overlap.
#[inline(always)]
unsafe fn small_copy(src: *const u8, dst: *mut u8, n: usize) {
    use std::ptr::{read_unaligned as rd, write_unaligned as wr};
    // SAFETY (every arm): each access lies in `[0, n)` of its range.
    unsafe {
        match n {
            0 => {}
            1..=3 => {
                *dst = *src;
                *dst.add(n / 2) = *src.add(n / 2);
                *dst.add(n - 1) = *src.add(n - 1);
            }
            4..=7 => {
                let (a, b) = (rd(src.cast::<u32>()), rd(src.add(n - 4).cast::<u32>()));
                wr(dst.cast::<u32>(), a);
                wr(dst.add(n - 4).cast::<u32>(), b);
            }
            8..=16 => {
                let (a, b) = (rd(src.cast::<u64>()), rd(src.add(n - 8).cast::<u64>()));
                wr(dst.cast::<u64>(), a);
                wr(dst.add(n - 8).cast::<u64>(), b);
            }
            17..=32 => {
                let (a, b) = (rd(src.cast::<u128>()), rd(src.add(n - 16).cast::<u128>()));
                wr(dst.cast::<u128>(), a);
                wr(dst.add(n - 16).cast::<u128>(), b);
            }
            _ => std::ptr::copy_nonoverlapping(src, dst, n),
        }
    }
}

/// Copies `dst.len()` bytes from shared `src` into `dst`.
///
/// # Safety
///
/// Every aligned word overlapping `src..src + dst.len()` must be valid for atomic
/// reads.
#[inline]
pub unsafe fn load(src: *const u8, dst: &mut [u8]) {
    // SAFETY: `dst` is a private buffer of its length; the rest is the caller's.
    unsafe { load_raw(src, dst.as_mut_ptr(), dst.len()) }
}

/// Appends `n` bytes from shared `src` to `out`, writing into its spare capacity
/// directly (no zeroing first).
///
/// # Safety
///
/// Every aligned word overlapping `src..src + n` must be valid for atomic reads.
#[inline]
pub unsafe fn load_append(src: *const u8, n: usize, out: &mut Vec<u8>) {
    out.reserve(n);
    let at = out.len();
    // SAFETY: after `reserve`, `at..at + n` is spare capacity of `out` (a private
    // heap buffer, so not shared memory); every byte of it is written before the
    // length covers it.
    unsafe {
        load_raw(src, out.as_mut_ptr().add(at), n);
        out.set_len(at + n);
    }
}

/// Copies private `src` to shared `dst`.
///
/// # Safety
///
/// Every aligned word overlapping `dst..dst + src.len()` must be valid for atomic
/// reads and writes, and not overlap `src`.
#[inline]
pub unsafe fn store(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    if n == 0 {
        return;
    }
    // SAFETY (whole body): each word accessed overlaps `dst..dst + n`.
    unsafe {
        let (first, at) = word_of(dst);
        if at == 0 && n == W {
            // One aligned word (a slot, a counter): one store, no loop.
            first.store(src.as_ptr().cast::<u64>().read_unaligned(), Relaxed);
            return;
        }
        let mut done = 0;
        if at != 0 || n < W {
            done = (W - at).min(n);
            merge(first, at, &src[..done]);
        }
        let mut w = dst.add(done).cast::<AtomicU64>();
        while n - done >= W {
            let v = src.as_ptr().add(done).cast::<u64>().read_unaligned();
            (*w).store(v, Relaxed);
            done += W;
            w = w.add(1);
        }
        if done < n {
            merge(&*w, 0, &src[done..]);
        }
    }
}

/// Sets `n` bytes of shared `dst` to zero.
///
/// # Safety
///
/// As for [`store`].
pub unsafe fn zero(dst: *mut u8, n: usize) {
    const CHUNK: [u8; 4096] = [0; 4096];
    let mut done = 0;
    while done < n {
        let k = (n - done).min(CHUNK.len());
        // SAFETY: a sub-range of the caller's range.
        unsafe { store(dst.add(done), &CHUNK[..k]) };
        done += k;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// 64 words of shared memory, as a region would hold them.
    fn mem() -> Vec<AtomicU64> {
        (0..64).map(|_| AtomicU64::new(0)).collect()
    }

    fn base(m: &[AtomicU64]) -> *mut u8 {
        m.as_ptr().cast::<u8>().cast_mut()
    }

    fn snapshot(m: &[AtomicU64]) -> Vec<u8> {
        m.iter()
            .flat_map(|w| w.load(Relaxed).to_ne_bytes())
            .collect()
    }

    proptest! {
        /// Any store, then any load, matches a plain byte array doing the same.
        #[test]
        fn copies_match_a_byte_array(
            at in 0usize..200,
            data in proptest::collection::vec(any::<u8>(), 0..250),
            r_at in 0usize..200,
            r_len in 0usize..250,
        ) {
            let m = mem();
            for (i, w) in m.iter().enumerate() {
                w.store(0x0101_0101_0101_0101 * (i as u64 % 200), Relaxed);
            }
            let mut model = snapshot(&m);
            let n = data.len().min(512 - at);
            unsafe { store(base(&m).add(at), &data[..n]) };
            model[at..at + n].copy_from_slice(&data[..n]);
            prop_assert_eq!(&snapshot(&m), &model);
            let rn = r_len.min(512 - r_at);
            let mut got = vec![0xEE; rn];
            unsafe { load(base(&m).add(r_at), &mut got) };
            prop_assert_eq!(&got[..], &model[r_at..r_at + rn]);
            let mut app = vec![7u8];
            unsafe { load_append(base(&m).add(r_at), rn, &mut app) };
            prop_assert_eq!(&app[1..], &model[r_at..r_at + rn]);
            unsafe { zero(base(&m).add(r_at), rn) };
            model[r_at..r_at + rn].fill(0);
            prop_assert_eq!(&snapshot(&m), &model);
        }
    }

    /// A partial-word store never writes back a byte another thread changed in the
    /// meantime (fetch-adds on the same word all survive).
    #[test]
    fn partial_word_stores_keep_concurrent_atomics() {
        let m = mem();
        let p = base(&m) as usize;
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..100_000u32 {
                    // Bytes 4..8 of word 0.
                    let v = (i % 251) as u8;
                    unsafe { store((p as *mut u8).add(4), &[v; 4]) };
                }
            });
            s.spawn(|| {
                for _ in 0..100_000 {
                    m[0].fetch_add(1, Relaxed);
                }
            });
        });
        let low = u32::from_ne_bytes(m[0].load(Relaxed).to_ne_bytes()[..4].try_into().unwrap());
        let want = if cfg!(target_endian = "little") {
            100_000
        } else {
            low
        };
        assert_eq!(low, want, "every fetch-add on the low half survived");
    }
}
