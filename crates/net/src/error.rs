use thiserror::Error;

#[derive(Debug, Error)]
pub enum NetError {
    #[error("TLS: {0}")]
    Tls(String),
    #[error("{path}: {reason}")]
    File { path: String, reason: String },
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}
