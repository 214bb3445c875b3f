//! Runs one request batch against the region table, appending the response frame.

use std::mem::MaybeUninit;

use farcache_proto::control::region_split;
use farcache_proto::op::MAX_OP_BYTES;
use farcache_proto::reply;
use farcache_proto::response::DONE_RUN_HEAD;
use farcache_proto::{
    Access, CacheId, DecodeError, Op, OpCode, RequestDecoder, ResponseEncoder, Status, Tag,
};

use crate::engine::completions::{Completions, Record};

use crate::engine::memory::FlowMemory;
use crate::engine::procs::ProcTable;
use crate::engine::step::{Spawned, Step};
use crate::engine::writing::CacheMemory;

use crate::engine::region::Region;
use crate::engine::store::{CacheRegions, StoreMap};
use crate::metrics::Tally;

mod chunk;
mod lookup;
mod tags;

use chunk::{Chunk, Prefetcher};
use lookup::{Lookup, Miss};
use tags::BatchTags;

/// What a batch runs against and on whose behalf.
pub struct BatchCtx<'a> {
    pub map: &'a StoreMap,
    pub procs: &'a ProcTable,
    /// What the connection's credential allows.
    pub access: Access,
    /// This server's advertised address (never given as an owner hint).
    pub me: &'a str,
    /// The connection proved the server role: it may write regions still arriving
    /// here (a migration's source copying them).
    pub from_server: bool,
    /// An owner's replication stream: the owner's address. Its writes land only on
    /// regions whose table names it the owner (see [`Lookup::fenced`]).
    pub replica_of: Option<&'a str>,
    /// Answers of tagged ops (see [`crate::engine::completions`]).
    pub completions: &'a Completions,
    /// Note the regions client writes landed in ([`Touched`]; `ServerConfig::ack_windows`).
    pub note_acks: bool,
    pub max_frame: usize,
}

/// The procedure `name` of `cache`, from `last` when the previous EXECUTE named it.
fn proc_for<'p, 'n>(
    procs: &ProcTable,
    last: &'p mut Option<(CacheId, &'n str, crate::engine::procs::ProcRef)>,
    cache: CacheId,
    name: &'n str,
) -> Option<&'p crate::engine::procs::ProcRef> {
    // The decoder hands out the same &str for repeats of a name, so a pointer compare
    // usually decides.
    let hit = matches!(last, Some((c, n, _)) if *c == cache
        && (std::ptr::eq(n.as_ptr(), name.as_ptr()) && n.len() == name.len() || *n == name));
    if !hit {
        *last = Some((cache, name, procs.get(cache, name)?));
    }
    last.as_ref().map(|(_, _, p)| p)
}

fn miss(out: &mut Vec<u8>, enc: &mut ResponseEncoder, op: OpCode, m: Miss<'_>) {
    match m {
        Miss::Status(s) => enc.status(out, op, s),
        Miss::Wrong(owner) => enc.wrong_server(out, op, owner),
    }
}

/// Whether the connection's credential allows `op`: a token reaches its own cache only,
/// and a read-only token neither writes nor runs atomics.
#[inline]
fn permitted(access: &Access, op: &Op<'_>) -> bool {
    match *op {
        Op::Read { cache, .. } | Op::Execute { cache, .. } => access.may_read(cache),
        Op::Write { cache, .. } | Op::Cas { cache, .. } | Op::FetchAdd { cache, .. } => {
            access.may_write(cache)
        }
        Op::Tag(_) | Op::Answer { .. } | Op::Ping => true,
    }
}

