//! Folding u64 words (sum, min, max, count of non-zero): the functions `aggregate`
//! offers, and the short fold an executor may answer without a run.

use crate::SprocError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum AggFn {
    Sum = 0,
    Min = 1,
    Max = 2,
    /// Records whose value is not zero.
    Count = 3,
}

impl AggFn {
    pub(crate) fn from_u8(v: u8) -> Result<Self, SprocError> {
        Ok(match v {
            0 => Self::Sum,
            1 => Self::Min,
            2 => Self::Max,
            3 => Self::Count,
            _ => {
                return Err(SprocError::bad(
                    "aggregate",
                    format!("unknown function {v}"),
                ));
            }
        })
    }

    pub(crate) fn init(self) -> u64 {
        match self {
            Self::Min => u64::MAX,
            _ => 0,
        }
    }

    pub(crate) fn fold(self, acc: u64, v: u64) -> u64 {
        match self {
            Self::Sum => acc.wrapping_add(v),
            Self::Min => acc.min(v),
            Self::Max => acc.max(v),
            // Never saturates: `run_into` refuses a count without room for every record.
            Self::Count => acc.saturating_add(u64::from(v != 0)),
        }
    }
}

/// A call whose whole work is folding `n` little-endian u64 words `stride` bytes apart
/// from its address (what a short `aggregate` call does). An executor that holds every
/// word may compute it straight from its memory and answer [`WordFold::apply`]'s
/// result as the call's 8-byte output, instead of running the procedure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WordFold {
    pub f: AggFn,
    /// At most [`WordFold::MAX_WORDS`].
    pub n: usize,
    pub stride: u64,
}

impl WordFold {
    pub const MAX_WORDS: usize = 8;

    /// The fold of `words` (the `n` words read).
    #[inline]
    pub fn apply(&self, words: impl Iterator<Item = u64>) -> u64 {
        match self.f {
            AggFn::Sum => words.fold(0, u64::wrapping_add),
            AggFn::Min => words.fold(u64::MAX, u64::min),
            AggFn::Max => words.fold(0, u64::max),
            // At most MAX_WORDS: no overflow.
            AggFn::Count => words.filter(|&v| v != 0).count() as u64,
        }
    }
}
