//! One run of a procedure on this server, and what it asks for next.

use farcache_sproc::{Outcome, Procedure, SprocError};

use super::memory::{FlowMemory, Pulled};
use crate::engine::store::CacheRegions;

pub enum Step {
    Done(Vec<u8>),
    Fail(SprocError),
    /// FFlow: continue at the owner of `addr` with `state`.
    Ship {
        addr: u64,
        state: Vec<u8>,
    },
    /// DFlow: bring `ranges` here, then run again at `at` with `state`.
    Pull {
        at: u64,
        ranges: Vec<(u64, u32)>,
        state: Vec<u8>,
    },
}

/// Runs `p` at `addr`. A continuation at an address this server holds means the record
/// there runs into another server's region; moving the invocation cannot help, so it
/// becomes a pull of the bytes the procedure could not read.
pub fn run(
    p: &dyn Procedure,
    c: &CacheRegions,
    pulled: Option<&Pulled>,
    addr: u64,
    args: &[u8],
) -> Step {
    let mem = FlowMemory::new(c, pulled);
    let mut out = Vec::new();
    match p.run_into(&mem, addr, args, &mut out) {
        Ok(None) => Step::Done(out),
        Ok(Some(o)) => next(p, c, &mem, addr, Ok(o)),
        Err(e) => next(p, c, &mem, addr, Err(e)),
    }
}

/// What a run at `addr` that ended with `r` asks for next.
pub fn next(
    p: &dyn Procedure,
    c: &CacheRegions,
    mem: &FlowMemory<'_>,
    addr: u64,
    r: Result<Outcome, SprocError>,
) -> Step {
    match r {
        Ok(Outcome::Done(r)) => Step::Done(r),
        Err(e) => Step::Fail(e),
        Ok(Outcome::Pull { ranges, state }) => Step::Pull {
            at: addr,
            ranges,
            state,
        },
        Ok(Outcome::Continue { addr: next, state }) if c.holds(next) => match mem.last_miss.get() {
            Some((a, len)) => Step::Pull {
                at: next,
                ranges: vec![(a, len as u32)],
                state,
            },
            _ => Step::Fail(SprocError::Reply(format!(
                "{} continued at {next}, which this server holds, without a read it could not serve",
                p.name()
            ))),
        },
        Ok(Outcome::Continue { addr: next, state }) => Step::Ship { addr: next, state },
    }
}

/// An EXECUTE whose reply waits for work on other servers.
pub struct Spawned {
    /// Where its reply goes, as an offset into the response frame.
    pub offset: usize,
    pub cache: farcache_proto::CacheId,
    pub proc_name: String,
    pub addr: u64,
    pub step: Step,
}
