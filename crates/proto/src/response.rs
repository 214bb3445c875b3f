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
//!
//! A DONE_RUN (tag [`DONE_RUN`] where an opcode goes, then status OK) holds the
//! outputs of consecutive EXECUTEs that finished with outputs of one length:
//! `count u32, len u32, count × output[len]`. It stands for `count` replies (at least
//! one, no more than the frame has left; outputs of at least one byte, so that every
//! reply takes bytes) and decodes as that many EXECUTE replies
//! with a [`ReplyBody::Done`] body. It exists because a batch of calls of one
//! procedure mostly answers that way, and a head per 8-byte result costs both ends
//! as much as the result.

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
    /// A finished procedure's output, from a DONE_RUN (an EXECUTE's `Data` body
    /// carries the same as [`crate::reply::TAG_DONE`] followed by the output).
    Done(&'a [u8]),
}

/// Wire tag of a DONE_RUN reply (see the module docs); not an [`OpCode`].
pub const DONE_RUN: u8 = 6;

/// Bytes of a DONE_RUN's head: tag, status, count, len.
pub const DONE_RUN_HEAD: usize = 10;

/// The DONE_RUN at the end of the frame being built, which later outputs of the same
/// length join.
#[derive(Debug, Clone, Copy)]
struct OpenRun {
    /// Offset of its head in the buffer.
    head: usize,
    len: usize,
    count: u32,
    /// Offset just past its last output: a later output joins only if it starts here.
    end: usize,
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
    run: Option<OpenRun>,
    /// Whether the last reply was OK (a server's per-op tally reads it).
    last_ok: bool,
}

impl ResponseEncoder {
    pub fn begin(out: &mut Vec<u8>, seq: u64) -> Self {
        let start = out.len();
        out.extend_from_slice(&[0u8; HEADER_LEN + 4]);
        Self {
            start,
            count: 0,
            seq,
            run: None,
            last_ok: true,
        }
    }

    /// Whether the last reply added was OK (a placeholder counts as OK).
    pub fn last_ok(&self) -> bool {
        self.last_ok
    }

    pub fn payload_len(&self, out: &[u8]) -> usize {
        out.len() - self.start - HEADER_LEN
    }

    /// A reply without a body (any status except WRONG_SERVER).
    pub fn status(&mut self, out: &mut Vec<u8>, op: OpCode, status: Status) {
        out.extend_from_slice(&[op as u8, status as u8]);
        self.count += 1;
        self.last_ok = status == Status::Ok;
    }

    /// Counts a reply that the caller will insert later at the current end of the frame
    /// (a server waiting on another server for it).
    pub fn placeholder(&mut self) {
        // The inserted reply must not land inside a DONE_RUN.
        self.run = None;
        self.count += 1;
        self.last_ok = true;
    }

    pub fn value(&mut self, out: &mut Vec<u8>, op: OpCode, value: u64) {
        out.extend_from_slice(&[op as u8, Status::Ok as u8]);
        out.extend_from_slice(&value.to_le_bytes());
        self.count += 1;
        self.last_ok = true;
    }

    /// A finished procedure's `output`: it joins the DONE_RUN that ends the frame when
    /// that run's outputs have the same length, else starts one.
    #[inline(always)]
    pub fn done(&mut self, out: &mut Vec<u8>, output: &[u8]) {
        let start = out.len();
        out.extend_from_slice(output);
        self.done_written(out, start);
    }

    /// Like [`done`](Self::done) for an output the caller has just appended to `out`
    /// at `start..` (written in place, saving a copy). Done replies cannot be taken
    /// back.
    #[inline(always)]
    pub fn done_written(&mut self, out: &mut Vec<u8>, start: usize) {
        let len = out.len() - start;
        self.count += 1;
        self.last_ok = true;
        if let Some(r) = &mut self.run
            && r.end == start
            && r.len == len
            && r.count < u32::MAX
        {
            r.count += 1;
            r.end = out.len();
            if let Some(c) = out.get_mut(r.head + 2..r.head + 6) {
                c.copy_from_slice(&r.count.to_le_bytes());
            }
            return;
        }
        self.start_run(out, start, len);
    }

