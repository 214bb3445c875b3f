//! `chase`: follows a linked chain, with the arguments and result of the built-in
//! `farcache_sproc::builtin::Chase`.
//!
//! Each node holds the cache address of the next node as a u64 at `next_off`;
//! `u64::MAX` ends the chain. Arguments and continuation state (20 bytes):
//! `next_off u32, hops u32 (left to follow), node u64, followed u32`; call it at the
//! head with `node = head, followed = 0`. Result (12 bytes): `node u64` reached
//! (`u64::MAX` if the chain ended first), `followed u32`. When a node's pointer is held
//! by another server it continues at that pointer's address.

#![no_std]
#![no_main]

use farcache_sproc_sdk::{Cache, Error, Outcome, Reader, Remote, Writer};

const NULL: u64 = u64::MAX;

fn chase<'o>(
    cache: &impl Cache,
    _addr: u64,
    args: &[u8],
    out: &'o mut [u8],
) -> Result<Outcome<'o>, Error> {
    let mut a = Reader::new(args);
    let (next_off, mut hops, mut node, mut followed) = (a.u32()?, a.u32()?, a.u64()?, a.u32()?);
    a.end()?;
    while hops > 0 && node != NULL {
        let at = node.checked_add(next_off.into()).ok_or(Error::Overflow)?;
        match cache.read_u64(at) {
            Ok(next) => node = next,
            Err(Remote) => {
                let state = Writer::new(out)
                    .u32(next_off)
                    .u32(hops)
                    .u64(node)
                    .u32(followed);
                return Ok(Outcome::Continue {
                    addr: at,
                    state: state.finish()?,
                });
            }
        }
        hops -= 1;
        // A forged state may start near u32::MAX: fail rather than wrap.
        followed = followed.checked_add(1).ok_or(Error::Args)?;
    }
    Ok(Outcome::Done(
        Writer::new(out).u64(node).u32(followed).finish()?,
    ))
}

farcache_sproc_sdk::procedure!(chase);
