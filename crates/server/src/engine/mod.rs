//! The storage engine: region memory and everything that runs against it on one
//! server, with no sockets and no other servers in sight.
//!
//! - [`region`]: one region's memory, its write gate and its lost ranges;
//! - [`store`]: the (cache, region) → memory table every worker reads without locks;
//! - [`exec`]: runs one request batch against the store (reads, writes, atomics,
//!   procedure calls), recording what a backup must receive;
//! - [`step`] and [`memory`]: one run of a procedure and the memory it sees (local
//!   regions plus bytes pulled from other servers);
//! - [`writing`]: the memory a writing procedure (the store's `kv_put`) reads and
//!   changes, each change noted for backups and migrations;
//! - [`dirty`]: the chunks written while a region is being copied away;
//! - [`lost`]: byte ranges a failure lost, refused until rewritten;
//! - [`procs`]: the procedures this server can run;
//! - [`completions`]: answers of tagged ops, so a retried op is applied once;
//! - [`inproc`]: batches through [`exec`] in this process (the benchmark's ceiling).
//!
//! Layering: nothing here names the runtime or the cluster layer; both use it.

pub mod completions;
pub mod dirty;
pub mod exec;
pub mod inproc;
pub mod lost;
pub mod memory;
pub mod procs;
pub mod region;
pub mod step;
pub mod store;
pub mod writing;
