//! Server-to-server messages (`Peer` frames), used by stored procedures to ship an
//! invocation to the owner of the data it needs (FFlow) or to pull that data (DFlow).
//!
//! A `Peer` frame carries `count u32` and then that many messages, so everything one
//! server has for another in one event-loop turn travels in one frame:
//!
//! | tag | message  | fields                                                                  |
//! |-----|----------|-------------------------------------------------------------------------|
//! | 1   | FORWARD  | ticket u64, origin (u8 len), cache u32, addr u64, hops u32, name (u8 len), state (u32 len) |
//! | 2   | RESULT   | ticket u64, hops u32, body (u32 len): an EXECUTE reply body             |
//! | 3   | FETCH    | ticket u64, origin (u8 len), cache u32, addr u64, len u32               |
//! | 4   | FETCHED  | ticket u64, addr u64, status u8, data (u32 len)                         |
//!
//! `origin` is the data address of the server waiting for the answer; answers (RESULT,
//! FETCHED) go to it directly, not back along the path. Tickets are opaque to everyone
//! but the origin.

use crate::frame::{FrameHeader, FrameKind, HEADER_LEN};
use crate::op::MAX_PROC_NAME;
use crate::status::Status;
use crate::wire::Cursor;
use crate::{CacheId, DecodeError};

/// Most bytes one FETCH asks for: larger pulls are split by the server that pulls, so
/// answering any one FETCH is a small, bounded piece of work (a peer's large pulls
/// cannot stall the other connections of the server answering them).
pub const MAX_FETCH: u32 = 64 << 10;

const FORWARD: u8 = 1;
const RESULT: u8 = 2;
const FETCH: u8 = 3;
const FETCHED: u8 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerMsg<'a> {
    /// Continue `proc_name` at the owner of `addr` with `state` as its arguments.
    Forward {
        ticket: u64,
        origin: &'a str,
        cache: CacheId,
        addr: u64,
        hops: u32,
        proc_name: &'a str,
        state: &'a [u8],
    },
    /// The end of a forwarded invocation, for the origin's `ticket`.
    Result {
        ticket: u64,
        hops: u32,
        body: &'a [u8],
    },
    /// Send `len` bytes at `addr` to `origin`.
    Fetch {
        ticket: u64,
        origin: &'a str,
        cache: CacheId,
        addr: u64,
        len: u32,
    },
    /// The bytes a FETCH asked for (`data` is empty unless `status` is Ok).
    Fetched {
        ticket: u64,
        addr: u64,
        status: Status,
        data: &'a [u8],
    },
}

impl PeerMsg<'_> {
    pub fn ticket(&self) -> u64 {
        match *self {
            Self::Forward { ticket, .. }
            | Self::Result { ticket, .. }
            | Self::Fetch { ticket, .. }
            | Self::Fetched { ticket, .. } => ticket,
        }
    }

    /// Decodes one message encoded by [`PeerMsg::encode`] (nothing may follow it).
    pub fn decode(b: &[u8]) -> Result<PeerMsg<'_>, DecodeError> {
        let mut d = PeerDecoder {
            cur: Cursor::new(b),
            declared: 1,
            seen: 1,
        };
        let m = d.next_msg()?;
        d.finish()?;
        Ok(m)
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }

    /// Appends the message (without a frame) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Self::Forward {
                ticket,
                origin,
                cache,
                addr,
                hops,
                proc_name,
                state,
            } => {
                out.push(FORWARD);
                out.extend_from_slice(&ticket.to_le_bytes());
                short_str(out, origin);
                out.extend_from_slice(&cache.to_le_bytes());
                out.extend_from_slice(&addr.to_le_bytes());
                out.extend_from_slice(&hops.to_le_bytes());
                short_str(out, proc_name);
                long_bytes(out, state);
            }
            Self::Result { ticket, hops, body } => {
                out.push(RESULT);
                out.extend_from_slice(&ticket.to_le_bytes());
                out.extend_from_slice(&hops.to_le_bytes());
                long_bytes(out, body);
            }
            Self::Fetch {
                ticket,
                origin,
                cache,
                addr,
                len,
            } => {
                out.push(FETCH);
                out.extend_from_slice(&ticket.to_le_bytes());
                short_str(out, origin);
                out.extend_from_slice(&cache.to_le_bytes());
                out.extend_from_slice(&addr.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
            }
            Self::Fetched {
                ticket,
                addr,
                status,
                data,
            } => {
                out.push(FETCHED);
                out.extend_from_slice(&ticket.to_le_bytes());
                out.extend_from_slice(&addr.to_le_bytes());
                out.push(status as u8);
                long_bytes(out, data);
            }
        }
    }
}

