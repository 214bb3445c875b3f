//! Accepts connections and deals them to workers round-robin.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use tracing::warn;

use crate::server::Shared;
use crate::worker::WorkerInbox;

pub const LISTENER: Token = Token(0);
pub const WAKER: Token = Token(1);

pub fn run(
    mut poll: Poll,
    mut listener: TcpListener,
    inboxes: Vec<WorkerInbox>,
    shared: Arc<Shared>,
) {
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
                    if inbox.tx.send(stream).is_ok() {
                        let _ = inbox.waker.wake();
                    }
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
