//! A worker thread: one mio event loop owning its connections. Every request runs to
//! completion on the thread that read it; nothing is handed to another thread.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;
use tracing::{debug, warn};

use crate::conn::Conn;
use crate::server::Shared;

pub const WAKER: Token = Token(usize::MAX);

pub struct Worker {
    pub id: usize,
    pub poll: Poll,
    pub incoming: Receiver<TcpStream>,
    pub shared: Arc<Shared>,
}

/// The handle the acceptor keeps to pass connections to a worker.
pub struct WorkerInbox {
    pub tx: std::sync::mpsc::Sender<TcpStream>,
    pub waker: Arc<Waker>,
}

impl Worker {
    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut conns: Slab<Conn> = Slab::new();
        let spin = self.shared.config.busy_poll;
        let mut last_work = Instant::now();
        loop {
            let timeout = (!spin.is_zero() && last_work.elapsed() < spin).then_some(Duration::ZERO);
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                warn!(worker = self.id, "poll failed: {e}");
                return;
            }
            if self.shared.shutdown.load(Ordering::Acquire) {
                return;
            }
            if events.is_empty() {
                continue;
            }
            last_work = Instant::now();
            for ev in events.iter() {
                if ev.token() == WAKER {
                    self.adopt(&mut conns);
                    continue;
                }
                let key = ev.token().0;
                let Some(conn) = conns.get_mut(key) else {
                    continue;
                };
                conn.on_ready(&self.shared);
                if conn.closed {
                    let mut c = conns.remove(key);
                    let _ = self.poll.registry().deregister(&mut c.stream);
                    self.shared
                        .metrics
                        .connections
                        .fetch_sub(1, Ordering::Relaxed);
                    debug!(worker = self.id, peer = %c.peer, "connection closed");
                }
            }
        }
    }

    fn adopt(&mut self, conns: &mut Slab<Conn>) {
        while let Ok(mut stream) = self.incoming.try_recv() {
            let peer = stream
                .peer_addr()
                .unwrap_or_else(|_| ([0, 0, 0, 0], 0).into());
            let entry = conns.vacant_entry();
            let token = Token(entry.key());
            if let Err(e) = self.poll.registry().register(
                &mut stream,
                token,
                Interest::READABLE | Interest::WRITABLE,
            ) {
                warn!(worker = self.id, "register failed: {e}");
                continue;
            }
            self.shared
                .metrics
                .connections
                .fetch_add(1, Ordering::Relaxed);
            debug!(worker = self.id, %peer, "connection adopted");
            let conn = entry.insert(Conn::new(stream, peer));
            // Data may have arrived before registration; edges raised then are lost.
            conn.on_ready(&self.shared);
        }
    }
}
