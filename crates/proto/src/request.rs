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
//! | TAG       | session u64, seq u64, done_below u64, result u64 (see [`Tag`]) |
//! | ANSWER    | addr u64, len u32, body[len] (servers only; see [`Op::Answer`]) |
//! | EXECUTE_RUN | cache u32, name_len u8, name, args_len u32, calls u32, then `calls` × (addr u64, args[args_len]) |
//!
//! An EXECUTE with `name_len` 0 calls the procedure the batch's previous EXECUTE named
//! (batches usually call one procedure many times); as the first EXECUTE it is an error.
//!
//! EXECUTE_RUN is `calls` EXECUTEs of one procedure on one cache with arguments of one
//! length, written once: it counts as `calls` ops toward the batch's count, gets
//! `calls` replies, and decodes as that many [`Op::Execute`]s. It exists because a
//! call's head (opcode, cache, name and argument lengths) otherwise costs as much to
//! check and decode as the rest of the call. A run of 0 calls, or of more calls than
//! the batch has ops left, is malformed; its `name_len` 0 repeats the previous name
//! like an EXECUTE's, and a named run names it for the EXECUTEs after it.
//!
//! A TAG belongs to the op after it: it is not counted in `count` and gets no reply
//! (decoded, it is an [`Op::Tag`] before that op). A frame cannot end in one. An
//! ANSWER, between a TAG and its op, is not counted either.

use crate::frame::{FrameHeader, FrameKind, HEADER_LEN};
use crate::op::{Op, OpCode, Tag};
use crate::wire::{Cursor, le_u32, le_u64};
use crate::{CacheId, DecodeError};

/// Bytes of an encoded READ, and of a WRITE's head.
pub const READ_LEN: usize = 17;

/// Wire tag of an EXECUTE_RUN (see the module docs); not an [`OpCode`]: it decodes
/// as EXECUTEs.
pub const EXECUTE_RUN: u8 = 6;

/// Bytes of an EXECUTE_RUN's head besides the name.
const RUN_HEAD: usize = 1 + 4 + 1 + 4 + 4;

/// Builds one request frame in place at the end of a caller-owned buffer, so a client can
/// keep appending ops without copying.
#[derive(Debug)]
pub struct RequestEncoder {
    start: usize,
    count: u32,
    seq: u64,
    /// Where the last EXECUTE's name sits in the frame (offset from `start`, length).
    last_name: Option<(usize, usize)>,
}

impl RequestEncoder {
    /// Starts a frame at the end of `out` (header patched by [`finish`](Self::finish)).
    pub fn begin(out: &mut Vec<u8>, seq: u64) -> Self {
        let start = out.len();
        out.extend_from_slice(&[0u8; HEADER_LEN + 4]);
        Self {
            start,
            count: 0,
            seq,
            last_name: None,
        }
    }