/// Validates the whole batch first (a malformed batch runs no op at all), then runs
/// every op in order (a [`Chunk`] at a time, the next chunk's memory requested before
/// this one runs) and appends exactly one reply per op, except EXECUTEs that go on at
/// other servers: those leave a hole in the frame and an entry in `spawned`.
#[allow(clippy::too_many_arguments)]
pub fn execute_batch<'m>(
    cx: &BatchCtx<'m>,
    payload: &[u8],
    seq: u64,
    out: &mut Vec<u8>,
    tally: &mut Tally,
    spawned: &mut Vec<Spawned>,
    written: &mut Vec<Written>,
    touched: &mut Touched<'m>,
) -> Result<(), DecodeError> {
    RequestDecoder::validate(payload)?;
    let frame_start = out.len();
    let mut enc = ResponseEncoder::begin(out, seq);
    let mut look = Lookup {
        map: cx.map,
        me: cx.me,
        replica_of: cx.replica_of,
        migration_writes: false,
        last: None,
        note_acks: cx.note_acks && !cx.from_server,
    };
    // Connections with the cluster secret skip the per-op check.
    let scoped = !cx.access.is_cluster();
    // A batch usually calls one procedure many times: look it up once.
    let mut last_proc: Option<(CacheId, &str, crate::engine::procs::ProcRef)> = None;
    // Ops run a chunk at a time, decoded (and their memory requested) one chunk ahead.
    let mut pf = Prefetcher {
        map: cx.map,
        access: cx.access,
        last: None,
    };
    let mut decoder = RequestDecoder::new(payload)?;
    let [mut a, mut b] = [Chunk::new(), Chunk::new()];
    // The two chunks trade roles by reference: moving one would copy 6 KiB.
    let (mut this, mut next) = (&mut a, &mut b);
    // A TAG names the op after it.
    let mut pending_tag: Option<Tag> = None;
    // A server's ANSWER sits between a TAG and the op it names.
    let mut pending_answer: Option<(u64, &[u8])> = None;
    let mut tags = BatchTags::new(cx);
    this.decode(&mut decoder, &mut pf)?;
    while !this.ops().is_empty() {
        next.decode(&mut decoder, &mut pf)?;
        for &op in this.ops() {
            if let Op::Tag(t) = op {
                pending_tag = Some(t);
                continue;
            }
            if let Op::Answer { addr, body } = op {
                // Only a server passes on what its EXECUTEs answered.
                if cx.from_server {
                    pending_answer = Some((addr, body));
                }
                continue;
            }
            let tag = pending_tag.take();
            let answer = pending_answer.take();
            let code = op.code();
            let before = out.len();
            if scoped && !permitted(&cx.access, &op) {
                tally.forbidden += 1;
                enc.status(out, code, Status::Forbidden);
                tally.op(code, 0, false);
                continue;
            }
            match op {
                Op::Read { cache, addr, len } => {
                    if len > MAX_OP_BYTES || enc.payload_len(out) + 6 + len as usize > cx.max_frame
                    {
                        enc.status(out, code, Status::TooLarge);
                    } else {
                        match look.find(cache, addr, len.into()) {
                            Ok(_) if look.lost(addr, len.into()) => {
                                enc.status(out, code, Status::DataLost)
                            }
                            Ok((r, off)) => {
                                enc.data_head(out, code, len as usize);
                                if !r.append_to(off, len as usize, out) {
                                    // `locate` checked the range; a region that disagrees
                                    // is a bug, reported rather than served.
                                    enc.abandon_last(out, before);
                                    enc.status(out, code, Status::Internal);
                                }
                            }
                            Err(m) => miss(out, &mut enc, code, m),
                        }
                    }
                }
                Op::Write { cache, addr, data } => {
                    look.migration_writes = cx.from_server;
                    let found = look.find(cache, addr, data.len() as u64);
                    let read_only = look.read_only();
                    look.migration_writes = false;
                    if data.len() > MAX_OP_BYTES as usize {
                        enc.status(out, code, Status::TooLarge);
                    } else {
                        match found {
                            Ok(_) if read_only => enc.status(out, code, Status::ReadOnly),
                            Ok(_) if let Some(s) = look.fenced(addr) => enc.status(out, code, s),
                            Ok(_) if look.paused(addr, data.len() as u64) => {
                                enc.status(out, code, Status::Paused)
                            }
                            Ok((r, off)) => {
                                let s = if let Some(t) = tag {
                                    let at = (r, off, addr);
                                    tags.write(&look, t, answer, at, data, written, touched)
                                } else if r.write_from(off, data) {
                                    look.wrote(addr, data.len() as u64, true, written);
                                    look.touch(touched, addr, r);
                                    Status::Ok
                                } else {
                                    Status::Internal
                                };
                                enc.status(out, code, s);
                            }
                            Err(m) => miss(out, &mut enc, code, m),
                        }
                    }
                }
                Op::Cas { addr, .. } | Op::FetchAdd { addr, .. } if !addr.is_multiple_of(8) => {
                    enc.status(out, code, Status::Misaligned);
                }
                Op::Cas { cache, addr, .. } | Op::FetchAdd { cache, addr, .. } => {
                    match look.find(cache, addr, 8) {
                        Ok(_) if look.lost(addr, 8) => enc.status(out, code, Status::DataLost),
                        Ok(_) if look.read_only() => enc.status(out, code, Status::ReadOnly),
                        Ok(_) if let Some(s) = look.fenced(addr) => enc.status(out, code, s),
                        Ok(_) if look.paused(addr, 8) => enc.status(out, code, Status::Paused),
                        Ok((r, off)) => {
                            // A repeat is answered from its record, not run again.
                            let run = || match op {
                                Op::Cas { expected, new, .. } => r.cas(off, expected, new),
                                Op::FetchAdd { delta, .. } => r.fetch_add(off, delta),
                                _ => None,
                            };
                            let v = match tag {
                                None => run(),
                                Some(t) => tags.repeated(t, addr).or_else(run),
                            };
                            match v {
                                Some(v) => {
                                    let from = written.len();
                                    look.wrote(addr, 8, false, written);
                                    look.touch(touched, addr, r);
                                    if let Some(t) = tag {
                                        tags.remember(t, addr, v, written, from);
                                    }
                                    enc.value(out, code, v)
                                }
                                None => enc.status(out, code, Status::Internal),
                            }
                        }
                        Err(m) => miss(out, &mut enc, code, m),
                    }
                }
                Op::Execute {
                    cache,
                    addr,
                    proc_name,
                    args,
                } => match look.find(cache, addr, 1) {
                    Err(m) => miss(out, &mut enc, code, m),
                    Ok((r, off)) => match (
                        look.cache(cache),
                        proc_for(cx.procs, &mut last_proc, cache, proc_name),
                    ) {
                        (None, _) => enc.status(out, code, Status::NoSuchCache),
                        (_, None) => enc.status(out, code, Status::NoSuchProc),
                        (Some(c), Some(p)) if p.writes() => {
                            let s = if scoped && !cx.access.may_write(cache) {
                                tally.forbidden += 1;
                                Some(Status::Forbidden)
                            } else if look.read_only() {
                                Some(Status::ReadOnly)
                            } else if let Some(s) = look.fenced(addr) {
                                Some(s)
                            } else if look.paused(addr, 1) {
                                Some(Status::Paused)
                            } else {
                                None
                            };
                            match s {
                                Some(s) => enc.status(out, code, s),
                                None => {
                                    let done = out.len();
                                    // A repeat is answered from its record, not run again.
                                    let again = tag.and_then(|t| tags.repeated_body(t, addr));
                                    let ran = match again {
                                        Some(body) => {
                                            out.extend_from_slice(&body);
                                            Ok(())
                                        }
                                        None => {
                                            let from = written.len();
                                            let mem = CacheMemory::new(c);
                                            let ran = p.run_writing(&mem, addr, args, out);
                                            // Changes count even when the run failed after them.
                                            for (at, len, overwrote) in mem.into_changes() {
                                                look.wrote(at, len, overwrote, written);
                                                let idx =
                                                    region_split(at, c.region_size).0 as usize;
                                                if let Some(Some(r)) = c.regions.get(idx) {
                                                    look.touch(touched, at, r);
                                                }
                                            }
                                            if let (Some(t), Ok(())) = (tag, &ran) {
                                                let body = &out[done..];
                                                tags.remember_body(t, addr, body, written, from);
                                            }
                                            ran
                                        }
                                    };
                                    answer_writing(cx, ran, out, &mut enc, done);
                                }
                            }
                        }
                        (Some(c), Some(p))
                            if let Some(v) = folded_here(c, (addr, r, off), &**p, args) =>
                        {
                            if enc.payload_len(out) + DONE_RUN_HEAD + 8 > cx.max_frame {
                                enc.status(out, code, Status::TooLarge);
                            } else {
                                enc.done(out, &v.to_le_bytes());
                            }
                        }
                        (Some(c), Some(p)) => {
                            let call = Call {
                                cache,
                                addr,
                                proc_name,
                                args,
                            };
                            run_execute(cx, c, p, &call, out, &mut enc, frame_start, spawned);
                        }
                    },
                },
                Op::Ping => enc.status(out, code, Status::Ok),
                // Taken before the match.
                Op::Tag(_) | Op::Answer { .. } => {}
            }
            let ok = out.len() == before || enc.last_ok();
            let bytes = match op {
                Op::Read { len, .. } => len as usize,
                Op::Write { data, .. } => data.len(),
                _ => 8,
            };
            tally.op(code, if ok { bytes } else { 0 }, ok);
        }
        (this, next) = (next, this);
    }
    tags.finish();
    enc.finish(out);
    Ok(())
}

