//! Accepts connections and deals them to workers round-robin.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use tracing::warn;

use crate::server::Shared;
use crate::worker::WorkerMsg;

pub const LISTENER: Token = Token(0);
pub const WAKER: Token = Token(1);

pub fn run(mut poll: Poll, mut listener: TcpListener, shared: Arc<Shared>) {
    let Some(inboxes) = shared.inboxes.get().filter(|i| !i.is_empty()) else {
        warn!("no workers to hand connections to");
        return;
    };
    if let Err(e) = poll
        .registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
    {
        warn!("cannot register listener: {e}");
        return;
    }
    let mut events = Events::with_capacity(64);
    let mut next = 0usize;
    loop {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            warn!("acceptor poll failed: {e}");
            return;
        }
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        loop {
            match listener.accept() {
                Ok((stream, _peer)) => {
                    let _ = stream.set_nodelay(true);
                    let inbox = &inboxes[next % inboxes.len()];
                    next = next.wrapping_add(1);
                    inbox.send(WorkerMsg::Conn(stream));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // EMFILE and friends: log and keep serving existing connections.
                    warn!("accept failed: {e}");
                    break;
                }
            }
        }
    }
}
