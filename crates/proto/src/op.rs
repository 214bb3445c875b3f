//! Data-path operations carried in request batches.

use crate::{CacheId, DecodeError};

/// Largest payload of one READ/WRITE/EXECUTE. Clients split larger ranges transparently.
pub const MAX_OP_BYTES: u32 = 1 << 20;
/// Longest stored-procedure name accepted in an EXECUTE.
pub const MAX_PROC_NAME: usize = 255;

/// Whether two procedure names are the same bytes. Names are short and compared up to
/// three times per EXECUTE on the client: names of 4 to 16 bytes are compared as two
/// overlapping words each side, without a loop or a `memcmp` call.
#[inline(always)]
pub fn same_name(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    #[inline(always)]
    fn word<const W: usize>(s: &[u8], at: usize) -> [u8; W] {
        let mut w = [0u8; W];
        w.copy_from_slice(&s[at..at + W]);
        w
    }
    match n {
        8..=16 => word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8),
        4..=7 => word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4),
        0..=3 => a.iter().zip(b).all(|(x, y)| x == y),
        _ => a == b,
    }
}

/// Arguments up to this long are short: copied with fixed-size moves, not a `memcpy`.
pub const SHORT_ARGS: usize = 32;

/// Copies `src` (at most [`SHORT_ARGS`] bytes) to the start of `dst` (at least as long).
/// From 4 bytes on, two overlapping fixed-size copies cover the range: a `memcpy` call
/// costs more than such a copy.
#[inline(always)]
pub fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n >= 16 {
        dst[..16].copy_from_slice(&src[..16]);
        dst[n - 16..n].copy_from_slice(&src[n - 16..]);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..n].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..n].copy_from_slice(&src[n - 4..]);
    } else {
        dst[..n].copy_from_slice(src);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum OpCode {
    Read = 1,
    Write = 2,
    Cas = 3,
    FetchAdd = 4,
    /// Reserved for stored procedures; servers without them answer `Unsupported`.
    Execute = 5,
    /// Names the next WRITE, CAS or FETCH_ADD for exactly-once retries ([`Tag`]); not
    /// counted in the batch and never answered.
    Tag = 7,
    /// The recorded reply of the tagged EXECUTE a server passes on with its writes
    /// (owner to backup, or in a region's live copy); not counted, never answered.
    Answer = 8,
    Ping = 0x10,
}

impl OpCode {
    pub fn from_u8(v: u8) -> Result<Self, DecodeError> {
        Ok(match v {
            1 => Self::Read,
            2 => Self::Write,
            3 => Self::Cas,
            4 => Self::FetchAdd,
            5 => Self::Execute,
            7 => Self::Tag,
            8 => Self::Answer,
            0x10 => Self::Ping,
            other => return Err(DecodeError::UnknownOp(other)),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Cas => "cas",
            Self::FetchAdd => "fetch_add",
            Self::Execute => "execute",
            Self::Tag => "tag",
            Self::Answer => "answer",
            Self::Ping => "ping",
        }
    }

    pub const ALL: [OpCode; 8] = [
        Self::Read,
        Self::Write,
        Self::Cas,
        Self::FetchAdd,
        Self::Execute,
        Self::Tag,
        Self::Answer,
        Self::Ping,
    ];
}

/// One decoded op; byte payloads borrow from the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op<'a> {
    Read {
        cache: CacheId,
        addr: u64,
        len: u32,
    },
    Write {
        cache: CacheId,
        addr: u64,
        data: &'a [u8],
    },
    /// Atomically: if the 8 bytes at `addr` equal `expected`, store `new`. Replies the old value.
    Cas {
        cache: CacheId,
        addr: u64,
        expected: u64,
        new: u64,
    },
    /// Atomically add `delta` (wrapping) to the 8 bytes at `addr`. Replies the old value.
    FetchAdd {
        cache: CacheId,
        addr: u64,
        delta: u64,
    },
    Execute {
        cache: CacheId,
        addr: u64,
        proc_name: &'a str,
        args: &'a [u8],
    },
    /// Applies to the op after it (see [`Tag`]).
    Tag(Tag),
    /// From a server only, between a TAG and the op it names: the reply body a
    /// tagged writing EXECUTE gave at `addr` (the EXECUTE's address, which the
    /// writes that follow need not share), so the receiver answers its retries
    /// from a record too.
    Answer {
        addr: u64,
        body: &'a [u8],
    },
    Ping,
}

/// A request id on a WRITE, CAS or FETCH_ADD to a region with backups, so that an op
/// sent again after its owner failed is applied once (the completion records of
/// RIFL, Lee et al., SOSP 2015): the owner and its backups remember each tagged op's
/// result by `(session, seq, addr)`, and answer a repeat with it instead of running
/// the op again.
///
/// Wire: `TAG session u64, seq u64, done_below u64, result u64` before the op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tag {
    /// Picked at random by each client lane.
    pub session: u64,
    /// The op's number in its session; the parts of a split op share it (their
    /// addresses differ).
    pub seq: u64,
    /// Every op of the session numbered below this has its answer: its record can go.
    pub done_below: u64,
    /// From an owner to its backups: the op's answer (the old value of a CAS or
    /// FETCH_ADD). Clients send 0.
    pub result: u64,
}

impl Tag {
    /// Bytes of an encoded TAG, opcode included.
    pub const LEN: usize = 1 + 8 * 4;
}

impl Op<'_> {
    pub fn code(&self) -> OpCode {
        match self {
            Op::Read { .. } => OpCode::Read,
            Op::Write { .. } => OpCode::Write,
            Op::Cas { .. } => OpCode::Cas,
            Op::FetchAdd { .. } => OpCode::FetchAdd,
            Op::Execute { .. } => OpCode::Execute,
            Op::Tag(_) => OpCode::Tag,
            Op::Answer { .. } => OpCode::Answer,
            Op::Ping => OpCode::Ping,
        }
    }

    /// Bytes of an ANSWER besides its body.
    pub const ANSWER_HEAD: usize = 1 + 8 + 4;

    /// Bytes of an EXECUTE besides its name and arguments.
    pub const EXECUTE_HEAD: usize = 1 + 4 + 8 + 1 + 4;

    /// Bytes this op occupies in a request frame.
    pub fn encoded_len(&self) -> usize {
        match self {
            Op::Read { .. } => 1 + 4 + 8 + 4,
            Op::Write { data, .. } => 1 + 4 + 8 + 4 + data.len(),
            Op::Cas { .. } => 1 + 4 + 8 + 8 + 8,
            Op::FetchAdd { .. } => 1 + 4 + 8 + 8,
            Op::Execute {
                proc_name, args, ..
            } => Self::EXECUTE_HEAD + proc_name.len() + args.len(),
            Op::Tag(_) => Tag::LEN,
            Op::Answer { body, .. } => Self::ANSWER_HEAD + body.len(),
            Op::Ping => 1,
        }
    }
}
