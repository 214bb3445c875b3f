//! One lane's connection to one server: the batch being filled, the batches in flight,
//! and the receive buffer.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use farcache_net::Stream;
use farcache_net::stream::BlockingStream;
use farcache_proto::blocking::handshake;
use farcache_proto::control::CacheInfo;
use farcache_proto::{
    CacheId, Credential, FrameHeader, FrameKind, HEADER_LEN, Op, RequestEncoder, Role, ServerId,
};
use mio::{Interest, Registry, Token};

use crate::error::OpError;
use crate::op::{Kind, PartRef};
use crate::parts::{Entry, PartList};

const MIN_READ: usize = 64 << 10;
/// A data reply's bytes besides its data (opcode, status, length).
pub(crate) const REPLY_HEAD: usize = 6;
/// A WRITE's reply (opcode, status).
pub(crate) const WRITE_REPLY: usize = 2;

struct OpenBatch {
    enc: RequestEncoder,
    parts: PartList,
    reply_bytes: usize,
}

pub(crate) struct InFlight {
    pub seq: u64,
    pub parts: PartList,
    pub sent: Instant,
}

pub(crate) struct ServerConn {
    pub server: ServerId,
    pub addr: String,
    /// The region table this connection's address was last checked against; ops routed
    /// with the same table skip the check.
    pub checked: Option<Arc<CacheInfo>>,
    stream: Stream,
    out: Vec<u8>,
    opos: usize,
    sealed_end: usize,
    open: Option<OpenBatch>,
    pub inflight: VecDeque<InFlight>,
    /// Parts that found `q` frames in flight and the open batch full, in order, with
    /// their ticket's id. They wait here rather than block the submitting thread (a
    /// silent server must not hold up calls that need other servers), and go out as
    /// replies make room.
    pub backlog: VecDeque<(PartRef, u64)>,
    rbuf: BytesMut,
    next_seq: u64,
    frame_limit: usize,
    max_frame: u32,
}

/// What the caller must do with a part that did not fit.
pub(crate) enum Append {
    Queued,
    /// `q` batches are in flight and the open batch is full (or parts wait in the
    /// backlog): the part joins the backlog.
    Full,
}

/// A connection that finished its handshake, not yet registered with a lane.
pub(crate) struct Dialed {
    server: ServerId,
    addr: String,
    stream: Stream,
    max_frame: u32,
}

/// How a lane reaches servers: its credential, and TLS if the client uses it.
pub(crate) struct Dial<'a> {
    pub cred: &'a Credential,
    pub tls: Option<&'a farcache_net::TlsConnector>,
    pub timeout: Duration,
}

impl ServerConn {
    /// Connects, proves the client's credential, checks the server's proof, and
    /// registers with the lane's poll under `token`.
    pub fn connect(
        server: ServerId,
        addr: &str,
        dial: &Dial<'_>,
        registry: &Registry,
        token: Token,
    ) -> Result<Self, OpError> {
        Self::attach(Self::dial(server, addr, dial)?, registry, token)
    }

    /// The blocking half of [`connect`](Self::connect): TCP (and TLS), then the
    /// handshake. Runs on a dialing thread, so a silent server holds up nobody.
    pub fn dial(server: ServerId, addr: &str, dial: &Dial<'_>) -> Result<Dialed, OpError> {
        let unavailable = |reason: String| OpError::ServerUnavailable {
            server,
            addr: addr.to_string(),
            reason,
        };
        let mut s = BlockingStream::connect(addr, dial.timeout, dial.timeout, dial.tls)
            .map_err(|e| unavailable(e.to_string()))?;
        let ack = handshake(
            &mut s,
            Role::Client,
            std::process::id().into(),
            "",
            dial.cred,
        )
        .map_err(|e| unavailable(e.to_string()))?;
        let stream = s.into_stream().map_err(|e| unavailable(e.to_string()))?;
        Ok(Dialed {
            server,
            addr: addr.to_string(),
            stream,
            max_frame: ack.max_frame,
        })
    }

