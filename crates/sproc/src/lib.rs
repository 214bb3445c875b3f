//! Stored procedures that run next to the data.
//!
//! A procedure is invoked at a cache address (`EXECUTE(cache, addr, name, args)`) on the
//! server that holds it. It reads cache memory through [`Memory`], which only serves
//! bytes this server holds. When it needs bytes held elsewhere it does not block: it
//! returns [`Outcome::Continue`] (FFlow: run me at the owner of this address with this
//! state) or [`Outcome::Pull`] (DFlow: bring these ranges here, then run me again with
//! this state), or it returns what it has to the caller. Servers carry out both
//! between themselves; a server without the cache's region table hands a continuation
//! to the client library, which re-sends it. Because a procedure's state is always
//! plain bytes, an invocation can stop and resume on any server.
//!
//! One run on one server may read memory at most a step budget of times
//! ([`memory::DEFAULT_STEP_BUDGET`], counted by the [`Memory`]); past it the run ends
//! with [`SprocError::Budget`], so no arguments (a cyclic chain, say) can keep a server
//! busy indefinitely. WebAssembly is additionally bounded by fuel.
//!
//! Layout: [`memory`] (what a procedure may read), [`outcome`] (what a run asks next),
//! [`procedure`] (the trait and registry), [`args`] (little-endian helpers),
//! [`builtin`] (gather, aggregate, pointer chase, scan-filter-aggregate, k-hop count).

pub mod args;
pub mod builtin;
pub mod error;
pub mod fold;
pub mod memory;
pub mod outcome;
pub mod procedure;
pub mod wasm;

pub use error::SprocError;
pub use memory::{Memory, Miss, Steps, WriteMemory};
pub use outcome::Outcome;
pub use procedure::{Procedure, Registry, WordFold};
