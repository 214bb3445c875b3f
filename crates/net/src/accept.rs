//! Taking connections off a listener, the same way in every listening process (the
//! server, the manager, the Redis front end): accept until the listener is drained,
//! keep serving when descriptors run out (and say to retry soon), wrap connections
//! from a TLS listener in a session, and let the caller's cap refuse a connection
//! before it costs anything but the accept.

use std::io;
use std::net::SocketAddr;

use mio::net::TcpListener;

use crate::error::NetError;
use crate::stream::Stream;
use crate::tls::TlsAcceptor;

/// What [`accept_next`] found.
pub enum Accepted {
    /// A connection to keep (admitted by the caller's cap).
    Conn { stream: Stream, peer: SocketAddr },
    /// A connection the caller's cap refused: the caller may say why (the Redis
    /// front end answers as Redis does) before dropping it, which closes it.
    Refused { stream: Stream, peer: SocketAddr },
    /// Nothing left waiting: poll again.
    Drained,
    /// A connection from the TLS listener whose session could not start (it was
    /// closed); call again for the next.
    TlsFailed { peer: SocketAddr, error: NetError },
    /// Accepting failed (out of descriptors and the like): existing connections go
    /// on, and the caller retries soon (the listener will not signal again for
    /// connections already waiting).
    Failed(io::Error),
}

/// Takes the next connection off `listener`, wrapped in a TLS session if `tls` is
/// given. `admit(peer)` decides whether it is kept (a cap: the caller counts it
/// there).
pub fn accept_next(
    listener: &TcpListener,
    tls: Option<&TlsAcceptor>,
    mut admit: impl FnMut(SocketAddr) -> bool,
) -> Accepted {
    loop {
        let (tcp, peer) = match listener.accept() {
            Ok(a) => a,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Accepted::Drained,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Accepted::Failed(e),
        };
        let _ = tcp.set_nodelay(true);
        let stream = match tls.map(TlsAcceptor::session) {
            None => Stream::Plain(tcp),
            Some(Ok(session)) => Stream::tls_server(tcp, session),
            // Dropping `tcp` closes it.
            Some(Err(error)) => return Accepted::TlsFailed { peer, error },
        };
        return if admit(peer) {
            Accepted::Conn { stream, peer }
        } else {
            Accepted::Refused { stream, peer }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drains_admits_and_refuses() {
        let std = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        std.set_nonblocking(true).expect("nonblocking");
        let addr = std.local_addr().expect("addr");
        let l = TcpListener::from_std(std);
        assert!(matches!(accept_next(&l, None, |_| true), Accepted::Drained));
        let _a = std::net::TcpStream::connect(addr).expect("connect");
        let _b = std::net::TcpStream::connect(addr).expect("connect");
        // The first is refused by the cap, the second kept.
        let mut seen = 0;
        let (mut got, mut refused) = (None, 0);
        for _ in 0..1000 {
            match accept_next(&l, None, |_| {
                seen += 1;
                seen > 1
            }) {
                Accepted::Conn { stream, .. } => {
                    got = Some(stream);
                    break;
                }
                Accepted::Refused { .. } => refused += 1,
                Accepted::Drained => std::thread::sleep(std::time::Duration::from_millis(1)),
                Accepted::Failed(e) => panic!("{e}"),
                Accepted::TlsFailed { error, .. } => panic!("{error}"),
            }
        }
        assert!(got.is_some());
        assert_eq!((seen, refused), (2, 1));
    }
}
