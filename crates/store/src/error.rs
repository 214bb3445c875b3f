//! Errors of store calls.

use farcache_client::{ClientError, OpError};
use farcache_kvformat::FormatError;

/// The client's errors ride boxed: every key of an MGET carries a `Result`, and a
/// small error type keeps those results small (they were 216 bytes each).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Client(Box<ClientError>),
    #[error(transparent)]
    Op(Box<OpError>),
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
        "erasure-coded value unreadable: {readable} of {chunks} chunks readable, {data} needed{}",
        first_error.as_ref().map(|e| format!(" (a chunk's read failed: {e})")).unwrap_or_default()
    )]
    Unreadable {
        readable: usize,
        chunks: usize,
        data: usize,
        /// Why the first failed chunk could not be read, if a read failed.
        first_error: Option<Box<StoreError>>,
    },
    /// The server answered something this version cannot read.
    #[error("unexpected reply from {proc}: {reason}")]
    Reply { proc: &'static str, reason: String },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl From<ClientError> for StoreError {
    fn from(e: ClientError) -> Self {
        Self::Client(Box::new(e))
    }
}

impl From<OpError> for StoreError {
    fn from(e: OpError) -> Self {
        Self::Op(Box::new(e))
    }
}

impl StoreError {
    /// The failed op behind this error, if one is.
    pub fn op(&self) -> Option<&OpError> {
        match self {
            Self::Op(op) => Some(op),
            Self::Client(c) => match &**c {
                ClientError::Op(op) => Some(op),
                _ => None,
            },
            _ => None,
        }
    }

    /// A failure that a retry may not see: a server unreachable or slow while its
    /// regions fail over or move. Store calls retry these for
    /// `TRANSIENT_BUDGET` (in the `store` module).
    pub fn is_transient(&self) -> bool {
        let Some(op) = self.op() else {
            return false;
        };
        matches!(
            op,
            OpError::ServerUnavailable { .. }
                | OpError::Timeout { .. }
                | OpError::Redirects(_)
                | OpError::Refresh(_)
                | OpError::Status(farcache_client::Status::Paused)
                | OpError::Status(farcache_client::Status::NotServing)
                | OpError::Status(farcache_client::Status::WrongServer)
                | OpError::Status(farcache_client::Status::NoSuchCache)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_stay_small() {
        // An MGET's per-key results are moved several times on the hot path.
        assert!(std::mem::size_of::<StoreError>() <= 48);
        assert!(std::mem::size_of::<Result<Option<bytes::Bytes>>>() <= 56);
    }
}
