//! Data-path operations carried in request batches.

use crate::{CacheId, DecodeError};

/// Largest payload of one READ/WRITE/EXECUTE. Clients split larger ranges transparently.
pub const MAX_OP_BYTES: u32 = 1 << 20;
/// Longest stored-procedure name accepted in an EXECUTE.
pub const MAX_PROC_NAME: usize = 255;

/// Whether two procedure names are the same bytes. Names are short and compared once
/// per EXECUTE: an inlined loop beats a `memcmp` call.
#[inline]
pub fn same_name(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
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
            Self::Ping => "ping",
        }
    }

    pub const ALL: [OpCode; 6] = [
        Self::Read,
        Self::Write,
        Self::Cas,
        Self::FetchAdd,
        Self::Execute,
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
    Ping,
}

impl Op<'_> {
    pub fn code(&self) -> OpCode {
        match self {
            Op::Read { .. } => OpCode::Read,
            Op::Write { .. } => OpCode::Write,
            Op::Cas { .. } => OpCode::Cas,
            Op::FetchAdd { .. } => OpCode::FetchAdd,
            Op::Execute { .. } => OpCode::Execute,
            Op::Ping => OpCode::Ping,
        }
    }

    /// Bytes this op occupies in a request frame.
    pub fn encoded_len(&self) -> usize {
        match self {
            Op::Read { .. } => 1 + 4 + 8 + 4,
            Op::Write { data, .. } => 1 + 4 + 8 + 4 + data.len(),
            Op::Cas { .. } => 1 + 4 + 8 + 8 + 8,
            Op::FetchAdd { .. } => 1 + 4 + 8 + 8,
            Op::Execute {
                proc_name, args, ..
            } => 1 + 4 + 8 + 1 + proc_name.len() + 4 + args.len(),
            Op::Ping => 1,
        }
    }
}
