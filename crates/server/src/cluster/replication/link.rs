//! One backup's link: a queue of WRITE frames over one connection that proved the
//! server role. The worker that queues writes sends the frame itself when fewer than
//! `WINDOW` frames are unacknowledged (no thread hand-off on the way out); the link's
//! thread reads the backup's answers in order, releases the writes each one covers,
//! and sends the frame that gathered meanwhile. Frames stay queued until
//! acknowledged, so a reconnect sends again everything the backup may not have
//! applied (a WRITE of a snapshot applied twice leaves the same bytes).

use std::collections::VecDeque;
use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use farcache_proto::blocking::read_frame;
use farcache_proto::{FrameKind, RequestEncoder, ResponseDecoder, Status};
use parking_lot::Mutex;
use tracing::{debug, warn};

use super::{Counters, Waiter, Written, locate};
use crate::cluster::Shared;
use crate::cluster::dial::{Timeouts, resolve};
use crate::cluster::mailbox::{Mailboxes, WorkerMsg};
use crate::engine::store::StoreMap;

/// Frames sent and not yet answered: while they travel, later writes gather into the
/// next frame (fewer, larger frames under load; no wait when idle).
const WINDOW: usize = 2;
/// A frame is sent once this big even if the window is full.
const FRAME_BYTES: usize = 1 << 20;
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Workers send frames themselves: a backup that stops reading may hold one this
/// long before its connection is dropped (and the frames wait for a new one).
const WRITE_TIMEOUT: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Rounds in a row the backup may refuse the frames (its table lags behind a move)
/// before the writes waiting on it fail; round `n` is sent again after `n` × 5 ms
/// (at most 100 ms): about 4 s in all.
const MAX_REFUSALS: u32 = 50;
const REFUSED_WAIT: Duration = Duration::from_millis(5);

/// A new stream's generation: strictly increasing in this process, and across
/// restarts (it starts from the wall clock), so a backup tells a stream that replaced
/// another from the one it replaced.
fn next_generation() -> u64 {
    use std::sync::atomic::AtomicU64;
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX / 2));
    let mut prev = LAST.load(Relaxed);
    loop {
        let next = now.max(prev + 1);
        match LAST.compare_exchange(prev, next, Relaxed, Relaxed) {
            Ok(_) => return next,
            Err(p) => prev = p,
        }
    }
}

/// What a backup's answer to a frame says.
enum Answer {
    Applied,
    /// The backup owns the region now: this server is a stale owner, and the
    /// writes must not be acknowledged.
    Owned(String),
    /// Refused for now (its table lags, or this stream was replaced): send again.
    Refused(String),
}

struct Frame {
    seq: u64,
    bytes: Vec<u8>,
    ops: u32,
    waiters: Vec<Waiter>,
}

#[derive(Default)]
struct State {
    /// The frame being filled, and its encoder.
    open: Vec<u8>,
    enc: Option<RequestEncoder>,
    open_waiters: Vec<Waiter>,
    /// Frames sent on the current connection (or waiting for one), oldest first,
    /// until the backup acknowledges them.
    sent: VecDeque<Frame>,
    next_seq: u64,
    /// The connection's sending half, while it works.
    out: Option<TcpStream>,
    /// The last frame the backup acknowledged.
    acked: u64,
}

impl State {
    /// Seals the open frame and sends it if the window has room (or it is large),
    /// on the current connection if there is one.
    fn pump(&mut self, counters: &Counters) {
        if self.enc.is_none() || (self.sent.len() >= WINDOW && self.open.len() < FRAME_BYTES) {
            return;
        }
        let Some(enc) = self.enc.take() else { return };
        let (ops, seq) = (enc.count(), enc.seq());
        enc.finish(&mut self.open);
        let frame = Frame {
            seq,
            bytes: std::mem::take(&mut self.open),
            ops,
            waiters: std::mem::take(&mut self.open_waiters),
        };
        if let Some(out) = self.out.as_mut() {
            match out.write_all(&frame.bytes) {
                Ok(()) => {
                    counters.frames.fetch_add(1, Relaxed);
                }
                Err(e) => {
                    // The reading side sees the connection fail and reconnects; the
                    // frame stays queued and goes again then.
                    debug!("replication write failed: {e}");
                    let _ = out.shutdown(Shutdown::Both);
                    self.out = None;
                }
            }
        }
        self.sent.push_back(frame);
    }
}