    /// The caller removed `n` bytes from the front of the buffer (already-sent frames).
    pub fn rebase(&mut self, n: usize) {
        self.start -= n;
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Payload bytes so far (including the count field).
    pub fn payload_len(&self, out: &[u8]) -> usize {
        out.len() - self.start - HEADER_LEN
    }

    #[inline]
    pub fn push(&mut self, out: &mut Vec<u8>, op: &Op<'_>) {
        // READ and WRITE share a fixed 17-byte head, written field by field in place:
        // a head built on the stack and copied in would be read back before its
        // stores retire (a store-forwarding stall per op).
        let head = |out: &mut Vec<u8>, code: OpCode, cache: u32, addr: u64, len: u32| {
            let at = out.len();
            out.extend_from_slice(&[0u8; 17]);
            let h = &mut out[at..];
            h[0] = code as u8;
            h[1..5].copy_from_slice(&cache.to_le_bytes());
            h[5..13].copy_from_slice(&addr.to_le_bytes());
            h[13..17].copy_from_slice(&len.to_le_bytes());
        };
        match *op {
            Op::Read { cache, addr, len } => {
                head(out, OpCode::Read, cache, addr, len);
                self.count += 1;
                return;
            }
            Op::Write { cache, addr, data } => {
                out.reserve(17 + data.len());
                head(out, OpCode::Write, cache, addr, data.len() as u32);
                out.extend_from_slice(data);
                self.count += 1;
                return;
            }
            Op::Execute {
                cache,
                addr,
                proc_name,
                args,
            } => {
                self.push_execute(out, cache, addr, proc_name, args);
                return;
            }
            _ => {}
        }
        out.push(op.code() as u8);
        match *op {
            Op::Read { .. } | Op::Write { .. } | Op::Execute { .. } => {}
            Op::Tag(t) => {
                for v in [t.session, t.seq, t.done_below, t.result] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                // Not an op of the batch: not counted.
                return;
            }
            Op::Answer { addr, body } => {
                out.extend_from_slice(&addr.to_le_bytes());
                out.extend_from_slice(&(body.len() as u32).to_le_bytes());
                out.extend_from_slice(body);
                return;
            }
            Op::Cas {
                cache,
                addr,
                expected,
                new,
            } => {
                out.extend_from_slice(&cache.to_le_bytes());
                out.extend_from_slice(&addr.to_le_bytes());
                out.extend_from_slice(&expected.to_le_bytes());
                out.extend_from_slice(&new.to_le_bytes());
            }
            Op::FetchAdd { cache, addr, delta } => {
                out.extend_from_slice(&cache.to_le_bytes());
                out.extend_from_slice(&addr.to_le_bytes());
                out.extend_from_slice(&delta.to_le_bytes());
            }
            Op::Ping => {}
        }
        self.count += 1;
    }

    /// Appends an EXECUTE; the same as [`push`](Self::push) with an [`Op::Execute`], for
    /// callers that have the fields at hand (a client's batched calls).
    #[inline]
    pub fn push_execute(
        &mut self,
        out: &mut Vec<u8>,
        cache: CacheId,
        addr: u64,
        proc_name: &str,
        args: &[u8],
    ) {
        // Cut at a char boundary so the name stays valid UTF-8.
        let mut end = proc_name.len().min(crate::op::MAX_PROC_NAME);
        while !proc_name.is_char_boundary(end) {
            end -= 1;
        }
        let name = &proc_name.as_bytes()[..end];
        let repeat = !name.is_empty()
            && self.last_name.is_some_and(|(at, len)| {
                out.get(self.start + at..self.start + at + len)
                    .is_some_and(|prev| crate::op::same_name(prev, name))
            });
        self.count += 1;
        if repeat && args.len() <= crate::op::SHORT_ARGS {
            // The common batched call: head and arguments in one reservation, each
            // field written in place (a head built on the stack and copied in would be
            // read back before its stores retire: a store-forwarding stall per call).
            let at = out.len();
            out.extend_from_slice(&[0u8; 18 + crate::op::SHORT_ARGS]);
            let dst = &mut out[at..];
            dst[0] = OpCode::Execute as u8;
            dst[1..5].copy_from_slice(&cache.to_le_bytes());
            dst[5..13].copy_from_slice(&addr.to_le_bytes());
            // dst[13], the name length, stays 0: the previous EXECUTE's name.
            dst[14..18].copy_from_slice(&(args.len() as u32).to_le_bytes());
            crate::op::copy_short(&mut dst[18..], args);
            out.truncate(at + 18 + args.len());
            return;
        }
        let mut h = [0u8; 18];
        h[0] = OpCode::Execute as u8;
        h[1..5].copy_from_slice(&cache.to_le_bytes());
        h[5..13].copy_from_slice(&addr.to_le_bytes());
        h[13] = if repeat { 0 } else { name.len() as u8 };
        h[14..18].copy_from_slice(&(args.len() as u32).to_le_bytes());
        out.reserve(h.len() + name.len() + args.len());
        if repeat {
            out.extend_from_slice(&h);
        } else {
            out.extend_from_slice(&h[..14]);
            self.last_name = Some((out.len() - self.start, name.len()));
            out.extend_from_slice(name);
            out.extend_from_slice(&h[14..]);
        }
        out.extend_from_slice(args);
    }

    /// Appends an EXECUTE of `proc_name` for each `(addr, args)` as one EXECUTE_RUN,
    /// every `args` exactly `args_len` bytes (a shorter or longer one is cut or
    /// zero-padded to `args_len`): the batched call path. The run names the procedure
    /// unless the previous EXECUTE did. Appends nothing and returns false when
    /// `args_len` exceeds [`SHORT_ARGS`](crate::op::SHORT_ARGS): such calls go one by
    /// one through [`push_execute`](Self::push_execute).
    #[inline]
    pub fn push_executes<'d>(
        &mut self,
        out: &mut Vec<u8>,
        cache: CacheId,
        proc_name: &str,
        args_len: u32,
        calls: impl ExactSizeIterator<Item = (u64, &'d [u8])>,
    ) -> bool {
        let len = args_len as usize;
        if len > crate::op::SHORT_ARGS {
            return false;
        }
        let n = calls.len();
        if n == 0 {
            return true;
        }
        // Cut at a char boundary so the name stays valid UTF-8 (as `push_execute`).
        let mut end = proc_name.len().min(crate::op::MAX_PROC_NAME);
        while !proc_name.is_char_boundary(end) {
            end -= 1;
        }
        let cut = &proc_name.as_bytes()[..end];
        let named = self.last_name.is_some_and(|(at, l)| {
            out.get(self.start + at..self.start + at + l)
                .is_some_and(|prev| crate::op::same_name(prev, cut))
        });
        let name = if named { &[][..] } else { cut };
        let each = 8 + len;
        let at = out.len();
        out.resize(at + RUN_HEAD + name.len() + each * n, 0);
        let h = &mut out[at..];
        h[0] = EXECUTE_RUN;
        h[1..5].copy_from_slice(&cache.to_le_bytes());
        h[5] = name.len() as u8;
        h[6..6 + name.len()].copy_from_slice(name);
        let f = 6 + name.len();
        h[f..f + 4].copy_from_slice(&args_len.to_le_bytes());
        h[f + 4..f + 8].copy_from_slice(&(n as u32).to_le_bytes());
        if !named {
            self.last_name = Some((at + 6 - self.start, name.len()));
        }
        for (c, (addr, args)) in h[RUN_HEAD + name.len()..].chunks_exact_mut(each).zip(calls) {
            c[..8].copy_from_slice(&addr.to_le_bytes());
            crate::op::copy_short(&mut c[8..], &args[..args.len().min(len)]);
        }
        self.count += n as u32;
        true
    }

    /// Appends a READ of `len` bytes at each of `addrs`, in one reservation: the
    /// batched read path, each head written in place (no per-op capacity check).
    #[inline]
    pub fn push_reads(
        &mut self,
        out: &mut Vec<u8>,
        cache: CacheId,
        len: u32,
        addrs: impl ExactSizeIterator<Item = u64>,
    ) {
        let n = addrs.len();
        let at = out.len();
        out.resize(at + READ_LEN * n, 0);
        for (h, addr) in out[at..].chunks_exact_mut(READ_LEN).zip(addrs) {
            h[0] = OpCode::Read as u8;
            h[1..5].copy_from_slice(&cache.to_le_bytes());
            h[5..13].copy_from_slice(&addr.to_le_bytes());
            h[13..17].copy_from_slice(&len.to_le_bytes());
        }
        self.count += n as u32;
    }

    /// Appends a WRITE of `data` at `addr` for each pair, every `data` exactly `len`
    /// bytes (a shorter or longer one is cut or zero-padded to `len`), in one
    /// reservation: the batched write path.
    #[inline]
    pub fn push_writes<'d>(
        &mut self,
        out: &mut Vec<u8>,
        cache: CacheId,
        len: u32,
        ops: impl ExactSizeIterator<Item = (u64, &'d [u8])>,
    ) {
        let n = ops.len();
        let each = READ_LEN + len as usize;
        let at = out.len();
        out.resize(at + each * n, 0);
        for (h, (addr, data)) in out[at..].chunks_exact_mut(each).zip(ops) {
            h[0] = OpCode::Write as u8;
            h[1..5].copy_from_slice(&cache.to_le_bytes());
            h[5..13].copy_from_slice(&addr.to_le_bytes());
            h[13..17].copy_from_slice(&len.to_le_bytes());
            let k = data.len().min(len as usize);
            h[READ_LEN..READ_LEN + k].copy_from_slice(&data[..k]);
        }
        self.count += n as u32;
    }

    /// [`push_writes`](Self::push_writes) with a TAG before each WRITE: the `k`-th
    /// write's tag is `tag` with `seq + k`.
    #[inline]
    pub fn push_tagged_writes<'d>(
        &mut self,
        out: &mut Vec<u8>,
        cache: CacheId,
        len: u32,
        tag: Tag,
        ops: impl ExactSizeIterator<Item = (u64, &'d [u8])>,
    ) {
        let n = ops.len();
        let each = Tag::LEN + READ_LEN + len as usize;
        let at = out.len();
        out.resize(at + each * n, 0);
        for (k, (h, (addr, data))) in out[at..].chunks_exact_mut(each).zip(ops).enumerate() {
            h[0] = OpCode::Tag as u8;
            h[1..9].copy_from_slice(&tag.session.to_le_bytes());
            h[9..17].copy_from_slice(&(tag.seq + k as u64).to_le_bytes());
            h[17..25].copy_from_slice(&tag.done_below.to_le_bytes());
            h[25..33].copy_from_slice(&tag.result.to_le_bytes());
            let w = &mut h[Tag::LEN..];
            w[0] = OpCode::Write as u8;
            w[1..5].copy_from_slice(&cache.to_le_bytes());
            w[5..13].copy_from_slice(&addr.to_le_bytes());
            w[13..17].copy_from_slice(&len.to_le_bytes());
            let k = data.len().min(len as usize);
            w[READ_LEN..READ_LEN + k].copy_from_slice(&data[..k]);
        }
        self.count += n as u32;
    }

    /// Appends a WRITE of `len` bytes that `fill` writes in place, for senders whose
    /// bytes live elsewhere (no staging copy).
    pub fn push_write_with(
        &mut self,
        out: &mut Vec<u8>,
        cache: CacheId,
        addr: u64,
        len: u32,
        fill: impl FnOnce(&mut [u8]),
    ) {
        let at = out.len();
        out.reserve(17 + len as usize);
        out.push(OpCode::Write as u8);
        out.extend_from_slice(&cache.to_le_bytes());
        out.extend_from_slice(&addr.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.resize(at + 17 + len as usize, 0);
        fill(&mut out[at + 17..]);
        self.count += 1;
    }

    /// Patches the header and count; the frame is then complete in `out`.
    pub fn finish(self, out: &mut [u8]) {
        let len = (out.len() - self.start - HEADER_LEN) as u32;
        let hdr = FrameHeader::new(FrameKind::Request, self.seq, len).encode();
        out[self.start..self.start + HEADER_LEN].copy_from_slice(&hdr);
        out[self.start + HEADER_LEN..self.start + HEADER_LEN + 4]
            .copy_from_slice(&self.count.to_le_bytes());
    }
}

/// Iterates the ops of a request payload. Use [`RequestDecoder::validate`] first when a
/// batch must be rejected whole rather than executed up to the first bad op.
#[derive(Debug)]
pub struct RequestDecoder<'a> {
    cur: Cursor<'a>,
    declared: u32,
    seen: u32,
    /// The last procedure name checked as UTF-8: what a `name_len` 0 refers to, and a
    /// byte compare is cheaper than validating a repeated name again.
    last_name: Option<&'a str>,
    /// The EXECUTE_RUN being decoded, while it has calls left.
    run: Option<RunLeft<'a>>,
}

/// What is left of an EXECUTE_RUN; its head checked that every call's bytes are there.
#[derive(Debug, Clone, Copy)]
struct RunLeft<'a> {
    cache: CacheId,
    name: &'a str,
    args_len: usize,
    left: u32,
}

