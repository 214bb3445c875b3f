//! Control-plane listener: one event-loop thread for every connection, and two small
//! pools of threads that run requests.
//!
//! The loop accepts (up to a connection cap), sends each connection a challenge,
//! checks its Hello, reads whole frames into buffers that grow only with the bytes that
//! arrive, and closes connections that do not authenticate, stall inside a frame or
//! stop reading their replies. A connection has one request in flight at a time. Quick
//! requests (heartbeats, registrations, opens, status) and catalogue changes (create,
//! reshape, delete, procedure registration, which wait on servers) run on separate
//! pools, so a slow change never delays the heartbeats that keep servers alive.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use farcache_net::handshake::MAX_HELLO;
use farcache_net::{
    Accepted, Clocks, FrameBuf, Greeting, GuardConfig, OutBuf, Stream, TlsAcceptor, accept_next,
};
use farcache_proto::ServerId;
use farcache_proto::control::{ControlRequest, ControlResponse};
use farcache_proto::frame::encode_frame;
use farcache_proto::{Authority, DecodeError, FrameHeader, FrameKind, HEADER_LEN, Role};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};
use parking_lot::Mutex;
use slab::Slab;

use crate::service::Caller;

/// Control messages are small JSON, but a procedure's code rides along (up to
/// `MAX_PROC_CODE`): the limit leaves room for both.
pub const MAX_CONTROL_FRAME: u32 = crate::service::MAX_PROC_CODE as u32 + (1 << 20);
const LISTENER: Token = Token(0);
const TLS_LISTENER: Token = Token(1);
const WAKER: Token = Token(2);
const FIRST_CONN: usize = 3;
const SWEEP_EVERY: Duration = Duration::from_millis(250);
/// Threads for quick requests and for catalogue changes.
const QUICK_THREADS: usize = 2;
const CHANGE_THREADS: usize = 4;
/// How soon to retry accepting after running out of descriptors.
const ACCEPT_RETRY: Duration = Duration::from_millis(20);

/// What answers authenticated requests: the service while this manager leads, a
/// standby's redirect to the leader while it does not.
pub(crate) trait Handler: Send + Sync + 'static {
    fn handle(&self, caller: &Caller, req: ControlRequest) -> ControlResponse;

    /// Server `id`'s heartbeat link closed (it may have died).
    fn link_closed(&self, id: ServerId);
}

/// What the listener needs to start.
pub struct ListenerConfig {
    pub listener: std::net::TcpListener,
    pub tls: Option<(std::net::TcpListener, TlsAcceptor)>,
    pub authority: Authority,
    pub guard: GuardConfig,
}

pub struct Listener {
    addr: SocketAddr,
    tls_addr: Option<SocketAddr>,
    stopping: Arc<AtomicBool>,
    waker: Arc<Waker>,
    threads: Vec<JoinHandle<()>>,
}

struct Job {
    conn: usize,
    serial: u64,
    seq: u64,
    caller: Caller,
    req: ControlRequest,
}

type Reply = (usize, u64, Vec<u8>);

/// A pool's queue; the loop drops it to stop the pool.
struct Pool {
    tx: Sender<Job>,
}

impl Pool {
    fn spawn(
        name: &str,
        threads: usize,
        service: &Arc<dyn Handler>,
        replies: &Sender<Reply>,
        waker: &Arc<Waker>,
        handles: &mut Vec<JoinHandle<()>>,
    ) -> io::Result<Self> {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let (rx, service, replies, waker) =
                (rx.clone(), service.clone(), replies.clone(), waker.clone());
            handles.push(
                thread::Builder::new()
                    .name(format!("manager-{name}-{i}"))
                    .spawn(move || run_jobs(&rx, service.as_ref(), &replies, &waker))?,
            );
        }
        Ok(Self { tx })
    }
}

fn run_jobs(
    rx: &Mutex<Receiver<Job>>,
    service: &dyn Handler,
    replies: &Sender<Reply>,
    waker: &Waker,
) {
    loop {
        let job = match rx.lock().recv() {
            Ok(j) => j,
            Err(_) => return,
        };
        let resp = service.handle(&job.caller, job.req);
        let mut frame = Vec::new();
        encode_frame(&mut frame, FrameKind::ControlReply, job.seq, &resp.encode());
        if replies.send((job.conn, job.serial, frame)).is_err() {
            return;
        }
        let _ = waker.wake();
    }
}

