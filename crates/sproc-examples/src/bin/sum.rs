//! `sum`: adds `n` little-endian u64 records 8 bytes apart, starting at `base` (the
//! Rust twin of `crates/sproc/procs/sum.wat`).
//!
//! Arguments and continuation state (24 bytes): `base u64, n u32, next u32,
//! partial u64`; call it with `next = partial = 0` at `base`. Result: the wrapping
//! sum, u64. When record `next` is held by another server it continues at that record.

#![no_std]
#![no_main]

use farcache_sproc_sdk::{Cache, Error, Outcome, Reader, Remote, Writer, offset};

fn sum<'o>(
    cache: &impl Cache,
    _addr: u64,
    args: &[u8],
    out: &'o mut [u8],
) -> Result<Outcome<'o>, Error> {
    let mut a = Reader::new(args);
    let (base, n, mut next, mut partial) = (a.u64()?, a.u32()?, a.u32()?, a.u64()?);
    a.end()?;
    while next < n {
        let at = offset(base, next.into(), 8)?;
        match cache.read_u64(at) {
            Ok(v) => partial = partial.wrapping_add(v),
            Err(Remote) => {
                let state = Writer::new(out).u64(base).u32(n).u32(next).u64(partial);
                return Ok(Outcome::Continue {
                    addr: at,
                    state: state.finish()?,
                });
            }
        }
        next += 1;
    }
    Ok(Outcome::Done(Writer::new(out).u64(partial).finish()?))
}

farcache_sproc_sdk::procedure!(sum);
