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

use crate::engine::region::Region;
use crate::engine::store::{CacheRegions, StoreMap};
use crate::metrics::Tally;

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

/// The tagged ops of one batch: repeats answered from their records, new answers
/// recorded together when the batch ends (one lock per session, not per op).
struct BatchTags<'a> {
    completions: &'a Completions,
    /// The batch comes from a server (an owner's replication stream, a migration's
    /// copy): its ops always apply, and record the answer the owner gave.
    replica: bool,
    /// The session last asked about, and the highest op number recorded for it
    /// when asked: ops above it are new (a client numbers upwards).
    known: Option<(u64, u64)>,
    records: Vec<Record>,
}

impl<'a> BatchTags<'a> {
    fn new(cx: &BatchCtx<'a>) -> Self {
        Self {
            completions: cx.completions,
            // A server's tag (a backup's stream, a migration's copy) carries the
            // answer its owner recorded.
            replica: cx.from_server,
            known: None,
            records: Vec::new(),
        }
    }

    /// A tagged client op that already ran here (or reached here from its owner):
    /// its recorded answer.
    fn repeated(&mut self, t: Tag, addr: u64) -> Option<u64> {
        if self.replica {
            return None;
        }
        let max = match self.known {
            Some((s, m)) if s == t.session => m,
            _ => {
                let m = self.completions.max_seq(t.session);
                self.known = Some((t.session, m));
                m
            }
        };
        if t.seq > max {
            return None;
        }
        let r = self.completions.get(t.session, t.seq, addr);
        if r.is_some() {
            self.completions
                .repeats
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        r
    }

    /// A tagged WRITE: answered from its record if it ran before, else run.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        look: &Lookup<'a>,
        t: Tag,
        (r, off): (&'a Region, usize),
        addr: u64,
        data: &[u8],
        written: &mut Vec<Written>,
        touched: &mut Touched<'a>,
    ) -> Status {
        let from = written.len();
        let again = self.repeated(t, addr).is_some();
        if !again && !r.write_from(off, data) {
            return Status::Internal;
        }
        look.wrote(addr, data.len() as u64, !again, written);
        look.touch(touched, addr, r);
        self.remember(t, addr, 0, written, from);
        Status::Ok
    }

    /// After a tagged op ran (or was answered from its record): keeps its answer for
    /// the batch's end, and hands it to the backups with the range the op wrote, if
    /// it has backups (`written[from..]`: what `Lookup::wrote` added for this op).
    #[inline(never)]
    fn remember(&mut self, tag: Tag, addr: u64, result: u64, written: &mut [Written], from: usize) {
        // A backup records what its owner answered.
        let result = if self.replica { tag.result } else { result };
        let tag = Tag { result, ..tag };
        self.records.push(Record { tag, addr, result });
        if let Some(w) = written.get_mut(from) {
            w.tag = Some(tag);
        }
    }

    fn finish(self) {
        self.completions.record_many(&self.records);
    }
}

enum Miss<'m> {
    Status(Status),
    Wrong(Option<&'m str>),
}

/// Resolves `[addr, addr+len)` of `cache` to a region and offset on this server.
/// The range must lie within one region: clients split at region boundaries.
fn locate<'m>(
    c: &'m CacheRegions,
    addr: u64,
    len: u64,
    me: &str,
) -> Result<(&'m Region, usize), Miss<'m>> {
    let end = addr
        .checked_add(len)
        .ok_or(Miss::Status(Status::OutOfRange))?;
    if end > c.capacity {
        return Err(Miss::Status(Status::OutOfRange));
    }
    let (idx, off) = region_split(addr, c.region_size);
    if off + len > c.region_size {
        return Err(Miss::Status(Status::OutOfRange));
    }
    match c.regions.get(idx as usize) {
        Some(Some(r)) => Ok((r, off as usize)),
        _ => Err(Miss::Wrong(c.hint(idx, me))),
    }
}

struct Lookup<'m> {
    map: &'m StoreMap,
    me: &'m str,
    /// The owner a replication stream comes from.
    replica_of: Option<&'m str>,
    /// Writes from a migration source may reach arriving regions (reads never do).
    migration_writes: bool,
    last: Option<(CacheId, &'m CacheRegions)>,
    note_acks: bool,
}

impl<'m> Lookup<'m> {
    #[inline]
    fn cache(&mut self, id: CacheId) -> Option<&'m CacheRegions> {
        if let Some((last, c)) = self.last
            && last == id
        {
            return Some(c);
        }
        let c = self.map.caches.get(&id)?;
        self.last = Some((id, c));
        Some(c)
    }

    // `lost`, `paused` and `wrote` test `guarded` here, in the op loop, before calling
    // out: most caches have no region being lost, moved or backed up.

    /// Whether bytes of `[addr, addr+len)` in the cache `find` last resolved are lost.
    #[inline]
    fn lost(&self, addr: u64, len: u64) -> bool {
        self.last
            .is_some_and(|(_, c)| c.guarded && c.lost_in(addr, len))
    }

    /// A replicated write from a server that is not the region's owner in this
    /// server's table: `WRONG_SERVER` when this server owns it now (the writer is a
    /// stale owner: a failover came first), `PAUSED` when the table names a third
    /// server (it may lag behind a move; the owner sends again shortly). Caches
    /// without a table yet take the write. (A migration's copy is no replication
    /// stream: it fills arriving regions unchecked.)
    #[inline]
    fn fenced(&self, addr: u64) -> Option<Status> {
        let writer = self.replica_of?;
        let (_, c) = self.last?;
        let idx = region_split(addr, c.region_size).0 as usize;
        match c.owners.get(idx).map(String::as_str) {
            None | Some("") => None,
            Some(o) if o == writer => None,
            Some(o) if o == self.me => Some(Status::WrongServer),
            Some(_) => Some(Status::Paused),
        }
    }

    #[inline]
    fn paused(&self, addr: u64) -> bool {
        self.last
            .is_some_and(|(_, c)| c.guarded && c.write_paused(addr))
    }

    /// After a write: tells the region (migration, lost bytes) and, if the region
    /// has backups, notes the range for them.
    #[inline(always)]
    fn wrote(&self, addr: u64, len: u64, overwrote: bool, written: &mut Vec<Written>) {
        if self.last.is_some_and(|(_, c)| c.guarded) {
            self.wrote_guarded(addr, len, overwrote, written);
        }
    }

    /// Notes the region `addr` is in (of the cache `find` last resolved) as written.
    #[inline(always)]
    fn touch(&self, touched: &mut Touched<'m>, addr: u64, r: &'m Region) {
        if self.note_acks
            && let Some((cache, c)) = self.last
        {
            touched.note(cache, region_split(addr, c.region_size).0, r);
        }
    }

    #[inline(never)]
    fn wrote_guarded(&self, addr: u64, len: u64, overwrote: bool, written: &mut Vec<Written>) {
        if let Some((cache, c)) = self.last {
            c.wrote(addr, len, overwrote);
            if c.backups_at(addr).is_some() {
                written.push(Written {
                    cache,
                    addr,
                    len: len as u32,
                    tag: None,
                });
            }
        }
    }

    /// Whether the cache `find` last resolved refuses writes from this connection.
    #[inline]
    fn read_only(&self) -> bool {
        !self.migration_writes && self.last.is_some_and(|(_, c)| c.read_only)
    }

    #[inline(always)]
    fn find(
        &mut self,
        cache: CacheId,
        addr: u64,
        len: u64,
    ) -> Result<(&'m Region, usize), Miss<'m>> {
        let c = self.cache(cache).ok_or(Miss::Status(Status::NoSuchCache))?;
        let found = locate(c, addr, len, self.me)?;
        if c.arriving(addr) && !self.migration_writes {
            // Not this server's yet: whoever asked goes to the owner it knows.
            let idx = region_split(addr, c.region_size).0;
            return Err(Miss::Wrong(c.hint(idx, self.me)));
        }
        Ok(found)
    }
}

/// Starts loading the region memory of ops before they run, so that random record
/// addresses (a cache miss each) overlap instead of stalling one after another. Only a
/// hint: ops whose cache or region is not here prefetch nothing, and every check still
/// happens when the op runs (see [`Chunk::decode`]).
struct Prefetcher<'m> {
    map: &'m StoreMap,
    access: Access,
    last: Option<(CacheId, &'m CacheRegions)>,
}

impl<'m> Prefetcher<'m> {
    #[inline(always)]
    fn op(&mut self, op: &Op<'_>) {
        // Not even a hint for a cache the credential does not reach.
        if !self.access.is_cluster() && !permitted(&self.access, op) {
            return;
        }
        let (cache, addr, write) = match *op {
            Op::Read { cache, addr, .. } => (cache, addr, false),
            Op::Write { cache, addr, .. }
            | Op::Cas { cache, addr, .. }
            | Op::FetchAdd { cache, addr, .. } => (cache, addr, true),
            Op::Execute { .. } | Op::Tag(_) | Op::Ping => return,
        };
        let c = match self.last {
            Some((id, c)) if id == cache => c,
            _ => {
                let Some(c) = self.map.caches.get(&cache) else {
                    return;
                };
                self.last = Some((cache, c));
                c
            }
        };
        let (idx, off) = region_split(addr, c.region_size);
        if let Some(Some(r)) = c.regions.get(idx as usize) {
            r.prefetch(off as usize, write);
        }
    }
}

/// Ops decoded (and their memory requested) at a time. The ops of one chunk run
/// while the next chunk's memory is on its way; two chunks of cache lines (8 KiB)
/// stay in the L1 until used. Requests issued in a burst overlap far better than one
/// issued a few ops ahead of each op (measured with `farcache_bench::ceiling`: 16 to
/// 256 ops per chunk did alike; one prefetch 4, 8 or 16 ops ahead gave under half).
const CHUNK: usize = 64;

/// Up to [`CHUNK`] decoded ops. Left uninitialized until decoded into: a batch of a few
/// ops does not pay for clearing room for a whole chunk.
struct Chunk<'a> {
    ops: [MaybeUninit<Op<'a>>; CHUNK],
    /// `ops[..len]` are initialized.
    len: usize,
}

impl<'a> Chunk<'a> {
    fn new() -> Self {
        Self {
            ops: [const { MaybeUninit::uninit() }; CHUNK],
            len: 0,
        }
    }

    /// Decodes up to [`CHUNK`] ops of a validated batch, replacing what it held, and
    /// starts loading each op's memory. The only place the op loop decodes, so the
    /// decoder is inlined here once.
    #[inline]
    fn decode(
        &mut self,
        d: &mut RequestDecoder<'a>,
        pf: &mut Prefetcher<'_>,
    ) -> Result<(), DecodeError> {
        self.len = 0;
        while self.len < CHUNK {
            let Some(op) = d.next() else { break };
            let op = op?;
            pf.op(&op);
            self.ops[self.len].write(op);
            self.len += 1;
        }
        Ok(())
    }

    fn ops(&self) -> &[Op<'a>] {
        // SAFETY: `ops[..len]` were written by `decode` (`len` only grows past an
        // element once it is written), and `MaybeUninit<T>` has the layout of `T`.
        unsafe { std::slice::from_raw_parts(self.ops.as_ptr().cast::<Op<'a>>(), self.len) }
    }
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
        Op::Tag(_) | Op::Ping => true,
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
    let mut tags = BatchTags::new(cx);
    this.decode(&mut decoder, &mut pf)?;
    while !this.ops().is_empty() {
        next.decode(&mut decoder, &mut pf)?;
        for &op in this.ops() {
            if let Op::Tag(t) = op {
                pending_tag = Some(t);
                continue;
            }
            let tag = pending_tag.take();
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
                            Ok(_) if look.paused(addr) => enc.status(out, code, Status::Paused),
                            Ok((r, off)) => {
                                let s = if let Some(t) = tag {
                                    tags.write(&look, t, (r, off), addr, data, written, touched)
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
                        Ok(_) if look.paused(addr) => enc.status(out, code, Status::Paused),
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
                Op::Tag(_) => {}
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub cache: CacheId,
    pub addr: u64,
    pub len: u32,
    /// The op's tag and answer, for the backups' completion records.
    pub tag: Option<farcache_proto::Tag>,
}

#[cfg(test)]
mod tests;