    /// Registers a dialed stream with the lane's poll under `token`.
    pub fn attach(d: Dialed, registry: &Registry, token: Token) -> Result<Self, OpError> {
        let Dialed {
            server,
            addr,
            mut stream,
            max_frame,
        } = d;
        if let Err(e) = stream.register(registry, token, Interest::READABLE | Interest::WRITABLE) {
            return Err(OpError::ServerUnavailable {
                server,
                addr,
                reason: e.to_string(),
            });
        }
        let rbuf = BytesMut::with_capacity(MIN_READ * 2);
        Ok(Self {
            server,
            addr,
            checked: None,
            stream,
            out: Vec::with_capacity(MIN_READ),
            opos: 0,
            sealed_end: 0,
            open: None,
            inflight: VecDeque::new(),
            backlog: VecDeque::new(),
            rbuf,
            next_seq: 1,
            frame_limit: (max_frame as usize / 2).min(8 << 20),
            max_frame,
        })
    }

    pub fn deregister(&mut self, registry: &Registry) {
        let _ = self.stream.deregister(registry);
    }

    pub fn idle(&self) -> bool {
        self.inflight.is_empty() && self.open.is_none() && self.backlog.is_empty()
    }

    /// Whether anything waits to be sent: bytes of sealed frames, an open batch, or
    /// parts in the backlog.
    pub fn unsent(&self) -> bool {
        self.opos < self.sealed_end || self.open.is_some() || !self.backlog.is_empty()
    }

    pub fn has_open(&self) -> bool {
        self.open.is_some()
    }

    /// Adds one op to the open batch, sealing it first when it reached `b` ops or the
    /// size limit.
    pub fn append(
        &mut self,
        part: Entry,
        op: &Op<'_>,
        reply_len: usize,
        b: usize,
        q: usize,
    ) -> Append {
        if !self.open_for(op.encoded_len(), reply_len, b, q) {
            return Append::Full;
        }
        if let Self {
            open: Some(open),
            out,
            ..
        } = self
        {
            open.enc.push(out, op);
            open.parts.add(part);
        }
        Append::Queued
    }

    /// [`append`](Self::append), preceded by `tag` if there is one (not counted as an
    /// op: it has no reply).
    pub fn append_tagged(
        &mut self,
        part: Entry,
        tag: Option<farcache_proto::Tag>,
        op: &Op<'_>,
        reply_len: usize,
        b: usize,
        q: usize,
    ) -> Append {
        let Some(tag) = tag else {
            return self.append(part, op, reply_len, b, q);
        };
        if !self.open_for(op.encoded_len() + farcache_proto::Tag::LEN, reply_len, b, q) {
            return Append::Full;
        }
        if let Self {
            open: Some(open),
            out,
            ..
        } = self
        {
            open.enc.push(out, &Op::Tag(tag));
            open.enc.push(out, op);
            open.parts.add(part);
        }
        Append::Queued
    }

