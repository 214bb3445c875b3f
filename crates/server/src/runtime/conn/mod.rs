//! One peer connection: the authenticated handshake, buffers, frame dispatch, and the
//! limits a peer lives under.
//!
//! - Nothing but a Hello answering this side's challenge is read before the peer has
//!   proven its role; the role and token then decide what each frame may do.
//! - Received bytes are read into the worker's shared buffer and served in place; only
//!   the tail of a frame still arriving is kept per connection ([`FrameBuf`]), so a
//!   connection's memory follows what its peer actually sent.
//! - A connection stops reading while its replies are unsent (per connection and in
//!   the whole server) or wait for other servers; a peer that does not read its
//!   replies, or stalls inside a frame or the handshake, is closed by the worker's
//!   sweep ([`Conn::expired`]).
//! - A connection reads a few times per event-loop turn and then yields to the others
//!   ([`Turn::Again`]): one busy peer cannot starve the rest.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

pub use farcache_net::Expiry;
use farcache_net::{Clocks, FrameBuf, Greeting, GuardConfig, OutBuf, Stream};
use farcache_proto::control::{ControlErrorCode, ControlRequest, ControlResponse};
use farcache_proto::frame::encode_frame;
use farcache_proto::peer::{PeerDecoder, PeerEncoder, PeerMsg};
use farcache_proto::{Access, DecodeError, FrameHeader, FrameKind, HEADER_LEN, Role, Status};
use mio::Registry;
use tracing::{debug, warn};

use crate::cluster::Shared;
use crate::cluster::control::Job;
use crate::cluster::flow::{Engine, HoleRef, Invocation, PendingResponses, Target};
use crate::cluster::replication::Waiter;
use crate::engine::exec::{BatchCtx, execute_batch, refuse_batch};
use crate::metrics::{GuardCounters, Tally};

/// Stop reading from a connection while this many responses wait for other servers,
mod handshake;
mod serve;

const MAX_PENDING_RESPONSES: usize = 4096;
/// ... or while those responses hold this many bytes.
const MAX_PENDING_BYTES: usize = 16 << 20;
/// Reads per connection per event-loop turn before the worker serves the others.
const READS_PER_TURN: usize = 4;
/// Bytes of work (replies written, bytes served to other servers) per connection per
/// turn: past it the connection waits for the next turn, so one peer's large requests
/// delay everyone else's by a bounded amount. At least one frame (or peer message) is
/// served per turn.
const TURN_WORK: usize = 64 << 10;
/// Write-buffer capacity kept once it drains; a larger one is given back.
const RETAIN_WBUF: usize = 4 << 20;

/// What a connection's frame handling needs from its worker.
pub struct WorkerCtx<'w> {
    pub shared: &'w Arc<Shared>,
    pub worker: usize,
    pub key: usize,
    pub engine: &'w mut Engine,
    pub reg: &'w Registry,
    pub peer_budget: &'w mut crate::runtime::peer_budget::PeerBudget,
}

/// What the worker does with a connection after serving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Wait for its next event.
    Idle,
    /// It may have more to read: serve it again next turn.
    Again,
    /// Held back by the server's unsent-reply cap or by a full session to another
    /// server: retry shortly.
    Blocked,
}

/// A peer that proved its role.
struct Peer {
    role: Role,
    access: Access,
    /// A server peer's advertised address (the `origin` its FETCHes must carry).
    identity: String,
    /// A server peer's replication stream generation (the Hello's `client_id`;
    /// 0: not a replication stream), and its owner's newest generation.
    stream: u64,
    newest: Option<Arc<parking_lot::RwLock<u64>>>,
}

enum Auth {
    /// Waiting for a Hello answering this challenge.
    Challenged(Greeting),
    Ready(Peer),
}

pub struct Conn {
    pub stream: Stream,
    pub peer: SocketAddr,
    /// Distinguishes this connection from later ones reusing its slab key.
    pub serial: u64,
    inbuf: FrameBuf,
    out: OutBuf,
    auth: Auth,
    /// Responses waiting for procedures running on other servers.
    pending: PendingResponses,
    /// A control request is with the pool: read nothing more until it answers.
    awaiting_control: bool,
    /// Set after a fatal protocol error: flush what is queued, then close.
    closing: bool,
    pub closed: bool,
    accepted: Instant,
    /// Since when an incomplete frame has waited for more bytes.
    frame_since: Option<Instant>,
    /// Bytes this connection has counted in the server's unsent total.
    accounted: usize,
    /// Work done in this turn (see [`TURN_WORK`]).
    work: usize,
    /// The turn's work is done: serve the rest next turn.
    yielded: bool,
    /// A peer message waits for room in the session it answers on.
    blocked: bool,
    /// The unserved rest of a peer frame, re-framed: served before the buffer.
    carry: Option<Vec<u8>>,
    /// The next peer frame served is `carry`, already validated.
    carried_valid: bool,
    /// Reads that returned bytes, ever: tells a worker's direct probe it found work.
    pub reads_with_data: u64,
}

