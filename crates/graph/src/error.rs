use farcache_client::{ClientError, OpError};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum GraphError {
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("edge list line {line}: {message}")]
    Parse { line: u64, message: String },
    #[error("graph-tool file: {0}")]
    Format(String),
    #[error("reading the edge list: {0}")]
    Io(#[from] std::io::Error),
    #[error("cache {cache:?} holds no graph: {reason}")]
    NotAGraph { cache: String, reason: String },
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Op(#[from] OpError),
    #[error("expand on the server: {0}")]
    Procedure(String),
    #[error("traversal made no progress after {0} retries (regions keep moving?)")]
    NoProgress(u32),
}

pub type Result<T> = std::result::Result<T, GraphError>;
