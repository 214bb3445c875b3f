//! Accepts connections and deals them to workers round-robin; refuses connections past
//! the cap, and wraps those from the TLS listener in a TLS session.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use farcache_net::Stream;
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use tracing::{debug, warn};

use crate::cluster::Shared;
use crate::cluster::mailbox::WorkerMsg;

pub const LISTENER: Token = Token(0);
pub const WAKER: Token = Token(1);
pub const TLS_LISTENER: Token = Token(2);

/// After a failed accept (out of descriptors), retry this soon: the listener will not
/// signal again for connections already waiting.
const RETRY: Duration = Duration::from_millis(20);

pub fn run(
    mut poll: Poll,
    mut listener: TcpListener,
    mut tls_listener: Option<TcpListener>,
    shared: Arc<Shared>,
) {
    let Some(inboxes) = shared.inboxes.get().filter(|i| !i.is_empty()) else {
        warn!("no workers to hand connections to");
        return;
    };
    let registered = poll
        .registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
        .and_then(|()| match tls_listener.as_mut() {
            Some(l) => poll
                .registry()
                .register(l, TLS_LISTENER, Interest::READABLE),
            None => Ok(()),
        });
    if let Err(e) = registered {
        warn!("cannot register listener: {e}");
        return;
    }
    let mut events = Events::with_capacity(64);
    let mut next = 0usize;
    let mut retry = false;
    loop {
        let timeout = retry.then_some(RETRY);
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            warn!("acceptor poll failed: {e}");
            return;
        }
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        retry = false;
        for (l, tls) in [(Some(&listener), false), (tls_listener.as_ref(), true)] {
            let Some(l) = l else { continue };
            while let Some(stream) = accept_one(l, &shared, tls, &mut retry) {
                let inbox = &inboxes[next % inboxes.len()];
                next = next.wrapping_add(1);
                inbox.send(WorkerMsg::Conn(stream));
            }
        }
    }
}

/// Accepts one connection; `None` when there is none left (or accepting failed, in
/// which case `retry` is set).
fn accept_one(l: &TcpListener, sh: &Shared, tls: bool, retry: &mut bool) -> Option<Stream> {
    loop {
        let (tcp, peer) = match l.accept() {
            Ok(a) => a,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // EMFILE and friends: keep serving existing connections, try again soon.
                warn!("accept failed: {e}");
                *retry = true;
                return None;
            }
        };
        let open = sh.metrics.connections.load(Ordering::Relaxed);
        if open as usize >= sh.config.guard.max_connections {
            sh.metrics.guard.refused.fetch_add(1, Ordering::Relaxed);
            debug!(%peer, open, "connection cap reached, refusing");
            continue; // dropping `tcp` closes it
        }
        let _ = tcp.set_nodelay(true);
        // Counted here, not when a worker adopts it, so a burst cannot overshoot.
        sh.metrics.connections.fetch_add(1, Ordering::Relaxed);
        if !tls {
            return Some(Stream::Plain(tcp));
        }
        match sh.config.tls.as_ref().map(|t| t.session()) {
            Some(Ok(session)) => return Some(Stream::tls_server(tcp, session)),
            Some(Err(e)) => warn!(%peer, "cannot start a TLS session: {e}"),
            None => warn!(%peer, "TLS listener without TLS settings"),
        }
        sh.metrics.connections.fetch_sub(1, Ordering::Relaxed);
    }
}
