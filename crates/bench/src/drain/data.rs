//! The data of `bench drain`: a pattern that differs at every 8-byte word (so a byte
//! read back from the wrong place or the wrong time is caught), written over the whole
//! cache and read back chunk by chunk.

use std::collections::VecDeque;

use farcache_client::{Cache, OpOutput, Ticket};
use indicatif::ProgressBar;

use crate::error::{BenchError, Result};

/// Bytes per read or write op of the fill and the verify.
pub const CHUNK: u64 = 1 << 20;
/// Ops per batch, and batches in flight: 64 MiB in flight at most.
const PER_BATCH: usize = 16;
const IN_FLIGHT: usize = 4;
const SEED: u64 = 0x0D4A_1B5E_C0FF_EE00;

/// The pattern's little-endian word at byte address `addr` (a multiple of 8).
#[inline]
pub fn word(addr: u64) -> u64 {
    let mut z = (addr >> 3)
        .wrapping_add(SEED)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The value the background load writes at `addr`: never the pattern's.
#[inline]
pub fn overwrite(addr: u64) -> u64 {
    !word(addr)
}

/// Fills `buf` with the pattern of `[addr, addr + buf.len())` (`addr` and the length
/// multiples of 8).
pub fn pattern_into(buf: &mut [u8], addr: u64) {
    for (i, w) in buf.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&word(addr + 8 * i as u64).to_le_bytes());
    }
}

/// One 8-byte word the background load wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub addr: u64,
    /// The write was acknowledged: the word must hold [`overwrite`]. Otherwise it
    /// failed, and either value is accepted.
    pub acked: bool,
}

/// What reading the whole cache back found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    pub bytes: u64,
    /// Bytes that differ from what was written, unreadable bytes included.
    pub mismatched_bytes: u64,
    /// Bytes whose read failed.
    pub unreadable_bytes: u64,
    /// Acknowledged load writes that read back as the fill's pattern.
    pub lost_writes: u64,
    pub first_mismatch: Option<u64>,
    pub first_error: Option<String>,
}

fn fill_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Cluster(format!("fill failed: {e}"))
}

/// Writes the pattern over `[0, size)`; `pb` counts MiB.
pub fn fill(cache: &Cache, size: u64, pb: &ProgressBar) -> Result<()> {
    let mut buf = vec![0u8; CHUNK as usize];
    let mut pending: VecDeque<(Ticket, u64)> = VecDeque::with_capacity(IN_FLIGHT + 1);
    let wait = |(t, bytes): (Ticket, u64)| -> Result<()> {
        if let Some(e) = t.wait().first_error() {
            return Err(fill_err(e));
        }
        pb.inc(bytes >> 20);
        Ok(())
    };
    let mut addr = 0;
    while addr < size {
        let mut b = cache.batch().with_capacity(PER_BATCH);
        let start = addr;
        while addr < size && b.len() < PER_BATCH {
            let n = CHUNK.min(size - addr);
            let chunk = &mut buf[..n as usize];
            pattern_into(chunk, addr);
            b.write(addr, chunk);
            addr += n;
        }
        pending.push_back((b.submit(), addr - start));
        if pending.len() >= IN_FLIGHT
            && let Some(p) = pending.pop_front()
        {
            wait(p)?;
        }
    }
    while let Some(p) = pending.pop_front() {
        wait(p)?;
    }
    Ok(())
}

/// Reads `[0, size)` back, [`CHUNK`] by chunk with at most 64 MiB in flight, and
/// compares it with the pattern and the load's writes (`slots`, sorted by address).
pub fn verify(cache: &Cache, size: u64, slots: &[Slot], pb: &ProgressBar) -> Verified {
    let mut out = Verified::default();
    let mut expected = vec![0u8; CHUNK as usize];
    let mut pending: VecDeque<(Ticket, Vec<(u64, u64)>)> = VecDeque::with_capacity(IN_FLIGHT + 1);
    let mut check = |(t, ops): (Ticket, Vec<(u64, u64)>), out: &mut Verified| {
        let results = t.wait();
        for (r, &(addr, len)) in results.iter().zip(&ops) {
            out.bytes += len;
            match r {
                Ok(OpOutput::Data(got)) if got.len() as u64 == len => {
                    compare(&got, addr, &mut expected[..len as usize], slots, out);
                }
                other => {
                    out.unreadable_bytes += len;
                    out.mismatched_bytes += len;
                    out.first_mismatch.get_or_insert(addr);
                    if out.first_error.is_none() {
                        out.first_error = Some(match other {
                            Err(e) => format!("read of [{addr}, +{len}): {e}"),
                            Ok(o) => format!("read of [{addr}, +{len}): unexpected {o:?}"),
                        });
                    }
                }
            }
        }
        pb.inc(ops.iter().map(|o| o.1).sum::<u64>() >> 20);
    };
    let mut addr = 0;
    while addr < size {
        let mut b = cache.batch().with_capacity(PER_BATCH);
        let mut ops = Vec::with_capacity(PER_BATCH);
        while addr < size && b.len() < PER_BATCH {
            let n = CHUNK.min(size - addr);
            b.read(addr, n);
            ops.push((addr, n));
            addr += n;
        }
        pending.push_back((b.submit(), ops));
        if pending.len() >= IN_FLIGHT
            && let Some(p) = pending.pop_front()
        {
            check(p, &mut out);
        }
    }
    while let Some(p) = pending.pop_front() {
        check(p, &mut out);
    }
    out
}

