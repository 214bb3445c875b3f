//! Procedures compiled into every server, one file each (`kv` holds the keyed
//! store's lookups).

mod aggregate;
mod chase;
mod expand;
mod gather;
pub mod hot;
mod khop;
mod kv;
mod scan;

use std::sync::Arc;

pub use aggregate::{AggFn, Aggregate};
pub use chase::{Chase, NULL};
pub use expand::{ENTRY as GRAPH_ENTRY, Expand, Expanded, Part, Stop};
pub use gather::Gather;
pub use khop::KHop;
pub use kv::{KvFind, KvGet, KvHot, KvMedit, KvMfind, KvMget, KvMput, KvPut, KvScan, KvStats};
pub use scan::{Cmp, Scan};

use crate::memory::Miss;
use crate::{Memory, Outcome, Procedure, SprocError};

/// What a procedure does when it needs bytes another server holds (the paper's three
/// options; built-ins that take it say so in their args).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Flow {
    /// FFlow: ship the invocation and its state to the owner.
    #[default]
    Ship = 0,
    /// DFlow: pull the bytes here, park, resume when they arrive.
    Pull = 1,
    /// Stop and return what it has, with where it stopped.
    Return = 2,
}

impl Flow {
    fn from_u8(proc: &'static str, v: u8) -> Result<Self, SprocError> {
        Ok(match v {
            0 => Self::Ship,
            1 => Self::Pull,
            2 => Self::Return,
            _ => return Err(SprocError::bad(proc, format!("unknown flow {v}"))),
        })
    }
}

/// A built-in by name, without allocation or hashing (looked up once per EXECUTE).
pub fn by_name(name: &str) -> Option<&'static dyn Procedure> {
    Some(match name {
        Gather::NAME => &Gather,
        Aggregate::NAME => &Aggregate,
        Chase::NAME => &Chase,
        Scan::NAME => &Scan,
        KHop::NAME => &KHop,
        Expand::NAME => &Expand,
        KvGet::NAME => &KvGet,
        KvFind::NAME => &KvFind,
        KvStats::NAME => &KvStats,
        KvScan::NAME => &KvScan,
        KvHot::NAME => &KvHot,
        KvMget::NAME => &KvMget,
        KvMfind::NAME => &KvMfind,
        KvPut::NAME => &KvPut,
        KvMput::NAME => &KvMput,
        KvMedit::NAME => &KvMedit,
        _ => return None,
    })
}

impl crate::Registry {
    /// A registry holding every built-in procedure.
    pub fn with_builtins() -> Self {
        let mut r = Self::default();
        for p in all() {
            r.insert(p);
        }
        r
    }
}

pub fn all() -> Vec<Arc<dyn Procedure>> {
    vec![
        Arc::new(Gather),
        Arc::new(Aggregate),
        Arc::new(Chase),
        Arc::new(Scan),
        Arc::new(KHop),
        Arc::new(Expand),
        Arc::new(KvGet),
        Arc::new(KvFind),
        Arc::new(KvStats),
        Arc::new(KvScan),
        Arc::new(KvHot),
        Arc::new(KvMget),
        Arc::new(KvMfind),
        Arc::new(KvPut),
        Arc::new(KvMput),
        Arc::new(KvMedit),
    ]
}

/// `base + index * size`, or an out-of-range error when that overflows (hostile args).
fn element(proc: &'static str, base: u64, index: u64, size: u64) -> Result<u64, SprocError> {
    index
        .checked_mul(size)
        .and_then(|o| base.checked_add(o))
        .ok_or(SprocError::OutOfRange {
            proc,
            addr: base,
            len: size,
        })
}

/// The common answer to a read that missed: continue at the owner, or fail when the
/// range is not in the cache at all or the run is out of steps.
fn on_miss(
    proc: &'static str,
    mem: &dyn Memory,
    m: Miss,
    addr: u64,
    len: u64,
    state: impl FnOnce() -> Vec<u8>,
) -> Result<Outcome, SprocError> {
    match m {
        Miss::Remote => Ok(Outcome::Continue {
            addr,
            state: state(),
        }),
        Miss::OutOfRange => Err(SprocError::OutOfRange { proc, addr, len }),
        Miss::Budget => Err(budget(proc, mem)),
        Miss::Lost => Err(SprocError::Lost { proc, addr, len }),
    }
}

/// The error for a run that got [`Miss::Budget`] from `mem`.
#[cold]
fn budget(proc: &'static str, mem: &dyn Memory) -> SprocError {
    SprocError::Budget {
        proc: proc.to_string(),
        limit: mem.step_limit(),
    }
}