impl Listener {
    pub fn spawn(cfg: ListenerConfig, service: Arc<dyn Handler>) -> io::Result<Self> {
        let addr = cfg.listener.local_addr()?;
        let tls_addr = cfg.tls.as_ref().map(|(l, _)| l.local_addr()).transpose()?;
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let stopping = Arc::new(AtomicBool::new(false));
        let (reply_tx, reply_rx) = channel();
        let mut threads = Vec::new();
        let quick = Pool::spawn(
            "quick",
            QUICK_THREADS,
            &service,
            &reply_tx,
            &waker,
            &mut threads,
        )?;
        let changes = Pool::spawn(
            "change",
            CHANGE_THREADS,
            &service,
            &reply_tx,
            &waker,
            &mut threads,
        )?;
        drop(reply_tx);
        let mut lp = EventLoop {
            service: service.clone(),
            poll,
            listener: TcpListener::from_std(nonblocking(cfg.listener)?),
            tls: match cfg.tls {
                Some((l, t)) => Some((TcpListener::from_std(nonblocking(l)?), t)),
                None => None,
            },
            authority: cfg.authority,
            guard: cfg.guard,
            conns: Slab::new(),
            serial: 0,
            unauth: VecDeque::new(),
            unauth_count: 0,
            quick,
            changes,
            replies: reply_rx,
            stopping: stopping.clone(),
        };
        lp.register()?;
        threads.push(
            thread::Builder::new()
                .name("manager-net".into())
                .spawn(move || lp.run())?,
        );
        Ok(Self {
            addr,
            tls_addr,
            stopping,
            waker,
            threads,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_addr
    }

    /// Stops accepting, closes every connection and joins all threads (requests in
    /// progress finish first).
    pub fn stop(self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
        for t in self.threads {
            if t.join().is_err() {
                tracing::warn!("manager thread panicked");
            }
        }
    }
}

fn nonblocking(l: std::net::TcpListener) -> io::Result<std::net::TcpListener> {
    l.set_nonblocking(true)?;
    Ok(l)
}

enum Auth {
    Challenged(Greeting),
    Ready(Caller),
}

struct Conn {
    stream: Stream,
    peer: SocketAddr,
    serial: u64,
    inbuf: FrameBuf,
    out: OutBuf,
    auth: Auth,
    /// A request is with a pool; the next is read once it answers.
    busy: bool,
    closing: bool,
    closed: bool,
    accepted: Instant,
    frame_since: Option<Instant>,
    /// The server this connection heartbeats for: its closing is a hint that the
    /// server died.
    server: Option<farcache_proto::ServerId>,
}

struct EventLoop {
    service: Arc<dyn Handler>,
    poll: Poll,
    listener: TcpListener,
    tls: Option<(TcpListener, TlsAcceptor)>,
    authority: Authority,
    guard: GuardConfig,
    conns: Slab<Conn>,
    serial: u64,
    /// Connections not yet authenticated, oldest first (entries may be stale), and how
    /// many there are.
    unauth: VecDeque<(usize, u64)>,
    unauth_count: usize,
    quick: Pool,
    changes: Pool,
    replies: Receiver<Reply>,
    stopping: Arc<AtomicBool>,
}

impl EventLoop {
    fn register(&mut self) -> io::Result<()> {
        self.poll
            .registry()
            .register(&mut self.listener, LISTENER, Interest::READABLE)?;
        if let Some((l, _)) = self.tls.as_mut() {
            self.poll
                .registry()
                .register(l, TLS_LISTENER, Interest::READABLE)?;
        }
        Ok(())
    }

    fn run(mut self) {
        let mut events = Events::with_capacity(256);
        let mut next_sweep = Instant::now() + SWEEP_EVERY;
        let mut accept_retry = false;
        while !self.stopping.load(Ordering::SeqCst) {
            let timeout = if accept_retry {
                ACCEPT_RETRY
            } else {
                SWEEP_EVERY
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::warn!("manager poll failed: {e}");
                return;
            }
            let retry = std::mem::take(&mut accept_retry);
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => accept_retry |= self.accept(false),
                    TLS_LISTENER => accept_retry |= self.accept(true),
                    WAKER => self.deliver_replies(),
                    Token(t) => self.serve(t - FIRST_CONN),
                }
            }
            if retry {
                accept_retry |= self.accept(false) | self.accept(true);
            }
            let now = Instant::now();
            if now >= next_sweep {
                next_sweep = now + SWEEP_EVERY;
                self.sweep(now);
            }
        }
        tracing::debug!(connections = self.conns.len(), "manager listener stopping");
    }

