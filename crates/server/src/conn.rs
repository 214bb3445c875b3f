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

use crate::exec::execute_batch;
use crate::metrics::Tally;
use crate::server::Shared;

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
    /// Set after a fatal protocol error: flush what is queued, then close.
    closing: bool,
    pub closed: bool,
}

impl Conn {
    pub fn new(stream: TcpStream, peer: SocketAddr) -> Self {
        Self {
            stream,
            peer,
            rbuf: vec![0; MIN_READ * 2],
            rpos: 0,
            rlen: 0,
            wbuf: Vec::with_capacity(MIN_READ),
            wpos: 0,
            role: None,
            closing: false,
            closed: false,
        }
    }

    fn pending_write(&self) -> usize {
        self.wbuf.len() - self.wpos
    }

    /// Reads and serves as much as the socket offers, stopping early while too much
    /// response data is unsent (it resumes from the writable event).
    pub fn on_ready(&mut self, sh: &Shared) {
        self.flush();
        while !self.closed && !self.closing && self.pending_write() < sh.config.max_pending_write {
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
                    self.serve_frames(sh);
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

    fn serve_frames(&mut self, sh: &Shared) {
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
            let r = self.serve_frame(sh, hdr, &payload[start..end]);
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
                let r = execute_batch(
                    &map,
                    payload,
                    hdr.seq,
                    &mut self.wbuf,
                    sh.config.max_frame as usize,
                    &mut tally,
                    &sh.procs,
                );
                sh.metrics.publish(&tally);
                r
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
