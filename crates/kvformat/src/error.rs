//! What can be wrong with bytes read from a store.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("not a farcache store (bad magic)")]
    NotAStore,
    #[error("store format version {found}, this build reads version {supported}")]
    Version { found: u32, supported: u32 },
    #[error("store descriptor is damaged: {0}")]
    Descriptor(String),
    #[error("malformed {what}: {reason}")]
    Malformed { what: &'static str, reason: String },
}
