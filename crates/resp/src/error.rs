//! Errors of starting a front end (a running session answers errors on the wire).

use farcache_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum RespError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The reply line for a store error: a Redis error code where one has the same
/// meaning (`OOM` for a full store, `TRYAGAIN` while a server fails over).
pub fn store_error_line(e: &StoreError) -> String {
    match e {
        StoreError::Full { .. } => format!("OOM {e}"),
        StoreError::Contended { .. } => format!("TRYAGAIN {e}"),
        _ if e.is_transient() => format!("TRYAGAIN {e}"),
        _ => format!("ERR {e}"),
    }
}
