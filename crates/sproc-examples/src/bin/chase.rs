//! `chase`: follows a linked chain, with the arguments and result of the built-in
//! `farcache_sproc::builtin::Chase`.
//!
//! Each node holds the cache address of the next node as a u64 at `next_off`;
//! `u64::MAX` ends the chain. Arguments and continuation state (21 bytes):
//! `next_off u32, hops u32 (left to follow), node u64, followed u32, flow u8`; call it
//! at the head with `node = head, followed = 0`. `flow` is the built-in's: 2 returns
//! at a node held elsewhere, anything else continues there (this SDK cannot pull);
//! it may be left out (20 bytes). Result (12 bytes): `node u64` reached
//! (`u64::MAX` if the chain ended first), `followed u32`. When a node's pointer is held
//! by another server it continues at that pointer's address.

#![no_std]
#![no_main]

use farcache_sproc_sdk::{Cache, Error, Outcome, Reader, Remote, Writer};

const NULL: u64 = u64::MAX;
const RETURN: u8 = 2;

fn chase<'o>(
    cache: &impl Cache,
    _addr: u64,
    args: &[u8],
    out: &'o mut [u8],
) -> Result<Outcome<'o>, Error> {
    let mut a = Reader::new(args);
    let (next_off, mut hops, mut node, mut followed) = (a.u32()?, a.u32()?, a.u64()?, a.u32()?);
    let flow = if a.remaining() > 0 { a.u8()? } else { 0 };
    a.end()?;
    while hops > 0 && node != NULL {
        let at = node.checked_add(next_off.into()).ok_or(Error::Overflow)?;
        match cache.read_u64(at) {
            Ok(next) => node = next,
            Err(Remote) if flow == RETURN => break,
            Err(Remote) => {
                let state = Writer::new(out)
                    .u32(next_off)
                    .u32(hops)
                    .u64(node)
                    .u32(followed)
                    .u8(flow);
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
