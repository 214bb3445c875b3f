//! Accepts connections and deals them to workers round-robin; refuses connections past
//! the cap, and wraps those from the TLS listener in a TLS session.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use farcache_net::{Accepted, accept_next};
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
    let inboxes = shared.mailboxes.all();
    if inboxes.is_empty() {
        warn!("no workers to hand connections to");
        return;
    }
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
        let tls = shared.config.tls.as_ref();
        for (l, tls) in [(Some(&listener), None), (tls_listener.as_ref(), tls)] {
            let Some(l) = l else { continue };
            loop {
                let admit = |peer| admit(&shared, peer);
                match accept_next(l, tls, admit) {
                    Accepted::Conn { stream, .. } => {
                        let inbox = &inboxes[next % inboxes.len()];
                        next = next.wrapping_add(1);
                        inbox.send(WorkerMsg::Conn(stream));
                    }
                    // Dropping it closes it (counted in `admit`).
                    Accepted::Refused { .. } => {}
                    Accepted::Drained => break,
                    Accepted::TlsFailed { peer, error } => {
                        warn!(%peer, "cannot start a TLS session: {error}");
                    }
                    Accepted::Failed(e) => {
                        // EMFILE and friends: keep serving existing connections.
                        warn!("accept failed: {e}");
                        retry = true;
                        break;
                    }
                }
            }
        }
    }
}

/// The connection cap: a connection is counted here, not when a worker adopts it, so
/// a burst cannot overshoot.
fn admit(sh: &Shared, peer: std::net::SocketAddr) -> bool {
    let open = sh.metrics.connections.load(Ordering::Relaxed);
    if open as usize >= sh.config.guard.max_connections {
        sh.metrics.guard.refused.fetch_add(1, Ordering::Relaxed);
        debug!(%peer, open, "connection cap reached, refusing");
        return false;
    }
    sh.metrics.connections.fetch_add(1, Ordering::Relaxed);
    true
}
