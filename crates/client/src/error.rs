use farcache_proto::Status;
use farcache_proto::blocking::RpcError;
use farcache_proto::control::ControlErrorCode;
use thiserror::Error;

/// Errors of client calls (control plane and whole-call failures).
#[derive(Debug, Error)]
pub enum ClientError {
    #[error("manager at {addr}: {source}")]
    Manager { addr: String, source: RpcError },
    #[error("{code:?}: {message}")]
    Rejected {
        code: ControlErrorCode,
        message: String,
    },
    #[error(transparent)]
    Op(#[from] OpError),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Seen by users of every front door (CLI, Rust, Python): it names the setting of each.
    #[error(
        "no credential: give the client the cluster secret or a cache token. Set \
         FARCACHE_SECRET_FILE (the cluster's key file; `farcache up` writes \
         farcache-data/cluster.secret) or FARCACHE_TOKEN (or FARCACHE_SECRET, the key in \
         hex), or use the client's secret/token settings (CLI: --secret-file / --token; \
         Rust: ClientConfig::secret / ::token; Python: farcache.Client(manager, \
         secret_file=..., secret=... or token=...), see docs/python.md)"
    )]
    NoCredential,
}

impl ClientError {
    pub fn code(&self) -> Option<ControlErrorCode> {
        match self {
            Self::Rejected { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// Why one op failed. Other ops of the same batch may still have succeeded.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum OpError {
    #[error("range [{addr}, {addr}+{len}) is outside the cache (capacity {capacity})")]
    OutOfRange { addr: u64, len: u64, capacity: u64 },
    #[error("server {server} at {addr} is unavailable: {reason}")]
    ServerUnavailable {
        server: u32,
        addr: String,
        reason: String,
    },
    #[error("server {server} at {addr} did not answer within {timeout_ms} ms")]
    Timeout {
        server: u32,
        addr: String,
        timeout_ms: u64,
    },
    #[error("server answered: {0}")]
    Status(Status),
    #[error("region still on a different server after {0} table refreshes")]
    Redirects(u32),
    #[error("cache table refresh failed: {0}")]
    Refresh(String),
    #[error("atomic ops need an 8-byte aligned address, got {0}")]
    Misaligned(u64),
    #[error("protocol violation by server {server}: {reason}")]
    Protocol { server: u32, reason: String },
    /// A stored procedure failed (bad arguments, out-of-range reads, …).
    #[error("procedure failed: {0}")]
    Procedure(String),
    /// A procedure kept moving between servers beyond the hop limit.
    #[error("procedure still running after {0} server hops")]
    Hops(u32),
    /// The only copy of these bytes died with a server. Reads (and procedures) of the
    /// range fail with this until it is overwritten or the loss is acknowledged with
    /// [`Cache::clear_lost`](crate::Cache::clear_lost). For a procedure the range is
    /// the region it ran in.
    #[error(
        "bytes [{addr}, {addr}+{len}) were lost with a failed server; overwrite them or \
         call clear_lost"
    )]
    DataLost { addr: u64, len: u64 },
}
