//! `scan`: a select pushdown over fixed-width rows, with the arguments and result of
//! the built-in `farcache_sproc::builtin::Scan`: count the rows whose u64 column at
//! `filter_off` compares true with `constant`, and sum their u64 column at `agg_off`.
//!
//! Arguments and continuation state (57 bytes): `base u64, rows u32, width u32,
//! filter_off u32, cmp u8 (0 <, 1 <=, 2 ==, 3 >=, 4 >, 5 !=), constant u64,
//! agg_off u32, row u32, count u64, sum u64`; call it at `base` with `row = count =
//! sum = 0`. Result (16 bytes): `count u64, sum u64` (wrapping). A row is read whole;
//! when it is held (even partly) by another server the scan continues at that row.
//! Rows are read into the output buffer, so they may be up to `MAX_OUTPUT - 64` bytes.

#![no_std]
#![no_main]

use farcache_sproc_sdk::{Cache, Error, Outcome, Reader, Remote, Writer, offset};

/// Room for the row buffer plus the result or state in front of it.
const MAX_OUTPUT: usize = 1 << 20;
/// Bytes of the output buffer kept for the result or state.
const HEAD: usize = 64;

fn test(cmp: u8, a: u64, b: u64) -> Result<bool, Error> {
    Ok(match cmp {
        0 => a < b,
        1 => a <= b,
        2 => a == b,
        3 => a >= b,
        4 => a > b,
        5 => a != b,
        _ => return Err(Error::Args),
    })
}

/// The u64 column at `off` (checked to lie inside the row before the scan starts).
fn column(row: &[u8], off: u32) -> Result<u64, Error> {
    let at = off as usize;
    let b = row.get(at..at + 8).ok_or(Error::Args)?;
    let mut v = [0u8; 8];
    v.copy_from_slice(b);
    Ok(u64::from_le_bytes(v))
}

fn scan<'o>(
    cache: &impl Cache,
    _addr: u64,
    args: &[u8],
    out: &'o mut [u8],
) -> Result<Outcome<'o>, Error> {
    let mut a = Reader::new(args);
    let (base, rows, width, filter_off) = (a.u64()?, a.u32()?, a.u32()?, a.u32()?);
    let (cmp, constant, agg_off) = (a.u8()?, a.u64()?, a.u32()?);
    let (mut i, mut count, mut sum) = (a.u32()?, a.u64()?, a.u64()?);
    a.end()?;
    test(cmp, 0, 0)?; // an unknown comparison fails even with no row left
    let (head, rest) = out.split_at_mut_checked(HEAD).ok_or(Error::OutputFull)?;
    let fits = |off: u32| off.checked_add(8).is_some_and(|end| end <= width);
    if !fits(filter_off) || !fits(agg_off) {
        return Err(Error::Args);
    }
    let row = rest.get_mut(..width as usize).ok_or(Error::Args)?;
    while i < rows {
        let at = offset(base, i.into(), width.into())?;
        if let Err(Remote) = cache.read(at, row) {
            let state = Writer::new(head)
                .u64(base)
                .u32(rows)
                .u32(width)
                .u32(filter_off)
                .u8(cmp)
                .u64(constant)
                .u32(agg_off)
                .u32(i)
                .u64(count)
                .u64(sum);
            return Ok(Outcome::Continue {
                addr: at,
                state: state.finish()?,
            });
        }
        if test(cmp, column(row, filter_off)?, constant)? {
            count = count.wrapping_add(1);
            sum = sum.wrapping_add(column(row, agg_off)?);
        }
        i += 1;
    }
    Ok(Outcome::Done(
        Writer::new(head).u64(count).u64(sum).finish()?,
    ))
}

farcache_sproc_sdk::procedure!(scan, max_output = MAX_OUTPUT);