    /// Accepts what is waiting; true if accepting failed and should be retried soon.
    fn accept(&mut self, tls: bool) -> bool {
        loop {
            let (l, acceptor) = match (tls, self.tls.as_ref()) {
                (false, _) => (&self.listener, None),
                (true, Some((l, t))) => (l, Some(t)),
                (true, None) => return false,
            };
            let (open, cap) = (self.conns.len(), self.guard.max_connections);
            match accept_next(l, acceptor, |_| open < cap) {
                Accepted::Conn { stream, peer } => self.adopt(stream, peer),
                // Dropping it closes it.
                Accepted::Refused { peer, .. } => {
                    tracing::debug!(%peer, "connection cap reached, refusing");
                }
                Accepted::TlsFailed { peer, error } => {
                    tracing::warn!(%peer, "cannot start a TLS session: {error}");
                }
                Accepted::Drained => return false,
                Accepted::Failed(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    return true;
                }
            }
        }
    }

    fn adopt(&mut self, mut stream: Stream, peer: SocketAddr) {
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        if let Err(e) = stream.register(
            self.poll.registry(),
            Token(FIRST_CONN + key),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!(%peer, "register failed: {e}");
            return;
        }
        let mut out = OutBuf::default();
        let greeting = Greeting::start(&self.authority, &mut out.buf);
        self.serial += 1;
        entry.insert(Conn {
            stream,
            peer,
            serial: self.serial,
            inbuf: FrameBuf::new(),
            out,
            auth: Auth::Challenged(greeting),
            busy: false,
            closing: false,
            closed: false,
            accepted: Instant::now(),
            frame_since: None,
            server: None,
        });
        self.unauth.push_back((key, self.serial));
        self.unauth_count += 1;
        if self.unauth_count > self.guard.max_unauthenticated {
            self.evict_oldest();
        }
        tracing::debug!(%peer, "control connection opened");
        self.serve(key);
    }

    fn evict_oldest(&mut self) {
        while let Some((key, serial)) = self.unauth.pop_front() {
            let live = self
                .conns
                .get(key)
                .is_some_and(|c| c.serial == serial && matches!(c.auth, Auth::Challenged(_)));
            if live {
                self.close(
                    key,
                    "too many connections waiting to authenticate; the oldest is closed",
                );
                return;
            }
        }
    }

    fn close(&mut self, key: usize, why: &str) {
        let Some(mut c) = self.conns.try_remove(key) else {
            return;
        };
        if matches!(c.auth, Auth::Challenged(_)) {
            self.unauth_count = self.unauth_count.saturating_sub(1);
        }
        if let Some(id) = c.server
            && !self.stopping.load(Ordering::Acquire)
        {
            // A server's heartbeat link closed: check at once whether it died rather
            // than wait for the heartbeat timeout.
            let service = self.service.clone();
            let spawned = thread::Builder::new()
                .name("manager-suspect".into())
                .spawn(move || service.link_closed(id));
            if let Err(e) = spawned {
                tracing::warn!(server = id, "cannot check a silent server: {e}");
            }
        }
        if !why.is_empty() {
            tracing::debug!(peer = %c.peer, "closing control connection: {why}");
            c.out.drop_unsent();
            encode_frame(&mut c.out.buf, FrameKind::Error, 0, why.as_bytes());
            c.flush();
        }
        let _ = c.stream.deregister(self.poll.registry());
    }

    fn deliver_replies(&mut self) {
        while let Ok((key, serial, frame)) = self.replies.try_recv() {
            if let Some(c) = self.conns.get_mut(key).filter(|c| c.serial == serial) {
                c.busy = false;
                c.out.buf.extend_from_slice(&frame);
                self.serve(key);
            }
        }
    }

    fn serve(&mut self, key: usize) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        let was_waiting = matches!(c.auth, Auth::Challenged(_));
        c.flush();
        while !c.closed && !c.closing && !c.busy {
            match c.next_frame() {
                Ok(Some((hdr, payload))) => {
                    if let Some(job) = c.handle(&self.authority, key, hdr, &payload) {
                        let pool = if is_change(&job.req) {
                            &self.changes
                        } else {
                            &self.quick
                        };
                        c.busy = pool.tx.send(job).is_ok();
                    }
                    c.flush();
                }
                Ok(None) => match c.inbuf.read_from(&mut c.stream, MAX_CONTROL_FRAME) {
                    Ok((0, _)) => c.closed = true,
                    Ok(_) => c.frame_since = (!c.inbuf.is_empty()).then(Instant::now),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        tracing::debug!(peer = %c.peer, error = %e, "control connection read failed");
                        c.closed = true;
                    }
                },
                Err(why) => c.fail(&why),
            }
        }
        if c.closing && c.out.pending() == 0 {
            c.closed = true;
        }
        if was_waiting && matches!(c.auth, Auth::Ready(_)) {
            self.unauth_count = self.unauth_count.saturating_sub(1);
        }
        if c.closed {
            self.close(key, "");
        }
    }

    fn sweep(&mut self, now: Instant) {
        let g = &self.guard;
        let overdue: Vec<(usize, &'static str)> = self
            .conns
            .iter()
            .filter_map(|(k, c)| {
                let clocks = Clocks {
                    accepted: c.accepted,
                    authenticated: !matches!(c.auth, Auth::Challenged(_)),
                    // A frame behind a request still with a pool is not stalled.
                    frame_since: c.frame_since.filter(|_| !c.busy),
                    stalled_since: c.out.stalled_since(),
                };
                g.expired(now, clocks).map(|e| (k, e.why()))
            })
            .collect();
        for (k, why) in overdue {
            self.close(k, why);
        }
        if self.unauth.len() > 4 * self.guard.max_unauthenticated {
            let conns = &self.conns;
            self.unauth.retain(|&(k, s)| {
                conns
                    .get(k)
                    .is_some_and(|c| c.serial == s && matches!(c.auth, Auth::Challenged(_)))
            });
        }
    }
}

