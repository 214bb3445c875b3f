//! The copy itself: region bytes go to the target as pipelined batches of WRITEs over
//! one connection that proved the server role, so the target needs no special path and
//! its own checks apply.

use std::collections::VecDeque;
use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use farcache_proto::blocking::{RpcError, read_frame};
use farcache_proto::control::{MigrationMode, MigrationPhase};
use farcache_proto::{FrameKind, Op, RequestEncoder, ResponseDecoder, Status};

use super::{DRAIN, Task};
use crate::cluster::Shared;
use crate::cluster::dial::{Timeouts, resolve};
use crate::engine::completions::Record;
use crate::engine::dirty::{CHUNK, DirtyChunks};
use crate::engine::lost::LostRanges;
use crate::engine::region::Region;
use crate::engine::store::WriteGate;

/// Bytes per request frame sent to the target.
const FRAME_BYTES: u64 = 1 << 20;
/// Longest single write: a run of consecutive chunks.
const RUN_BYTES: u64 = 256 << 10;
/// Frames sent and not yet answered: keeps the pipe full without unbounded buffering.
const WINDOW: usize = 8;
/// Dirty bytes few enough to send during the final pause (well under 1 ms at the
/// copy's rate on loopback).
const FINAL_BYTES: u64 = 512 << 10;
/// Copy rounds before writers are throttled anyway.
const MAX_ROUNDS: u32 = 32;
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Completion records per frame (50 bytes each as a tag and an empty write)...
const RECORDS_PER_FRAME: usize = 16 << 10;
/// ...and reply bodies per frame, in bytes (a frame ends past it).
const BODY_BYTES_PER_FRAME: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("target {0}: {1}")]
    Target(String, RpcError),
    #[error("target refused a chunk: {0}")]
    Refused(Status),
    #[error("the region is no longer held here")]
    Gone,
    #[error("batches did not drain in time to change the region's write gate")]
    Drain,
    #[error("cancelled")]
    Cancelled,
}

pub fn run(sh: &Arc<Shared>, task: &Arc<Task>) {
    let result = copy(sh, task);
    let mut p = task.progress.lock();
    match result {
        Ok(()) => {
            p.phase = MigrationPhase::HandedOff;
            p.copied = Some(Instant::now());
            drop(p);
            task.ended.notify_all();
        }
        Err(e) => {
            p.phase = MigrationPhase::Failed;
            p.error = Some(e.to_string());
            drop(p);
            task.ended.notify_all();
            if !task.cancelled() {
                tracing::warn!(cache = task.cache, region = task.region, to = %task.to, "migration failed: {e}");
                // Writes go on here; the manager picks another target or gives up.
                sh.store.set_gate(task.cache, task.region, None, DRAIN);
                task.release_others(sh);
            }
        }
    }
}

fn copy(sh: &Shared, task: &Task) -> Result<(), CopyError> {
    fail::fail_point!("migration-before-copy");
    let region = sh
        .store
        .region(task.cache, task.region)
        .ok_or(CopyError::Gone)?;
    let len = region.len() as u64;
    sh.replicator
        .fence_old_streams(sh, &task.to)
        .map_err(|e| CopyError::Target(task.to.clone(), RpcError::Unexpected(e)))?;
    let mut link = Link::connect(sh, task)?;
    let dirty = Arc::new(DirtyChunks::new(len));
    let gate = |g: WriteGate| {
        if sh.store.set_gate(task.cache, task.region, Some(g), DRAIN) {
            Ok(())
        } else {
            Err(CopyError::Drain)
        }
    };
    let all: Vec<u64> = (0..dirty.chunks()).collect();
    let mut last = Vec::new();
    match task.mode {
        MigrationMode::PauseAll => {
            // The baseline: every region of the cache held here stops taking writes.
            let held: Vec<u32> = sh
                .store
                .held()
                .into_iter()
                .filter(|r| r.cache == task.cache && r.region != task.region)
                .map(|r| r.region)
                .collect();
            for &r in &held {
                sh.store
                    .set_gate(task.cache, r, Some(WriteGate::Pause), DRAIN);
            }
            *task.others.lock() = held;
            gate(WriteGate::Pause)?;
            task.progress.lock().paused_at = Some(Instant::now());
            link.send(task, &region, &all)?;
        }
        MigrationMode::PauseRegion => {
            gate(WriteGate::Pause)?;
            task.progress.lock().paused_at = Some(Instant::now());
            link.send(task, &region, &all)?;
        }
        MigrationMode::DirtyTracking => {
            task.progress.lock().dirty = Some(dirty.clone());
            if let Some(chunks) = crate::failpoints::throttle_from_start() {
                dirty.throttle(chunks);
            }
            gate(WriteGate::Track(dirty.clone()))?;
            link.send(task, &region, &all)?;
            let mut before = all.len();
            let mut throttled = false;
            loop {
                // Every frame answered first: what is still in flight when writes
                // pause would lengthen the pause.
                link.settle(0)?;
                let d = dirty.take();
                let rounds = task.progress.lock().rounds;
                if d.len() as u64 * CHUNK <= FINAL_BYTES || rounds >= MAX_ROUNDS + 4 {
                    last = d;
                    break;
                }
                // Writes dirty the region about as fast as it copies (a round did not
                // halve the set), or too many rounds: from now on writes that would
                // dirty more than the final pause can send wait, so the next round
                // leaves little, and the pause stays short however fast the writes.
                if !throttled && (d.len() * 2 > before || rounds >= MAX_ROUNDS) {
                    dirty.throttle(FINAL_BYTES / CHUNK);
                    throttled = true;
                    tracing::debug!(
                        cache = task.cache,
                        region = task.region,
                        rounds,
                        dirty = d.len(),
                        "writers throttled"
                    );
                }
                before = d.len();
                link.send(task, &region, &d)?;
            }
            gate(WriteGate::Pause)?;
            task.progress.lock().paused_at = Some(Instant::now());
            // Writes that saw the tracking gate are done (the gate change drained
            // them), so their chunks are marked by now.
            last.extend(dirty.take());
            last.sort_unstable();
            last.dedup();
        }
    }
    link.send(task, &region, &last)?;
    // With no more writes here, the answers of the region's tagged ops go too: the
    // target answers a retry of one from its record instead of applying it again.
    let base = u64::from(task.region) * len;
    let records = sh.completions.in_range(base, base + len);
    link.send_records(task, &records)?;
    link.settle(0)?;
    // The region changes owner: what this server forwarded to its backups must land
    // before the new owner forwards anything (writes here are paused by now).
    if !task.replicate && !sh.replicator.quiesce(DRAIN) {
        return Err(CopyError::Drain);
    }
    Ok(())
}

