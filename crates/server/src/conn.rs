//! One peer connection: buffers, handshake state and frame dispatch.

use std::io::{self, Read, Write};
use std::net::SocketAddr;

use farcache_proto::control::{ControlRequest, ControlResponse};
use farcache_proto::frame::encode_frame;
use farcache_proto::{
    DecodeError, FrameHeader, FrameKind, Hello, HelloAck, PROTOCOL_VERSION, Role,
};
use mio::net::TcpStream;
use tracing::{debug, warn};

use farcache_proto::peer::PeerDecoder;
use mio::Registry;

use crate::exec::execute_batch;
use crate::flow::{Engine, HoleRef, Invocation, PendingResponses, Target};
use crate::metrics::Tally;
use crate::server::Shared;

/// Stop reading from a connection while this many responses wait for other servers.
const MAX_PENDING_RESPONSES: usize = 4096;

/// What a connection's frame handling needs from its worker.
pub struct WorkerCtx<'w> {
    pub key: usize,
    pub engine: &'w mut Engine,
    pub reg: &'w Registry,
}

const MIN_READ: usize = 64 << 10;
/// Most a partial frame grows the receive buffer by before more of it arrives.
const GROW_STEP: usize = 1 << 20;
/// Receive buffers above this size shrink back once empty.
const RETAIN_RBUF: usize = 32 << 20;
/// Largest Hello payload accepted (the real one is a few bytes).
const MAX_HELLO: u32 = 256;

pub struct Conn {
    pub stream: TcpStream,
    pub peer: SocketAddr,
    rbuf: Vec<u8>,
    rpos: usize,
    rlen: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    role: Option<Role>,
    /// Distinguishes this connection from later ones reusing its slab key.
    pub serial: u64,
    /// Responses waiting for procedures running on other servers.
    pending: PendingResponses,
    /// Set after a fatal protocol error: flush what is queued, then close.
    closing: bool,
    pub closed: bool,
}

impl Conn {
    pub fn new(stream: TcpStream, peer: SocketAddr, serial: u64) -> Self {
        Self {
            stream,
            peer,
            rbuf: vec![0; MIN_READ * 2],
            rpos: 0,
            rlen: 0,
            wbuf: Vec::with_capacity(MIN_READ),
            wpos: 0,
            role: None,
            serial,
            pending: PendingResponses::default(),
            closing: false,
            closed: false,
        }
    }

    fn pending_write(&self) -> usize {
        self.wbuf.len() - self.wpos
    }

