//! A Redis-protocol front end for a farcache keyed store: redis-cli, redis-benchmark
//! and redis-py work against it unchanged.
//!
//! It speaks RESP2 and RESP3 (`HELLO 3`), maps the string commands onto
//! [`farcache_store::Store`] (one store per front end, database 0), and runs stored
//! procedures with `FCALL`. Pipelined runs of `GET` and `SET` become one multi-get
//! or multi-put, so a pipeline costs one round trip per farcache server.
//!
//! Writes through a front end hold a lock per key stripe, so its read-modify-write
//! commands (`INCR`, `APPEND`, `SETRANGE`, `EXPIRE`, `SET ... GET`) are atomic among
//! its clients. Native farcache clients writing the same keys at the same moment are
//! not serialised with them (see docs/resp.md for why one front end per store).
//!
//! Layout: [`parse`] (requests), [`reply`] (RESP2/RESP3 replies), [`server`]
//! (listener, connection cap), [`shared`] (store, counters, key-stripe locks), [`session`] (a connection's state), `worker`
//! (the event loop batching across connections), `offload` (the pool for commands too big for a loop), `cmd` (the command table and handlers by family), `script` (Lua scripts: cache and interpreter), [`auth`] (tokens).

pub mod auth;
mod cmd;
mod edit;
pub mod error;
mod offload;
pub mod parse;
pub mod pattern;
pub mod reply;
mod script;
pub mod server;
pub mod session;
pub mod shared;
mod worker;

pub use auth::{Access, AuthPolicy};
pub use error::RespError;
pub use server::{Frontend, FrontendConfig};
