//! `chase`: follows a linked chain. Each node holds the cache address of the next node
//! as a u64 at `next_off`; [`NULL`] ends the chain.

use super::Flow;
use crate::args::{ArgReader, ArgWriter};
use crate::memory::Miss;
use crate::{Memory, Outcome, Procedure, SprocError};

const NAME: &str = "chase";

/// The end-of-chain pointer.
pub const NULL: u64 = u64::MAX;

pub struct Chase;

impl Chase {
    pub const NAME: &'static str = NAME;

    /// Invoke at `head`: follow at most `hops` pointers.
    /// Nodes held by another server are reached by shipping the invocation (FFlow).
    pub fn args(head: u64, next_off: u32, hops: u32) -> Vec<u8> {
        Self::args_with(head, next_off, hops, Flow::Ship)
    }

    /// Like [`Chase::args`], choosing what happens at a node held elsewhere. With
    /// [`Flow::Return`] the result names the node where it stopped; calling again there
    /// with the remaining hops finishes the chase.
    pub fn args_with(head: u64, next_off: u32, hops: u32, flow: Flow) -> Vec<u8> {
        state(next_off, hops, head, 0, flow)
    }

    /// The result: (the node reached, pointers followed). The node is [`NULL`] if the
    /// chain ended before `hops`.
    pub fn result(bytes: &[u8]) -> Result<(u64, u32), SprocError> {
        let mut r = ArgReader::new(NAME, bytes);
        let node = r.u64("node")?;
        let n = r.u32("followed")?;
        r.end()?;
        Ok((node, n))
    }
}

fn state(next_off: u32, remaining: u32, cur: u64, followed: u32, flow: Flow) -> Vec<u8> {
    ArgWriter::default()
        .u32(next_off)
        .u32(remaining)
        .u64(cur)
        .u32(followed)
        .u8(flow as u8)
        .finish()
}

fn done(cur: u64, followed: u32) -> Outcome {
    let mut out = cur.to_le_bytes().to_vec();
    out.extend_from_slice(&followed.to_le_bytes());
    Outcome::Done(out)
}

impl Procedure for Chase {
    fn name(&self) -> &str {
        NAME
    }

    fn run(&self, mem: &dyn Memory, _addr: u64, args: &[u8]) -> Result<Outcome, SprocError> {
        let mut r = ArgReader::new(NAME, args);
        let next_off = r.u32("next offset")?;
        let mut remaining = r.u32("hops")?;
        let mut cur = r.u64("node")?;
        let mut followed = r.u32("followed")?;
        let flow = if r.is_empty() {
            Flow::Ship
        } else {
            Flow::from_u8(NAME, r.u8("flow")?)?
        };
        r.end()?;
        while remaining > 0 && cur != NULL {
            let at = cur
                .checked_add(u64::from(next_off))
                .ok_or(SprocError::OutOfRange {
                    proc: NAME,
                    addr: cur,
                    len: 8,
                })?;
            match mem.read_u64(at) {
                Ok(next) => cur = next,
                Err(Miss::OutOfRange) => {
                    return Err(SprocError::OutOfRange {
                        proc: NAME,
                        addr: at,
                        len: 8,
                    });
                }
                Err(Miss::Budget) => return Err(super::budget(NAME, mem)),
                Err(Miss::Lost) => {
                    return Err(SprocError::Lost {
                        proc: NAME,
                        addr: at,
                        len: 8,
                    });
                }
                Err(Miss::Remote) => {
                    let state = state(next_off, remaining, cur, followed, flow);
                    return Ok(match flow {
                        // Resume at the pointer itself so the hand-off lands on its owner.
                        Flow::Ship => Outcome::Continue { addr: at, state },
                        Flow::Pull => Outcome::Pull {
                            ranges: vec![(at, 8)],
                            state,
                        },
                        Flow::Return => done(cur, followed),
                    });
                }
            }
            remaining -= 1;
            // Only a forged state can carry a count this high.
            followed = followed
                .checked_add(1)
                .ok_or_else(|| SprocError::bad(NAME, "followed count overflows u32"))?;
        }
        Ok(done(cur, followed))
    }
}
