//! Errors of store calls.

use farcache_client::{ClientError, OpError};
use farcache_kvformat::FormatError;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Op(#[from] OpError),
    #[error("store format: {0}")]
    Format(#[from] FormatError),
    #[error("invalid key: {0}")]
    Key(String),
    #[error("value of {len} bytes is larger than this store's limit of {limit} bytes")]
    ValueTooLarge { len: u64, limit: u64 },
    #[error("invalid store options: {0}")]
    Options(String),
    /// No space for an item of this size class: the shard's heap is carved out and
    /// no item of the class could be evicted (the shard is full of other sizes).
    #[error(
        "store full: shard {shard} has no free or evictable {size}-byte item (its memory \
         is held by items of other sizes)"
    )]
    Full { shard: u32, size: u32 },
    /// The key's bucket kept changing under this call.
    #[error("key kept changing under {attempts} attempts (heavy contention); retry")]
    Contended { attempts: u32 },
    /// Erasure coding refused the chunks (a bug or damaged chunks).
    #[error("erasure coding: {0}")]
    Erasure(String),
    /// An erasure-coded value has fewer than `data` readable chunks.
    #[error(
        "erasure-coded value unreadable: {readable} of {chunks} chunks readable, {data} needed"
    )]
    Unreadable {
        readable: usize,
        chunks: usize,
        data: usize,
    },
    /// The server answered something this version cannot read.
    #[error("unexpected reply from {proc}: {reason}")]
    Reply { proc: &'static str, reason: String },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl StoreError {
    /// A failure that a retry may not see: a server unreachable or slow while its
    /// regions fail over or move. Store calls retry these for
    /// [`crate::store::TRANSIENT_BUDGET`].
    pub fn is_transient(&self) -> bool {
        let op = match self {
            Self::Op(op) | Self::Client(ClientError::Op(op)) => op,
            _ => return false,
        };
        matches!(
            op,
            OpError::ServerUnavailable { .. }
                | OpError::Timeout { .. }
                | OpError::Redirects(_)
                | OpError::Refresh(_)
                | OpError::Status(farcache_client::Status::Paused)
                | OpError::Status(farcache_client::Status::WrongServer)
                | OpError::Status(farcache_client::Status::NoSuchCache)
        )
    }
}
