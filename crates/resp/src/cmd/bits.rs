//! Bit commands on string values: GETBIT, SETBIT, BITCOUNT and BITPOS (with
//! `BYTE | BIT` ranges), and BITOP, as Redis answers them. SETBIT is a
//! read-modify-write under the key's stripe, BITOP holds every key's; the others
//! read the value once.

use super::int_arg;
use super::rmw::{Change, Ttl, rmw};
use crate::error::store_error_line;
use crate::parse::Args;
use crate::reply::Out;
use crate::session::Session;

/// Redis's limit: a bit offset addresses at most 512 MiB.
const MAX_BIT_OFFSET: i64 = (512 << 23) - 1;

fn bit_offset(arg: &[u8]) -> Result<usize, &'static str> {
    match int_arg(arg) {
        Ok(o) if (0..=MAX_BIT_OFFSET).contains(&o) => Ok(o as usize),
        _ => Err("ERR bit offset is not an integer or out of range"),
    }
}

fn bit_at(v: &[u8], off: usize) -> u8 {
    v.get(off / 8).map_or(0, |b| (b >> (7 - off % 8)) & 1)
}

pub fn getbit(s: &mut Session, a: &Args, out: &mut Out) {
    let off = match bit_offset(&a[2]) {
        Ok(o) => o,
        Err(e) => return out.error(e),
    };
    match s.shared.store.get(&a[1]) {
        Ok(v) => out.int(i64::from(bit_at(v.as_deref().unwrap_or_default(), off))),
        Err(e) => out.error(&store_error_line(&e)),
    }
}

pub fn setbit(s: &mut Session, a: &Args, out: &mut Out) {
    let off = match bit_offset(&a[2]) {
        Ok(o) => o,
        Err(e) => return out.error(e),
    };
    let on = match &a[3][..] {
        b"0" => false,
        b"1" => true,
        _ => return out.error("ERR bit is not an integer or out of range"),
    };
    let r = rmw(s, &a[1], |old| {
        let mut v = old.map(|e| e.value.to_vec()).unwrap_or_default();
        let was = bit_at(&v, off);
        if v.len() <= off / 8 {
            v.resize(off / 8 + 1, 0);
        }
        let mask = 1u8 << (7 - off % 8);
        if on {
            v[off / 8] |= mask;
        } else {
            v[off / 8] &= !mask;
        }
        Ok((Change::Put(v, Ttl::Keep), i64::from(was)))
    });
    match r {
        Ok(n) => out.int(n),
        Err(e) => out.error(&e),
    }
}

/// A `start end [BYTE|BIT]` range resolved against a value, in bits, inclusive;
/// `None` when it is empty.
fn bit_range(len: usize, start: i64, end: i64, in_bits: bool) -> Option<(usize, usize)> {
    let total = if in_bits { len as i64 * 8 } else { len as i64 };
    let (mut start, mut end) = (start, end);
    if start < 0 {
        start += total;
    }
    if end < 0 {
        end += total;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= total {
        end = total - 1;
    }
    if start > end {
        return None;
    }
    let (start, end) = (start as usize, end as usize);
    Some(if in_bits {
        (start, end)
    } else {
        (start * 8, end * 8 + 7)
    })
}

/// The optional `start end [BYTE|BIT]` (or, for BITPOS, `start [end [BYTE|BIT]]`)
/// after the fixed arguments: (start, end or `None`, in bits).
fn range_args(rest: &[bytes::Bytes]) -> Result<(i64, Option<i64>, bool), &'static str> {
    let int = |b: &[u8]| int_arg(b).map_err(|_| "ERR value is not an integer or out of range");
    let start = match rest.first() {
        Some(b) => int(b)?,
        None => 0,
    };
    let end = match rest.get(1) {
        Some(b) => Some(int(b)?),
        None => None,
    };
    let in_bits = match rest.get(2) {
        None => false,
        Some(u) if u.eq_ignore_ascii_case(b"byte") => false,
        Some(u) if u.eq_ignore_ascii_case(b"bit") => true,
        Some(_) => return Err("ERR syntax error"),
    };
    if rest.len() > 3 {
        return Err("ERR syntax error");
    }
    Ok((start, end, in_bits))
}

pub fn bitcount(s: &mut Session, a: &Args, out: &mut Out) {
    let rest = &a[2..];
    if rest.len() == 1 {
        return out.error("ERR syntax error");
    }
    let (start, end, in_bits) = match range_args(rest) {
        Ok(r) => r,
        Err(e) => return out.error(e),
    };
    let v = match s.shared.store.get(&a[1]) {
        Ok(v) => v.unwrap_or_default(),
        Err(e) => return out.error(&store_error_line(&e)),
    };
    let Some((from, to)) = bit_range(v.len(), start, end.unwrap_or(-1), in_bits) else {
        return out.int(0);
    };
    out.int(count_ones(&v, from, to) as i64);
}

/// Set bits in bit positions `from..=to` of `v`.
fn count_ones(v: &[u8], from: usize, to: usize) -> u64 {
    let (first, last) = (from / 8, to / 8);
    let mut n: u64 = v[first..=last]
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum();
    // Take off the bits of the edge bytes outside the range.
    n -= u64::from((v[first] & !(0xffu8 >> (from % 8))).count_ones());
    n -= u64::from((v[last] & ((0xffu16 >> (to % 8 + 1)) as u8)).count_ones());
    n
}

