//! The in-cache format of farcache's keyed store, shared by the client-side store
//! (`farcache-store`) and the server-side lookups (the `kv_*` built-in procedures).
//!
//! A store is a cache cut into equal **shards**, each inside one region so that a
//! key's index entry and its item always live on the same server: a lookup is one
//! procedure run that never leaves the server. A shard holds, in order:
//!
//! ```text
//! [0, 64)        descriptor (the store's parameters; identical in every shard)
//! [64, 128)      counters: bump pointer, CLOCK hand, evictions, generation
//! [128, 640)     free-list heads, one per size class (tagged against ABA)
//! [1024, ..)     index: buckets of 8 words (7 item slots + 1 bucket lock)
//! [refs, ..)     CLOCK reference bytes, 8 per bucket
//! [heap, end)    items, carved from the heap in size classes
//! ```
//!
//! Invariants the store keeps (see `farcache-store` for the protocol):
//! - an item is written in full before a slot points at it, and is never changed
//!   while a slot points at it; readers check its checksum and re-read the slot;
//! - a slot goes `EMPTY → item → (item | TOMB)*`: it never becomes empty again;
//! - buckets come in pairs (`b`, `b ^ 1`): a key lives in its home bucket or, once
//!   the home has no empty slot left, in the pair bucket. A new key takes the first
//!   empty slot of home-then-pair, so concurrent inserts of one key always race for
//!   the same slot, and a lookup that finds an empty slot at home stops there;
//! - once neither bucket has an empty slot, inserts take the home bucket's lock.

pub mod class;
pub mod error;
pub mod hash;
pub mod item;
pub mod layout;
pub mod manifest;
pub mod slot;
pub mod wire;

pub use error::FormatError;
pub use layout::{Descriptor, Layout};
pub use slot::{FreeHead, SlotWord};