    /// [`append`](Self::append) of an EXECUTE, without building an [`Op`] (the batched
    /// call path).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn append_execute(
        &mut self,
        part: Entry,
        cache: CacheId,
        addr: u64,
        proc_name: &str,
        args: &[u8],
        reply_len: usize,
        (b, q): (usize, usize),
    ) -> Append {
        let len = Op::EXECUTE_HEAD + proc_name.len() + args.len();
        if !self.open_for(len, reply_len, b, q) {
            return Append::Full;
        }
        if let Self {
            open: Some(open),
            out,
            ..
        } = self
        {
            open.enc.push_execute(out, cache, addr, proc_name, args);
            open.parts.add(part);
        }
        Append::Queued
    }

    /// How many more ops of `op_len` encoded bytes, each with a reply of `reply_len`,
    /// the open batch takes, opening one (or sealing a full one while fewer than `q`
    /// are in flight) as needed; 0 when none can go now. The ops are then added with
    /// [`push_reads`](Self::push_reads) or [`push_writes`](Self::push_writes).
    #[inline]
    pub fn room(&mut self, op_len: usize, reply_len: usize, b: usize, q: usize) -> usize {
        if !self.backlog.is_empty() {
            return 0;
        }
        let limit = self.frame_limit;
        let fits = |open: &OpenBatch, out: &[u8]| {
            let by_ops = b.saturating_sub(open.parts.len());
            let by_bytes = limit.saturating_sub(open.enc.payload_len(out)) / op_len.max(1);
            let by_reply = limit.saturating_sub(open.reply_bytes) / reply_len.max(1);
            by_ops.min(by_bytes).min(by_reply)
        };
        if let Some(open) = &self.open {
            let n = fits(open, &self.out);
            if n > 0 {
                return n;
            }
            if !self.seal(q) {
                return 0;
            }
        }
        self.open_batch();
        // An empty batch takes one op of any size, as `open_for` does.
        self.open
            .as_ref()
            .map_or(0, |open| fits(open, &self.out).max(1))
    }

    /// Appends READs of `len` bytes at `addrs`: ops `first..` of ticket `key`, sent
    /// whole, for which [`room`](Self::room) made room.
    #[inline]
    pub fn push_reads(
        &mut self,
        (key, first): (u32, u32),
        cache: CacheId,
        len: u32,
        addrs: impl ExactSizeIterator<Item = u64>,
    ) {
        let n = addrs.len();
        if let Self {
            open: Some(open),
            out,
            ..
        } = self
        {
            open.enc.push_reads(out, cache, len, addrs);
            open.parts
                .push_whole_n(key, first, n as u32, len, Kind::Read);
            open.reply_bytes += n * (len as usize + REPLY_HEAD);
        }
    }

    /// Appends EXECUTEs of `proc_name` with `args_len`-byte arguments: ops `first..`
    /// of ticket `key`, sent whole, for which [`room`](Self::room) made room. False
    /// (nothing appended) when the arguments are too long for the batched form.
    #[inline]
    pub fn push_executes<'d>(
        &mut self,
        (key, first): (u32, u32),
        cache: CacheId,
        proc_name: &str,
        args_len: u32,
        reply_len: usize,
        calls: impl ExactSizeIterator<Item = (u64, &'d [u8])>,
    ) -> bool {
        let n = calls.len();
        let Self {
            open: Some(open),
            out,
            ..
        } = self
        else {
            return false;
        };
        if !open
            .enc
            .push_executes(out, cache, proc_name, args_len, calls)
        {
            return false;
        }
        open.parts
            .push_whole_n(key, first, n as u32, 0, Kind::Execute);
        open.reply_bytes += n * reply_len;
        true
    }

    /// Appends WRITEs of `len`-byte data: ops `first..` of ticket `key`, sent whole,
    /// for which [`room`](Self::room) made room. With a `tag` (the first write's), each
    /// write goes tagged.
    #[inline]
    pub fn push_writes<'d>(
        &mut self,
        (key, first): (u32, u32),
        cache: CacheId,
        len: u32,
        tag: Option<farcache_proto::Tag>,
        ops: impl ExactSizeIterator<Item = (u64, &'d [u8])>,
    ) {
        let n = ops.len();
        if let Self {
            open: Some(open),
            out,
            ..
        } = self
        {
            match tag {
                None => open.enc.push_writes(out, cache, len, ops),
                Some(t) => open.enc.push_tagged_writes(out, cache, len, t, ops),
            }
            open.parts
                .push_whole_n(key, first, n as u32, len, Kind::Write);
            open.reply_bytes += n * WRITE_REPLY;
        }
    }

    fn open_batch(&mut self) -> &mut OpenBatch {
        self.open.get_or_insert_with(|| {
            let seq = self.next_seq;
            self.next_seq += 1;
            OpenBatch {
                enc: RequestEncoder::begin(&mut self.out, seq),
                parts: PartList::new(),
                reply_bytes: 0,
            }
        })
    }

    /// Makes room in the open batch for one more op of `len` bytes and a reply of
    /// `reply_len`, sealing the current one (or opening one) as needed; false when `q`
    /// batches are in flight and the open one is full.
    #[inline]
    fn open_for(&mut self, len: usize, reply_len: usize, b: usize, q: usize) -> bool {
        if !self.backlog.is_empty() {
            // Parts queued earlier go first.
            return false;
        }
        if let Some(open) = &self.open {
            let full = open.parts.len() >= b
                || open.enc.payload_len(&self.out) + len > self.frame_limit
                || open.reply_bytes + reply_len > self.frame_limit;
            if full && !self.seal(q) {
                return false;
            }
        }
        let open = self.open_batch();
        open.reply_bytes += reply_len;
        true
    }

    /// Closes the open batch into a frame ready to send, if fewer than `q` are in flight.
    pub fn seal(&mut self, q: usize) -> bool {
        if self.inflight.len() >= q {
            return false;
        }
        let Some(open) = self.open.take() else {
            return true;
        };
        let seq = open.enc.seq();
        open.enc.finish(&mut self.out);
        self.sealed_end = self.out.len();
        self.inflight.push_back(InFlight {
            seq,
            parts: open.parts,
            sent: Instant::now(),
        });
        true
    }

    /// Writes sealed frames until the socket pushes back.
    pub fn flush(&mut self) -> io::Result<()> {
        self.stream.push()?;
        while self.opos < self.sealed_end {
            match self.stream.write(&self.out[self.opos..self.sealed_end]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.opos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.opos == self.sealed_end && self.opos > 0 {
            // Keep the open batch (if any) and drop what was sent.
            let sent = self.opos;
            self.out.drain(..sent);
            self.sealed_end = 0;
            self.opos = 0;
            if let Some(open) = &mut self.open {
                open.enc.rebase(sent);
            }
        }
        Ok(())
    }

    /// Reads what the socket has and hands every complete response frame to `on_frame`.
    pub fn read_ready(
        &mut self,
        mut on_frame: impl FnMut(&mut Self, InFlight, Bytes) -> Result<(), OpError>,
    ) -> Result<(), OpError> {
        loop {
            if self.rbuf.capacity() - self.rbuf.len() < MIN_READ {
                self.rbuf.reserve(MIN_READ.max(self.rbuf.len()));
            }
            let spare = self.rbuf.spare_capacity_mut();
            let space = spare.len();
            match self.stream.read_spare(spare) {
                Ok(0) => return Err(self.unavailable("connection closed by server")),
                Ok(n) => {
                    // SAFETY: the read initialized the first `n` bytes of the spare room.
                    unsafe { self.rbuf.set_len(self.rbuf.len() + n) };
                    self.take_frames(&mut on_frame)?;
                    if self.stream.drained_after(n, space) {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.unavailable(&e.to_string())),
            }
        }
    }

    fn take_frames(
        &mut self,
        on_frame: &mut impl FnMut(&mut Self, InFlight, Bytes) -> Result<(), OpError>,
    ) -> Result<(), OpError> {
        loop {
            let hdr = match FrameHeader::decode(&self.rbuf, self.max_frame) {
                Ok(Some(h)) => h,
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.protocol(e.to_string())),
            };
            let n = hdr.frame_len();
            if self.rbuf.len() < n {
                // Room for the whole frame, so the rest can arrive in one read.
                self.rbuf.reserve(n - self.rbuf.len());
                return Ok(());
            }
            let frame = self.rbuf.split_to(n).freeze();
            match hdr.kind {
                FrameKind::Response => {
                    let Some(front) = self.inflight.pop_front() else {
                        return Err(self.protocol("response with nothing in flight".into()));
                    };
                    if front.seq != hdr.seq {
                        return Err(self.protocol(format!(
                            "response seq {} but {} expected",
                            hdr.seq, front.seq
                        )));
                    }
                    on_frame(self, front, frame.slice(HEADER_LEN..))?;
                }
                FrameKind::Error => {
                    let text = String::from_utf8_lossy(&frame[HEADER_LEN..]).into_owned();
                    return Err(self.protocol(format!("server closed the connection: {text}")));
                }
                other => return Err(self.protocol(format!("unexpected {other:?} frame"))),
            }
        }
    }

    /// Parts waiting on this connection (open and in flight), for failing them.
    pub fn take_all_parts(&mut self) -> Vec<PartList> {
        let mut v: Vec<PartList> = self.inflight.drain(..).map(|f| f.parts).collect();
        if let Some(open) = self.open.take() {
            v.push(open.parts);
        }
        v
    }

    pub fn oldest_sent(&self) -> Option<Instant> {
        self.inflight.front().map(|f| f.sent)
    }

    pub fn unavailable(&self, reason: &str) -> OpError {
        OpError::ServerUnavailable {
            server: self.server,
            addr: self.addr.clone(),
            reason: reason.to_string(),
        }
    }

    fn protocol(&self, reason: String) -> OpError {
        OpError::Protocol {
            server: self.server,
            reason,
        }
    }
}