impl Conn {
    /// A new connection, with this side's challenge queued as its first frame.
    pub fn new(stream: Stream, peer: SocketAddr, serial: u64, sh: &Shared) -> Self {
        let mut out = OutBuf::default();
        let greeting = Greeting::start(&sh.authority, &mut out.buf);
        Self {
            stream,
            peer,
            serial,
            inbuf: FrameBuf::new(),
            out,
            auth: Auth::Challenged(greeting),
            pending: PendingResponses::default(),
            awaiting_control: false,
            closing: false,
            closed: false,
            accepted: Instant::now(),
            frame_since: None,
            accounted: 0,
            work: 0,
            yielded: false,
            blocked: false,
            carry: None,
            carried_valid: false,
            reads_with_data: 0,
        }
    }

    pub fn is_authenticated(&self) -> bool {
        matches!(self.auth, Auth::Ready(_))
    }

    fn pending_write(&self) -> usize {
        self.out.pending()
    }

    /// Why the connection may not take more requests now, if it may not.
    fn paused(&self, sh: &Shared) -> Option<Turn> {
        if self.awaiting_control
            || self.pending.len() >= MAX_PENDING_RESPONSES
            || self.pending.bytes() >= MAX_PENDING_BYTES
            || self.pending_write() >= sh.config.max_pending_write
        {
            // A control reply, an answer from another server or a writable event
            // resumes it.
            return Some(Turn::Idle);
        }
        if sh.output_total.load(Relaxed) >= sh.config.max_output_total {
            return Some(Turn::Blocked);
        }
        None
    }

