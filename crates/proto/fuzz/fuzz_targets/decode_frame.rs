//! Feeds arbitrary bytes to every wire-protocol decoder: frame headers (as a stream of
//! frames), request batches, response batches, the handshake and control JSON.
//!
//! Run with `cargo +nightly fuzz run decode_frame` from `crates/proto`. The decode
//! entry point lives in `../decode_all.rs`, which the `codec_props` property tests also
//! run on stable, so it is built and exercised by the normal test suite.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../decode_all.rs"]
mod decode_all;

fuzz_target!(|data: &[u8]| {
    decode_all::decode_all(data);
});
