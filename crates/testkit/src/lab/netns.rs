//! Moving a thread into a lab host's network namespace, and the lab's own round trip.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::{Host, Lab};
use crate::TestkitError;

/// Moves the calling thread into `host`'s network namespace. Sockets it opens from
/// then on, and threads it starts, live there (a client made on this thread reaches
/// the lab's addresses). Other threads of the process are not affected.
pub fn enter(host: &Host) -> Result<(), TestkitError> {
    let f = std::fs::File::open(format!("/run/netns/{}", host.netns))?;
    // SAFETY: `f` is an open namespace file for the duration of the call; setns only
    // changes the calling thread's network namespace.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if r != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

/// Median round trip of `n` one-byte TCP exchanges from `from` to `to`.
pub(super) fn tcp_rtt(
    _lab: &Lab,
    from: &Host,
    to: &Host,
    n: usize,
) -> Result<Duration, TestkitError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let server = {
        let to = to.clone();
        std::thread::spawn(move || -> Result<(), TestkitError> {
            enter(&to)?;
            let l = TcpListener::bind((to.ip, 0))?;
            let _ = tx.send(l.local_addr()?);
            let (mut s, _) = l.accept()?;
            s.set_nodelay(true)?;
            let mut b = [0u8; 1];
            while s.read_exact(&mut b).is_ok() {
                s.write_all(&b)?;
            }
            Ok(())
        })
    };
    let addr = rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| TestkitError::Other("the lab's echo server did not start".into()))?;
    let from = from.clone();
    let client = std::thread::spawn(move || -> Result<Vec<Duration>, TestkitError> {
        enter(&from)?;
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        let mut b = [7u8; 1];
        let mut v = Vec::with_capacity(n);
        for _ in 0..n.max(1) {
            let t = Instant::now();
            s.write_all(&b)?;
            s.read_exact(&mut b)?;
            v.push(t.elapsed());
        }
        Ok(v)
    });
    let mut v = client
        .join()
        .map_err(|_| TestkitError::Other("rtt thread panicked".into()))??;
    let _ = server.join();
    v.sort();
    Ok(v[v.len() / 2])
}
