//! An event loop serving many connections. Each turn reads what every ready
//! connection sent, then runs the commands in rounds: a round takes from each
//! connection its leading run of `GET`s and `MGET`s (or plain `SET`s, or `INCR`s and
//! their kin), runs all of them as one multi-get (one multi-put; one batched
//! read-modify-write per key), and answers other commands one by one. So
//! fifty clients each sending one `GET` cost one round trip per farcache server,
//! not fifty; each connection's replies stay in its command order. Commands too
//! big for a turn go to the offload pool ([`crate::offload`]) and their connection
//! waits for them.
//!
//! Before a connection authenticates (when `AUTH` is required) it is parsed with
//! [`Limits::UNAUTHENTICATED`], one command at a time (the next waits until that one
//! ran, since it may be the `AUTH` that lifts them), and is closed if it has not
//! authenticated within the front end's `auth_timeout`.

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use crate::cmd;
use crate::error::store_error_line;
use crate::offload::{Done, Job};
use crate::parse::{Args, Limits, ProtocolError, next_command};
use crate::reply::Out;
use crate::session::Session;
use crate::shared::Shared;
use farcache_store::{Edit, Edited};

mod rounds;

pub const WAKER: Token = Token(usize::MAX);
/// Bytes read from one connection per turn (others get their turn).
const READ_BUDGET: usize = 1 << 20;
/// Past this many unsent reply bytes a connection is not read until it drains.
const OUT_HIGH: usize = 16 << 20;
const SCRATCH: usize = 64 << 10;
/// Longest the loop sleeps with nothing to do.
const IDLE_WAIT: Duration = Duration::from_millis(500);

struct Conn {
    stream: TcpStream,
    s: Session,
    accepted: Instant,
    /// Unparsed bytes. Reading stops at [`Limits::max_query`] (Redis's
    /// `client-query-buffer-limit`); if no frame completes within it, a protocol
    /// error and close.
    inbuf: BytesMut,
    queue: VecDeque<Args>,
    /// Parsing stopped behind a command of an unauthenticated connection: the rest
    /// of `inbuf` is parsed once it ran.
    held: bool,
    out: Vec<u8>,
    /// Bytes of `out` already sent.
    sent: usize,
    /// The peer closed its side, or sent a request that can never parse: answer
    /// what came before, then close.
    closing: bool,
    protocol_error: Option<ProtocolError>,
    writable_interest: bool,
    read_paused: bool,
    /// A command of this connection runs on the offload pool (the id of the session
    /// it took along): nothing else of it runs, and it is not read, until it is back.
    busy: Option<u64>,
}

/// A `GET` or `MGET` waiting in a round (the command itself, moved out of its
/// queue: the keys are views into the received bytes, never copied).
struct GetItem {
    conn: usize,
    args: Args,
    multi: bool,
}

/// The part of a round that runs as one multi-get or multi-put.
#[derive(Default)]
struct Round {
    gets: Vec<GetItem>,
    /// `SET key value` and `MSET` commands and their connections.
    sets: Vec<(usize, Args)>,
    /// Edits (the `INCR` family, `APPEND`, `SETRANGE`) and their connections.
    edits: Vec<(usize, Args)>,
}

pub struct Worker {
    shared: Arc<Shared>,
    poll: Poll,
    conns: Slab<Conn>,
    incoming: Receiver<TcpStream>,
    scratch: Vec<u8>,
    /// Connections to read again without waiting for an event.
    again: Vec<usize>,
    /// Where heavy commands go, and where they come back (with a wake-up).
    offload: Sender<Job>,
    done_tx: Sender<Done>,
    done_rx: Receiver<Done>,
    waker: Arc<Waker>,
    auth_timeout: Duration,
    /// The earliest auth deadline of a connection not yet authenticated (when to
    /// sweep next).
    next_sweep: Option<Instant>,
}