/// Appends a FETCHED message whose `len` data bytes `fill` writes in place (saving the
/// copy through a separate buffer); if `fill` reports a status other than Ok, the data
/// is dropped and the message carries that status and `hint` instead.
pub fn push_fetched_with(
    out: &mut Vec<u8>,
    ticket: u64,
    addr: u64,
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> Status,
    hint: impl FnOnce() -> Option<String>,
) {
    out.push(FETCHED);
    out.extend_from_slice(&ticket.to_le_bytes());
    out.extend_from_slice(&addr.to_le_bytes());
    let status_at = out.len();
    out.push(Status::Ok as u8);
    let len_at = out.len();
    out.extend_from_slice(&(len as u32).to_le_bytes());
    let data_at = out.len();
    out.resize(data_at + len, 0);
    let status = fill(&mut out[data_at..]);
    if status != Status::Ok {
        out.truncate(data_at);
        out[status_at] = status as u8;
        let h = hint().unwrap_or_default();
        out[len_at..len_at + 4].copy_from_slice(&(h.len() as u32).to_le_bytes());
        out.extend_from_slice(h.as_bytes());
    }
}

fn short_str(out: &mut Vec<u8>, s: &str) {
    // Names and addresses are checked before they get here; clip rather than corrupt.
    let b = &s.as_bytes()[..s.len().min(MAX_PROC_NAME)];
    out.push(b.len() as u8);
    out.extend_from_slice(b);
}

fn long_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Builds one `Peer` frame at the end of `out`.
#[derive(Debug)]
pub struct PeerEncoder {
    start: usize,
    count: u32,
}

impl PeerEncoder {
    pub fn begin(out: &mut Vec<u8>) -> Self {
        let start = out.len();
        out.extend_from_slice(&[0u8; HEADER_LEN + 4]);
        Self { start, count: 0 }
    }

    pub fn push(&mut self, out: &mut Vec<u8>, msg: &PeerMsg<'_>) {
        msg.encode(out);
        self.count += 1;
    }

    /// Appends `count` messages already encoded back to back (the rest of a frame,
    /// see [`PeerDecoder::rest`]).
    pub fn push_encoded_many(&mut self, out: &mut Vec<u8>, count: u32, msgs: &[u8]) {
        out.extend_from_slice(msgs);
        self.count += count;
    }

    /// Appends a message already encoded with [`PeerMsg::encode`].
    pub fn push_encoded(&mut self, out: &mut Vec<u8>, msg: &[u8]) {
        out.extend_from_slice(msg);
        self.count += 1;
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// Bytes in the frame so far, header included.
    pub fn len(&self, out: &[u8]) -> usize {
        out.len() - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn finish(self, out: &mut [u8]) {
        let len = (out.len() - self.start - HEADER_LEN) as u32;
        let hdr = FrameHeader::new(FrameKind::Peer, 0, len).encode();
        out[self.start..self.start + HEADER_LEN].copy_from_slice(&hdr);
        out[self.start + HEADER_LEN..self.start + HEADER_LEN + 4]
            .copy_from_slice(&self.count.to_le_bytes());
    }
}

/// Iterates the messages of a `Peer` frame payload. Every malformed input is an error.
#[derive(Debug)]
pub struct PeerDecoder<'a> {
    cur: Cursor<'a>,
    declared: u32,
    seen: u32,
}

impl<'a> PeerDecoder<'a> {
    pub fn new(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut cur = Cursor::new(payload);
        let declared = cur.u32("peer message count")?;
        Ok(Self {
            cur,
            declared,
            seen: 0,
        })
    }

    /// The messages not decoded yet: how many the frame declared past those seen,
    /// and their encoded bytes.
    pub fn rest(&self) -> (u32, &'a [u8]) {
        (self.declared.saturating_sub(self.seen), self.cur.rest())
    }

    /// Decodes the whole payload once, so a bad frame is refused before any message runs.
    pub fn validate(payload: &[u8]) -> Result<(), DecodeError> {
        let mut d = PeerDecoder::new(payload)?;
        for m in d.by_ref() {
            m?;
        }
        d.finish()
    }

    fn finish(&self) -> Result<(), DecodeError> {
        if self.seen != self.declared {
            return Err(DecodeError::CountMismatch {
                declared: self.declared,
                found: self.seen,
            });
        }
        match self.cur.remaining() {
            0 => Ok(()),
            n => Err(DecodeError::TrailingBytes(n)),
        }
    }

