//! Control-plane listener: one thread accepting, one thread per connection.
//!
//! Control traffic is low rate (registrations, heartbeats, catalogue calls), so plain
//! blocking threads are simpler than an event loop and fast enough.

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use farcache_proto::FrameKind;
use farcache_proto::blocking::{RpcError, read_frame, write_frame};
use farcache_proto::control::ControlRequest;
use parking_lot::Mutex;

use crate::service::Service;

/// Control messages are small JSON; refusing big frames keeps a peer from making the
/// manager allocate memory for garbage.
pub const MAX_CONTROL_FRAME: u32 = 1 << 20;
/// Bounds how long a peer that stops reading can hold a connection thread in a write.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Open connections, so shutdown can close them and wait for their threads.
#[derive(Default)]
struct Connections {
    next: AtomicU64,
    open: Mutex<HashMap<u64, TcpStream>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

pub struct Listener {
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    accept: JoinHandle<()>,
    conns: Arc<Connections>,
}

impl Listener {
    pub fn spawn(listener: TcpListener, service: Arc<Service>) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        let stopping = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(Connections::default());
        let accept = {
            let (stopping, conns) = (Arc::clone(&stopping), Arc::clone(&conns));
            thread::Builder::new()
                .name("manager-accept".into())
                .spawn(move || accept_loop(&listener, &service, &stopping, &conns))?
        };
        Ok(Self {
            addr,
            stopping,
            accept,
            conns,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, closes every connection and joins all threads.
    pub fn stop(self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the blocking accept with a connection of our own.
        if let Err(e) = TcpStream::connect_timeout(&wake_addr(self.addr), Duration::from_secs(1)) {
            tracing::warn!(error = %e, "cannot wake the accept thread");
        }
        if self.accept.join().is_err() {
            tracing::warn!("accept thread panicked");
        }
        for stream in self.conns.open.lock().values() {
            // Unblocks the connection thread's read; errors mean it is already closed.
            let _ = stream.shutdown(Shutdown::Both);
        }
        let threads = std::mem::take(&mut *self.conns.threads.lock());
        for t in threads {
            if t.join().is_err() {
                tracing::warn!("connection thread panicked");
            }
        }
    }
}

/// Where to connect to reach our own listener (a wildcard address is not connectable).
fn wake_addr(addr: SocketAddr) -> SocketAddr {
    let mut a = addr;
    if a.ip().is_unspecified() {
        match a {
            SocketAddr::V4(_) => a.set_ip(std::net::Ipv4Addr::LOCALHOST.into()),
            SocketAddr::V6(_) => a.set_ip(std::net::Ipv6Addr::LOCALHOST.into()),
        }
    }
    a
}

fn accept_loop(
    listener: &TcpListener,
    service: &Arc<Service>,
    stopping: &AtomicBool,
    conns: &Arc<Connections>,
) {
    loop {
        let accepted = listener.accept();
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // E.g. out of file descriptors: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if let Err(e) = spawn_connection(stream, peer, service, conns) {
            tracing::warn!(%peer, error = %e, "cannot start a connection thread");
        }
    }
}

fn spawn_connection(
    stream: TcpStream,
    peer: SocketAddr,
    service: &Arc<Service>,
    conns: &Arc<Connections>,
) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let id = conns.next.fetch_add(1, Ordering::Relaxed);
    conns.open.lock().insert(id, stream.try_clone()?);
    let (service, conns2) = (Arc::clone(service), Arc::clone(conns));
    let spawned = thread::Builder::new()
        .name(format!("manager-conn-{id}"))
        .spawn(move || {
            serve(stream, peer, &service);
            conns2.open.lock().remove(&id);
        });
    let handle = match spawned {
        Ok(h) => h,
        Err(e) => {
            conns.open.lock().remove(&id);
            return Err(e);
        }
    };
    let mut threads = conns.threads.lock();
    threads.retain(|t| !t.is_finished());
    threads.push(handle);
    Ok(())
}

/// Answers control requests until EOF; a protocol error ends the connection with an
/// `Error` frame.
fn serve(mut stream: TcpStream, peer: SocketAddr, service: &Service) {
    tracing::debug!(%peer, "control connection opened");
    loop {
        let (header, payload) = match read_frame(&mut stream, MAX_CONTROL_FRAME) {
            Ok(frame) => frame,
            Err(RpcError::Io(e)) => {
                if e.kind() != io::ErrorKind::UnexpectedEof {
                    tracing::debug!(%peer, error = %e, "control connection read failed");
                }
                break;
            }
            Err(e) => return reject(stream, peer, &format!("bad frame: {e}")),
        };
        if header.kind != FrameKind::Control {
            let msg = format!(
                "expected a Control frame, got {:?} (the manager takes no Hello)",
                header.kind
            );
            return reject(stream, peer, &msg);
        }
        let req = match ControlRequest::from_json(&payload) {
            Ok(r) => r,
            Err(e) => return reject(stream, peer, &format!("bad control request: {e}")),
        };
        let resp = service.handle(req);
        if let Err(e) = write_frame(
            &mut stream,
            FrameKind::ControlReply,
            header.seq,
            &resp.to_json(),
        ) {
            tracing::debug!(%peer, error = %e, "control reply write failed");
            break;
        }
    }
    tracing::debug!(%peer, "control connection closed");
}

/// Sends an `Error` frame and closes. Unread input is drained briefly first: closing a
/// socket with unread data sends a reset, which can destroy the error frame in flight.
fn reject(mut stream: TcpStream, peer: SocketAddr, msg: &str) {
    tracing::warn!(%peer, error = msg, "closing control connection after a protocol error");
    if write_frame(&mut stream, FrameKind::Error, 0, msg.as_bytes()).is_err() {
        return;
    }
    let _ = stream.shutdown(Shutdown::Write);
    if stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .is_ok()
    {
        let mut buf = [0u8; 4096];
        let mut budget = 1usize << 20;
        while let Ok(n @ 1..) = stream.read(&mut buf) {
            budget = budget.saturating_sub(n);
            if budget == 0 {
                break;
            }
        }
    }
}
