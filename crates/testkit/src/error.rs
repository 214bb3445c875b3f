use thiserror::Error;

#[derive(Debug, Error)]
pub enum TestkitError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("manager: {0}")]
    Manager(#[from] farcache_manager::ManagerError),
    #[error("server: {0}")]
    Server(#[from] farcache_server::ServerError),
    #[error("client: {0}")]
    Client(#[from] farcache_client::ClientError),
    #[error("timed out: {0}")]
    Timeout(String),
    /// The network lab cannot run here (not root, or `ip`/`nft` missing); the
    /// message says what is missing. Lab tests skip with it, loudly.
    #[error("network lab unavailable: {0}")]
    LabUnavailable(String),
    /// A lab command (`ip`, `nft`, `tc`) failed.
    #[error("lab: `{command}` failed: {stderr}")]
    Lab { command: String, stderr: String },
    #[error("{0}")]
    Other(String),
}
