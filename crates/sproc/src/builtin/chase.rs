//! `chase`: follows a linked chain. Each node holds the cache address of the next node
//! as a u64 at `next_off`; [`NULL`] ends the chain.

use crate::args::{ArgReader, ArgWriter};
use crate::{Memory, Outcome, Procedure, SprocError};

const NAME: &str = "chase";

/// The end-of-chain pointer.
pub const NULL: u64 = u64::MAX;

pub struct Chase;

impl Chase {
    pub const NAME: &'static str = NAME;

    /// Invoke at `head`: follow at most `hops` pointers.
    pub fn args(head: u64, next_off: u32, hops: u32) -> Vec<u8> {
        state(next_off, hops, head, 0)
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

fn state(next_off: u32, remaining: u32, cur: u64, followed: u32) -> Vec<u8> {
    ArgWriter::default()
        .u32(next_off)
        .u32(remaining)
        .u64(cur)
        .u32(followed)
        .finish()
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
                Err(m) => {
                    // Resume at the node itself so the hand-off lands on its owner.
                    return super::on_miss(NAME, m, at, 8, || {
                        state(next_off, remaining, cur, followed)
                    })
                    .map(|o| match o {
                        Outcome::Continue { state, .. } => Outcome::Continue { addr: at, state },
                        done => done,
                    });
                }
            }
            remaining -= 1;
            followed += 1;
        }
        let mut out = cur.to_le_bytes().to_vec();
        out.extend_from_slice(&followed.to_le_bytes());
        Ok(Outcome::Done(out))
    }
}