impl Worker {
    pub fn new(
        shared: Arc<Shared>,
        incoming: Receiver<TcpStream>,
        offload: Sender<Job>,
        auth_timeout: Duration,
    ) -> std::io::Result<(Self, Arc<Waker>)> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        Ok((
            Self {
                shared,
                poll,
                conns: Slab::new(),
                incoming,
                scratch: vec![0; SCRATCH],
                again: Vec::new(),
                offload,
                done_tx,
                done_rx,
                waker: waker.clone(),
                auth_timeout,
                next_sweep: None,
            },
            waker,
        ))
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        loop {
            if self.shared.stopping() {
                return;
            }
            let wait = if self.again.is_empty() {
                self.next_sweep.map_or(IDLE_WAIT, |t| {
                    t.saturating_duration_since(Instant::now()).min(IDLE_WAIT)
                })
            } else {
                Duration::ZERO
            };
            if let Err(e) = self.poll.poll(&mut events, Some(wait))
                && e.kind() != ErrorKind::Interrupted
            {
                tracing::error!(error = %e, "RESP worker poll failed");
                return;
            }
            let mut ready = std::mem::take(&mut self.again);
            for ev in events.iter() {
                if ev.token() == WAKER {
                    self.adopt();
                    self.take_back(&mut ready);
                } else {
                    ready.push(ev.token().0);
                }
            }
            for id in ready {
                self.read(id);
            }
            self.rounds();
            self.flush_all();
            self.sweep(Instant::now());
        }
    }

    /// Closes the connections whose auth deadline passed, if one may have.
    fn sweep(&mut self, now: Instant) {
        if self.next_sweep.is_none_or(|t| now < t) {
            return;
        }
        self.next_sweep = None;
        let mut expired = Vec::new();
        for (id, c) in self.conns.iter() {
            if c.s.authenticated() {
                continue;
            }
            match c.accepted.checked_add(self.auth_timeout) {
                Some(t) if t <= now => expired.push(id),
                Some(t) => self.next_sweep = Some(self.next_sweep.map_or(t, |n| n.min(t))),
                None => {}
            }
        }
        for id in expired {
            if let Some(c) = self.conns.get(id) {
                tracing::debug!(
                    peer = ?c.stream.peer_addr().ok(),
                    timeout = ?self.auth_timeout,
                    "RESP connection closed: no AUTH in time"
                );
            }
            self.shared
                .rejected_unauthenticated
                .fetch_add(1, Ordering::Relaxed);
            self.close(id);
        }
    }

    /// Takes the connections the acceptor handed over.
    fn adopt(&mut self) {
        while let Ok(mut stream) = self.incoming.try_recv() {
            let entry = self.conns.vacant_entry();
            let id = entry.key();
            if let Err(e) =
                self.poll
                    .registry()
                    .register(&mut stream, Token(id), Interest::READABLE)
            {
                tracing::warn!(error = %e, "cannot watch a RESP connection");
                self.shared.connected.fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            let s = Session::new(self.shared.clone());
            let accepted = Instant::now();
            if !s.authenticated()
                && let Some(t) = accepted.checked_add(self.auth_timeout)
            {
                self.next_sweep = Some(self.next_sweep.map_or(t, |n| n.min(t)));
            }
            entry.insert(Conn {
                stream,
                s,
                accepted,
                inbuf: BytesMut::with_capacity(SCRATCH),
                queue: VecDeque::new(),
                held: false,
                out: Vec::new(),
                sent: 0,
                closing: false,
                protocol_error: None,
                writable_interest: false,
                read_paused: false,
                busy: None,
            });
            // Bytes may have arrived before registration (edge-triggered).
            self.read(id);
        }
    }

    /// Takes back the commands the offload pool finished: their replies, and their
    /// connections' sessions. Connections that closed meanwhile are forgotten.
    fn take_back(&mut self, ready: &mut Vec<usize>) {
        while let Ok(done) = self.done_rx.try_recv() {
            let Some(c) = self.conns.get_mut(done.conn) else {
                continue;
            };
            if c.busy != Some(done.s.id) {
                // The slot holds a newer connection.
                continue;
            }
            c.s = done.s;
            c.out.extend_from_slice(&done.out);
            c.busy = None;
            if c.read_paused {
                c.read_paused = false;
                ready.push(done.conn);
            }
        }
    }

    /// Hands `a`, a command of connection `id`, to the offload pool with the
    /// connection's session.
    fn send_off(&mut self, id: usize, a: Args) {
        let Some(c) = self.conns.get_mut(id) else {
            return;
        };
        let stand_in = c.s.placeholder();
        let s = std::mem::replace(&mut c.s, stand_in);
        c.busy = Some(s.id);
        let job = Job {
            conn: id,
            s,
            args: a,
            done: self.done_tx.clone(),
            waker: self.waker.clone(),
        };
        if let Err(back) = self.offload.send(job) {
            // No pool (stopping): run it here.
            let Job { s, args, .. } = back.0;
            c.s = s;
            c.busy = None;
            let mut out = Out {
                buf: &mut c.out,
                proto: c.s.proto,
            };
            cmd::dispatch(&mut c.s, &args, &mut out);
        }
    }

    /// Reads what `id` sent and parses its complete commands.
    fn read(&mut self, id: usize) {
        let Some(c) = self.conns.get_mut(id) else {
            return;
        };
        if c.busy.is_some() || c.out.len() - c.sent > OUT_HIGH {
            // Read again once the replies drain.
            c.read_paused = true;
            return;
        }
        let authenticated = c.s.authenticated();
        let limits = Limits::new(authenticated);
        let mut got = 0;
        // The socket may hold more than was read (no `WouldBlock` seen).
        let mut more = false;
        while !c.closing {
            // Stop at the query cap: the rest waits in the socket (before AUTH the
            // cap is small, so a stranger is held to a few hundred KiB).
            if got >= READ_BUDGET || c.inbuf.len() >= limits.max_query {
                more = true;
                break;
            }
            match c.stream.read(&mut self.scratch) {
                Ok(0) => {
                    c.closing = true;
                    break;
                }
                Ok(n) => {
                    got += n;
                    c.inbuf.extend_from_slice(&self.scratch[..n]);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    c.closing = true;
                    break;
                }
            }
        }
        c.held = false;
        let mut refused = None;
        loop {
            if !authenticated && !c.queue.is_empty() {
                // The queued command may be the AUTH that lifts the limits.
                c.held = !c.inbuf.is_empty();
                break;
            }
            match next_command(&mut c.inbuf, &limits) {
                Ok(Some(a)) if a.is_empty() => {}
                Ok(Some(a)) => {
                    self.shared.commands.fetch_add(1, Ordering::Relaxed);
                    c.queue.push_back(a);
                }
                Ok(None) => break,
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        // Nothing held back and still at the cap: no frame can complete within it.
        if refused.is_none() && !c.held && c.inbuf.len() >= limits.max_query {
            refused = Some(ProtocolError(if authenticated {
                format!("client query buffer above {} MiB", limits.max_query >> 20)
            } else {
                format!(
                    "unauthenticated query buffer above {} KiB",
                    limits.max_query >> 10
                )
            }));
        }
        if let Some(e) = refused {
            if !authenticated {
                tracing::debug!(
                    peer = ?c.stream.peer_addr().ok(),
                    error = %e,
                    "RESP connection closed before AUTH"
                );
                self.shared
                    .rejected_unauthenticated
                    .fetch_add(1, Ordering::Relaxed);
            }
            c.protocol_error = Some(e);
            c.closing = true;
            c.held = false;
            c.inbuf = BytesMut::new();
        }
        if c.held || (more && !c.closing) {
            // More may be waiting; edge-triggered polling will not say so again.
            self.again.push(id);
        }
    }

    /// Sends what every connection has to send; closes the finished ones.
    fn flush_all(&mut self) {
        let ids: Vec<usize> = self.conns.iter().map(|(i, _)| i).collect();
        for id in ids {
            let Some(c) = self.conns.get_mut(id) else {
                continue;
            };
            if c.busy.is_none()
                && let Some(e) = c.protocol_error.take()
            {
                Out {
                    buf: &mut c.out,
                    proto: c.s.proto,
                }
                .error(&format!("ERR {e}"));
            }
            let mut broken = false;
            while c.sent < c.out.len() {
                match c.stream.write(&c.out[c.sent..]) {
                    Ok(0) => {
                        broken = true;
                        break;
                    }
                    Ok(n) => c.sent += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => {
                        broken = true;
                        break;
                    }
                }
            }
            let drained = c.sent == c.out.len();
            if drained {
                c.out.clear();
                c.sent = 0;
                if c.read_paused {
                    c.read_paused = false;
                    self.again.push(id);
                }
            }
            let done = broken
                || (drained
                    && c.busy.is_none()
                    && c.queue.is_empty()
                    && (c.s.quit || (c.closing && !c.held)));
            if done {
                self.close(id);
                continue;
            }
            // Watch for room to write while replies wait, and stop once they are out.
            let want_writable = !drained;
            if want_writable != c.writable_interest {
                let interest = if want_writable {
                    Interest::READABLE | Interest::WRITABLE
                } else {
                    Interest::READABLE
                };
                let _ = self
                    .poll
                    .registry()
                    .reregister(&mut c.stream, Token(id), interest);
                c.writable_interest = want_writable;
            }
        }
    }

    fn close(&mut self, id: usize) {
        if self.conns.contains(id) {
            let mut c = self.conns.remove(id);
            let _ = self.poll.registry().deregister(&mut c.stream);
            self.shared.connected.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
