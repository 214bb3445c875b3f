//! `--metrics-listen`: the server's counters in Prometheus text format over plain HTTP.
//! Scrapes are rare and tiny, so one blocking thread serves them one at a time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use farcache_proto::control::ServerStats;
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

/// Every counter in Prometheus text, from the same snapshot a `ServerStats` control
/// call answers (so the two never disagree).
pub fn prometheus_text(sh: &Shared) -> String {
    render(&crate::cluster::control::stats(sh))
}

fn render(st: &ServerStats) -> String {
    let mut s = String::new();
    let mut put = |name: &str, v: u64| {
        s += &format!("farcache_{name} {v}\n");
    };
    for o in &st.ops {
        put(&format!("ops_total{{op=\"{}\"}}", o.op), o.count);
        put(&format!("op_bytes_total{{op=\"{}\"}}", o.op), o.bytes);
        put(&format!("op_errors_total{{op=\"{}\"}}", o.op), o.errors);
    }
    put("protocol_errors_total", st.protocol_errors);
    put("connections", st.connections);
    let p = &st.peer;
    for (name, v) in [
        ("frames_sent", p.frames_sent),
        ("msgs_sent", p.msgs_sent),
        ("forwards", p.forwards),
        ("fetches", p.fetches),
        ("results", p.results),
        ("failures", p.failures),
        ("queued", p.queued),
        ("stolen", p.stolen),
    ] {
        put(&format!("peer_{name}_total"), v);
    }
    let g = &st.guard;
    for (name, v) in [
        ("refused", g.refused),
        ("evicted", g.evicted),
        ("auth_failures", g.auth_failures),
        ("timed_out", g.timed_out),
        ("cut_off", g.cut_off),
        ("forbidden", g.forbidden),
        ("peer_dropped", g.peer_dropped),
        ("unleased", g.unleased),
        ("fenced", g.fenced),
    ] {
        put(&format!("guard_{name}_total"), v);
    }
    put("worker_panics_total", st.worker_panics);
    put("memory_bytes", st.memory);
    put("memory_used_bytes", st.used);
    put("migrations", st.migrations);
    put("lost_bytes", st.lost_bytes);
    let r = &st.replication;
    for (name, v) in [
        ("frames_total", r.frames),
        ("bytes_total", r.bytes),
        ("held_responses_total", r.held),
        ("link_failures_total", r.link_failures),
        ("unacked_frames", r.unacked),
    ] {
        put(&format!("replication_{name}"), v);
    }
    let c = &st.completions;
    put("completion_records", c.records);
    put("completion_repeats_total", c.repeats);
    put("completion_evicted_total", c.evicted);
    s
}
