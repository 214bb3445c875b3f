//! Per-op status codes. The numbers are part of the protocol and never reused.

use crate::DecodeError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Status {
    Ok = 0,
    /// The byte range lies outside the cache's capacity.
    OutOfRange = 1,
    /// This server holds no cache with that id (deleted, or never placed here).
    NoSuchCache = 2,
    /// The region is not on this server; the reply may name the owner.
    WrongServer = 3,
    /// The op or its reply would exceed the frame or op size limit.
    TooLarge = 4,
    /// Atomic ops need an 8-byte aligned address.
    Misaligned = 5,
    /// The op is known but not supported by this server (e.g. EXECUTE before sprocs).
    Unsupported = 6,
    /// The server cannot allocate the memory the request needs.
    NoMemory = 7,
    /// A bug or an unexpected condition on the server.
    Internal = 8,
    /// EXECUTE named a procedure this server has not loaded.
    NoSuchProc = 9,
    /// The connection's token does not allow this op on this cache (another cache, or
    /// a write with a read-only token).
    Forbidden = 10,
    /// The region is being handed to another server and takes no writes for a few
    /// milliseconds; send the op again shortly (clients do this themselves).
    Paused = 11,
    /// The bytes were lost with a server that held the only copy; they read as this
    /// until the range is overwritten or the loss is acknowledged (`clear_lost`).
    DataLost = 12,
    /// The cache is read-only (it was loaded from a file): writes and atomics are
    /// refused.
    ReadOnly = 13,
    /// The server holds no lease from the manager (it is cut off from it, or was
    /// declared dead and has not rejoined): it neither reads nor writes any region.
    /// Nothing was applied; clients ask the manager for the region's owner and retry.
    NotServing = 14,
}

impl Status {
    pub fn from_u8(v: u8) -> Result<Self, DecodeError> {
        Ok(match v {
            0 => Self::Ok,
            1 => Self::OutOfRange,
            2 => Self::NoSuchCache,
            3 => Self::WrongServer,
            4 => Self::TooLarge,
            5 => Self::Misaligned,
            6 => Self::Unsupported,
            7 => Self::NoMemory,
            8 => Self::Internal,
            9 => Self::NoSuchProc,
            10 => Self::Forbidden,
            11 => Self::Paused,
            12 => Self::DataLost,
            13 => Self::ReadOnly,
            14 => Self::NotServing,
            other => return Err(DecodeError::UnknownStatus(other)),
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::OutOfRange => "address out of range",
            Self::NoSuchCache => "no such cache",
            Self::WrongServer => "wrong server",
            Self::TooLarge => "too large",
            Self::Misaligned => "misaligned atomic",
            Self::Unsupported => "unsupported op",
            Self::NoMemory => "out of memory",
            Self::Internal => "internal server error",
            Self::NoSuchProc => "no such procedure",
            Self::Forbidden => "not permitted by this connection's token",
            Self::Paused => "region paused for migration, retry",
            Self::DataLost => "data lost with a failed server",
            Self::ReadOnly => "the cache is read-only",
            Self::NotServing => "server holds no lease from the manager, retry",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.as_str(), *self as u8)
    }
}
