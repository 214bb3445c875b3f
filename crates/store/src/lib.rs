//! A keyed store inside a farcache cache: `get`/`put`/`delete` of byte keys, batched
//! multi-get and multi-put, TTLs, CLOCK eviction when full.
//!
//! ```no_run
//! # fn main() -> Result<(), farcache_store::StoreError> {
//! use farcache_store::{StoreExt, StoreOptions};
//! let client = farcache_client::Client::connect("127.0.0.1:7000")?;
//! let store = client.create_store("sessions", 64 << 20, &StoreOptions::default())?;
//! store.put(b"user:42", b"{\"name\":\"ada\"}")?;
//! assert_eq!(store.get(b"user:42")?.as_deref(), Some(&b"{\"name\":\"ada\"}"[..]));
//! # Ok(()) }
//! ```
//!
//! How it works (layout in `farcache-kvformat`): keys hash to a shard (a slice of one
//! region, so one server) and a bucket of 7 slots in it (or, once that is full, in
//! its pair bucket, the next cache line). A GET is one round trip: the
//! `kv_get` procedure runs on the key's server, finds the slot and returns the value.
//! A PUT writes a new immutable item and swings the key's slot to it with one
//! compare-and-swap (so the last writer wins and no reader sees half a value), then
//! recycles the old item. Items come from per-shard size classes: a client reuses
//! what it freed, then carves fresh heap, then pops the shard's shared free list, then
//! evicts with CLOCK (reference bytes beside the slots, set by GET hits).
//!
//! Blocking calls drive the connections on the calling thread; `*_async` calls
//! return futures for any executor ([`async_api`]).
//!
//! Layout: [`store`] (handle, create/open, reads), [`lookup`] (batched reads), [`put`] (the write pipeline),
//! [`alloc`] (item allocation and recycling), [`evict`] (the CLOCK sweep),
//! [`large`] (erasure-coded values), [`repair`] (rebuilding after lost servers),
//! [`hot`] (second copies of hot keys, reads to the less loaded home),
//! [`stats`] (occupancy and fragmentation), [`meta`] (value with expiry), [`update`]
//! (read-modify-write in two round trips), [`keys`] (listing keys a page at a time).

pub mod alloc;
pub mod async_api;
pub mod copies;
pub mod delete;
pub mod edits;
pub mod error;
pub mod evict;
mod free;
mod get;
pub mod hot;
mod hot_state;
pub mod keys;
pub mod large;
pub mod lookup;
pub mod meta;
pub mod options;
mod pool;
pub mod put;
pub mod repair;
mod runs;
pub mod stats;
pub mod store;
pub mod update;

pub use async_api::StoreFuture;
pub use error::{Result, StoreError};
pub use farcache_kvformat::manifest::Manifest;
pub use farcache_kvformat::wire::{Edit, Edited};
pub use get::PendingGets;
pub use hot::{HotController, HotOptions};
pub use meta::Entry;
pub use options::{Condition, PutOptions, StoreOptions};
pub use repair::{RepairReport, Repairer};
pub use stats::StoreStats;
pub use store::{HEDGE_AFTER, Store, StoreExt};
pub use update::Update;
