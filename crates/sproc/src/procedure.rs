//! The procedure trait and the per-server registry of loaded procedures.

use std::collections::HashMap;
use std::sync::Arc;

pub use crate::fold::WordFold;
use crate::{Memory, Outcome, SprocError, WriteMemory};

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

    /// Whether this procedure changes memory. The executor then runs it only through
    /// [`Procedure::run_writing`], on the region its address is in, with the checks a
    /// client's write gets (write access, a paused or fenced region); it never moves
    /// to another server.
    fn writes(&self) -> bool {
        false
    }

    /// Runs a writing procedure, appending its result to `out`.
    fn run_writing(
        &self,
        _mem: &dyn WriteMemory,
        _addr: u64,
        _args: &[u8],
        _out: &mut Vec<u8>,
    ) -> Result<(), SprocError> {
        Err(SprocError::Flow(format!("{} does not write", self.name())))
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