    /// Puts a DONE_RUN head in front of the `len`-byte output at `start..`. An empty
    /// output is a plain EXECUTE reply instead: a run of them would be replies that
    /// take no bytes, so a reply count alone could make a decoder spin.
    #[inline(never)]
    fn start_run(&mut self, out: &mut Vec<u8>, start: usize, len: usize) {
        if len == 0 {
            self.run = None;
            out.extend_from_slice(&[OpCode::Execute as u8, Status::Ok as u8, 1, 0, 0, 0]);
            out.push(crate::reply::TAG_DONE);
            return;
        }
        let mut head = [0u8; DONE_RUN_HEAD];
        head[0] = DONE_RUN;
        head[1] = Status::Ok as u8;
        head[2..6].copy_from_slice(&1u32.to_le_bytes());
        head[6..].copy_from_slice(&(len as u32).to_le_bytes());
        // Slide the output up to make room for the head (outputs are small).
        out.extend_from_slice(&head);
        out.copy_within(start..start + len, start + DONE_RUN_HEAD);
        out[start..start + DONE_RUN_HEAD].copy_from_slice(&head);
        self.run = Some(OpenRun {
            head: start,
            len,
            count: 1,
            end: out.len(),
        });
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
        self.last_ok = true;
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
        self.last_ok = true;
    }

    /// Takes back the last reply, which starts at `at` in `out`.
    pub fn abandon_last(&mut self, out: &mut Vec<u8>, at: usize) {
        out.truncate(at);
        self.count -= 1;
    }

    pub fn wrong_server(&mut self, out: &mut Vec<u8>, op: OpCode, owner: Option<&str>) {
        out.extend_from_slice(&[op as u8, Status::WrongServer as u8]);
        let owner = owner.unwrap_or("").as_bytes();
        let owner = &owner[..owner.len().min(u16::MAX as usize)];
        out.extend_from_slice(&(owner.len() as u16).to_le_bytes());
        out.extend_from_slice(owner);
        self.count += 1;
        self.last_ok = false;
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
    /// Outputs left in the DONE_RUN being read, and their length.
    run_left: u32,
    run_len: usize,
}

/// Consecutive outputs of one DONE_RUN ([`ResponseDecoder::take_done`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoneOutputs<'a> {
    /// `count` outputs of `len` bytes, back to back.
    pub bytes: &'a [u8],
    pub len: usize,
    pub count: u32,
}

impl<'a> ResponseDecoder<'a> {
    pub fn new(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut cur = Cursor::new(payload);
        let declared = cur.u32("reply count")?;
        Ok(Self {
            cur,
            declared,
            seen: 0,
            run_left: 0,
            run_len: 0,
        })
    }

