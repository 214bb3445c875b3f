use thiserror::Error;

#[derive(Debug, Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("manager: {0}")]
    Manager(String),
    #[error("identity file {path}: {reason}")]
    Identity { path: String, reason: String },
    #[error("region store: {0}")]
    Store(#[from] StoreError),
}

/// Why a region cannot be placed (reported to the manager as a control error).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum StoreError {
    #[error("not enough memory: {requested} bytes requested, {free} of {total} free")]
    NoMemory {
        requested: u64,
        free: u64,
        total: u64,
    },
    #[error("region size must be a positive multiple of 4096, got {0}")]
    BadRegionSize(u64),
    #[error("region {region} of cache {cache} already placed with size {existing}")]
    Conflict {
        cache: u32,
        region: u32,
        existing: u64,
    },
    #[error("mapping memory failed: {0}")]
    Map(String),
    #[error("region {region} lies past a capacity of {capacity} bytes in regions of {region_size}")]
    RegionOutOfRange {
        region: u32,
        capacity: u64,
        region_size: u64,
    },
}
