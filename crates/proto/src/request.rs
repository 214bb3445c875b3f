//! Request batches: `count: u32` followed by `count` ops, each `opcode: u8` + fields (LE).
//!
//! | op        | fields                                                        |
//! |-----------|---------------------------------------------------------------|
//! | READ      | cache u32, addr u64, len u32                                  |
//! | WRITE     | cache u32, addr u64, len u32, data[len]                       |
//! | CAS       | cache u32, addr u64, expected u64, new u64                    |
//! | FETCH_ADD | cache u32, addr u64, delta u64                                |
//! | EXECUTE   | cache u32, addr u64, name_len u8, name, args_len u32, args    |
//! | PING      | —                                                             |
//! | TAG       | session u64, seq u64, done_below u64, result u64 (see [`crate::op::Tag`]) |
//! | ANSWER    | addr u64, len u32, body[len] (servers only; see [`crate::op::Op::Answer`]) |
//! | EXECUTE_RUN | cache u32, name_len u8, name, args_len u32, calls u32, then `calls` × (addr u64, args[args_len]) |
//!
//! An EXECUTE with `name_len` 0 calls the procedure the batch's previous EXECUTE named
//! (batches usually call one procedure many times); as the first EXECUTE it is an error.
//!
//! EXECUTE_RUN is `calls` EXECUTEs of one procedure on one cache with arguments of one
//! length, written once: it counts as `calls` ops toward the batch's count, gets
//! `calls` replies, and decodes as that many [`crate::op::Op::Execute`]s. It exists because a
//! call's head (opcode, cache, name and argument lengths) otherwise costs as much to
//! check and decode as the rest of the call. A run of 0 calls, or of more calls than
//! the batch has ops left, is malformed; its `name_len` 0 repeats the previous name
//! like an EXECUTE's, and a named run names it for the EXECUTEs after it.
//!
//! A TAG belongs to the op after it: it is not counted in `count` and gets no reply
//! (decoded, it is an [`crate::op::Op::Tag`] before that op). A frame cannot end in one. An
//! ANSWER, between a TAG and its op, is not counted either.

mod decode;
mod encode;

pub use decode::RequestDecoder;
pub use encode::RequestEncoder;

/// Bytes of an encoded READ, and of a WRITE's head.
pub const READ_LEN: usize = 17;

/// Wire tag of an EXECUTE_RUN (see the module docs); not an [`crate::op::OpCode`]: it decodes
/// as EXECUTEs.
pub const EXECUTE_RUN: u8 = 6;

/// Bytes of an EXECUTE_RUN's head besides the name.
const RUN_HEAD: usize = 1 + 4 + 1 + 4 + 4;

#[cfg(test)]
mod tests;
