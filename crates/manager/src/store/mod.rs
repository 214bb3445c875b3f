//! Persistence: where the catalogue lives, behind one interface with two backends.
//!
//! - [`redb`]: an embedded file, the default for one machine.
//! - [`etcd`]: etcd, for several managers with one leader. Every change is an etcd
//!   transaction conditioned on this manager still leading and on each written key
//!   being at the revision this manager last saw, so a deposed manager never commits.
//!
//! The service changes its in-memory catalogue only after a commit succeeded.

pub(crate) mod etcd;
pub(crate) mod redb;

use farcache_proto::{CacheId, ServerId};

use crate::catalogue::{CacheRecord, ServerRecord};
use crate::error::ManagerError;
use crate::events::Event;

/// One change; a slice of these commits atomically.
#[derive(Debug, Clone, Copy)]
pub enum Write<'a> {
    Server(&'a ServerRecord),
    Cache(&'a CacheRecord),
    RemoveCache(CacheId),
    NextServerId(ServerId),
    NextCacheId(CacheId),
    /// A promotion or loss, under its number (see `events`).
    Event(u64, &'a Event),
    /// An event that fell out of its list.
    DropEvent(u64),
}

/// Everything read back when a manager starts leading.
#[derive(Debug, Default)]
pub struct Loaded {
    pub servers: Vec<ServerRecord>,
    pub caches: Vec<CacheRecord>,
    pub next_server_id: ServerId,
    pub next_cache_id: CacheId,
    /// Promotions and losses, by number.
    pub events: Vec<(u64, Event)>,
}

/// A catalogue backend.
pub(crate) trait Backend: Send {
    /// Applies `writes` durably, all or nothing. An error means the change may not be
    /// assumed made (the caller rolls back what it did on servers).
    fn commit(&self, writes: &[Write<'_>]) -> Result<(), ManagerError>;

    /// For logs and status.
    fn name(&self) -> &'static str;
}

pub(crate) type Store = Box<dyn Backend>;

fn encode<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, ManagerError> {
    serde_json::to_vec(v).map_err(|e| ManagerError::Corrupt(format!("cannot encode: {e}")))
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, b: &[u8]) -> Result<T, ManagerError> {
    serde_json::from_slice(b).map_err(|e| ManagerError::Corrupt(format!("{what}: {e}")))
}
