//! `aggregate`: sum / min / max / count-non-zero of `n` u64 records `stride` bytes apart.

use crate::args::{ArgReader, ArgWriter};
pub use crate::fold::AggFn;
use crate::{Memory, Outcome, Procedure, SprocError, WordFold};

const NAME: &str = "aggregate";
/// Length of [`Aggregate::call`]'s arguments.
const SHORT: usize = 9;
/// Short calls over at most this many records try [`Memory::read_u64s`] first.
const FAST_RECORDS: usize = WordFold::MAX_WORDS;

pub struct Aggregate;

impl Aggregate {
    pub const NAME: &'static str = NAME;

    /// Invoke at `base`: the little-endian u64 records at `base + i * stride`, `i < n`.
    pub fn args(f: AggFn, base: u64, n: u32, stride: u32) -> Vec<u8> {
        state(f, base, n, stride, 0, f.init())
    }

    /// The short form of [`Aggregate::args`] for a call at the first record's address
    /// (`base` = the EXECUTE address): 9 bytes instead of 29 on the wire, built on the
    /// stack.
    pub fn call(f: AggFn, n: u32, stride: u32) -> [u8; 9] {
        let mut a = [0u8; 9];
        a[0] = f as u8;
        a[1..5].copy_from_slice(&n.to_le_bytes());
        a[5..9].copy_from_slice(&stride.to_le_bytes());
        a
    }

    /// The result: the aggregate as a u64 (`u64::MAX` for the min of no records).
    #[inline]
    pub fn result(bytes: &[u8]) -> Result<u64, SprocError> {
        match <[u8; 8]>::try_from(bytes) {
            Ok(b) => Ok(u64::from_le_bytes(b)),
            Err(_) => bad_result(bytes),
        }
    }
}

/// The reader's error for a result that is not one u64.
#[cold]
fn bad_result(bytes: &[u8]) -> Result<u64, SprocError> {
    let mut r = ArgReader::new(NAME, bytes);
    let v = r.u64("result")?;
    r.end()?;
    Ok(v)
}

fn state(f: AggFn, base: u64, n: u32, stride: u32, i: u32, acc: u64) -> Vec<u8> {
    ArgWriter::default()
        .u8(f as u8)
        .u64(base)
        .u32(n)
        .u32(stride)
        .u32(i)
        .u64(acc)
        .finish()
}

/// A short call as a fold of at most [`FAST_RECORDS`] records from the call's
/// address; `None` for any other call, which the general road runs (and which reports
/// any error in the arguments).
#[inline]
fn short_fold(a: &[u8; SHORT]) -> Option<WordFold> {
    let [f, n0, n1, n2, n3, s0, s1, s2, s3] = *a;
    let n = u32::from_le_bytes([n0, n1, n2, n3]) as usize;
    let stride = u32::from_le_bytes([s0, s1, s2, s3]);
    if n > FAST_RECORDS || (stride < 8 && n > 1) {
        return None;
    }
    Some(WordFold {
        f: AggFn::from_u8(f).ok()?,
        n,
        stride: stride.into(),
    })
}

/// A short call over records that are all held here: the result, read with one
/// [`Memory::read_u64s`]. `None` sends the call down the general road.
#[inline]
fn short_call(mem: &dyn Memory, base: u64, a: &[u8; SHORT]) -> Option<u64> {
    let w = short_fold(a)?;
    let mut words = [0u64; FAST_RECORDS];
    let words = &mut words[..w.n];
    if !mem.read_u64s(base, w.stride, words) {
        return None;
    }
    Some(w.apply(words.iter().copied()))
}

impl Procedure for Aggregate {
    fn name(&self) -> &str {
        NAME
    }

    fn run(&self, mem: &dyn Memory, addr: u64, args: &[u8]) -> Result<Outcome, SprocError> {
        crate::procedure::run_by_into(self, mem, addr, args)
    }

    fn word_fold(&self, args: &[u8]) -> Option<WordFold> {
        short_fold(<&[u8; SHORT]>::try_from(args).ok()?)
    }

    fn run_into(
        &self,
        mem: &dyn Memory,
        addr: u64,
        args: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Outcome>, SprocError> {
        if let Ok(short) = <&[u8; SHORT]>::try_from(args)
            && let Some(acc) = short_call(mem, addr, short)
        {
            out.extend_from_slice(&acc.to_le_bytes());
            return Ok(None);
        }
        let mut r = ArgReader::new(NAME, args);
        let f = AggFn::from_u8(r.u8("function")?)?;
        let (base, n, stride, mut i, mut acc) = if args.len() == SHORT {
            (addr, r.u32("n")?, r.u32("stride")?, 0, f.init())
        } else {
            (
                r.u64("base")?,
                r.u32("n")?,
                r.u32("stride")?,
                r.u32("index")?,
                r.u64("accumulator")?,
            )
        };
        r.end()?;
        if stride < 8 && n > 1 {
            return Err(SprocError::bad(NAME, "stride below the 8-byte record"));
        }
        // A count grows by at most one per record left; checking that once keeps the
        // per-record fold free of checks.
        if f == AggFn::Count && acc.checked_add(u64::from(n.saturating_sub(i))).is_none() {
            return Err(SprocError::bad(
                NAME,
                format!("count {acc} would overflow over {n} records"),
            ));
        }
        while i < n {
            let at = super::element(NAME, base, i.into(), stride.into())?;
            match mem.read_u64(at) {
                Ok(v) => acc = f.fold(acc, v),
                Err(m) => {
                    return super::on_miss(NAME, mem, m, at, 8, || {
                        state(f, base, n, stride, i, acc)
                    })
                    .map(Some);
                }
            }
            i += 1;
        }
        out.extend_from_slice(&acc.to_le_bytes());
        Ok(None)
    }
}
