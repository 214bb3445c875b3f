//! One worker's sessions to other servers, for FFlow hand-offs, DFlow pulls and their
//! answers. Messages queue per destination and leave as one `Peer` frame per
//! destination per event-loop turn (per-destination batching), unless batching is off.
//!
//! A session proves this server's role like any connection (it answers the other
//! side's challenge with the cluster secret and its advertised address, and checks the
//! other side's proof), and only goes to servers the region tables name (the peer
//! directory, resolved off the worker). What one destination may hold queued is capped
//! in bytes, and a session the other side stops reading from is failed.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use farcache_net::{FrameBuf, Stream};
use farcache_proto::frame::encode_frame;
use farcache_proto::peer::PeerEncoder;
use farcache_proto::{Challenge, FrameHeader, FrameKind, HEADER_LEN, Hello, HelloAck};
use mio::event::Event;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use slab::Slab;
use tracing::{debug, warn};

use crate::cluster::Shared;
use crate::metrics::{GuardCounters, PeerCounters};

/// Tokens at and above this belong to peer sessions.
pub const PEER_BASE: usize = 1 << 40;
/// After a failed connection, messages for that server fail fast for this long.
const RETRY_AFTER: Duration = Duration::from_millis(300);
/// Largest `Peer` frame this side builds.
const FRAME_TARGET: usize = 1 << 20;
/// Largest frame a session reads from the other side (only handshake frames and
/// errors come back).
const MAX_BACK: u32 = 64 << 10;

enum State {
    Connecting,
    /// Waiting for the other side's challenge, then for its answer to our Hello.
    Handshake {
        sent: Option<(Challenge, Hello)>,
    },
    Ready,
    Down {
        until: Instant,
        why: String,
    },
}

struct Session {
    addr: String,
    stream: Option<Stream>,
    state: State,
    /// Encoded messages not yet framed, and their bytes.
    queued: Vec<Vec<u8>>,
    queued_bytes: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    rbuf: FrameBuf,
    /// When the connection started (handshake deadline) or writes last stopped
    /// making progress (stall deadline).
    since: Instant,
}

impl Session {
    fn backlog(&self) -> usize {
        self.queued_bytes + self.wbuf.len() - self.wpos
    }
}

/// What the engine must act on after sessions did I/O.
#[derive(Default)]
pub struct Fallout {
    /// Messages that could not be sent, with the reason.
    pub bounced: Vec<(String, Vec<u8>)>,
    /// Servers whose session failed, with the reason (messages already written to it
    /// may be lost).
    pub down: Vec<(String, String)>,
}

impl Fallout {
    pub fn is_empty(&self) -> bool {
        self.bounced.is_empty() && self.down.is_empty()
    }
}

pub struct Sessions {
    by_addr: HashMap<String, usize>,
    slots: Slab<Session>,
    batching: bool,
    dirty: Vec<usize>,
}

impl Sessions {
    pub fn new(batching: bool) -> Self {
        Self {
            by_addr: HashMap::new(),
            slots: Slab::new(),
            batching,
            dirty: Vec::new(),
        }
    }

    /// Queues one encoded message for `dest`.
    pub fn send(
        &mut self,
        sh: &Shared,
        reg: &Registry,
        dest: &str,
        msg: Vec<u8>,
        out: &mut Fallout,
    ) {
        let key = match self.by_addr.get(dest) {
            Some(&k) => k,
            None => {
                let k = self.slots.insert(Session {
                    addr: dest.to_string(),
                    stream: None,
                    state: State::Down {
                        until: Instant::now(),
                        why: String::new(),
                    },
                    queued: Vec::new(),
                    queued_bytes: 0,
                    wbuf: Vec::new(),
                    wpos: 0,
                    rbuf: FrameBuf::new(),
                    since: Instant::now(),
                });
                self.by_addr.insert(dest.to_string(), k);
                k
            }
        };
        let Some(s) = self.slots.get_mut(key) else {
            return;
        };
        if let State::Down { until, why } = &s.state {
            if Instant::now() < *until {
                out.bounced.push((why.clone(), msg));
                return;
            }
            if let Err(why) = connect(sh, reg, key, s) {
                out.bounced.push((why.clone(), msg));
                s.state = State::Down {
                    until: Instant::now() + RETRY_AFTER,
                    why,
                };
                return;
            }
        }
        if s.backlog() + msg.len() > sh.config.max_peer_queue {
            GuardCounters::bump(&sh.metrics.guard.peer_dropped);
            let why = format!(
                "server {dest} is not taking messages fast enough ({} bytes queued for it)",
                s.backlog()
            );
            out.bounced.push((why, msg));
            return;
        }
        s.queued_bytes += msg.len();
        s.queued.push(msg);
        if self.batching {
            if s.queued.len() == 1 {
                self.dirty.push(key);
            }
        } else {
            self.flush_one(key, out, Some(&sh.metrics.peer));
        }
    }