    /// Serves what is buffered and what the socket offers, a few reads at most.
    pub fn on_ready(&mut self, sh: &Shared, ctx: &mut WorkerCtx<'_>, scratch: &mut [u8]) -> Turn {
        self.flush();
        (self.work, self.yielded, self.blocked) = (0, false, false);
        let mut reads = 0;
        let mut turn = loop {
            if self.closed || self.closing {
                break Turn::Idle;
            }
            if !self.inbuf.is_empty() || self.carry.is_some() {
                self.serve_buffered(sh, ctx);
                if self.closed || self.closing {
                    break Turn::Idle;
                }
            }
            if self.blocked {
                break Turn::Blocked;
            }
            if self.yielded {
                break Turn::Again;
            }
            if let Some(t) = self.paused(sh) {
                break t;
            }
            if reads == READS_PER_TURN {
                break Turn::Again;
            }
            reads += 1;
            let read = if self.inbuf.is_empty() {
                self.stream.read(scratch).map(|n| {
                    let used = self.serve_frames(sh, ctx, &scratch[..n]);
                    if used < n {
                        self.inbuf.stash(&scratch[used..n]);
                    }
                    (n, scratch.len())
                })
            } else {
                let r = self.inbuf.read_from(&mut self.stream, sh.config.max_frame);
                if let Ok((n, _)) = r
                    && n > 0
                {
                    self.serve_buffered(sh, ctx);
                }
                r
            };
            self.flush();
            match read {
                Ok((0, _)) => {
                    self.closed = true;
                    break Turn::Idle;
                }
                Ok((n, room)) => {
                    self.reads_with_data += 1;
                    self.frame_since = (!self.inbuf.is_empty()).then(Instant::now);
                    if self.blocked {
                        break Turn::Blocked;
                    }
                    if self.yielded {
                        break Turn::Again;
                    }
                    if self.stream.drained_after(n, room) {
                        // The next arrival raises a new edge.
                        break Turn::Idle;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Turn::Idle,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    debug!(peer = %self.peer, "read error: {e}");
                    self.closed = true;
                    break Turn::Idle;
                }
            }
        };
        // Edge-triggered polling reports room to write only after a write that
        // pushed back, and new bytes only when more arrive. So replies made since
        // the last flush go out now, and whole frames held back by a pause that a
        // flush in this turn lifted are served next turn: else both wait for the
        // peer's next request, which a client waiting for these replies never sends.
        self.flush();
        if turn == Turn::Idle
            && !self.closed
            && !self.closing
            && self.paused(sh).is_none()
            && self.frame_waiting(sh)
        {
            turn = Turn::Again;
        }
        if self.closing && self.pending_write() == 0 {
            self.closed = true;
        }
        self.account(sh);
        turn
    }

    /// Whether the buffer holds a whole frame (or one that cannot parse), so a turn
    /// would serve something: after a pause lifts within the turn no event tells.
    fn frame_waiting(&self, sh: &Shared) -> bool {
        let data = self.inbuf.bytes();
        match FrameHeader::decode(data, sh.config.max_frame) {
            Ok(Some(h)) => data.len() >= h.frame_len(),
            Ok(None) => false,
            Err(_) => true,
        }
    }

    fn serve_buffered(&mut self, sh: &Shared, ctx: &mut WorkerCtx<'_>) {
        // The rest of a split peer frame comes before what follows it. It is kept
        // apart rather than copied back in front of the buffer: a turn serves about
        // one 64 KiB FETCH, and copying megabytes behind it every turn was quadratic.
        if let Some(c) = self.carry.take() {
            self.serve_frames(sh, ctx, &c);
            if self.carry.is_some() || self.blocked || self.yielded || self.closing {
                return;
            }
        }
        let mut buf = std::mem::take(&mut self.inbuf);
        let used = self.serve_frames(sh, ctx, buf.bytes());
        buf.consume(used);
        if !self.closing {
            self.inbuf = buf;
        }
    }

    /// Backups acknowledged the writes of held response `resp` (one of its parts).
    pub fn replicated(&mut self, sh: &Shared, resp: u64) {
        self.pending.release(resp);
        self.pending.drain_ready(&mut self.out.buf);
        self.account(sh);
    }

    /// Puts an answer from another server into its response; sends what is complete.
    pub fn fill(&mut self, sh: &Shared, hole: HoleRef, body: &[u8]) {
        self.pending
            .fill(hole.resp, hole.hole, body, sh.config.max_frame as usize);
        self.pending.drain_ready(&mut self.out.buf);
        self.account(sh);
    }

    /// The control pool answered: queue the reply (behind responses still waiting for
    /// other servers) and read again.
    pub fn control_done(&mut self, sh: &Shared, frame: Vec<u8>) {
        self.awaiting_control = false;
        if self.pending.is_empty() {
            self.out.buf.extend_from_slice(&frame);
        } else {
            self.pending.push(frame, &[]);
            self.pending.drain_ready(&mut self.out.buf);
        }
        self.account(sh);
    }

    fn fatal(&mut self, sh: &Shared, why: &str) {
        sh.metrics.protocol_errors.fetch_add(1, Relaxed);
        warn!(peer = %self.peer, "closing connection after protocol error: {why}");
        encode_frame(&mut self.out.buf, FrameKind::Error, 0, why.as_bytes());
        self.closing = true;
        self.inbuf.clear();
        self.frame_since = None;
    }

    /// Best effort before the worker drops the connection (its thread failed, or the
    /// server stops): tell the peer why.
    pub fn abort(&mut self, why: &str) {
        self.out.drop_unsent();
        encode_frame(&mut self.out.buf, FrameKind::Error, 0, why.as_bytes());
        self.flush();
        self.closed = true;
    }

    /// Writes queued bytes until the socket pushes back.
    pub fn flush(&mut self) {
        if let Err(e) = self.out.flush(&mut self.stream, RETAIN_WBUF) {
            debug!(peer = %self.peer, "write error: {e}");
            self.closed = true;
        }
    }

    /// Keeps the server-wide count of unsent reply bytes up to date.
    fn account(&mut self, sh: &Shared) {
        let now = self.pending_write() + self.pending.bytes();
        if now != self.accounted {
            if now > self.accounted {
                sh.output_total.fetch_add(now - self.accounted, Relaxed);
            } else {
                sh.output_total.fetch_sub(self.accounted - now, Relaxed);
            }
            self.accounted = now;
        }
    }

    /// Takes this connection's bytes out of the server's count (it is being dropped).
    pub fn release(&mut self, sh: &Shared) {
        sh.output_total.fetch_sub(self.accounted, Relaxed);
        self.accounted = 0;
    }

    /// Whether a deadline passed: the handshake, a frame that stopped arriving, or
    /// replies the peer does not take. Returns what to log and count.
    pub fn expired(&self, now: Instant, g: &GuardConfig) -> Option<Expiry> {
        // A frame waiting on this connection's own work is not stalled.
        let idle = !self.awaiting_control && self.pending.is_empty();
        g.expired(
            now,
            Clocks {
                accepted: self.accepted,
                authenticated: self.is_authenticated(),
                frame_since: self.frame_since.filter(|_| idle),
                stalled_since: self.out.stalled_since(),
            },
        )
    }
}

/// The wall clock in microseconds (acknowledgement windows are compared across the
/// servers of one machine, or of hosts whose clocks are synchronised).
fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}
