//! The procedure trait and the per-server registry of loaded procedures.

use std::collections::HashMap;
use std::sync::Arc;

use crate::{Memory, Outcome, SprocError};

/// Largest result or state a built-in procedure may produce (it travels in one
/// reply; a keyed store's largest small value plus its key fits).
pub const MAX_OUTPUT: usize = 2 << 20;

pub trait Procedure: Send + Sync {
    fn name(&self) -> &str;

    /// Runs the invocation routed to `addr` with `args` (the caller's, or a state this
    /// procedure returned in [`Outcome::Continue`]) until it finishes or needs bytes
    /// held by another server.
    fn run(&self, mem: &dyn Memory, addr: u64, args: &[u8]) -> Result<Outcome, SprocError>;

    /// Like [`Procedure::run`], but a finished run appends its result to `out` and
    /// returns `None`; any other outcome comes back as from `run`. The server calls
    /// this, so a procedure that finishes where it starts can answer without
    /// allocating; the default goes through `run`.
    fn run_into(
        &self,
        mem: &dyn Memory,
        addr: u64,
        args: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Outcome>, SprocError> {
        match self.run(mem, addr, args)? {
            Outcome::Done(r) => {
                out.extend_from_slice(&r);
                Ok(None)
            }
            o => Ok(Some(o)),
        }
    }

    /// This call as a [`WordFold`], when folding words is all it does; the executor
    /// may then answer it without a run (same result, same step charge of one per
    /// word, which a fold of at most [`WordFold::MAX_WORDS`] never exceeds). `None`,
    /// the default: run it.
    fn word_fold(&self, _args: &[u8]) -> Option<WordFold> {
        None
    }
}

/// A call whose whole work is folding `n` little-endian u64 words `stride` bytes apart
/// from its address (what a short `aggregate` call does). An executor that holds every
/// word may compute it straight from its memory and answer [`WordFold::apply`]'s
/// result as the call's 8-byte output, instead of running the procedure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WordFold {
    pub f: crate::builtin::AggFn,
    /// At most [`WordFold::MAX_WORDS`].
    pub n: usize,
    pub stride: u64,
}

impl WordFold {
    pub const MAX_WORDS: usize = 8;

    /// The fold of `words` (the `n` words read).
    #[inline]
    pub fn apply(&self, words: impl Iterator<Item = u64>) -> u64 {
        use crate::builtin::AggFn;
        match self.f {
            AggFn::Sum => words.fold(0, u64::wrapping_add),
            AggFn::Min => words.fold(u64::MAX, u64::min),
            AggFn::Max => words.fold(0, u64::max),
            // At most MAX_WORDS: no overflow.
            AggFn::Count => words.filter(|&v| v != 0).count() as u64,
        }
    }
}

/// [`Procedure::run`] for a procedure whose work is in its `run_into`.
pub fn run_by_into<P: Procedure + ?Sized>(
    p: &P,
    mem: &dyn Memory,
    addr: u64,
    args: &[u8],
) -> Result<Outcome, SprocError> {
    let mut out = Vec::new();
    Ok(p.run_into(mem, addr, args, &mut out)?
        .unwrap_or(Outcome::Done(out)))
}

/// Procedures a server can run, by name.
#[derive(Clone, Default)]
pub struct Registry {
    procs: HashMap<String, Arc<dyn Procedure>>,
}

impl Registry {
    /// A registry holding every built-in procedure.
    pub fn with_builtins() -> Self {
        let mut r = Self::default();
        for p in crate::builtin::all() {
            r.insert(p);
        }
        r
    }

    pub fn insert(&mut self, p: Arc<dyn Procedure>) {
        self.procs.insert(p.name().to_string(), p);
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Procedure>> {
        self.procs.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.procs.keys().map(String::as_str)
    }
}
