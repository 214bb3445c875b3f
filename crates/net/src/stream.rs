//! One connection as the event loops see it: plain TCP or TLS, non-blocking, with the
//! same `read`/`write` for both. TLS records rustls holds back (handshake messages,
//! encrypted bytes the socket refused) go out on [`Stream::push`].

use std::io::{self, Read, Write};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::time::Duration;

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use crate::NetError;
use crate::tls::TlsConnector;

/// Most bytes one [`Stream::read_spare`] takes from a TLS session (its records are at
/// most 16 KiB of plaintext).
const TLS_READ: usize = 64 << 10;

pub struct TlsStream {
    tcp: TcpStream,
    conn: rustls::Connection,
}

pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_tls() {
            "Stream::Tls"
        } else {
            "Stream::Plain"
        })
    }
}

fn tls_io(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}"))
}

impl Stream {
    /// A server-side TLS session over an accepted connection.
    pub fn tls_server(tcp: TcpStream, session: rustls::ServerConnection) -> Self {
        Self::Tls(Box::new(TlsStream {
            tcp,
            conn: rustls::Connection::Server(session),
        }))
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Self::Tls(_))
    }

    fn tcp(&self) -> &TcpStream {
        match self {
            Self::Plain(t) => t,
            Self::Tls(s) => &s.tcp,
        }
    }

    fn tcp_mut(&mut self) -> &mut TcpStream {
        match self {
            Self::Plain(t) => t,
            Self::Tls(s) => &mut s.tcp,
        }
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().peer_addr()
    }

    pub fn register(&mut self, reg: &Registry, token: Token, i: Interest) -> io::Result<()> {
        reg.register(self.tcp_mut(), token, i)
    }

    pub fn deregister(&mut self, reg: &Registry) -> io::Result<()> {
        reg.deregister(self.tcp_mut())
    }

    /// Whether `n` bytes from a read into `room` bytes of space mean the connection
    /// has nothing more for now. A TLS session may hold decrypted bytes the socket
    /// will not signal again, so only `WouldBlock` says so there.
    #[inline]
    pub fn drained_after(&self, n: usize, room: usize) -> bool {
        match self {
            Self::Plain(_) => n < room,
            Self::Tls(_) => false,
        }
    }

    /// Reads plaintext; `Ok(0)` at the end of the stream.
    #[inline]
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Plain(t) => t.read(buf),
            Self::Tls(s) => s.read(buf),
        }
    }

    /// Reads plaintext into room that need not be initialized: a plain socket's bytes
    /// come straight from `recv`, so a receive buffer is never zero-filled first only
    /// to be overwritten. `Ok(0)` at the end of the stream.
    pub fn read_spare(&mut self, buf: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
        match self {
            Self::Plain(t) => {
                use std::os::fd::AsRawFd;
                // SAFETY: `recv` writes at most `buf.len()` bytes into `buf`, which is
                // valid for writes of that many bytes; nothing reads them here.
                let n = unsafe { libc::recv(t.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            }
            Self::Tls(s) => {
                // Decrypted bytes come from the session's own buffer: a bounded piece
                // is cleared and read into as initialized bytes.
                let n = buf.len().min(TLS_READ);
                let piece = &mut buf[..n];
                piece.fill(MaybeUninit::new(0));
                // SAFETY: every byte of `piece` was initialized just above.
                let piece = unsafe { &mut *(piece as *mut [MaybeUninit<u8>] as *mut [u8]) };
                s.read(piece)
            }
        }
    }

    /// Writes plaintext; a TLS session may take bytes it cannot send yet (see `push`).
    #[inline]
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Plain(t) => t.write(buf),
            Self::Tls(s) => s.write(buf),
        }
    }

    /// Sends what the TLS session holds; true when nothing is left.
    #[inline]
    pub fn push(&mut self) -> io::Result<bool> {
        match self {
            Self::Plain(_) => Ok(true),
            Self::Tls(s) => s.push(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Stream::read(self, buf)
    }
}

impl TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            match self.conn.read_tls(&mut self.tcp) {
                Ok(0) => return Ok(0),
                Ok(_) => {
                    self.conn.process_new_packets().map_err(tls_io)?;
                    // Handshake replies and alerts leave now, not with the next write.
                    self.push()?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.conn.writer().write(buf)?;
        self.push()?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn push(&mut self) -> io::Result<bool> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

/// A blocking connection for handshakes and control calls; becomes a [`Stream`] for
/// the event loop with [`BlockingStream::into_stream`].
pub enum BlockingStream {
    Plain(std::net::TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>>),
}

impl BlockingStream {
    /// Connects to `addr` (resolving it on the calling thread), over TLS when `tls` is
    /// given; reads and writes time out after `io_timeout`.
    pub fn connect(
        addr: &str,
        connect_timeout: Duration,
        io_timeout: Duration,
        tls: Option<&TlsConnector>,
    ) -> Result<Self, NetError> {
        use std::net::ToSocketAddrs;
        let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolves to nothing");
        let mut tcp = None;
        for sa in addr.to_socket_addrs()? {
            match std::net::TcpStream::connect_timeout(&sa, connect_timeout) {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let tcp = tcp.ok_or(last)?;
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(Some(io_timeout))?;
        tcp.set_write_timeout(Some(io_timeout))?;
        Ok(match tls {
            None => Self::Plain(tcp),
            Some(t) => Self::Tls(Box::new(rustls::StreamOwned::new(t.session(addr)?, tcp))),
        })
    }

    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Self::Plain(s) => s.set_read_timeout(t),
            Self::Tls(s) => s.sock.set_read_timeout(t),
        }
    }

    /// The same connection, non-blocking, for an event loop.
    pub fn into_stream(self) -> io::Result<Stream> {
        match self {
            Self::Plain(s) => {
                s.set_nonblocking(true)?;
                Ok(Stream::Plain(TcpStream::from_std(s)))
            }
            Self::Tls(s) => {
                let rustls::StreamOwned { conn, sock } = *s;
                sock.set_nonblocking(true)?;
                Ok(Stream::Tls(Box::new(TlsStream {
                    tcp: TcpStream::from_std(sock),
                    conn: rustls::Connection::Client(conn),
                })))
            }
        }
    }
}

impl Read for BlockingStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Plain(s) => s.read(buf),
            Self::Tls(s) => s.read(buf),
        }
    }
}

impl Write for BlockingStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Plain(s) => s.write(buf),
            Self::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Plain(s) => s.flush(),
            Self::Tls(s) => s.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_reads_land_in_spare_room_and_report_the_end() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut writer = std::net::TcpStream::connect(addr).expect("connect");
        let (accepted, _) = listener.accept().expect("accept");
        let mut s = Stream::Plain(TcpStream::from_std(accepted));
        writer.write_all(b"hello, spare room").expect("write");
        let mut buf: Vec<u8> = Vec::with_capacity(64);
        while buf.len() < 17 {
            match s.read_spare(buf.spare_capacity_mut()) {
                Ok(n) => {
                    // SAFETY: the read initialized the first `n` spare bytes.
                    unsafe { buf.set_len(buf.len() + n) };
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(&buf[..], b"hello, spare room");
        drop(writer);
        let end = loop {
            match s.read_spare(buf.spare_capacity_mut()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                other => break other,
            }
        };
        assert_eq!(end.expect("end of stream"), 0);
    }
}