pub struct Link {
    addr: String,
    st: Mutex<State>,
    closed: AtomicBool,
    /// Closed because the backup refused (it owns the region, or kept refusing):
    /// writes queued after that fail too.
    failed: AtomicBool,
    counters: Arc<Counters>,
    /// Since when writes have waited for the backup with no acknowledgement, in µs
    /// after `born` plus one (0 while nothing waits). Outside `st`, which a worker
    /// holds while a send blocks: the heartbeat that reads it must never wait.
    waiting_since: AtomicU64,
    born: Instant,
}

impl Link {
    pub fn open(sh: &Arc<Shared>, addr: &str, counters: Arc<Counters>) -> Arc<Self> {
        let link = Arc::new(Self {
            addr: addr.to_owned(),
            st: Mutex::new(State::default()),
            closed: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            counters,
            waiting_since: AtomicU64::new(0),
            born: Instant::now(),
        });
        let (l, w) = (link.clone(), Arc::downgrade(sh));
        let spawned = std::thread::Builder::new()
            .name(format!("fc-replicate-{addr}"))
            .spawn(move || l.run(&w));
        if let Err(e) = spawned {
            // Without a thread nothing is acknowledged: writes wait until the backup
            // is dropped, as for an unreachable backup.
            warn!(backup = %addr, "cannot start a replication thread: {e}");
        }
        link
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The frame holding everything queued so far (0: nothing is unacknowledged).
    pub fn mark(&self) -> u64 {
        let st = self.st.lock();
        if st.sent.is_empty() && st.enc.is_none() {
            0
        } else {
            st.next_seq
        }
    }

    /// Whether frames up to `mark` were acknowledged (or dropped with the link).
    pub fn reached(&self, mark: u64) -> bool {
        let st = self.st.lock();
        self.is_closed() || st.acked >= mark
    }

    /// How long writes have waited for this backup without an acknowledgement.
    pub fn stalled(&self, now: Instant) -> Option<Duration> {
        if self.is_closed() {
            return None;
        }
        match self.waiting_since.load(Ordering::Acquire) {
            0 => None,
            us => Some(now.saturating_duration_since(self.born + Duration::from_micros(us - 1))),
        }
    }

    /// Notes that writes wait from now on (`false`: nothing waits).
    fn set_waiting(&self, waiting: bool) {
        let v = if waiting {
            u64::try_from(self.born.elapsed().as_micros()).unwrap_or(u64::MAX - 1) + 1
        } else {
            0
        };
        self.waiting_since.store(v, Ordering::Release);
    }

    /// Whether the link is open and connected: its stream is the newest the backup
    /// knows from this server.
    pub fn connected(&self) -> bool {
        !self.is_closed() && self.st.lock().out.is_some()
    }

    pub fn unacked(&self) -> usize {
        self.st.lock().sent.len()
    }

    /// Reads the ranges from their regions into the open frame, in one critical
    /// section, notes who waits for them, and sends the frame if the window allows.
    pub fn queue(&self, sh: &Shared, map: &StoreMap, ranges: &[&Written], waiter: Waiter) {
        let mut st = self.st.lock();
        if self.is_closed() {
            drop(st);
            if self.failed.load(Ordering::Acquire) {
                // The backup refused: this server may be a stale owner.
                return notify_failed(&sh.mailboxes, vec![waiter]);
            }
            // Dropped as a backup meanwhile: nothing to wait for.
            return release(&sh.mailboxes, vec![waiter]);
        }
        if self.waiting_since.load(Ordering::Acquire) == 0 {
            self.set_waiting(true);
        }
        let State {
            open,
            enc,
            open_waiters,
            next_seq,
            ..
        } = &mut *st;
        let e = enc.get_or_insert_with(|| {
            *next_seq += 1;
            RequestEncoder::begin(open, *next_seq)
        });
        let mut bytes = 0u64;
        for w in ranges {
            let Some((r, off)) = locate(map, w) else {
                continue;
            };
            if let Some(t) = w.tag {
                e.push(open, &farcache_proto::Op::Tag(t));
                if let Some((addr, body)) = &w.answer {
                    e.push(open, &farcache_proto::Op::Answer { addr: *addr, body });
                }
            }
            e.push_write_with(open, w.cache, w.addr, w.len, |d| {
                // The op that wrote the range checked it lies in the region.
                let _ = r.read_into(off, d);
            });
            bytes += u64::from(w.len);
        }
        open_waiters.push(waiter);
        self.counters.bytes.fetch_add(bytes, Relaxed);
        st.pump(&self.counters);
    }

    /// Stops the link and releases every write waiting on it (the backup is no longer
    /// a copy of anything this server owns).
    pub fn close(&self, sh: &Shared) {
        let waiters = self.stop();
        debug!(backup = %self.addr, released = waiters.len(), "replication link closed");
        release(&sh.mailboxes, waiters);
    }

    /// Stops the link and fails every write waiting on it: the backup may not hold
    /// them and this server may no longer own their regions, so none is acknowledged
    /// (their clients' connections are closed: the outcome is unknown to them).
    pub fn fail(&self, sh: &Shared, why: &str) {
        self.failed.store(true, Ordering::Release);
        let waiters = self.stop();
        warn!(backup = %self.addr, failed = waiters.len(), "replicated writes fail: {why}");
        notify_failed(&sh.mailboxes, waiters);
    }

    fn stop(&self) -> Vec<Waiter> {
        self.closed.store(true, Ordering::Release);
        let waiters: Vec<Waiter> = {
            let mut st = self.st.lock();
            if let Some(out) = st.out.take() {
                // Also wakes the thread blocked reading answers.
                let _ = out.shutdown(Shutdown::Both);
            }
            let mut w: Vec<Waiter> = st.sent.drain(..).flat_map(|f| f.waiters).collect();
            w.append(&mut st.open_waiters);
            st.enc = None;
            st.open.clear();
            w
        };
        waiters
    }

    /// Connects (again and again, with backoff) and reads answers until closed.
    fn run(self: &Arc<Self>, sh: &Weak<Shared>) {
        let mut backoff = Duration::from_millis(10);
        let mut warned = false;
        let mut refusals = 0u32;
        while !self.is_closed() {
            let Some(shared) = sh.upgrade() else { return };
            if shared.shutdown.load(Ordering::Acquire) {
                return;
            }
            let stream = match connect(&shared, &self.addr) {
                Ok(s) => s,
                Err(e) => {
                    if !warned {
                        warn!(backup = %self.addr, "backup unreachable, writes to its regions wait: {e}");
                        self.counters.link_failures.fetch_add(1, Relaxed);
                        warned = true;
                    }
                    drop(shared);
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            let max_frame = shared.config.max_frame;
            drop(shared);
            let (why, answer) = self.serve(sh, stream, max_frame);
            self.st.lock().out = None;
            if self.is_closed() {
                return;
            }
            match answer {
                Some(Answer::Owned(what)) => {
                    if let Some(shared) = sh.upgrade() {
                        self.fail(&shared, &format!("the backup owns the region now ({what})"));
                    }
                    return;
                }
                Some(Answer::Refused(_)) => {
                    refusals += 1;
                    if refusals >= MAX_REFUSALS {
                        if let Some(shared) = sh.upgrade() {
                            self.fail(&shared, &format!("refused {refusals} times: {why}"));
                        }
                        return;
                    }
                    // The backup answers: no reason to back off as from a dead link.
                    debug!(backup = %self.addr, refusals, "backup refused frames, sending again: {why}");
                    std::thread::sleep((REFUSED_WAIT * refusals).min(Duration::from_millis(100)));
                    continue;
                }
                Some(Answer::Applied) => {
                    // The link worked: the next failure starts from a short wait again.
                    refusals = 0;
                    backoff = Duration::from_millis(10);
                }
                None => refusals = 0,
            }
            warn!(backup = %self.addr, "replication link failed, reconnecting: {why}");
            self.counters.link_failures.fetch_add(1, Relaxed);
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
            warned = false;
        }
    }

    /// One connection: sends again what is unacknowledged, then matches answers to
    /// frames until the connection fails. Returns why it ended, and the backup's last
    /// answer when it refused frames.
    fn serve(
        &self,
        sh: &Weak<Shared>,
        stream: TcpStream,
        max_frame: u32,
    ) -> (String, Option<Answer>) {
        let mut inp = match stream.try_clone() {
            Ok(s) => s,
            Err(e) => return (e.to_string(), None),
        };
        let mut applied = None;
        {
            let mut st = self.st.lock();
            if self.is_closed() {
                return ("closed".into(), None);
            }
            let mut out = stream;
            for f in &st.sent {
                if let Err(e) = out.write_all(&f.bytes) {
                    return (e.to_string(), None);
                }
                self.counters.frames.fetch_add(1, Relaxed);
            }
            st.out = Some(out);
            st.pump(&self.counters);
        }
        loop {
            let (hdr, payload) = match read_frame(&mut inp, max_frame) {
                Ok(f) => f,
                Err(e) => return (e.to_string(), applied),
            };
            if hdr.kind != FrameKind::Response {
                return (format!("a {:?} frame", hdr.kind), applied);
            }
            let waiters = {
                let mut st = self.st.lock();
                if self.is_closed() {
                    return ("closed".into(), None);
                }
                let Some(front) = st.sent.front() else {
                    return ("an answer to nothing".into(), applied);
                };
                match answer(&payload, front.ops) {
                    Answer::Applied => applied = Some(Answer::Applied),
                    refused @ (Answer::Owned(_) | Answer::Refused(_)) => {
                        let why = match &refused {
                            Answer::Owned(w) | Answer::Refused(w) => w.clone(),
                            Answer::Applied => String::new(),
                        };
                        warn!(backup = %self.addr, "backup refused replicated writes: {why}");
                        if let Some(out) = st.out.take() {
                            let _ = out.shutdown(Shutdown::Both);
                        }
                        return (why, Some(refused));
                    }
                }
                let waiters = match st.sent.pop_front() {
                    Some(f) => {
                        st.acked = f.seq;
                        f.waiters
                    }
                    None => Vec::new(),
                };
                // Progress: what still waits has waited from now on.
                self.set_waiting(!st.sent.is_empty() || st.enc.is_some());
                // The window has room again: what gathered meanwhile goes now.
                st.pump(&self.counters);
                waiters
            };
            if let Some(shared) = sh.upgrade() {
                notify(&shared.mailboxes, waiters);
            }
        }
    }
}

/// What the backup said to a frame of `ops` writes.
fn answer(payload: &[u8], ops: u32) -> Answer {
    let dec = match ResponseDecoder::new(payload) {
        Ok(d) => d,
        Err(e) => return Answer::Refused(e.to_string()),
    };
    let mut n = 0u32;
    for r in dec {
        let r = match r {
            Ok(r) => r,
            Err(e) => return Answer::Refused(e.to_string()),
        };
        match r.status {
            Status::Ok => {}
            Status::WrongServer => return Answer::Owned(format!("op {n}: {}", r.status)),
            s => return Answer::Refused(format!("op {n}: {s}")),
        }
        n += 1;
    }
    if n != ops {
        return Answer::Refused(format!("{n} answers to {ops} writes"));
    }
    Answer::Applied
}

/// A new replication stream to `addr`, announced (the backup refuses older streams'
/// frames from then on).
pub(super) fn connect(sh: &Shared, addr: &str) -> Result<TcpStream, String> {
    let to = match sh.peers.load().get(addr).copied() {
        Some(a) => a,
        None => resolve(addr).map_err(|e| e.to_string())?,
    };
    // Answers may take as long as the backup needs; a dead backup is dropped by
    // the manager, which closes the link.
    let t = Timeouts {
        connect: IO_TIMEOUT,
        read: None,
        write: Some(WRITE_TIMEOUT),
    };
    // A new stream: the backup refuses the frames of this owner's older ones.
    sh.dialer
        .dial(to, t, next_generation())
        .map_err(|e| e.to_string())
}

/// Tells each worker which of its held responses have one more acknowledgement.
fn notify(boxes: &Mailboxes, waiters: Vec<Waiter>) {
    // Backups hold the writes; the clients have no answer yet.
    fail::fail_point!("owner-before-release");
    boxes.post_waiters(waiters, WorkerMsg::Replicated);
}

/// Tells each worker which of its held responses no longer wait for a dropped backup.
fn release(boxes: &Mailboxes, waiters: Vec<Waiter>) {
    boxes.post_waiters(waiters, WorkerMsg::Released);
}

/// Tells each worker which of its held responses can never be acknowledged.
fn notify_failed(boxes: &Mailboxes, waiters: Vec<Waiter>) {
    boxes.post_waiters(waiters, WorkerMsg::ReplicationFailed);
}