    /// Whether `bytes` more for `dest` would fit under the per-destination cap (so
    /// work whose answer would be dropped is not done).
    pub fn has_room(&self, sh: &Shared, dest: &str, bytes: usize) -> bool {
        self.by_addr
            .get(dest)
            .and_then(|&k| self.slots.get(k))
            .is_none_or(|s| s.backlog() + bytes <= sh.config.max_peer_queue)
    }

    /// Frames and writes everything queued this turn.
    pub fn flush(&mut self, sh: &Shared, out: &mut Fallout) {
        for key in std::mem::take(&mut self.dirty) {
            self.flush_one(key, out, Some(&sh.metrics.peer));
        }
    }

    fn flush_one(&mut self, key: usize, out: &mut Fallout, counters: Option<&PeerCounters>) {
        let Some(s) = self.slots.get_mut(key) else {
            return;
        };
        if !matches!(s.state, State::Ready) {
            return; // framed once the session is up
        }
        let mut frames = 0u64;
        let msgs = s.queued.len() as u64;
        let mut enc: Option<PeerEncoder> = None;
        for m in s.queued.drain(..) {
            if enc
                .as_ref()
                .is_some_and(|e| !self.batching || e.len(&s.wbuf) + m.len() > FRAME_TARGET)
                && let Some(e) = enc.take()
            {
                e.finish(&mut s.wbuf);
            }
            enc.get_or_insert_with(|| {
                frames += 1;
                PeerEncoder::begin(&mut s.wbuf)
            })
            .push_encoded(&mut s.wbuf, &m);
        }
        s.queued_bytes = 0;
        if let Some(e) = enc {
            e.finish(&mut s.wbuf);
        }
        if let Some(c) = counters {
            PeerCounters::add(&c.frames_sent, frames);
            PeerCounters::add(&c.msgs_sent, msgs);
        }
        if let Err(why) = write_out(s) {
            self.fail(key, why, out);
        }
    }

    pub fn on_event(&mut self, sh: &Shared, token: Token, ev: &Event, out: &mut Fallout) {
        let key = token.0 - PEER_BASE;
        let Some(s) = self.slots.get_mut(key) else {
            return;
        };
        if s.stream.is_none() {
            return;
        }
        if matches!(s.state, State::Connecting) && ev.is_writable() {
            match s.stream.as_ref().map(Stream::peer_addr) {
                Some(Ok(_)) => {
                    s.state = State::Handshake { sent: None };
                    debug!(peer = %s.addr, "peer session connected, authenticating");
                }
                Some(Err(e)) if e.kind() == io::ErrorKind::NotConnected => {}
                Some(Err(e)) => {
                    let why = format!("cannot connect to server {}: {e}", s.addr);
                    return self.fail(key, why, out);
                }
                None => return,
            }
        }
        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
            if let Err(why) = read_back(sh, s) {
                return self.fail(key, why, out);
            }
            if matches!(s.state, State::Ready) && !s.queued.is_empty() {
                self.flush_one(key, out, Some(&sh.metrics.peer));
            }
        }
        let Some(s) = self.slots.get_mut(key) else {
            return;
        };
        if ev.is_writable()
            && !matches!(s.state, State::Connecting)
            && let Err(why) = write_out(s)
        {
            self.fail(key, why, out);
        }
    }

    /// Fails sessions whose handshake or writes are overdue.
    pub fn sweep(&mut self, now: Instant, handshake: Duration, stall: Duration, out: &mut Fallout) {
        let overdue: Vec<(usize, String)> = self
            .slots
            .iter()
            .filter_map(|(k, s)| match s.state {
                State::Connecting | State::Handshake { .. }
                    if now.duration_since(s.since) > handshake =>
                {
                    Some((
                        k,
                        format!("server {} did not complete the handshake in time", s.addr),
                    ))
                }
                State::Ready if s.wpos < s.wbuf.len() && now.duration_since(s.since) > stall => {
                    Some((
                        k,
                        format!("server {} stopped reading this server's messages", s.addr),
                    ))
                }
                _ => None,
            })
            .collect();
        for (k, why) in overdue {
            self.fail(k, why, out);
        }
    }

    fn fail(&mut self, key: usize, why: String, out: &mut Fallout) {
        let Some(s) = self.slots.get_mut(key) else {
            return;
        };
        warn!(peer = %s.addr, "{why}");
        s.stream = None;
        s.wbuf.clear();
        s.wpos = 0;
        s.rbuf.clear();
        s.queued_bytes = 0;
        for m in s.queued.drain(..) {
            out.bounced.push((why.clone(), m));
        }
        out.down.push((s.addr.clone(), why.clone()));
        s.state = State::Down {
            until: Instant::now() + RETRY_AFTER,
            why,
        };
    }
}

