//! Frame header: every message on a farcache connection starts with these 16 bytes.
//!
//! ```text
//! 0      4     5      6          8                16
//! | len  | kind| flags| reserved | seq            | payload (len bytes) ...
//! ```
//! `len` counts payload bytes only. `seq` is chosen by the sender of a request and echoed
//! in its response, so a client can match batches without relying on timing.

use crate::DecodeError;

pub const HEADER_LEN: usize = 16;
/// Default largest payload a peer accepts (servers take `--max-frame`).
pub const MAX_FRAME_DEFAULT: u32 = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameKind {
    Hello = 1,
    HelloAck = 2,
    Request = 3,
    Response = 4,
    Control = 5,
    ControlReply = 6,
    /// A fatal protocol error; the payload is UTF-8 text. The sender closes afterwards.
    Error = 7,
    /// Server-to-server messages for stored procedures (see the `peer` module).
    Peer = 8,
    /// The acceptor's nonce, the first frame of the handshake (see [`crate::hello`]).
    Challenge = 9,
}

impl FrameKind {
    pub fn from_u8(v: u8) -> Result<Self, DecodeError> {
        Ok(match v {
            1 => Self::Hello,
            2 => Self::HelloAck,
            3 => Self::Request,
            4 => Self::Response,
            5 => Self::Control,
            6 => Self::ControlReply,
            7 => Self::Error,
            8 => Self::Peer,
            9 => Self::Challenge,
            other => return Err(DecodeError::UnknownFrameKind(other)),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub len: u32,
    pub kind: FrameKind,
    pub flags: u8,
    pub seq: u64,
}

impl FrameHeader {
    pub fn new(kind: FrameKind, seq: u64, len: u32) -> Self {
        Self {
            len,
            kind,
            flags: 0,
            seq,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&self.len.to_le_bytes());
        b[4] = self.kind as u8;
        b[5] = self.flags;
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b
    }

    /// Decodes a header from the first 16 bytes of `buf`; returns `Ok(None)` when fewer
    /// bytes have arrived. Rejects payloads over `max_len` before anything is buffered.
    pub fn decode(buf: &[u8], max_len: u32) -> Result<Option<Self>, DecodeError> {
        if buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let kind = FrameKind::from_u8(buf[4])?;
        if buf[6] != 0 || buf[7] != 0 {
            return Err(DecodeError::ReservedBits);
        }
        if len > max_len {
            return Err(DecodeError::FrameTooLarge {
                len: len.into(),
                max: max_len.into(),
            });
        }
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&buf[8..16]);
        Ok(Some(Self {
            len,
            kind,
            flags: buf[5],
            seq: u64::from_le_bytes(seq),
        }))
    }

    /// Total bytes of header plus payload.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.len as usize
    }
}

/// Appends a complete frame to `out`.
pub fn encode_frame(out: &mut Vec<u8>, kind: FrameKind, seq: u64, payload: &[u8]) {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&FrameHeader::new(kind, seq, len).encode());
    out.extend_from_slice(payload);
}
