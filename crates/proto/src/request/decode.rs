//! Iterating and validating the ops of a request payload.

use crate::op::{Op, OpCode, Tag};
use crate::wire::{Cursor, le_u32, le_u64};
use crate::{CacheId, DecodeError};

use super::EXECUTE_RUN;

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
