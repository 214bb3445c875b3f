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
    #[error("{0}")]
    Other(String),
}
