//! `--metrics-listen`: the server's counters in Prometheus text format over plain HTTP.
//! Scrapes are rare and tiny, so one blocking thread serves them one at a time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::{debug, info};

use crate::cluster::Shared;

pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let l = TcpListener::bind(addr)?;
    // Non-blocking accept lets the thread notice shutdown.
    l.set_nonblocking(true)?;
    Ok(l)
}

pub(crate) fn run(listener: TcpListener, sh: Arc<Shared>) {
    if let Ok(a) = listener.local_addr() {
        info!(addr = %a, "metrics endpoint listening");
    }
    while !sh.shutdown.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((s, peer)) => {
                if let Err(e) = answer(s, &sh) {
                    debug!(%peer, "metrics scrape failed: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                sh.sleep(Duration::from_millis(50));
            }
            Err(e) => {
                debug!("metrics accept failed: {e}");
                sh.sleep(Duration::from_millis(50));
            }
        }
    }
}

fn answer(mut s: TcpStream, sh: &Shared) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    // Read the request head (we answer every path the same way).
    let mut head = [0u8; 4096];
    let mut n = 0;
    while n < head.len() {
        let r = s.read(&mut head[n..])?;
        if r == 0 {
            break;
        }
        n += r;
        if head[..n].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let (status, body) = if head[..n].starts_with(b"GET ") {
        ("200 OK", crate::runtime::metrics_http::prometheus_text(sh))
    } else {
        ("405 Method Not Allowed", "only GET\n".to_string())
    };
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Every counter in Prometheus text: the metrics', plus migrations, lost bytes and
/// replication, which live with their components.
pub fn prometheus_text(sh: &Shared) -> String {
    let mut s = sh
        .metrics
        .render_prometheus(sh.store.used(), sh.store.memory());
    let r = sh.replicator.stats();
    s += &format!(
        "farcache_migrations {}\nfarcache_lost_bytes {}\n",
        sh.migrations.busy(),
        sh.store.lost_bytes()
    );
    for (name, v) in [
        ("frames_total", r.frames),
        ("bytes_total", r.bytes),
        ("held_responses_total", r.held),
        ("link_failures_total", r.link_failures),
        ("unacked_frames", r.unacked),
    ] {
        s += &format!("farcache_replication_{name} {v}\n");
    }
    let c = &sh.completions;
    s += &format!(
        "farcache_completion_records {}\nfarcache_completion_repeats_total {}\nfarcache_completion_evicted_total {}\n",
        c.len(),
        c.repeats.load(Ordering::Relaxed),
        c.evicted.load(Ordering::Relaxed)
    );
    s
}
