//! The driver's connection: a non-blocking `TCP_NODELAY` socket with a send buffer
//! and a receive buffer parsed in place, busy-polled for the spin window and then
//! blocking in `poll(2)`.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::Duration;

use super::{DEFAULT_SPIN, ctx};
use crate::error::Result;

/// Longest single `poll(2)` after the spin window (then check again).
const BLOCK_TIMEOUT_MS: libc::c_int = 100;

/// Initial receive buffer per connection; grows if one reply token is larger.
const INBUF_BYTES: usize = 1 << 20;

/// A non-blocking, `TCP_NODELAY` connection with a send buffer and a
/// receive buffer parsed in place.
#[derive(Debug)]
pub(crate) struct SpinConn {
    pub(super) peer: &'static str,
    stream: TcpStream,
    inbuf: Vec<u8>,
    head: usize,
    tail: usize,
    pub(super) out: Vec<u8>,
    sent: usize,
    /// Idle busy-poll window before blocking in `poll(2)`.
    pub(super) spin: Duration,
}

impl SpinConn {
    /// Connects (blocking) to 127.0.0.1:`port`, then switches to non-blocking.
    pub(crate) fn connect(peer: &'static str, port: u16) -> Result<Self> {
        let stream =
            TcpStream::connect((Ipv4Addr::LOCALHOST, port)).map_err(|e| ctx(peer, "connect", e))?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        Ok(SpinConn {
            peer,
            stream,
            inbuf: vec![0; INBUF_BYTES],
            head: 0,
            tail: 0,
            out: Vec::new(),
            sent: 0,
            spin: DEFAULT_SPIN,
        })
    }

    /// Sets the idle polling window (see [`LoadOpts::spin`]).
    pub(crate) fn with_spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// Writes as much pending output as the socket takes; whether any moved.
    pub(super) fn flush(&mut self) -> Result<bool> {
        let mut moved = false;
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => return Err(ctx(self.peer, "write", io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    self.sent += n;
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ctx(self.peer, "write", e)),
            }
        }
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        }
        Ok(moved)
    }

    /// Blocks until the socket is readable, or writable when output is
    /// pending, for at most [`BLOCK_TIMEOUT_MS`].
    pub(super) fn wait(&self) -> Result<()> {
        use std::os::fd::AsRawFd;
        let events = if self.out.is_empty() {
            libc::POLLIN
        } else {
            libc::POLLIN | libc::POLLOUT
        };
        let mut pfd = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events,
            revents: 0,
        };
        // SAFETY: `pfd` is one valid, initialised pollfd that outlives the
        // call, and the count passed is 1.
        let r = unsafe { libc::poll(&mut pfd, 1, BLOCK_TIMEOUT_MS) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(ctx(self.peer, "poll", e));
            }
        }
        Ok(())
    }

    /// One `read` into the free end of the receive buffer; whether any
    /// arrived. The peer closing the connection is an error.
    pub(super) fn fill(&mut self) -> Result<bool> {
        if self.head == self.tail {
            self.head = 0;
            self.tail = 0;
        } else if self.tail > self.inbuf.len() / 2 {
            // Only a partial reply token is left over: move it to the front.
            self.inbuf.copy_within(self.head..self.tail, 0);
            self.tail -= self.head;
            self.head = 0;
        }
        if self.tail == self.inbuf.len() {
            // One token is larger than the buffer.
            self.inbuf.resize(self.inbuf.len() * 2, 0);
        }
        match self.stream.read(&mut self.inbuf[self.tail..]) {
            Ok(0) => Err(ctx(
                self.peer,
                "read",
                io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by server"),
            )),
            Ok(n) => {
                self.tail += n;
                Ok(true)
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                Ok(false)
            }
            Err(e) => Err(ctx(self.peer, "read", e)),
        }
    }

    pub(super) fn pending(&self) -> &[u8] {
        &self.inbuf[self.head..self.tail]
    }

    pub(super) fn consume(&mut self, n: usize) {
        self.head = (self.head + n).min(self.tail);
    }
}
