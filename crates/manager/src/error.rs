//! Errors: [`ManagerError`] for starting and running the manager, [`Reject`] for a
//! request the manager refuses (it becomes a `ControlResponse::Error`).

use farcache_proto::control::{ControlErrorCode, ControlResponse};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ManagerError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// Boxed: redb's error is large and this type travels in every `Result`.
    #[error("store: {0}")]
    Store(Box<redb::Error>),
    #[error("store holds an unreadable record: {0}")]
    Corrupt(String),
    #[error("etcd: {0}")]
    Etcd(String),
    /// Another manager leads; this one must not change the catalogue.
    #[error("not the leader: {0}")]
    NotLeader(String),
}

impl From<redb::Error> for ManagerError {
    fn from(e: redb::Error) -> Self {
        Self::Store(Box::new(e))
    }
}

/// redb reports each operation's failures with its own type; accept them all with `?`.
macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for ManagerError {
            fn from(e: $t) -> Self {
                Self::Store(Box::new(e.into()))
            }
        }
    )*};
}
from_redb!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

/// A refused request: a stable code for programs and a message for people.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reject {
    pub code: ControlErrorCode,
    pub message: String,
}

impl Reject {
    pub fn new(code: ControlErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ControlErrorCode::InvalidArgument, message)
    }

    pub fn not_found(name: &str) -> Self {
        Self::new(
            ControlErrorCode::NotFound,
            format!("no cache named '{name}'"),
        )
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ControlErrorCode::Unavailable, message)
    }

    /// A store failure: the change was not made, so the caller may retry.
    pub fn store(e: &ManagerError) -> Self {
        if let ManagerError::NotLeader(why) = e {
            return Self::new(ControlErrorCode::NotLeader, why.clone());
        }
        Self::new(
            ControlErrorCode::Internal,
            format!("cannot persist the change: {e}"),
        )
    }
}

impl From<Reject> for ControlResponse {
    fn from(r: Reject) -> Self {
        ControlResponse::Error {
            code: r.code,
            message: r.message,
        }
    }
}