/// Compares `got` (read at `addr`) with the pattern, the load's writes applied.
fn compare(got: &[u8], addr: u64, expected: &mut [u8], slots: &[Slot], out: &mut Verified) {
    pattern_into(expected, addr);
    let end = addr + got.len() as u64;
    let first = slots.partition_point(|s| s.addr < addr);
    for s in slots[first..].iter().take_while(|s| s.addr < end) {
        let at = (s.addr - addr) as usize;
        let new = overwrite(s.addr).to_le_bytes();
        let was = &got[at..at + 8];
        if s.acked {
            if was == word(s.addr).to_le_bytes() {
                out.lost_writes += 1;
            }
            expected[at..at + 8].copy_from_slice(&new);
        } else if was == new {
            // A failed write may or may not have landed: both values are right.
            expected[at..at + 8].copy_from_slice(&new);
        }
    }
    if got != expected {
        let mut first = None;
        for (i, (a, b)) in got.iter().zip(expected.iter()).enumerate() {
            if a != b {
                out.mismatched_bytes += 1;
                first.get_or_insert(i);
            }
        }
        if let Some(i) = first {
            out.first_mismatch.get_or_insert(addr + i as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verified(got: &[u8], addr: u64, slots: &[Slot]) -> Verified {
        let mut out = Verified::default();
        let mut exp = vec![0u8; got.len()];
        compare(got, addr, &mut exp, slots, &mut out);
        out
    }

    #[test]
    fn the_pattern_differs_per_word_and_from_overwrites() {
        let mut a = vec![0u8; 64];
        pattern_into(&mut a, 4096);
        let words: Vec<u64> = a
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
            .collect();
        for (i, w) in words.iter().enumerate() {
            assert_eq!(*w, word(4096 + 8 * i as u64));
            assert_ne!(*w, overwrite(4096 + 8 * i as u64));
        }
        let mut d = words.clone();
        d.dedup();
        assert_eq!(d.len(), words.len());
    }

    #[test]
    fn compare_counts_bytes_and_applies_the_loads_writes() {
        let addr = 1 << 20;
        let mut got = vec![0u8; 256];
        pattern_into(&mut got, addr);
        assert_eq!(verified(&got, addr, &[]), Verified::default());

        // An acknowledged write that landed, one that was lost, a failed one either way.
        let at = |off: u64| (off as usize)..(off as usize + 8);
        got[at(16)].copy_from_slice(&overwrite(addr + 16).to_le_bytes());
        got[at(64)].copy_from_slice(&overwrite(addr + 64).to_le_bytes());
        let slots = [
            Slot {
                addr: addr - 8,
                acked: true,
            }, // outside: ignored
            Slot {
                addr: addr + 16,
                acked: true,
            },
            Slot {
                addr: addr + 32,
                acked: true,
            },
            Slot {
                addr: addr + 64,
                acked: false,
            },
            Slot {
                addr: addr + 72,
                acked: false,
            },
        ];
        let v = verified(&got, addr, &slots);
        assert_eq!(v.lost_writes, 1);
        assert_eq!(v.first_mismatch, Some(addr + 32));
        assert!(v.mismatched_bytes > 0 && v.mismatched_bytes <= 8);

        // One flipped byte is one mismatched byte.
        let mut got = vec![0u8; 64];
        pattern_into(&mut got, addr);
        got[13] ^= 0xFF;
        let v = verified(&got, addr, &[]);
        assert_eq!((v.mismatched_bytes, v.first_mismatch), (1, Some(addr + 13)));
    }
}
