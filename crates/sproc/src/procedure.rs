//! The procedure trait and the per-server registry of loaded procedures.

use std::collections::HashMap;
use std::sync::Arc;

use crate::{Memory, Outcome, SprocError};

/// Largest result or state a procedure may produce (it travels in one reply).
pub const MAX_OUTPUT: usize = 1 << 20;

pub trait Procedure: Send + Sync {
    fn name(&self) -> &str;

    /// Runs the invocation routed to `addr` with `args` (the caller's, or a state this
    /// procedure returned in [`Outcome::Continue`]) until it finishes or needs bytes
    /// held by another server.
    fn run(&self, mem: &dyn Memory, addr: u64, args: &[u8]) -> Result<Outcome, SprocError>;
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