impl<'a> RequestDecoder<'a> {
    pub fn new(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut cur = Cursor::new(payload);
        let declared = cur.u32("op count")?;
        Ok(Self {
            cur,
            declared,
            seen: 0,
            last_name: None,
            run: None,
        })
    }

    pub fn declared(&self) -> u32 {
        self.declared
    }

    /// Checks the whole payload: every op well formed, the count exact, nothing trailing.
    pub fn validate(payload: &'a [u8]) -> Result<u32, DecodeError> {
        let mut d = Self::new(payload)?;
        while let Some(op) = d.next() {
            op?;
            // The rest of a run was checked with its head: skip its calls.
            if let Some(run) = d.run.take() {
                d.cur.advance(run.left as usize * (8 + run.args_len));
                d.seen += run.left;
            }
        }
        d.finish()?;
        Ok(d.declared)
    }

    /// After iteration: errors if ops are missing or bytes are left over.
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

    /// `name` as a str, reusing the last check when the bytes are the same; an empty
    /// name is the previous EXECUTE's.
    #[inline]
    fn name(&mut self, name: &'a [u8]) -> Option<&'a str> {
        if let Some(last) = self.last_name {
            let l = last.as_bytes();
            if name.is_empty() || crate::op::same_name(name, l) {
                // Same bytes as a name already validated: reuse that &str.
                return Some(last);
            }
        }
        if name.is_empty() {
            return None;
        }
        let s = std::str::from_utf8(name).ok()?;
        self.last_name = Some(s);
        Some(s)
    }

    /// READ, WRITE and EXECUTE are almost every op: parse their fixed head with one
    /// bounds check. Anything else, or too few bytes, takes the general path.
    #[inline(always)]
    fn decode_fast(&mut self) -> Option<Op<'a>> {
        const HEAD: usize = 17;
        let r = self.cur.rest();
        if r.first() == Some(&(OpCode::Execute as u8)) {
            return self.decode_execute(r);
        }
        if r.len() < HEAD {
            return None;
        }
        let (cache, addr, len) = (le_u32(r, 1), le_u64(r, 5), le_u32(r, 13));
        match r[0] {
            x if x == OpCode::Read as u8 => {
                self.cur.advance(HEAD);
                Some(Op::Read { cache, addr, len })
            }
            x if x == OpCode::Write as u8 && r.len() - HEAD >= len as usize => {
                let data = &r[HEAD..HEAD + len as usize];
                self.cur.advance(HEAD + len as usize);
                Some(Op::Write { cache, addr, data })
            }
            x if x == OpCode::Tag as u8 && r.len() >= Tag::LEN => {
                let t = Tag {
                    session: le_u64(r, 1),
                    seq: le_u64(r, 9),
                    done_below: le_u64(r, 17),
                    result: le_u64(r, 25),
                };
                self.cur.advance(Tag::LEN);
                // A tag is part of the op after it: not counted.
                self.seen -= 1;
                Some(Op::Tag(t))
            }
            _ => None,
        }
    }