/// The regions a batch's writes landed in, each once (their acknowledgement windows
/// feed the split-brain check). Random writes hop between regions on almost every op,
/// so a bit per region index says "seen" in a few instructions.
#[derive(Default)]
pub struct Touched<'m> {
    cache: CacheId,
    seen: Vec<u64>,
    regions: Vec<&'m Region>,
}

impl<'m> Touched<'m> {
    #[inline(always)]
    fn note(&mut self, cache: CacheId, idx: u64, r: &'m Region) {
        if cache == self.cache
            && let Some(w) = self.seen.get((idx / 64) as usize)
            && w & (1 << (idx % 64)) != 0
        {
            return;
        }
        self.note_new(cache, idx, r);
    }

    #[inline(never)]
    fn note_new(&mut self, cache: CacheId, idx: u64, r: &'m Region) {
        if cache != self.cache {
            // Another cache: its indices are its own (a region may be listed twice,
            // which only notes the same time twice).
            self.cache = cache;
            self.seen.clear();
        }
        let w = (idx / 64) as usize;
        if self.seen.len() <= w {
            self.seen.resize(w + 1, 0);
        }
        self.seen[w] |= 1 << (idx % 64);
        self.regions.push(r);
    }

    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    pub fn regions(&self) -> &[&'m Region] {
        &self.regions
    }
}

