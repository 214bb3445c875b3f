//! The farcache wire protocol.
//!
//! Everything here is pure encoding and decoding over byte slices: no sockets, no threads.
//! A connection carries length-prefixed [frames](frame). After an authenticated
//! [`hello`] exchange ([`auth`]: cluster secret or cache token, challenge–response) the
//! client sends *request batches* ([`request`]) and the server answers each with one
//! *response batch* ([`response`]) carrying one reply per op, in order. Control-plane
//! messages (manager ↔ server ↔ client) ride in `Control` frames as JSON ([`control`]).
//!
//! Decoding never panics on hostile input: every malformed byte sequence becomes a
//! [`DecodeError`].

pub mod auth;
pub mod blocking;
pub mod control;
pub mod elastic;
pub mod error;
pub mod frame;
pub mod hello;
pub mod op;
pub mod peer;
pub mod reply;
pub mod request;
pub mod response;
pub mod slo;
pub mod status;
mod wire;

pub use auth::{Access, Authority, CacheToken, ClusterSecret, Credential, Rights};
pub use error::DecodeError;
pub use frame::{FrameHeader, FrameKind, HEADER_LEN, MAX_FRAME_DEFAULT};
pub use hello::{Challenge, Claim, Hello, HelloAck, PROTOCOL_VERSION, Role};
pub use op::{MAX_OP_BYTES, Op, OpCode, Tag};
pub use request::{RequestDecoder, RequestEncoder};
pub use response::{DoneOutputs, Reply, ReplyBody, ResponseDecoder, ResponseEncoder};
pub use status::Status;

/// Identifies a cache cluster-wide (assigned by the manager).
pub type CacheId = u32;
/// Identifies a server cluster-wide (assigned by the manager).
pub type ServerId = u32;
