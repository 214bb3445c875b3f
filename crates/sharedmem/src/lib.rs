//! Copies between private buffers and memory that other threads access at the same
//! time.
//!
//! Cache regions are read and written by many worker threads at once, and their
//! aligned 8-byte words are also the targets of compare-and-swap and fetch-add. In
//! Rust's memory model a plain copy that races with a write is a data race, which is
//! undefined behaviour whatever the hardware would do; so is an atomic write racing
//! with an atomic access of another size. Every access to shared memory here is
//! therefore atomic (relaxed: no ordering is promised between concurrent copies,
//! only that each word read is a word some writer wrote):
//!
//! - [`words`]: memory whose covering aligned words all belong to it (a cache
//!   region). Every access is an `AtomicU64` access to an aligned word, so copies,
//!   compare-and-swap and fetch-add on the same word never mix sizes.
//! - [`bytes`]: any buffer (one Python lends, which numpy may write while the GIL is
//!   released): bytes at the unaligned edges, aligned words in between, nothing
//!   outside the buffer.

pub mod bytes;
pub mod words;
