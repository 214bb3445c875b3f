//! Response batches: `count: u32` followed by one reply per request op, in order.
//! A reply is `opcode: u8, status: u8` and a body fixed by the pair:
//!
//! | reply                         | body                         |
//! |-------------------------------|------------------------------|
//! | READ ok, EXECUTE ok           | len u32, data[len]           |
//! | CAS ok, FETCH_ADD ok          | old value u64                |
//! | WRITE ok, PING ok             | —                            |
//! | any op, WRONG_SERVER          | owner_len u16, owner address |
//! | any other status              | —                            |

use crate::DecodeError;
use crate::frame::{FrameHeader, FrameKind, HEADER_LEN};
use crate::op::OpCode;
use crate::status::Status;
use crate::wire::{Cursor, le_u32};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyBody<'a> {
    None,
    Data(&'a [u8]),
    Value(u64),
    /// The owner's address when the answering server knows it.
    Owner(Option<&'a str>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply<'a> {
    pub op: OpCode,
    pub status: Status,
    pub body: ReplyBody<'a>,
}

/// Builds one response frame at the end of a caller-owned buffer (the server's write buffer).
#[derive(Debug)]
pub struct ResponseEncoder {
    start: usize,
    count: u32,
    seq: u64,
}

impl ResponseEncoder {
    pub fn begin(out: &mut Vec<u8>, seq: u64) -> Self {
        let start = out.len();
        out.extend_from_slice(&[0u8; HEADER_LEN + 4]);
        Self {
            start,
            count: 0,
            seq,
        }
    }

    pub fn payload_len(&self, out: &[u8]) -> usize {
        out.len() - self.start - HEADER_LEN
    }

    /// A reply without a body (any status except WRONG_SERVER).
    pub fn status(&mut self, out: &mut Vec<u8>, op: OpCode, status: Status) {
        out.extend_from_slice(&[op as u8, status as u8]);
        self.count += 1;
    }

    /// Counts a reply that the caller will insert later at the current end of the frame
    /// (a server waiting on another server for it).
    pub fn placeholder(&mut self) {
        self.count += 1;
    }

    pub fn value(&mut self, out: &mut Vec<u8>, op: OpCode, value: u64) {
        out.extend_from_slice(&[op as u8, Status::Ok as u8]);
        out.extend_from_slice(&value.to_le_bytes());
        self.count += 1;
    }

    pub fn data(&mut self, out: &mut Vec<u8>, op: OpCode, data: &[u8]) {
        self.data_with(out, op, data.len(), |dst| dst.copy_from_slice(data));
    }

    /// A data reply of `len` bytes written in place by `fill` (saves a copy on the server).
    pub fn data_with(
        &mut self,
        out: &mut Vec<u8>,
        op: OpCode,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) {
        let mut head = [op as u8, Status::Ok as u8, 0, 0, 0, 0];
        head[2..].copy_from_slice(&(len as u32).to_le_bytes());
        out.reserve(head.len() + len);
        out.extend_from_slice(&head);
        let at = out.len();
        out.resize(at + len, 0);
        fill(&mut out[at..]);
        self.count += 1;
    }

    /// The head of a data reply of exactly `len` bytes, which the caller appends to
    /// `out` right after (bytes the encoder cannot borrow as a slice, such as memory
    /// other threads may write: no zeroed placeholder is written first). Room for the
    /// head and `len` bytes is reserved. To take the reply back, as for any reply:
    /// [`ResponseEncoder::abandon_last`] with `out.len()` from before this call.
    #[inline]
    pub fn data_head(&mut self, out: &mut Vec<u8>, op: OpCode, len: usize) {
        out.reserve(6 + len);
        out.extend_from_slice(&[op as u8, Status::Ok as u8]);
        out.extend_from_slice(&(len as u32).to_le_bytes());
        self.count += 1;
    }

    /// Starts a data reply whose length is not known yet: append the bytes to `out`,
    /// then call [`ResponseEncoder::close_data`] with the returned mark.
    #[inline]
    pub fn open_data(&mut self, out: &mut Vec<u8>, op: OpCode) -> usize {
        out.extend_from_slice(&[op as u8, Status::Ok as u8, 0, 0, 0, 0]);
        self.count += 1;
        out.len()
    }

    /// Ends the data reply begun at `mark`, writing its length.
    #[inline]
    pub fn close_data(&mut self, out: &mut [u8], mark: usize) {
        let len = (out.len() - mark) as u32;
        out[mark - 4..mark].copy_from_slice(&len.to_le_bytes());
    }

    /// Takes back the last reply, which starts at `at` in `out`.
    pub fn abandon_last(&mut self, out: &mut Vec<u8>, at: usize) {
        out.truncate(at);
        self.count -= 1;
    }

    /// Takes back the data reply begun at `mark`, so another reply can replace it.
    pub fn abandon_data(&mut self, out: &mut Vec<u8>, mark: usize) {
        out.truncate(mark - 6);
        self.count -= 1;
    }

    pub fn wrong_server(&mut self, out: &mut Vec<u8>, op: OpCode, owner: Option<&str>) {
        out.extend_from_slice(&[op as u8, Status::WrongServer as u8]);
        let owner = owner.unwrap_or("").as_bytes();
        let owner = &owner[..owner.len().min(u16::MAX as usize)];
        out.extend_from_slice(&(owner.len() as u16).to_le_bytes());
        out.extend_from_slice(owner);
        self.count += 1;
    }

    pub fn finish(self, out: &mut [u8]) {
        let len = (out.len() - self.start - HEADER_LEN) as u32;
        let hdr = FrameHeader::new(FrameKind::Response, self.seq, len).encode();
        out[self.start..self.start + HEADER_LEN].copy_from_slice(&hdr);
        out[self.start + HEADER_LEN..self.start + HEADER_LEN + 4]
            .copy_from_slice(&self.count.to_le_bytes());
    }
}

/// One reply on its own, for a place a frame left with [`ResponseEncoder::placeholder`]:
/// a data reply carrying `data`, or `TooLarge` if it would take the frame past
/// `room` bytes.
pub fn late_data_reply(op: OpCode, data: &[u8], room: usize) -> Vec<u8> {
    if data.len() + 6 > room {
        return vec![op as u8, Status::TooLarge as u8];
    }
    let mut r = Vec::with_capacity(6 + data.len());
    r.extend_from_slice(&[op as u8, Status::Ok as u8]);
    r.extend_from_slice(&(data.len() as u32).to_le_bytes());
    r.extend_from_slice(data);
    r
}

#[derive(Debug)]
pub struct ResponseDecoder<'a> {
    cur: Cursor<'a>,
    declared: u32,
    seen: u32,
}

impl<'a> ResponseDecoder<'a> {
    pub fn new(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut cur = Cursor::new(payload);
        let declared = cur.u32("reply count")?;
        Ok(Self {
            cur,
            declared,
            seen: 0,
        })
    }

    pub fn declared(&self) -> u32 {
        self.declared
    }

    /// Offset of the next unread byte within the payload.
    pub fn position(&self) -> usize {
        self.cur.position()
    }

    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.seen != self.declared {
            return Err(DecodeError::CountMismatch {
                declared: self.declared,
                found: self.seen,
            });
        }
        if self.cur.remaining() != 0 {
            return Err(DecodeError::TrailingBytes(self.cur.remaining()));
        }
        Ok(())
    }

    /// Successful READ, WRITE and EXECUTE replies, the common case, with one bounds
    /// check.
    #[inline]
    fn decode_fast(&mut self) -> Option<Reply<'a>> {
        let r = self.cur.rest();
        if r.len() < 2 || r[1] != Status::Ok as u8 {
            return None;
        }
        let op = match r[0] {
            x if x == OpCode::Write as u8 => {
                self.cur.advance(2);
                return Some(Reply {
                    op: OpCode::Write,
                    status: Status::Ok,
                    body: ReplyBody::None,
                });
            }
            x if x == OpCode::Read as u8 => OpCode::Read,
            x if x == OpCode::Execute as u8 => OpCode::Execute,
            _ => return None,
        };
        if r.len() < 6 {
            return None;
        }
        let len = le_u32(r, 2) as usize;
        let data = r.get(6..6usize.checked_add(len)?)?;
        self.cur.advance(6 + len);
        Some(Reply {
            op,
            status: Status::Ok,
            body: ReplyBody::Data(data),
        })
    }

    /// Every op kind, with full checks (the fast path above covers the common ones).
    #[inline(never)]
    fn decode_one(&mut self) -> Result<Reply<'a>, DecodeError> {
        let c = &mut self.cur;
        let op = OpCode::from_u8(c.u8("reply opcode")?)?;
        let status = Status::from_u8(c.u8("status")?)?;
        let body = match (status, op) {
            (Status::Ok, OpCode::Read | OpCode::Execute) => {
                let len = c.u32("data len")? as usize;
                ReplyBody::Data(c.bytes(len, "reply data")?)
            }
            (Status::Ok, OpCode::Cas | OpCode::FetchAdd) => ReplyBody::Value(c.u64("value")?),
            (Status::WrongServer, _) => {
                let len = c.u16("owner len")? as usize;
                let s = std::str::from_utf8(c.bytes(len, "owner")?)
                    .map_err(|_| DecodeError::Utf8("owner"))?;
                ReplyBody::Owner(if s.is_empty() { None } else { Some(s) })
            }
            _ => ReplyBody::None,
        };
        Ok(Reply { op, status, body })
    }
}

