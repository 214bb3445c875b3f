//! `gather`: reads a list of (address, length) ranges and returns them concatenated.
//! Ranges held by other servers are pulled here (DFlow), all in one request, so the
//! server fetches them with one message batch per owner.

use crate::args::{ArgReader, ArgWriter};
use crate::memory::Miss;
use crate::procedure::MAX_OUTPUT;
use crate::{Memory, Outcome, Procedure, SprocError};

const NAME: &str = "gather";

pub struct Gather;

impl Gather {
    pub const NAME: &'static str = NAME;

    /// Invoke anywhere, best at the server holding most of the bytes.
    pub fn args(ranges: &[(u64, u32)]) -> Vec<u8> {
        state(ranges, 0, &[])
    }
}

fn state(ranges: &[(u64, u32)], next: u32, out: &[u8]) -> Vec<u8> {
    let mut w = ArgWriter::default().u32(ranges.len() as u32).u32(next);
    for &(a, l) in ranges {
        w = w.u64(a).u32(l);
    }
    w.bytes(out).finish()
}

impl Procedure for Gather {
    fn name(&self) -> &str {
        NAME
    }

    fn run(&self, mem: &dyn Memory, _addr: u64, args: &[u8]) -> Result<Outcome, SprocError> {
        let mut r = ArgReader::new(NAME, args);
        let count = r.u32("count")? as usize;
        let next = r.u32("next")? as usize;
        if count.saturating_mul(12) > args.len() || next > count {
            return Err(SprocError::bad(NAME, "range list does not match its count"));
        }
        let mut ranges = Vec::with_capacity(count);
        let mut total = 0usize;
        for _ in 0..count {
            let a = r.u64("address")?;
            let l = r.u32("length")?;
            total = total.saturating_add(l as usize);
            ranges.push((a, l));
        }
        if total > MAX_OUTPUT {
            return Err(SprocError::TooLarge {
                proc: NAME,
                limit: MAX_OUTPUT,
            });
        }
        let mut out = r.rest().to_vec();
        for (j, &(a, l)) in ranges.iter().enumerate().skip(next) {
            let at = out.len();
            out.resize(at + l as usize, 0);
            if let Err(m) = mem.read(a, &mut out[at..]) {
                out.truncate(at);
                if m != Miss::Remote {
                    return super::on_miss(NAME, mem, m, a, l.into(), Vec::new);
                }
                // Ask for every remaining range not readable here at once.
                let mut scratch = Vec::new();
                let mut want = Vec::new();
                for &(a, l) in &ranges[j..] {
                    scratch.resize(l as usize, 0);
                    match mem.read(a, &mut scratch) {
                        Err(Miss::Remote) => want.push((a, l)),
                        Err(m) => return super::on_miss(NAME, mem, m, a, l.into(), Vec::new),
                        Ok(()) => {}
                    }
                }
                return Ok(Outcome::Pull {
                    ranges: want,
                    state: state(&ranges, j as u32, &out),
                });
            }
        }
        Ok(Outcome::Done(out))
    }
}
