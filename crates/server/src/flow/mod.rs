//! Procedures that need bytes held by other servers: hand the invocation to the owner
//! (FFlow), pull the bytes here and resume (DFlow), or return to the client.
//!
//! - [`step`]: one run of a procedure and what it asks for next;
//! - [`memory`]: local regions plus the bytes pulled for an invocation;
//! - [`engine`]: per-worker parked invocations, tickets, deadlines, peer messages;
//! - [`sched`]: per-worker queues of runnable invocations, stolen by idle workers;
//! - [`sessions`]: per-worker sessions to other servers, batched per destination;
//! - [`pending`]: client responses waiting for answers from other servers.

pub mod engine;
pub mod memory;
pub mod pending;
pub mod sched;
pub mod sessions;
pub mod step;

pub use engine::{Engine, Invocation, Target};
pub use pending::{HoleRef, PendingResponses};
pub use step::Step;

/// An EXECUTE whose reply waits for work on other servers.
pub struct Spawned {
    /// Where its reply goes, as an offset into the response frame.
    pub offset: usize,
    pub cache: farcache_proto::CacheId,
    pub proc_name: String,
    pub addr: u64,
    pub step: Step,
}