    /// Reads and serves as much as the socket offers, stopping early while too much
    /// response data is unsent (it resumes from the writable event).
    pub fn on_ready(&mut self, sh: &Shared, ctx: &mut WorkerCtx<'_>) {
        self.flush();
        while !self.closed
            && !self.closing
            && self.pending_write() < sh.config.max_pending_write
            && self.pending.len() < MAX_PENDING_RESPONSES
        {
            if self.rbuf.len() - self.rlen < MIN_READ {
                self.make_room(MIN_READ);
            }
            let space = self.rbuf.len() - self.rlen;
            match self.stream.read(&mut self.rbuf[self.rlen..]) {
                Ok(0) => {
                    self.closed = true;
                    break;
                }
                Ok(n) => {
                    self.rlen += n;
                    self.serve_frames(sh, ctx);
                    self.flush();
                    if n < space {
                        // Drained the socket for now; the next arrival raises a new edge.
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    debug!(peer = %self.peer, "read error: {e}");
                    self.closed = true;
                }
            }
        }
        if self.closing && self.pending_write() == 0 {
            self.closed = true;
        }
    }

    fn make_room(&mut self, want: usize) {
        if self.rpos > 0 {
            self.rbuf.copy_within(self.rpos..self.rlen, 0);
            self.rlen -= self.rpos;
            self.rpos = 0;
        }
        if self.rbuf.len() - self.rlen < want {
            self.rbuf.resize(self.rlen + want, 0);
        }
    }

    /// Puts an answer from another server into its response; sends what is complete.
    pub fn fill(&mut self, sh: &Shared, hole: HoleRef, body: &[u8]) {
        self.pending
            .fill(hole.resp, hole.hole, body, sh.config.max_frame as usize);
        self.pending.drain_ready(&mut self.wbuf);
    }

    fn serve_frames(&mut self, sh: &Shared, ctx: &mut WorkerCtx<'_>) {
        let max = sh.config.max_frame;
        while !self.closing {
            let avail = &self.rbuf[self.rpos..self.rlen];
            let hdr = match FrameHeader::decode(avail, max) {
                Ok(Some(h)) => h,
                Ok(None) => break,
                Err(e) => return self.fatal(sh, &e),
            };
            if self.role.is_none() && (hdr.kind != FrameKind::Hello || hdr.len > MAX_HELLO) {
                let e = DecodeError::BadHello(format!(
                    "{:?} frame of {} bytes before the handshake (a Hello of at most {MAX_HELLO} bytes comes first)",
                    hdr.kind, hdr.len
                ));
                return self.fatal(sh, &e);
            }
            if avail.len() < hdr.frame_len() {
                // Grow with the bytes that actually arrive, not with the length a peer
                // announces: a 16-byte header must not commit 64 MiB.
                let missing = hdr.frame_len() - (self.rlen - self.rpos);
                self.make_room(missing.min(GROW_STEP));
                break;
            }
            let start = self.rpos + farcache_proto::HEADER_LEN;
            let end = self.rpos + hdr.frame_len();
            self.rpos = end;
            // Borrow the payload out of rbuf while writing into wbuf.
            let payload = std::mem::take(&mut self.rbuf);
            let r = self.serve_frame(sh, ctx, hdr, &payload[start..end]);
            self.rbuf = payload;
            if let Err(e) = r {
                return self.fatal(sh, &e);
            }
        }
        if self.rpos == self.rlen {
            self.rpos = 0;
            self.rlen = 0;
            if self.rbuf.len() > RETAIN_RBUF {
                // A big frame is done: give its memory back.
                self.rbuf.truncate(MIN_READ * 2);
                self.rbuf.shrink_to_fit();
            }
        }
    }

    fn serve_frame(
        &mut self,
        sh: &Shared,
        ctx: &mut WorkerCtx<'_>,
        hdr: FrameHeader,
        payload: &[u8],
    ) -> Result<(), DecodeError> {
        match (hdr.kind, self.role) {
            (FrameKind::Hello, None) => {
                let hello = Hello::decode(payload)?;
                if hello.version != PROTOCOL_VERSION {
                    return Err(DecodeError::BadHello(format!(
                        "client speaks protocol v{}, this server speaks v{PROTOCOL_VERSION}",
                        hello.version
                    )));
                }
                self.role = Some(hello.role);
                let ack = HelloAck {
                    version: PROTOCOL_VERSION,
                    server_id: sh.server_id(),
                    max_frame: sh.config.max_frame,
                };
                encode_frame(&mut self.wbuf, FrameKind::HelloAck, hdr.seq, &ack.encode());
                Ok(())
            }
            (FrameKind::Request, Some(_)) => {
                let map = sh.store.snapshot();
                let mut tally = Tally::default();
                let start = self.wbuf.len();
                let mut spawned = Vec::new();
                let r = execute_batch(
                    &map,
                    payload,
                    hdr.seq,
                    &mut self.wbuf,
                    sh.config.max_frame as usize,
                    &mut tally,
                    &sh.procs,
                    &mut spawned,
                );
                sh.metrics.publish(&tally);
                r?;
                if !spawned.is_empty() || !self.pending.is_empty() {
                    // Replies leave in request order: this one waits, or queues behind.
                    let frame = self.wbuf.split_off(start);
                    let holes: Vec<usize> = spawned.iter().map(|s| s.offset).collect();
                    let resp = self.pending.push(frame, &holes);
                    for (i, s) in spawned.into_iter().enumerate() {
                        let hole = HoleRef {
                            conn: ctx.key,
                            serial: self.serial,
                            resp,
                            hole: i as u32,
                        };
                        let inv = Invocation {
                            cache: s.cache,
                            proc_name: s.proc_name,
                            addr: s.addr,
                            state: Vec::new(),
                            hops: 0,
                            pulled: Default::default(),
                            target: Target::Local(hole),
                        };
                        ctx.engine.start(sh, ctx.reg, inv, s.step);
                    }
                    self.pending.drain_ready(&mut self.wbuf);
                }
                Ok(())
            }
            (FrameKind::Peer, Some(Role::Server)) => {
                PeerDecoder::validate(payload)?;
                for m in PeerDecoder::new(payload)? {
                    ctx.engine.on_msg(sh, ctx.reg, m?);
                }
                Ok(())
            }
            (FrameKind::Control, Some(role)) => {
                let reply = match ControlRequest::from_json(payload) {
                    Ok(req) => crate::control::handle(sh, role, req),
                    Err(e) => return Err(e),
                };
                encode_frame(
                    &mut self.wbuf,
                    FrameKind::ControlReply,
                    hdr.seq,
                    &reply.to_json(),
                );
                Ok(())
            }
            (kind, role) => Err(DecodeError::BadHello(format!(
                "{kind:?} frame not allowed {}",
                if role.is_none() {
                    "before the handshake"
                } else {
                    "after the handshake"
                }
            ))),
        }
    }

    fn fatal(&mut self, sh: &Shared, e: &DecodeError) {
        sh.metrics
            .protocol_errors
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        warn!(peer = %self.peer, "closing connection after protocol error: {e}");
        encode_frame(
            &mut self.wbuf,
            FrameKind::Error,
            0,
            e.to_string().as_bytes(),
        );
        self.closing = true;
        self.rpos = 0;
        self.rlen = 0;
    }

    /// Writes queued bytes until the socket pushes back.
    pub fn flush(&mut self) {
        while self.pending_write() > 0 {
            match self.stream.write(&self.wbuf[self.wpos..]) {
                Ok(0) => {
                    self.closed = true;
                    return;
                }
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    debug!(peer = %self.peer, "write error: {e}");
                    self.closed = true;
                    return;
                }
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        if self.wbuf.capacity() > 32 << 20 {
            self.wbuf.shrink_to(MIN_READ);
        }
    }
}

/// A reply for a control request a connection's role may not make.
pub fn forbidden(what: &str) -> ControlResponse {
    ControlResponse::error(
        farcache_proto::control::ControlErrorCode::InvalidArgument,
        format!("{what} is only accepted from the manager"),
    )
}