/// Answers every op of a batch with `status` and runs none (a server without a lease
/// refuses whole batches). The batch is validated as for running it.
pub fn refuse_batch(
    payload: &[u8],
    seq: u64,
    status: Status,
    out: &mut Vec<u8>,
    tally: &mut Tally,
) -> Result<(), DecodeError> {
    RequestDecoder::validate(payload)?;
    let mut enc = ResponseEncoder::begin(out, seq);
    for op in RequestDecoder::new(payload)? {
        let code = op?.code();
        enc.status(out, code, status);
        tally.op(code, 0, false);
    }
    enc.finish(out);
    Ok(())
}

/// A call that only folds words (`Procedure::word_fold`), answered from the region
/// its address landed in: no `Memory`, no run. `None` when the procedure does more,
/// a word lies outside that region, or the cache is guarded (a migration, a backup or
/// lost bytes need the general road's checks).
#[inline]
fn folded_here(
    c: &CacheRegions,
    (addr, r, off): (u64, &Region, usize),
    p: &dyn farcache_sproc::Procedure,
    args: &[u8],
) -> Option<u64> {
    if c.guarded {
        return None;
    }
    let w = p.word_fold(args)?;
    // Regions may reach past the cache's capacity: the general road refuses those.
    let span = w.stride.checked_mul(w.n.saturating_sub(1) as u64)?;
    if addr.checked_add(span)?.checked_add(8)? > c.capacity {
        return None;
    }
    let mut words = [0u64; farcache_sproc::WordFold::MAX_WORDS];
    let words = words.get_mut(..w.n)?;
    for (i, x) in words.iter_mut().enumerate() {
        let at = w.stride.checked_mul(i as u64)?.checked_add(off as u64)?;
        let mut b = [0u8; 8];
        if !r.read_into(usize::try_from(at).ok()?, &mut b) {
            return None;
        }
        *x = u64::from_le_bytes(b);
    }
    Some(w.apply(words.iter().copied()))
}