impl<'a> Iterator for ResponseDecoder<'a> {
    type Item = Result<Reply<'a>, DecodeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.seen == self.declared {
            return None;
        }
        self.seen += 1;
        if let Some(r) = self.decode_fast() {
            return Some(Ok(r));
        }
        let r = self.decode_one();
        if r.is_err() {
            self.declared = self.seen;
        }
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_replies() {
        let mut out = Vec::new();
        let mut enc = ResponseEncoder::begin(&mut out, 9);
        enc.data(&mut out, OpCode::Read, b"abc");
        enc.status(&mut out, OpCode::Write, Status::Ok);
        enc.value(&mut out, OpCode::Cas, 42);
        enc.wrong_server(&mut out, OpCode::Read, Some("127.0.0.1:7"));
        enc.wrong_server(&mut out, OpCode::Write, None);
        enc.status(&mut out, OpCode::Read, Status::OutOfRange);
        enc.data_head(&mut out, OpCode::Read, 4);
        out.extend_from_slice(b"wxyz");
        let at = out.len();
        enc.data_head(&mut out, OpCode::Execute, 2);
        enc.abandon_last(&mut out, at);
        enc.finish(&mut out);
        let hdr = FrameHeader::decode(&out, u32::MAX).unwrap().unwrap();
        assert_eq!((hdr.kind, hdr.seq), (FrameKind::Response, 9));
        let mut d = ResponseDecoder::new(&out[HEADER_LEN..]).unwrap();
        let got: Vec<_> = d.by_ref().map(Result::unwrap).collect();
        d.finish().unwrap();
        assert_eq!(got[0].body, ReplyBody::Data(b"abc"));
        assert_eq!(got[1].status, Status::Ok);
        assert_eq!(got[2].body, ReplyBody::Value(42));
        assert_eq!(got[3].body, ReplyBody::Owner(Some("127.0.0.1:7")));
        assert_eq!(got[4].body, ReplyBody::Owner(None));
        assert_eq!(got[5].status, Status::OutOfRange);
        assert_eq!(got[6].body, ReplyBody::Data(b"wxyz"));
        assert_eq!(got.len(), 7);
    }
}