/// Requests that change the catalogue and wait on servers.
fn is_change(req: &ControlRequest) -> bool {
    matches!(
        req,
        ControlRequest::CreateCache { .. }
            | ControlRequest::ReshapeCache { .. }
            | ControlRequest::SetSlo { .. }
            | ControlRequest::DeleteCache { .. }
            | ControlRequest::RegisterProc { .. }
    )
}

impl Conn {
    /// The next whole frame in the buffer, if one is there.
    fn next_frame(&mut self) -> Result<Option<(FrameHeader, Vec<u8>)>, String> {
        let max = match self.auth {
            Auth::Challenged(_) => MAX_HELLO,
            Auth::Ready(_) => MAX_CONTROL_FRAME,
        };
        let Some(h) =
            FrameHeader::decode(self.inbuf.bytes(), max).map_err(|e| format!("bad frame: {e}"))?
        else {
            return Ok(None);
        };
        if self.inbuf.len() < h.frame_len() {
            return Ok(None);
        }
        let payload = self.inbuf.bytes()[HEADER_LEN..h.frame_len()].to_vec();
        self.inbuf.consume(h.frame_len());
        if self.inbuf.is_empty() {
            self.frame_since = None;
        }
        Ok(Some((h, payload)))
    }

    /// Handles one frame: the handshake, or a request for a pool.
    fn handle(
        &mut self,
        authority: &Authority,
        key: usize,
        hdr: FrameHeader,
        payload: &[u8],
    ) -> Option<Job> {
        match (&self.auth, hdr.kind) {
            (Auth::Challenged(g), FrameKind::Hello) => {
                let g = *g;
                match g.verify(authority, payload) {
                    Ok(v) => {
                        g.answer(
                            authority,
                            &v,
                            0,
                            MAX_CONTROL_FRAME,
                            hdr.seq,
                            &mut self.out.buf,
                        );
                        tracing::debug!(peer = %self.peer, role = ?v.role, "control peer authenticated");
                        self.auth = Auth::Ready(Caller {
                            role: v.role,
                            access: v.access,
                            identity: v.identity,
                        });
                    }
                    Err(why) => {
                        let why = DecodeError::from(why).to_string();
                        tracing::warn!(peer = %self.peer, "handshake refused: {why}");
                        self.fail(&why);
                    }
                }
                None
            }
            (Auth::Challenged(_), kind) => {
                self.fail(&format!(
                    "{kind:?} frame before the handshake (a Hello answering the challenge comes first)"
                ));
                None
            }
            (Auth::Ready(caller), FrameKind::Control) => match ControlRequest::decode(payload) {
                Ok(req) => {
                    if let (Role::Server, ControlRequest::Heartbeat { server_id, .. }) =
                        (caller.role, &req)
                    {
                        self.server = Some(*server_id);
                    }
                    Some(Job {
                        conn: key,
                        serial: self.serial,
                        seq: hdr.seq,
                        caller: caller.clone(),
                        req,
                    })
                }
                Err(e) => {
                    self.fail(&format!("bad control request: {e}"));
                    None
                }
            },
            (Auth::Ready(_), kind) => {
                self.fail(&format!("expected a Control frame, got {kind:?}"));
                None
            }
        }
    }

    /// Queues an `Error` frame; the connection closes once it is sent.
    fn fail(&mut self, why: &str) {
        tracing::warn!(peer = %self.peer, error = why, "closing control connection after a protocol error");
        encode_frame(&mut self.out.buf, FrameKind::Error, 0, why.as_bytes());
        self.closing = true;
        self.inbuf.clear();
        self.flush();
    }

    fn flush(&mut self) {
        // Control replies are small: keep no more than 64 KiB of buffer when idle.
        if self.out.flush(&mut self.stream, 64 << 10).is_err() {
            self.closed = true;
        }
    }
}