/// The reply to a writing procedure's run, whose output starts at `start`.
fn answer_writing(
    cx: &BatchCtx<'_>,
    ran: Result<(), farcache_sproc::SprocError>,
    out: &mut Vec<u8>,
    enc: &mut ResponseEncoder,
    start: usize,
) {
    let code = OpCode::Execute;
    match ran {
        Ok(()) if enc.payload_len(out) + DONE_RUN_HEAD <= cx.max_frame => {
            enc.done_written(out, start)
        }
        Ok(()) => {
            out.truncate(start);
            enc.status(out, code, Status::TooLarge);
        }
        Err(e) => {
            out.truncate(start);
            let mut body = Vec::new();
            reply::push_failed(&mut body, &e.to_string());
            enc.data(out, code, &body);
        }
    }
}

/// One EXECUTE's fields.
struct Call<'a> {
    cache: CacheId,
    addr: u64,
    proc_name: &'a str,
    args: &'a [u8],
}

/// Runs a procedure at `call.addr`. A finished run writes its result straight into the
/// reply; a failure, or a continuation the client must send on, becomes the reply
/// body; work that goes on at other servers leaves a hole in the frame.
#[allow(clippy::too_many_arguments)]
fn run_execute(
    cx: &BatchCtx<'_>,
    c: &CacheRegions,
    p: &crate::engine::procs::ProcRef,
    call: &Call<'_>,
    out: &mut Vec<u8>,
    enc: &mut ResponseEncoder,
    frame_start: usize,
    spawned: &mut Vec<Spawned>,
) {
    let code = OpCode::Execute;
    #[cfg(feature = "failpoints")]
    if crate::failpoints::refuses_execute(call.args) {
        enc.status(out, code, Status::NotServing);
        return;
    }
    let mem = FlowMemory::new(c, None);
    // A finished call's output is written in place, then made a DONE_RUN reply.
    let start = out.len();
    let slow = match p.run_into(&mem, call.addr, call.args, out) {
        Ok(None) => None,
        Ok(Some(o)) => Some(Ok(o)),
        Err(e) => Some(Err(e)),
    };
    let Some(r) = slow else {
        if enc.payload_len(out) + DONE_RUN_HEAD <= cx.max_frame {
            enc.done_written(out, start);
        } else {
            out.truncate(start);
            enc.status(out, code, Status::TooLarge);
        }
        return;
    };
    out.truncate(start);
    let mut body = Vec::new();
    match crate::engine::step::next(&**p, c, &mem, call.addr, r) {
        Step::Done(r) => reply::push_done(&mut body, &r),
        Step::Fail(e) => reply::push_failed(&mut body, &e.to_string()),
        // No region table from the manager: the client continues it.
        Step::Ship { addr: next, state } if c.owners.is_empty() => {
            reply::push_continue(&mut body, next, &state)
        }
        step => {
            // The reply is inserted when the answer comes.
            enc.placeholder();
            spawned.push(Spawned {
                offset: out.len() - frame_start,
                cache: call.cache,
                proc_name: call.proc_name.to_owned(),
                addr: call.addr,
                step,
            });
            return;
        }
    }
    if enc.payload_len(out) + 6 + body.len() > cx.max_frame {
        enc.status(out, code, Status::TooLarge)
    } else {
        enc.data(out, code, &body)
    }
}

/// A range one op wrote in a region that has backups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub cache: CacheId,
    pub addr: u64,
    pub len: u32,
    /// The op's tag and answer, for the backups' completion records.
    pub tag: Option<farcache_proto::Tag>,
    /// A writing EXECUTE's address and reply body, passed on with its tag.
    pub answer: Option<(u64, std::sync::Arc<[u8]>)>,
}

#[cfg(test)]
mod tests;
