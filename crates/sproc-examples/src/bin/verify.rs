//! `verify`: reads one record and checks its checksum.
//!
//! A record at `addr` is `len u32, checksum u64, payload [len bytes]`, the checksum
//! being the 64-bit FNV-1a hash of the payload. Arguments: `addr u64`; call it at
//! `addr`. Result (13 bytes): `valid u8` (1 if the payload hashes to the stored
//! checksum, 0 if not), `len u32`, `hash u64` (the payload's hash as computed).
//!
//! The payload is hashed in chunks of up to 256 bytes that never cross a 256-byte
//! boundary, so a chunk never straddles two regions (region sizes are multiples of
//! 4096). When a chunk is held by another server the procedure continues there with
//! the state (36 bytes) `addr u64, len u32, checksum u64, done u32, hash u64, tag u32`
//! where `tag` is [`RESUME`]; a record whose header is remote is simply continued at
//! `addr` with the original 8-byte arguments, so the 12-byte header must lie within
//! one region (reading across two servers at once would need DFlow).

#![no_std]
#![no_main]

use farcache_sproc_sdk::{Cache, Error, Outcome, Reader, Remote, Writer};

const CHUNK: u64 = 256;
const HEADER: u64 = 12;
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
/// Marks a resumed state, so a truncated or foreign 36-byte argument is refused.
const RESUME: u32 = 0x7e51_f00d;

fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash = (hash ^ u64::from(b)).wrapping_mul(FNV_PRIME);
    }
    hash
}

fn verify<'o>(
    cache: &impl Cache,
    _addr: u64,
    args: &'o [u8],
    out: &'o mut [u8],
) -> Result<Outcome<'o>, Error> {
    let mut a = Reader::new(args);
    let addr = a.u64()?;
    let (len, checksum, mut done, mut hash) = if a.remaining() == 0 {
        let Ok(h) = cache.read_array::<12>(addr) else {
            // Nothing done yet: the arguments are the whole state.
            return Ok(Outcome::Continue { addr, state: args });
        };
        let mut h = Reader::new(&h);
        (h.u32()?, h.u64()?, 0, FNV_OFFSET)
    } else {
        let state = (a.u32()?, a.u64()?, a.u32()?, a.u64()?);
        if a.u32()? != RESUME || state.2 > state.0 {
            return Err(Error::Args);
        }
        a.end()?;
        state
    };
    let payload = addr.checked_add(HEADER).ok_or(Error::Overflow)?;
    let mut buf = [0u8; CHUNK as usize];
    while done < len {
        let at = payload.checked_add(done.into()).ok_or(Error::Overflow)?;
        // Up to the next 256-byte boundary, and no further than the payload's end.
        let n = (CHUNK - at % CHUNK).min(u64::from(len - done));
        let chunk = &mut buf[..n as usize];
        if let Err(Remote) = cache.read(at, chunk) {
            let state = Writer::new(out)
                .u64(addr)
                .u32(len)
                .u64(checksum)
                .u32(done)
                .u64(hash)
                .u32(RESUME);
            return Ok(Outcome::Continue {
                addr: at,
                state: state.finish()?,
            });
        }
        hash = fnv1a(hash, chunk);
        done += n as u32;
    }
    let valid = u8::from(hash == checksum);
    Ok(Outcome::Done(
        Writer::new(out).u8(valid).u32(len).u64(hash).finish()?,
    ))
}

farcache_sproc_sdk::procedure!(verify);