    /// Up to `max` (at least 1) next replies when they are outputs of one DONE_RUN,
    /// taken in one go; `None` (nothing taken) when the next reply is anything else.
    #[inline]
    pub fn take_done(&mut self, max: u32) -> Option<DoneOutputs<'a>> {
        if self.run_left == 0 {
            let r = self.cur.rest();
            if r.first() != Some(&DONE_RUN) || self.seen == self.declared {
                return None;
            }
            // A malformed head is left for `next` to report.
            let run = self.peek_run().ok()?;
            self.open_run(run);
        }
        let count = self.run_left.min(max.max(1));
        let len = self.run_len;
        // `open_run` checked the whole run is there.
        let bytes = self.cur.rest().get(..len * count as usize)?;
        self.cur.advance(bytes.len());
        self.run_left -= count;
        self.seen += count;
        Some(DoneOutputs { bytes, len, count })
    }

    /// The DONE_RUN whose head the cursor is at: its count and output length, checked
    /// against the replies left and the bytes there. Reads nothing.
    fn peek_run(&self) -> Result<(u32, usize), DecodeError> {
        let bad = |m: String| DecodeError::BadReply(m);
        let r = self.cur.rest();
        if r.len() < DONE_RUN_HEAD {
            return Err(DecodeError::Truncated {
                what: "done run head",
                need: DONE_RUN_HEAD,
                have: r.len(),
            });
        }
        let status = Status::from_u8(r[1])?;
        let (count, len) = (le_u32(r, 2), le_u32(r, 6) as usize);
        let left = self.declared - self.seen;
        let have = r.len() - DONE_RUN_HEAD;
        if status != Status::Ok {
            Err(bad(format!("done run with status {status:?}")))
        } else if count == 0 || count > left {
            Err(bad(format!(
                "done run of {count} outputs, {left} replies left"
            )))
        } else if len == 0 {
            Err(bad("done run of empty outputs".into()))
        } else if len.checked_mul(count as usize).is_none_or(|n| n > have) {
            Err(DecodeError::Truncated {
                what: "done run",
                need: len.saturating_mul(count as usize),
                have,
            })
        } else {
            Ok((count, len))
        }
    }

    /// Enters the DONE_RUN [`peek_run`](Self::peek_run) checked.
    fn open_run(&mut self, (count, len): (u32, usize)) {
        self.cur.advance(DONE_RUN_HEAD);
        self.run_left = count;
        self.run_len = len;
    }

    /// The next output of the DONE_RUN being read (one is left).
    #[inline]
    fn run_output(&mut self) -> Reply<'a> {
        let r = self.cur.rest();
        let (out, _) = r.split_at(self.run_len.min(r.len()));
        self.cur.advance(out.len());
        self.run_left -= 1;
        Reply {
            op: OpCode::Execute,
            status: Status::Ok,
            body: ReplyBody::Done(out),
        }
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
    #[inline(always)]
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

    /// The common replies stay inline in the caller's loop; the rest (DONE_RUN
    /// outputs, failures, malformed replies) take [`ResponseDecoder::next_slow`].
    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        if self.seen == self.declared {
            return None;
        }
        if self.run_left == 0
            && let Some(r) = self.decode_fast()
        {
            self.seen += 1;
            return Some(Ok(r));
        }
        Some(self.next_slow())
    }
}

impl<'a> ResponseDecoder<'a> {
    /// The next reply when it is not a plain successful one (a reply is left).
    #[inline(never)]
    fn next_slow(&mut self) -> Result<Reply<'a>, DecodeError> {
        if self.run_left > 0 {
            self.seen += 1;
            return Ok(self.run_output());
        }
        if self.cur.rest().first() == Some(&DONE_RUN) {
            let run = self.peek_run();
            self.seen += 1;
            return match run {
                Ok(run) => {
                    self.open_run(run);
                    Ok(self.run_output())
                }
                Err(e) => {
                    self.declared = self.seen;
                    Err(e)
                }
            };
        }
        self.seen += 1;
        let r = self.decode_one();
        if r.is_err() {
            self.declared = self.seen;
        }
        r
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

    /// Replies of a frame built by `build`, decoded one at a time.
    fn decoded(build: impl FnOnce(&mut Vec<u8>, &mut ResponseEncoder)) -> Vec<u8> {
        let mut out = Vec::new();
        let mut enc = ResponseEncoder::begin(&mut out, 1);
        build(&mut out, &mut enc);
        enc.finish(&mut out);
        out
    }

