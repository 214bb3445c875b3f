//! One worker's sessions to other servers, for FFlow hand-offs, DFlow pulls and their
//! answers. Messages queue per destination and leave as one `Peer` frame per
//! destination per event-loop turn (per-destination batching), unless batching is off.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use farcache_proto::frame::encode_frame;
use farcache_proto::peer::PeerEncoder;
use farcache_proto::{FrameKind, Hello, Role};
use mio::event::Event;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use slab::Slab;
use tracing::{debug, warn};

use crate::metrics::{Metrics, PeerCounters};

/// Tokens at and above this belong to peer sessions.
pub const PEER_BASE: usize = 1 << 40;
/// After a failed connection, messages for that server fail fast for this long.
const RETRY_AFTER: Duration = Duration::from_millis(300);
/// Largest `Peer` frame this side builds.
const FRAME_TARGET: usize = 1 << 20;

enum State {
    Connecting,
    Ready,
    Down { until: Instant, why: String },
}

struct Session {
    addr: String,
    stream: Option<TcpStream>,
    state: State,
    /// Encoded messages not yet framed.
    queued: Vec<Vec<u8>>,
    wbuf: Vec<u8>,
    wpos: usize,
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
        reg: &Registry,
        metrics: &Metrics,
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
                    wbuf: Vec::new(),
                    wpos: 0,
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
            if let Err(e) = connect(reg, key, s) {
                let why = format!("cannot connect to server {dest}: {e}");
                out.bounced.push((why.clone(), msg));
                s.state = State::Down {
                    until: Instant::now() + RETRY_AFTER,
                    why,
                };
                return;
            }
        }
        s.queued.push(msg);
        if self.batching {
            if s.queued.len() == 1 {
                self.dirty.push(key);
            }
        } else {
            self.flush_one(key, out, Some(&metrics.peer));
        }
    }

    /// Frames and writes everything queued this turn.
    pub fn flush(&mut self, metrics: &Metrics, out: &mut Fallout) {
        for key in std::mem::take(&mut self.dirty) {
            self.flush_one(key, out, Some(&metrics.peer));
        }
    }

    fn flush_one(&mut self, key: usize, out: &mut Fallout, counters: Option<&PeerCounters>) {
        let Some(s) = self.slots.get_mut(key) else {
            return;
        };
        if !matches!(s.state, State::Ready) {
            return; // framed once the connection is up
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

    pub fn on_event(&mut self, token: Token, ev: &Event, metrics: &Metrics, out: &mut Fallout) {
        let key = token.0 - PEER_BASE;
        let Some(s) = self.slots.get_mut(key) else {
            return;
        };
        let Some(stream) = s.stream.as_mut() else {
            return;
        };
        if let Ok(Some(e)) | Err(e) = stream.take_error() {
            let why = format!("session to server {} failed: {e}", s.addr);
            return self.fail(key, why, out);
        }
        if matches!(s.state, State::Connecting) && ev.is_writable() {
            match stream.peer_addr() {
                Ok(_) => {
                    s.state = State::Ready;
                    debug!(peer = %s.addr, "peer session up");
                    if !s.queued.is_empty() {
                        self.flush_one(key, out, Some(&metrics.peer));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotConnected => {}
                Err(e) => {
                    let why = format!("cannot connect to server {}: {e}", s.addr);
                    return self.fail(key, why, out);
                }
            }
        }
        let Some(s) = self.slots.get_mut(key) else {
            return;
        };
        if ev.is_readable() || ev.is_read_closed() {
            // Peers answer on their own sessions; only a HelloAck or an error comes back.
            let mut scratch = [0u8; 4096];
            loop {
                let Some(stream) = s.stream.as_mut() else {
                    return;
                };
                match stream.read(&mut scratch) {
                    Ok(0) => {
                        let why = format!("server {} closed the session", s.addr);
                        return self.fail(key, why, out);
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        let why = format!("session to server {} failed: {e}", s.addr);
                        return self.fail(key, why, out);
                    }
                }
            }
        }
        if ev.is_writable()
            && matches!(s.state, State::Ready)
            && let Err(why) = write_out(s)
        {
            self.fail(key, why, out);
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

fn resolve(addr: &str) -> io::Result<SocketAddr> {
    if let Ok(a) = addr.parse() {
        return Ok(a);
    }
    addr.to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))
}

fn connect(reg: &Registry, key: usize, s: &mut Session) -> io::Result<()> {
    let mut stream = TcpStream::connect(resolve(&s.addr)?)?;
    let _ = stream.set_nodelay(true);
    reg.register(
        &mut stream,
        Token(PEER_BASE + key),
        Interest::READABLE | Interest::WRITABLE,
    )?;
    s.wbuf.clear();
    s.wpos = 0;
    encode_frame(
        &mut s.wbuf,
        FrameKind::Hello,
        0,
        &Hello::new(Role::Server, 0).encode(),
    );
    s.stream = Some(stream);
    s.state = State::Connecting;
    Ok(())
}

fn write_out(s: &mut Session) -> Result<(), String> {
    let Some(stream) = s.stream.as_mut() else {
        return Ok(());
    };
    while s.wpos < s.wbuf.len() {
        match stream.write(&s.wbuf[s.wpos..]) {
            Ok(0) => return Err(format!("server {} stopped reading", s.addr)),
            Ok(n) => s.wpos += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("session to server {} failed: {e}", s.addr)),
        }
    }
    s.wbuf.clear();
    s.wpos = 0;
    Ok(())
}