    fn short_str(&mut self, what: &'static str) -> Result<&'a str, DecodeError> {
        let n = self.cur.u8(what)?;
        std::str::from_utf8(self.cur.bytes(n.into(), what)?).map_err(|_| DecodeError::Utf8(what))
    }

    fn long_bytes(&mut self, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let n = self.cur.u32(what)?;
        self.cur.bytes(n as usize, what)
    }

    fn next_msg(&mut self) -> Result<PeerMsg<'a>, DecodeError> {
        let tag = self.cur.u8("peer message tag")?;
        let ticket = self.cur.u64("ticket")?;
        Ok(match tag {
            FORWARD => PeerMsg::Forward {
                ticket,
                origin: self.short_str("origin")?,
                cache: self.cur.u32("cache")?,
                addr: self.cur.u64("address")?,
                hops: self.cur.u32("hops")?,
                proc_name: self.short_str("procedure name")?,
                state: self.long_bytes("state")?,
            },
            RESULT => PeerMsg::Result {
                ticket,
                hops: self.cur.u32("hops")?,
                body: self.long_bytes("result")?,
            },
            FETCH => PeerMsg::Fetch {
                ticket,
                origin: self.short_str("origin")?,
                cache: self.cur.u32("cache")?,
                addr: self.cur.u64("address")?,
                len: self.cur.u32("length")?,
            },
            FETCHED => PeerMsg::Fetched {
                ticket,
                addr: self.cur.u64("address")?,
                status: Status::from_u8(self.cur.u8("status")?)?,
                data: self.long_bytes("data")?,
            },
            other => return Err(DecodeError::UnknownOp(other)),
        })
    }
}

impl<'a> Iterator for PeerDecoder<'a> {
    type Item = Result<PeerMsg<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.seen >= self.declared {
            return None;
        }
        self.seen += 1;
        match self.next_msg() {
            Ok(m) => Some(Ok(m)),
            Err(e) => {
                self.seen = self.declared;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<PeerMsg<'static>> {
        vec![
            PeerMsg::Forward {
                ticket: 1,
                origin: "127.0.0.1:7000",
                cache: 3,
                addr: 1 << 40,
                hops: 2,
                proc_name: "chase",
                state: b"state",
            },
            PeerMsg::Result {
                ticket: u64::MAX,
                hops: 7,
                body: &[0, 1, 2],
            },
            PeerMsg::Fetch {
                ticket: 9,
                origin: "h:1",
                cache: 1,
                addr: 4096,
                len: 16,
            },
            PeerMsg::Fetched {
                ticket: 9,
                addr: 4096,
                status: Status::Ok,
                data: &[7; 16],
            },
        ]
    }

    #[test]
    fn fetched_written_in_place_matches_the_encoder() {
        let mut a = Vec::new();
        push_fetched_with(
            &mut a,
            9,
            64,
            4,
            |d| {
                d.copy_from_slice(b"abcd");
                Status::Ok
            },
            || None,
        );
        let want = PeerMsg::Fetched {
            ticket: 9,
            addr: 64,
            status: Status::Ok,
            data: b"abcd",
        };
        assert_eq!(a, want.to_vec());
        let mut b = Vec::new();
        push_fetched_with(
            &mut b,
            9,
            64,
            4,
            |_| Status::WrongServer,
            || Some("h:1".into()),
        );
        let want = PeerMsg::Fetched {
            ticket: 9,
            addr: 64,
            status: Status::WrongServer,
            data: b"h:1",
        };
        assert_eq!(b, want.to_vec());
    }

    #[test]
    fn roundtrip_and_truncation() {
        let msgs = all();
        let mut out = Vec::new();
        let mut e = PeerEncoder::begin(&mut out);
        for m in &msgs {
            e.push(&mut out, m);
        }
        e.finish(&mut out);
        let hdr = FrameHeader::decode(&out, u32::MAX).unwrap().unwrap();
        assert_eq!(hdr.kind, FrameKind::Peer);
        let payload = &out[HEADER_LEN..];
        PeerDecoder::validate(payload).unwrap();
        let got: Vec<_> = PeerDecoder::new(payload)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(got, msgs);
        for m in &msgs {
            assert_eq!(PeerMsg::decode(&m.to_vec()), Ok(*m));
        }
        for cut in 0..payload.len() {
            assert!(PeerDecoder::validate(&payload[..cut]).is_err(), "cut {cut}");
        }
        let mut extra = payload.to_vec();
        extra.push(0);
        assert!(PeerDecoder::validate(&extra).is_err());
        let mut bad = payload.to_vec();
        bad[4] = 99;
        assert!(PeerDecoder::validate(&bad).is_err());
    }
}