    /// EXECUTE: `opcode, cache u32, addr u64, name_len u8, name, args_len u32, args`.
    #[inline]
    fn decode_execute(&mut self, r: &'a [u8]) -> Option<Op<'a>> {
        const HEAD: usize = 14;
        let name_len = *r.get(HEAD - 1)? as usize;
        let args_at = HEAD + name_len + 4;
        if r.len() < args_at {
            return None;
        }
        let args_len = le_u32(r, args_at - 4) as usize;
        let args = r.get(args_at..args_at.checked_add(args_len)?)?;
        let proc_name = self.name(&r[HEAD..HEAD + name_len])?;
        let (cache, addr) = (le_u32(r, 1), le_u64(r, 5));
        self.cur.advance(args_at + args_len);
        Some(Op::Execute {
            cache,
            addr,
            proc_name,
            args,
        })
    }

    /// The next call of the run being decoded, if one is.
    #[inline]
    fn run_call(&mut self) -> Option<Op<'a>> {
        let run = self.run.as_mut()?;
        let stride = 8 + run.args_len;
        // The run's head checked these bytes; a miss would only end the run early.
        let Some(r) = self.cur.rest().get(..stride) else {
            self.run = None;
            return None;
        };
        let op = Op::Execute {
            cache: run.cache,
            addr: le_u64(r, 0),
            proc_name: run.name,
            args: &r[8..],
        };
        self.cur.advance(stride);
        run.left -= 1;
        if run.left == 0 {
            self.run = None;
        }
        Some(op)
    }

