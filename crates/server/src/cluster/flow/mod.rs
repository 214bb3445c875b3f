//! Procedures that need bytes held by other servers: hand the invocation to the owner
//! (FFlow), pull the bytes here and resume (DFlow), or return to the client. One run
//! of a procedure and the memory it sees are the engine's (`crate::engine::step`,
//! `crate::engine::memory`).
//!
//! - [`engine`]: per-worker parked invocations, tickets, deadlines, peer messages;
//! - [`sched`]: per-worker queues of runnable invocations, stolen by idle workers;
//! - [`sessions`]: per-worker sessions to other servers, batched per destination;
//! - [`pending`]: client responses waiting for answers from other servers.

pub mod engine;
pub mod pending;
pub mod sched;
pub mod sessions;

pub use engine::{Engine, Invocation, Target};
pub use pending::{HoleRef, PendingResponses};