/// Sorted chunk indexes as (offset, length) runs of consecutive chunks, each at most
/// `RUN_BYTES` and clipped at the region's end `rs`.
fn runs(chunks: &[u64], rs: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &c in chunks {
        let off = c * CHUNK;
        if off >= rs {
            continue;
        }
        let len = CHUNK.min(rs - off);
        match out.last_mut() {
            Some((o, l)) if *o + *l == off && *l + len <= RUN_BYTES => *l += len,
            _ => out.push((off, len)),
        }
    }
    out
}

/// A pipelined connection to the target.
struct Link {
    /// Frames are written whole (about 1 MiB each), so no buffering in between.
    out: TcpStream,
    inp: TcpStream,
    seq: u64,
    /// Sequence numbers and op counts of unanswered frames.
    inflight: VecDeque<(u64, usize)>,
    buf: Vec<u8>,
    max_frame: u32,
    /// The region's lost bytes, if any, when the copy began (they only shrink).
    lost: Option<Arc<LostRanges>>,
}

impl Link {
    fn connect(sh: &Shared, task: &Task) -> Result<Self, CopyError> {
        let err = |e: RpcError| CopyError::Target(task.to.clone(), e);
        let to = resolve(&task.to).map_err(err)?;
        let s = sh
            .dialer
            .dial(to, Timeouts::all(IO_TIMEOUT), 0)
            .map_err(err)?;
        let inp = s.try_clone().map_err(|e| err(e.into()))?;
        Ok(Self {
            out: s,
            inp,
            seq: 0,
            inflight: VecDeque::new(),
            buf: Vec::new(),
            max_frame: sh.config.max_frame,
            lost: sh
                .store
                .snapshot()
                .caches
                .get(&task.cache)
                .and_then(|c| c.lost.get(&task.region).cloned()),
        })
    }

    /// Sends the given chunks of `region` (one copy round); consecutive chunks go as
    /// one write of up to `RUN_BYTES`, and writes are packed into frames of about
    /// `FRAME_BYTES`.
    fn send(&mut self, task: &Task, region: &Region, chunks: &[u64]) -> Result<(), CopyError> {
        let lost = self.lost.clone();
        let lost = lost.as_deref();
        let rs = region.len() as u64;
        let base = u64::from(task.region) * rs;
        let mut sent = 0u64;
        let mut parts: Vec<(u64, u64)> = Vec::new();
        for (off, len) in runs(chunks, rs) {
            // Lost bytes are not sent: they stay lost at the target, which placed the
            // region as all lost.
            match lost {
                Some(l) => parts.extend(l.gaps(off, len)),
                None => parts.push((off, len)),
            }
        }
        let mut i = 0;
        while i < parts.len() {
            if task.cancelled() {
                return Err(CopyError::Cancelled);
            }
            self.settle(WINDOW - 1)?;
            self.buf.clear();
            self.seq += 1;
            let mut enc = RequestEncoder::begin(&mut self.buf, self.seq);
            let (mut ops, mut bytes) = (0, 0u64);
            while i < parts.len() && bytes < FRAME_BYTES {
                let (at, len) = parts[i];
                // Straight from region memory into the frame: no staging copy.
                let mut held = true;
                enc.push_write_with(&mut self.buf, task.cache, base + at, len as u32, |dst| {
                    held = region.read_into(at as usize, dst);
                });
                if !held {
                    return Err(CopyError::Gone);
                }
                (ops, bytes, i) = (ops + 1, bytes + len, i + 1);
            }
            sent += bytes;
            enc.finish(&mut self.buf);
            self.out
                .write_all(&self.buf)
                .map_err(|e| CopyError::Target(task.to.clone(), e.into()))?;
            self.inflight.push_back((self.seq, ops));
        }
        self.out
            .flush()
            .map_err(|e| CopyError::Target(task.to.clone(), e.into()))?;
        let mut p = task.progress.lock();
        p.bytes += sent;
        p.rounds += 1;
        Ok(())
    }