pub fn bitpos(s: &mut Session, a: &Args, out: &mut Out) {
    let bit = match &a[2][..] {
        b"0" => 0u8,
        b"1" => 1u8,
        _ => return out.error("ERR The bit argument must be 1 or 0."),
    };
    let (start, end, in_bits) = match range_args(&a[3..]) {
        Ok(r) => r,
        Err(e) => return out.error(e),
    };
    let v = match s.shared.store.get(&a[1]) {
        Ok(Some(v)) => v,
        // A missing key is an endless run of zeros.
        Ok(None) => return out.int(if bit == 1 { -1 } else { 0 }),
        Err(e) => return out.error(&store_error_line(&e)),
    };
    let Some((from, to)) = bit_range(v.len(), start, end.unwrap_or(-1), in_bits) else {
        return out.int(-1);
    };
    match first_bit(&v, bit, from, to) {
        Some(p) => out.int(p as i64),
        // Without an end, the value reads as padded with zeros on the right.
        None if bit == 0 && end.is_none() => out.int(to as i64 + 1),
        None => out.int(-1),
    }
}

/// The first position in `from..=to` holding `bit`.
fn first_bit(v: &[u8], bit: u8, from: usize, to: usize) -> Option<usize> {
    let skip = if bit == 1 { 0x00 } else { 0xff };
    let mut p = from;
    while p <= to {
        if p.is_multiple_of(8) && p + 7 <= to && v[p / 8] == skip {
            p += 8;
            continue;
        }
        if bit_at(v, p) == bit {
            return Some(p);
        }
        p += 1;
    }
    None
}

/// `BITOP AND | OR | XOR | NOT dest src...`: the sources (a missing one is empty)
/// combined byte by byte, the shorter ones padded with zeros, written to `dest`
/// without an expiry (an empty result deletes `dest`); answers the result's length.
/// Every key's stripe is held, so the sources are read and `dest` written as one step
/// against other writers through this front end.
pub fn bitop(s: &mut Session, a: &Args, out: &mut Out) {
    let op = a[1].to_ascii_lowercase();
    let srcs = &a[3..];
    match &op[..] {
        b"not" if srcs.len() != 1 => {
            return out.error("ERR BITOP NOT must be called with a single source key.");
        }
        b"and" | b"or" | b"xor" | b"not" => {}
        _ => return out.error("ERR syntax error"),
    }
    let sh = s.shared.clone();
    let _held = sh.lock_keys(a[2..].iter());
    // One source at a time: the front end holds the result and one value, however
    // many sources are named (each may be 512 MiB).
    let mut r: Vec<u8> = Vec::new();
    for (n, k) in srcs.iter().enumerate() {
        let v = match sh.store.get(k) {
            Ok(v) => v.unwrap_or_default(),
            Err(e) => return out.error(&store_error_line(&e)),
        };
        if n == 0 {
            r = v.to_vec();
            if &op[..] == b"not" {
                r.iter_mut().for_each(|x| *x = !*x);
            }
            continue;
        }
        // Bytes past a value's end count as zero (so a longer value zeroes an AND).
        if r.len() < v.len() {
            r.resize(v.len(), 0);
        }
        for (i, x) in r.iter_mut().enumerate() {
            let y = v.get(i).copied().unwrap_or(0);
            match &op[..] {
                b"and" => *x &= y,
                b"or" => *x |= y,
                _ => *x ^= y,
            }
        }
    }
    let len = r.len();
    let done = if r.is_empty() {
        sh.store.delete(&a[2]).map(|_| ())
    } else {
        sh.store.put(&a[2], &r)
    };
    match done {
        Ok(()) => out.int(len as i64),
        Err(e) => out.error(&store_error_line(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::{bit_range, count_ones, first_bit};

    #[test]
    fn ranges_and_counts_follow_redis() {
        // "foobar" from the Redis docs: BITCOUNT 26, 1 1 -> 6, 5 30 BIT -> 17.
        let v = b"foobar";
        let all = bit_range(6, 0, -1, false).expect("range");
        assert_eq!(count_ones(v, all.0, all.1), 26);
        let (f, t) = bit_range(6, 1, 1, false).expect("range");
        assert_eq!(count_ones(v, f, t), 6);
        let (f, t) = bit_range(6, 5, 30, true).expect("range");
        assert_eq!(count_ones(v, f, t), 17);
        assert_eq!(bit_range(6, 4, 2, false), None);
        assert_eq!(bit_range(0, 0, -1, false), None);
    }

    #[test]
    fn positions_follow_redis() {
        // Examples from the Redis docs for BITPOS.
        let v = [0xff, 0xf0, 0x00];
        let (f, t) = bit_range(3, 0, -1, false).expect("range");
        assert_eq!(first_bit(&v, 0, f, t), Some(12));
        let v = [0x00, 0xff, 0xf0];
        let (f, t) = bit_range(3, 2, -1, false).expect("range");
        assert_eq!(first_bit(&v, 1, f, t), Some(16));
        let (f, t) = bit_range(3, 7, 15, true).expect("range");
        assert_eq!(first_bit(&v, 1, f, t), Some(8));
        let v = [0x00, 0x00, 0x00];
        let (f, t) = bit_range(3, 0, -1, false).expect("range");
        assert_eq!(first_bit(&v, 1, f, t), None);
    }
}
