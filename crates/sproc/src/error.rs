//! Errors a procedure invocation can end with. They reach the caller as text, so each
//! says what was wrong with which input.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SprocError {
    #[error("bad arguments for {proc}: {reason}")]
    BadArgs { proc: &'static str, reason: String },
    #[error("{proc} read [{addr}, {addr}+{len}), whose data was lost with a failed server")]
    Lost {
        proc: &'static str,
        addr: u64,
        len: u64,
    },
    #[error("{proc} read [{addr}, {addr}+{len}) outside the cache")]
    OutOfRange {
        proc: &'static str,
        addr: u64,
        len: u64,
    },
    #[error("{proc} result exceeds {limit} bytes")]
    TooLarge { proc: &'static str, limit: usize },
    #[error("malformed procedure reply: {0}")]
    Reply(String),
    /// The code given at registration is not a usable module.
    #[error("cannot load procedure: {0}")]
    Compile(String),
    /// Handing the invocation or its data between servers failed (unreachable server,
    /// no answer in time, no region table).
    #[error("{0}")]
    Flow(String),
    /// The run read memory more times than its step budget allows (see
    /// [`crate::memory::Steps`]).
    #[error(
        "{proc} stopped after its step budget of {limit} reads (a cycle, or too much work for one call: split it)"
    )]
    Budget { proc: String, limit: u64 },
    /// A sandboxed procedure trapped, ran out of fuel or broke the ABI.
    #[error("procedure {proc} {reason}")]
    Trapped { proc: String, reason: String },
}

impl SprocError {
    pub(crate) fn bad(proc: &'static str, reason: impl Into<String>) -> Self {
        Self::BadArgs {
            proc,
            reason: reason.into(),
        }
    }
}
