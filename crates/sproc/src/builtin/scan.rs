//! `scan`: a select pushdown over fixed-width rows: count the rows whose u64 column at
//! `filter_off` compares true with a constant, and sum their u64 column at `agg_off`.

use crate::args::{ArgReader, ArgWriter};
use crate::{Memory, Outcome, Procedure, SprocError};

const NAME: &str = "scan";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Cmp {
    Lt = 0,
    Le = 1,
    Eq = 2,
    Ge = 3,
    Gt = 4,
    Ne = 5,
}

impl Cmp {
    fn from_u8(v: u8) -> Result<Self, SprocError> {
        Ok(match v {
            0 => Self::Lt,
            1 => Self::Le,
            2 => Self::Eq,
            3 => Self::Ge,
            4 => Self::Gt,
            5 => Self::Ne,
            _ => return Err(SprocError::bad(NAME, format!("unknown comparison {v}"))),
        })
    }

    pub fn test(self, a: u64, b: u64) -> bool {
        match self {
            Self::Lt => a < b,
            Self::Le => a <= b,
            Self::Eq => a == b,
            Self::Ge => a >= b,
            Self::Gt => a > b,
            Self::Ne => a != b,
        }
    }
}

pub struct Scan;

/// Fixed part of the arguments.
#[derive(Debug, Clone, Copy)]
struct Plan {
    base: u64,
    rows: u32,
    width: u32,
    filter_off: u32,
    cmp: Cmp,
    constant: u64,
    agg_off: u32,
}

impl Scan {
    pub const NAME: &'static str = NAME;

    /// Invoke at `base`: `rows` rows of `width` bytes.
    #[allow(clippy::too_many_arguments)]
    pub fn args(
        base: u64,
        rows: u32,
        width: u32,
        filter_off: u32,
        cmp: Cmp,
        constant: u64,
        agg_off: u32,
    ) -> Vec<u8> {
        let p = Plan {
            base,
            rows,
            width,
            filter_off,
            cmp,
            constant,
            agg_off,
        };
        state(&p, 0, 0, 0)
    }

    /// The result: (matching rows, wrapping sum of their aggregate column).
    pub fn result(bytes: &[u8]) -> Result<(u64, u64), SprocError> {
        let mut r = ArgReader::new(NAME, bytes);
        let c = r.u64("count")?;
        let s = r.u64("sum")?;
        r.end()?;
        Ok((c, s))
    }
}

fn state(p: &Plan, i: u32, count: u64, sum: u64) -> Vec<u8> {
    ArgWriter::default()
        .u64(p.base)
        .u32(p.rows)
        .u32(p.width)
        .u32(p.filter_off)
        .u8(p.cmp as u8)
        .u64(p.constant)
        .u32(p.agg_off)
        .u32(i)
        .u64(count)
        .u64(sum)
        .finish()
}

fn column(row: &[u8], off: u32) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&row[off as usize..off as usize + 8]);
    u64::from_le_bytes(a)
}

impl Procedure for Scan {
    fn name(&self) -> &str {
        NAME
    }

    fn run(&self, mem: &dyn Memory, _addr: u64, args: &[u8]) -> Result<Outcome, SprocError> {
        let mut r = ArgReader::new(NAME, args);
        let p = Plan {
            base: r.u64("base")?,
            rows: r.u32("rows")?,
            width: r.u32("width")?,
            filter_off: r.u32("filter offset")?,
            cmp: Cmp::from_u8(r.u8("comparison")?)?,
            constant: r.u64("constant")?,
            agg_off: r.u32("aggregate offset")?,
        };
        let mut i = r.u32("row")?;
        let mut count = r.u64("count")?;
        let mut sum = r.u64("sum")?;
        r.end()?;
        let fits = |off: u32| off.checked_add(8).is_some_and(|e| e <= p.width);
        if !fits(p.filter_off)
            || !fits(p.agg_off)
            || p.width as usize > crate::procedure::MAX_OUTPUT
        {
            return Err(SprocError::bad(NAME, "columns must lie inside the row"));
        }
        let mut row = vec![0u8; p.width as usize];
        while i < p.rows {
            let at = super::element(NAME, p.base, i.into(), p.width.into())?;
            if let Err(m) = mem.read(at, &mut row) {
                return super::on_miss(NAME, mem, m, at, p.width.into(), || {
                    state(&p, i, count, sum)
                });
            }
            if p.cmp.test(column(&row, p.filter_off), p.constant) {
                // Only a forged state can carry a count this high.
                count = count
                    .checked_add(1)
                    .ok_or_else(|| SprocError::bad(NAME, "row count overflows u64"))?;
                sum = sum.wrapping_add(column(&row, p.agg_off));
            }
            i += 1;
        }
        let mut out = count.to_le_bytes().to_vec();
        out.extend_from_slice(&sum.to_le_bytes());
        Ok(Outcome::Done(out))
    }
}
