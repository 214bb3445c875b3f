//! Building request frames in place (see the parent module for the layout).

use crate::frame::{FrameHeader, FrameKind, HEADER_LEN};
use crate::op::{Op, OpCode, Tag};

use crate::CacheId;

use super::{EXECUTE_RUN, READ_LEN, RUN_HEAD};

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