/// The address of `dest` if it is a server the region tables name.
fn directory(sh: &Shared, dest: &str) -> Option<SocketAddr> {
    sh.peers.load().get(dest).copied()
}

fn connect(sh: &Shared, reg: &Registry, key: usize, s: &mut Session) -> Result<(), String> {
    let Some(at) = directory(sh, &s.addr) else {
        return Err(format!(
            "server {} is not named by any region table this server holds",
            s.addr
        ));
    };
    let fail = |e: io::Error| format!("cannot connect to server {}: {e}", s.addr);
    let tcp = TcpStream::connect(at).map_err(fail)?;
    let _ = tcp.set_nodelay(true);
    let mut stream = Stream::Plain(tcp);
    stream
        .register(
            reg,
            Token(PEER_BASE + key),
            Interest::READABLE | Interest::WRITABLE,
        )
        .map_err(fail)?;
    s.wbuf.clear();
    s.wpos = 0;
    s.rbuf.clear();
    s.stream = Some(stream);
    s.state = State::Connecting;
    s.since = Instant::now();
    Ok(())
}

/// Reads what the other side sends back: its challenge, its answer to our Hello, or an
/// error. Nothing else is expected on a session.
fn read_back(sh: &Shared, s: &mut Session) -> Result<(), String> {
    loop {
        let Some(stream) = s.stream.as_mut() else {
            return Ok(());
        };
        match s.rbuf.read_from(stream, MAX_BACK) {
            Ok((0, _)) => return Err(format!("server {} closed the session", s.addr)),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("session to server {} failed: {e}", s.addr)),
        }
        while let Some(h) = FrameHeader::decode(s.rbuf.bytes(), MAX_BACK)
            .map_err(|e| format!("server {} sent a bad frame: {e}", s.addr))?
        {
            if s.rbuf.len() < h.frame_len() {
                break;
            }
            let payload = s.rbuf.bytes()[HEADER_LEN..h.frame_len()].to_vec();
            s.rbuf.consume(h.frame_len());
            on_frame(sh, s, h.kind, &payload)?;
        }
    }
}

fn on_frame(sh: &Shared, s: &mut Session, kind: FrameKind, payload: &[u8]) -> Result<(), String> {
    let bad = |what: &str| format!("server {}: {what}", s.addr);
    match (kind, &s.state) {
        (FrameKind::Challenge, State::Handshake { sent: None }) => {
            let ch = Challenge::decode(payload).map_err(|e| bad(&e.to_string()))?;
            let hello = sh.dialer.hello(&ch);
            encode_frame(&mut s.wbuf, FrameKind::Hello, 0, &hello.encode());
            s.state = State::Handshake {
                sent: Some((ch, hello)),
            };
            write_out(s)
        }
        (
            FrameKind::HelloAck,
            State::Handshake {
                sent: Some((ch, hello)),
            },
        ) => {
            let ack = HelloAck::decode(payload).map_err(|e| bad(&e.to_string()))?;
            sh.dialer
                .check_ack(hello, ch, &ack)
                .map_err(|e| bad(&e.to_string()))?;
            debug!(peer = %s.addr, "peer session up");
            s.state = State::Ready;
            s.since = Instant::now();
            Ok(())
        }
        (FrameKind::Error, _) => Err(bad(&format!(
            "refused the session: {}",
            String::from_utf8_lossy(payload)
        ))),
        (kind, _) => Err(bad(&format!("unexpected {kind:?} frame on a session"))),
    }
}

fn write_out(s: &mut Session) -> Result<(), String> {
    let Some(stream) = s.stream.as_mut() else {
        return Ok(());
    };
    let before = s.wpos;
    while s.wpos < s.wbuf.len() {
        match stream.write(&s.wbuf[s.wpos..]) {
            Ok(0) => return Err(format!("server {} stopped reading", s.addr)),
            Ok(n) => s.wpos += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if s.wpos != before && matches!(s.state, State::Ready) {
                    s.since = Instant::now();
                }
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("session to server {} failed: {e}", s.addr)),
        }
    }
    s.wbuf.clear();
    s.wpos = 0;
    if matches!(s.state, State::Ready) {
        s.since = Instant::now();
    }
    Ok(())
}
