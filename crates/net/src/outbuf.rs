//! Bytes queued for a peer, written as far as its socket takes them, with the time the
//! peer last stopped taking them (so a peer that does not read its replies can be cut
//! off).

use std::io;
use std::time::Instant;

use crate::Stream;

#[derive(Debug, Default)]
pub struct OutBuf {
    /// Queued bytes; the first `pos` are already sent.
    pub buf: Vec<u8>,
    pos: usize,
    stalled_since: Option<Instant>,
}

/// What a flush found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flushed {
    /// Everything is sent.
    All,
    /// The socket pushed back; the rest goes on its next writable event.
    Partly,
}

impl OutBuf {
    /// Bytes queued and not yet sent.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Since when queued bytes have waited without the peer taking any.
    pub fn stalled_since(&self) -> Option<Instant> {
        self.stalled_since
    }

    /// Drops what is queued but not sent (before a last `Error` frame).
    pub fn drop_unsent(&mut self) {
        self.buf.truncate(self.pos);
    }

    /// Writes queued bytes (after what a TLS session holds) until the socket pushes
    /// back. Once everything is sent the buffer is reused, unless it grew past
    /// `retain` bytes, which are given back. An error means the connection is done.
    pub fn flush(&mut self, stream: &mut Stream, retain: usize) -> io::Result<Flushed> {
        stream.push()?;
        let before = self.pos;
        while self.pos < self.buf.len() {
            match stream.write(&self.buf[self.pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.pos < self.buf.len() {
            // Progress resets the clock: a slow reader is not a stalled one.
            if self.pos != before || self.stalled_since.is_none() {
                self.stalled_since = Some(Instant::now());
            }
            return Ok(Flushed::Partly);
        }
        self.stalled_since = None;
        self.buf.clear();
        self.pos = 0;
        if self.buf.capacity() > retain {
            self.buf = Vec::new();
        }
        Ok(Flushed::All)
    }
}