    #[test]
    fn done_outputs_of_one_length_share_a_run() {
        let out = decoded(|out, enc| {
            enc.done(out, b"aaaa");
            enc.done(out, b"bbbb");
            enc.done(out, b"cc");
            enc.status(out, OpCode::Read, Status::OutOfRange);
            enc.done(out, b"dd");
            enc.placeholder();
            enc.done(out, b"ee");
        });
        let payload = &out[HEADER_LEN..];
        // Four runs: a new length, the status and the placeholder end one each.
        assert_eq!(payload.len(), 4 + 4 * DONE_RUN_HEAD + 14 + 2);
        let mut d = ResponseDecoder::new(payload).unwrap();
        assert_eq!(d.declared(), 7);
        let got: Vec<_> = d.by_ref().take(5).map(Result::unwrap).collect();
        let bodies: Vec<_> = got.iter().map(|r| r.body).collect();
        assert_eq!(
            bodies,
            [
                ReplyBody::Done(b"aaaa"),
                ReplyBody::Done(b"bbbb"),
                ReplyBody::Done(b"cc"),
                ReplyBody::None,
                ReplyBody::Done(b"dd"),
            ]
        );
        assert!(
            got.iter()
                .all(|r| r.op != OpCode::Execute || r.status == Status::Ok)
        );
        // The placeholder's reply was never inserted: what follows is the last run.
        assert_eq!(d.next().unwrap().unwrap().body, ReplyBody::Done(b"ee"));
        assert!(matches!(d.next(), Some(Err(_))), "one reply short");
    }

    #[test]
    fn an_empty_output_is_a_plain_reply_between_runs() {
        let out = decoded(|out, enc| {
            enc.done(out, b"ab");
            enc.done(out, b"");
            enc.done(out, b"cd");
        });
        let got: Vec<_> = ResponseDecoder::new(&out[HEADER_LEN..])
            .unwrap()
            .map(|r| r.unwrap().body)
            .collect();
        assert_eq!(
            got,
            [
                ReplyBody::Done(b"ab"),
                ReplyBody::Data(&[crate::reply::TAG_DONE]),
                ReplyBody::Done(b"cd"),
            ]
        );
    }

    #[test]
    fn done_outputs_are_taken_in_slices_of_a_run() {
        let out = decoded(|out, enc| {
            for i in 0u8..5 {
                enc.done(out, &[i; 3]);
            }
            enc.data(out, OpCode::Read, b"xy");
        });
        let mut d = ResponseDecoder::new(&out[HEADER_LEN..]).unwrap();
        let a = d.take_done(2).unwrap();
        assert_eq!((a.count, a.len, a.bytes), (2, 3, &[0, 0, 0, 1, 1, 1][..]));
        assert_eq!(d.next().unwrap().unwrap().body, ReplyBody::Done(&[2; 3]));
        let b = d.take_done(9).unwrap();
        assert_eq!((b.count, b.bytes.len()), (2, 6));
        assert_eq!(d.take_done(9), None, "a read is next");
        assert_eq!(d.next().unwrap().unwrap().body, ReplyBody::Data(b"xy"));
        d.finish().unwrap();
    }

    #[test]
    fn malformed_done_runs_are_refused() {
        let frame = |count: u32, len: u32, bytes: usize, declared: u32| {
            let mut p = declared.to_le_bytes().to_vec();
            p.extend_from_slice(&[DONE_RUN, Status::Ok as u8]);
            p.extend_from_slice(&count.to_le_bytes());
            p.extend_from_slice(&len.to_le_bytes());
            p.extend(std::iter::repeat_n(7u8, bytes));
            p
        };
        for (p, why) in [
            (frame(0, 8, 0, 1), "no outputs"),
            (frame(3, 8, 24, 2), "more outputs than replies"),
            (frame(2, 8, 15, 2), "outputs cut short"),
            (frame(2, u32::MAX, 8, 2), "length overflows"),
            (frame(2, 8, 16, 2)[..10].to_vec(), "head cut short"),
            (frame(u32::MAX, 0, 0, u32::MAX), "empty outputs"),
        ] {
            let mut d = ResponseDecoder::new(&p).unwrap();
            assert_eq!(d.take_done(8), None, "{why}");
            assert!(matches!(d.next(), Some(Err(_))), "{why}");
            assert!(d.next().is_none(), "{why}: the decoder stops");
        }
        let mut bad_status = frame(1, 1, 1, 1);
        bad_status[5] = Status::Internal as u8;
        let mut d = ResponseDecoder::new(&bad_status).unwrap();
        assert!(matches!(d.next(), Some(Err(DecodeError::BadReply(_)))));
    }
}