    /// Sends completion records as tagged empty writes: the target's executor
    /// records the answer a tag from a server carries (as a backup does).
    fn send_records(&mut self, task: &Task, records: &[Record]) -> Result<(), CopyError> {
        for part in frames_of(records) {
            self.settle(WINDOW - 1)?;
            self.buf.clear();
            self.seq += 1;
            let mut enc = RequestEncoder::begin(&mut self.buf, self.seq);
            for r in part {
                enc.push(&mut self.buf, &Op::Tag(r.tag));
                if let Some(body) = &r.body {
                    let addr = r.addr;
                    enc.push(&mut self.buf, &Op::Answer { addr, body });
                }
                let op = Op::Write {
                    cache: task.cache,
                    addr: r.addr,
                    data: &[],
                };
                enc.push(&mut self.buf, &op);
            }
            enc.finish(&mut self.buf);
            self.out
                .write_all(&self.buf)
                .map_err(|e| CopyError::Target(task.to.clone(), e.into()))?;
            self.inflight.push_back((self.seq, part.len()));
        }
        self.out
            .flush()
            .map_err(|e| CopyError::Target(task.to.clone(), e.into()))?;
        task.progress.lock().records += records.len() as u64;
        Ok(())
    }

    /// Reads answers until at most `keep` frames are unanswered.
    fn settle(&mut self, keep: usize) -> Result<(), CopyError> {
        if self.inflight.len() > keep {
            self.out
                .flush()
                .map_err(|e| CopyError::Target("flush".into(), e.into()))?;
        }
        while self.inflight.len() > keep {
            let (_, n) = self.inflight.pop_front().unwrap_or((0, 0));
            let (hdr, payload) = read_frame(&mut self.inp, self.max_frame)
                .map_err(|e| CopyError::Target("answer".into(), e))?;
            if hdr.kind != FrameKind::Response {
                return Err(CopyError::Target(
                    "answer".into(),
                    RpcError::Unexpected(format!("{:?} frame", hdr.kind)),
                ));
            }
            let mut dec = ResponseDecoder::new(&payload)
                .map_err(|e| CopyError::Target("answer".into(), e.into()))?;
            for _ in 0..n {
                match dec.next() {
                    Some(Ok(r)) if r.status == Status::Ok => {}
                    Some(Ok(r)) => return Err(CopyError::Refused(r.status)),
                    Some(Err(e)) => return Err(CopyError::Target("answer".into(), e.into())),
                    None => {
                        return Err(CopyError::Target(
                            "answer".into(),
                            RpcError::Unexpected("short answer".into()),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// `records` cut into frames of at most [`RECORDS_PER_FRAME`] records and about
/// [`BODY_BYTES_PER_FRAME`] bytes of reply bodies.
fn frames_of(records: &[Record]) -> impl Iterator<Item = &[Record]> {
    let mut rest = records;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (mut n, mut bytes) = (0, 0);
        while n < rest.len() && n < RECORDS_PER_FRAME && bytes < BODY_BYTES_PER_FRAME {
            bytes += rest[n].body.as_ref().map_or(0, |b| b.len());
            n += 1;
        }
        let (part, after) = rest.split_at(n);
        rest = after;
        Some(part)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_neighbours_up_to_the_run_size() {
        let per_run = RUN_BYTES / CHUNK;
        let all: Vec<u64> = (0..per_run + 2).collect();
        assert_eq!(
            runs(&all, 1 << 30),
            vec![(0, RUN_BYTES), (RUN_BYTES, 2 * CHUNK)]
        );
        assert_eq!(
            runs(&[1, 3, 4], 1 << 30),
            vec![(CHUNK, CHUNK), (3 * CHUNK, 2 * CHUNK)]
        );
        // The last chunk is clipped at the region's end; chunks past it are dropped.
        assert_eq!(runs(&[0, 1, 2], CHUNK + 10), vec![(0, CHUNK + 10)]);
    }
}
