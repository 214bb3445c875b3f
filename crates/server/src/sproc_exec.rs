//! EXECUTE: runs a stored procedure against this server's regions of a cache.
//!
//! The procedure reads through [`CacheMemory`], which serves only bytes held here.
//! When it needs bytes held elsewhere it returns a continuation (its state plus the
//! address it needs); the reply carries it to the caller, which resumes the procedure
//! at the owner of that address.

use farcache_sproc::outcome::{TAG_CONTINUE, TAG_DONE, encode_failure};
use farcache_sproc::{Memory, Miss, Outcome, Procedure, SprocError};

use crate::store::CacheRegions;

pub(crate) struct CacheMemory<'m> {
    pub c: &'m CacheRegions,
}

impl Memory for CacheMemory<'_> {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), Miss> {
        let end = addr.checked_add(out.len() as u64).ok_or(Miss::OutOfRange)?;
        if end > self.c.capacity {
            return Err(Miss::OutOfRange);
        }
        let rs = self.c.region_size;
        let (mut at, mut done) = (addr, 0usize);
        while done < out.len() {
            let off = at % rs;
            let n = ((rs - off) as usize).min(out.len() - done);
            match self.c.regions.get((at / rs) as usize) {
                Some(Some(r)) => r.read_into(off as usize, &mut out[done..done + n]),
                _ => return Err(Miss::Remote),
            }
            done += n;
            at += n as u64;
        }
        Ok(())
    }
}

impl CacheMemory<'_> {
    fn holds(&self, addr: u64) -> bool {
        let rs = self.c.region_size;
        addr < self.c.capacity && matches!(self.c.regions.get((addr / rs) as usize), Some(Some(_)))
    }
}

/// Runs `proc` at `addr` and appends the reply body (see `farcache_sproc::outcome`).
pub(crate) fn run(
    p: Option<&dyn Procedure>,
    c: &CacheRegions,
    proc: &str,
    addr: u64,
    args: &[u8],
    body: &mut Vec<u8>,
) -> Result<(), NoSuchProc> {
    let p = p.ok_or(NoSuchProc)?;
    let mem = CacheMemory { c };
    match p.run(&mem, addr, args) {
        Ok(Outcome::Done(r)) => {
            body.push(TAG_DONE);
            body.extend_from_slice(&r);
        }
        // The needed bytes start here but run into another server's region: moving the
        // invocation cannot help; it needs a data pull (DFlow), not there yet.
        Ok(Outcome::Continue { addr: next, .. }) if mem.holds(next) => {
            let e = SprocError::Reply(format!(
                "{proc} needs a record at {next} that spans servers (DFlow not supported yet)"
            ));
            encode_failure(&e, body);
        }
        Ok(Outcome::Continue { addr: next, state }) => {
            body.push(TAG_CONTINUE);
            body.extend_from_slice(&next.to_le_bytes());
            body.extend_from_slice(&state);
        }
        Err(e) => encode_failure(&e, body),
    }
    Ok(())
}

pub(crate) struct NoSuchProc;