    /// An EXECUTE_RUN's head, then its first call. `seen` already counts that call.
    #[inline(never)]
    fn start_run(&mut self) -> Result<Op<'a>, DecodeError> {
        let c = &mut self.cur;
        c.u8("opcode")?;
        let cache = c.u32("cache")?;
        let name_len = c.u8("name len")? as usize;
        let raw = c.bytes(name_len, "proc name")?;
        let args_len = c.u32("args len")? as usize;
        let calls = c.u32("run calls")?;
        let have = c.remaining();
        let name = match (name_len, self.last_name) {
            (0, Some(last)) => last,
            (0, None) => return Err(DecodeError::NoProcToRepeat),
            _ => {
                let s = std::str::from_utf8(raw).map_err(|_| DecodeError::Utf8("proc name"))?;
                self.last_name = Some(s);
                s
            }
        };
        let left = self.declared - self.seen + 1;
        if calls == 0 || calls > left {
            return Err(DecodeError::BadRun(format!(
                "{calls} calls where the batch has {left} ops left"
            )));
        }
        let need = (calls as usize).checked_mul(8 + args_len);
        if need.is_none_or(|n| n > have) {
            return Err(DecodeError::Truncated {
                what: "run calls",
                need: need.unwrap_or(usize::MAX),
                have,
            });
        }
        self.run = Some(RunLeft {
            cache,
            name,
            args_len,
            left: calls,
        });
        self.run_call().ok_or(DecodeError::Truncated {
            what: "run calls",
            need: 8 + args_len,
            have,
        })
    }

    /// Every op kind, with full checks (the fast path above covers the common ones).
    #[inline(never)]
    fn decode_one(&mut self) -> Result<Op<'a>, DecodeError> {
        if self.cur.rest().first() == Some(&EXECUTE_RUN) {
            return self.start_run();
        }
        let c = &mut self.cur;
        let code = OpCode::from_u8(c.u8("opcode")?)?;
        Ok(match code {
            OpCode::Read => Op::Read {
                cache: c.u32("cache")?,
                addr: c.u64("addr")?,
                len: c.u32("len")?,
            },
            OpCode::Write => {
                let cache = c.u32("cache")?;
                let addr = c.u64("addr")?;
                let len = c.u32("len")?;
                Op::Write {
                    cache,
                    addr,
                    data: c.bytes(len as usize, "write data")?,
                }
            }
            OpCode::Cas => Op::Cas {
                cache: c.u32("cache")?,
                addr: c.u64("addr")?,
                expected: c.u64("expected")?,
                new: c.u64("new")?,
            },
            OpCode::FetchAdd => Op::FetchAdd {
                cache: c.u32("cache")?,
                addr: c.u64("addr")?,
                delta: c.u64("delta")?,
            },
            OpCode::Execute => {
                let cache = c.u32("cache")?;
                let addr = c.u64("addr")?;
                let name_len = c.u8("name len")? as usize;
                let raw = c.bytes(name_len, "proc name")?;
                let name = match (name_len, self.last_name) {
                    (0, Some(last)) => last,
                    (0, None) => return Err(DecodeError::NoProcToRepeat),
                    _ => {
                        let s =
                            std::str::from_utf8(raw).map_err(|_| DecodeError::Utf8("proc name"))?;
                        self.last_name = Some(s);
                        s
                    }
                };
                let args_len = c.u32("args len")? as usize;
                Op::Execute {
                    cache,
                    addr,
                    proc_name: name,
                    args: c.bytes(args_len, "args")?,
                }
            }
            OpCode::Tag => Op::Tag(Tag {
                session: c.u64("tag session")?,
                seq: c.u64("tag seq")?,
                done_below: c.u64("tag done below")?,
                result: c.u64("tag result")?,
            }),
            OpCode::Answer => {
                let addr = c.u64("answer addr")?;
                let len = c.u32("answer len")?;
                Op::Answer {
                    addr,
                    body: c.bytes(len as usize, "answer body")?,
                }
            }
            OpCode::Ping => Op::Ping,
        })
    }
}

impl<'a> Iterator for RequestDecoder<'a> {
    type Item = Result<Op<'a>, DecodeError>;

    // Always inlined: the server's op loop calls it once per op, and rustc stopped
    // inlining it when TAG made it longer (a call per op, seen in perf).
    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        if self.seen == self.declared {
            return None;
        }
        self.seen += 1;
        if let Some(op) = self.run_call() {
            return Some(Ok(op));
        }
        if let Some(op) = self.decode_fast() {
            return Some(Ok(op));
        }
        let r = self.decode_one();
        if let Ok(Op::Tag(_) | Op::Answer { .. }) = r {
            // A tag (and an answer) is part of the op after it.
            self.seen -= 1;
        }
        if r.is_err() {
            // Stop at the first error: nothing after it can be trusted.
            self.declared = self.seen;
        }
        Some(r)
    }
}

#[cfg(test)]
mod tests;
