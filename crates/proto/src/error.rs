use thiserror::Error;

/// Why a byte sequence is not a valid frame or op. The peer that sent it gets an
/// `Error` frame carrying this text and its connection is closed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    FrameTooLarge { len: u64, max: u64 },
    #[error("unknown frame kind {0}")]
    UnknownFrameKind(u8),
    #[error("reserved header bits must be zero")]
    ReservedBits,
    #[error("truncated {what}: need {need} bytes, have {have}")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("unknown op code {0:#04x}")]
    UnknownOp(u8),
    #[error("unknown status code {0}")]
    UnknownStatus(u8),
    #[error("batch declares {declared} ops but {found} were decoded")]
    CountMismatch { declared: u32, found: u32 },
    #[error("{0} trailing bytes after the last op")]
    TrailingBytes(usize),
    #[error("bad handshake: {0}")]
    BadHello(String),
    /// A frame the peer's proven role may not send (after a handshake that succeeded).
    #[error("frame not allowed: {0}")]
    NotAllowed(String),
    #[error("bad control message: {0}")]
    BadControl(String),
    #[error("invalid utf-8 in {0}")]
    Utf8(&'static str),
    #[error("EXECUTE with an empty procedure name before any EXECUTE named one")]
    NoProcToRepeat,
    #[error("malformed EXECUTE run: {0}")]
    BadRun(String),
    #[error("malformed procedure reply: {0}")]
    BadReply(String),
}
