//! Raw loopback TCP floors measured by our own busy-polling code: a
//! ping-pong round trip and a multi-message stream.
//!
//! Why not only sockperf: its ping-pong blocks in `recv`, so on an idle VM
//! the figure includes waking a sleeping thread and wanders between 10 and
//! 100+ µs on the same host. farcache's client spins on non-blocking
//! sockets, so the floor it should be compared with is a spinning one.
//! Both ends here use non-blocking sockets with `TCP_NODELAY` and yield the
//! core (never sleep) when nothing moved, as farcache's client does.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{BenchError, Result};
use crate::histogram::{LatencyHistogram, LatencySummary};
use crate::row::{BenchRow, nan_as_null};

/// How long the server thread waits for the client to connect.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(5);

/// Gives up when one side makes no progress for this long.
const STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Warm-up of the stream before its measured window.
const STREAM_WARMUP: Duration = Duration::from_millis(100);

/// Receive buffer of the stream's reader.
const STREAM_READ_BUF: usize = 4 << 20;

/// Parameters of [`raw_tcp_floor`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RawTcpOpts {
    /// Ping-pong message size, bytes.
    pub pingpong_msg_size: usize,
    /// Recorded round trips (after `round_trips / 10`, at least 1000,
    /// unrecorded ones).
    pub round_trips: u64,
    /// Stream message size, bytes.
    pub stream_msg_size: usize,
    /// Messages handed to each `write` call.
    pub msgs_per_write: usize,
    /// Measured stream window (after a 100 ms warm-up).
    pub duration: Duration,
}

impl RawTcpOpts {
    /// 16 B ping-pong (100k round trips, 20k when `quick`) and a stream of
    /// 64 × 4 KiB per write for 2 s (0.5 s when `quick`).
    pub fn new(quick: bool) -> Self {
        RawTcpOpts {
            pingpong_msg_size: 16,
            round_trips: if quick { 20_000 } else { 100_000 },
            stream_msg_size: 4096,
            msgs_per_write: 64,
            duration: Duration::from_millis(if quick { 500 } else { 2000 }),
        }
    }
}

impl Default for RawTcpOpts {
    fn default() -> Self {
        Self::new(false)
    }
}

/// Result of [`spin_stream`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamResult {
    pub msg_size: usize,
    pub msgs_per_write: usize,
    /// Received bytes per second over the window, in Gbit/s (1e9 bit/s).
    pub gbps: f64,
    pub msgs_per_sec: f64,
    pub secs: f64,
}

/// Spinning loopback TCP floors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RawTcpFloor {
    /// Ping-pong message size, bytes.
    pub pingpong_msg_size: usize,
    /// Full round-trip times (not halved, unlike sockperf's output), µs.
    pub spin_rtt: LatencySummary,
    /// Stream message size, bytes.
    pub msg_size: usize,
    /// Messages per `write` call.
    pub msgs_per_write: usize,
    /// Stream bandwidth, Gbit/s (1e9 bit/s), as received.
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub gbps: f64,
    /// Stream messages per second, as received.
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub msgs_per_sec: f64,
}

impl RawTcpFloor {
    /// Median round trip, µs.
    pub fn rtt_p50_us(&self) -> f64 {
        self.spin_rtt.p50_us
    }

    /// Report rows: the spinning ping-pong (full RTT) and the stream.
    pub fn rows(&self) -> Vec<BenchRow> {
        let rtt = &self.spin_rtt;
        vec![
            BenchRow {
                name: format!("raw TCP spin ping-pong {}B (RTT)", self.pingpong_msg_size),
                system: "rawtcp".into(),
                op: "ping-pong".into(),
                record_size: self.pingpong_msg_size,
                distribution: "-".into(),
                c: Some(1),
                q: Some(1),
                mops: if rtt.mean_us > 0.0 {
                    1.0 / rtt.mean_us
                } else {
                    f64::NAN
                },
                p50_us: rtt.p50_us,
                p99_us: rtt.p99_us,
                p999_us: rtt.p999_us,
                ..BenchRow::default()
            },
            BenchRow {
                name: format!(
                    "raw TCP spin stream {}x{}B",
                    self.msgs_per_write, self.msg_size
                ),
                system: "rawtcp".into(),
                op: "stream".into(),
                record_size: self.msg_size,
                distribution: "-".into(),
                c: Some(1),
                b: Some(self.msgs_per_write),
                mops: self.msgs_per_sec / 1e6,
                p50_us: f64::NAN,
                p99_us: f64::NAN,
                p999_us: f64::NAN,
                bandwidth_gbps: Some(self.gbps),
                ..BenchRow::default()
            },
        ]
    }
}

/// Measures both floors: [`spin_pingpong`] then [`spin_stream`].
pub fn raw_tcp_floor(opts: &RawTcpOpts) -> Result<RawTcpFloor> {
    let spin_rtt = spin_pingpong(opts.pingpong_msg_size, opts.round_trips)?;
    let stream = spin_stream(opts.stream_msg_size, opts.msgs_per_write, opts.duration)?;
    Ok(RawTcpFloor {
        pingpong_msg_size: opts.pingpong_msg_size,
        spin_rtt,
        msg_size: stream.msg_size,
        msgs_per_write: stream.msgs_per_write,
        gbps: stream.gbps,
        msgs_per_sec: stream.msgs_per_sec,
    })
}

/// Round-trip time of `msg_size`-byte messages between a busy-polling
/// client and a busy-polling echo thread over loopback: `round_trips`
/// recorded after `max(round_trips / 10, 1000)` unrecorded ones.
pub fn spin_pingpong(msg_size: usize, round_trips: u64) -> Result<LatencySummary> {
    if msg_size == 0 || round_trips == 0 {
        return Err(BenchError::InvalidArgument(
            "ping-pong needs a non-empty message and at least one round trip".into(),
        ));
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let port = listener.local_addr()?.port();
    std::thread::scope(|sc| {
        let server = sc.spawn(move || echo_server(&listener));
        let client = pingpong_client(port, msg_size, round_trips);
        let served = server
            .join()
            .unwrap_or_else(|_| Err(thread_panicked("echo")));
        let hist = client?;
        served?;
        Ok(hist.summary())
    })
}

fn pingpong_client(port: u16, msg_size: usize, round_trips: u64) -> Result<LatencyHistogram> {
    let mut s = connect(port)?;
    let msg = vec![0x5Au8; msg_size];
    let mut reply = vec![0u8; msg_size];
    let mut hist = LatencyHistogram::new();
    let warmup = (round_trips / 10).max(1000);
    for i in 0..warmup + round_trips {
        let t0 = Instant::now();
        spin_write_all(&mut s, &msg)?;
        spin_read_exact(&mut s, &mut reply)?;
        let rtt = t0.elapsed();
        if i >= warmup {
            hist.record_duration(rtt);
        }
    }
    if reply != msg {
        return Err(BenchError::InvalidArgument(
            "echo server returned different bytes".into(),
        ));
    }
    Ok(hist)
}

/// Accepts one connection and echoes everything it reads until EOF.
fn echo_server(listener: &TcpListener) -> Result<()> {
    let mut s = accept(listener)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut idle = Idle::default();
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                spin_write_all(&mut s, &buf[..n])?;
                idle.reset();
            }
            Err(e) if would_block(&e) => idle.spin("echo server read")?,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Bandwidth of a one-way stream over loopback: the writer hands
/// `msgs_per_write` messages of `msg_size` bytes to each `write` call; a
/// reader thread drains them into a large buffer. Both busy-poll. Counted
/// at the reader over `duration`, after a 100 ms warm-up.
pub fn spin_stream(
    msg_size: usize,
    msgs_per_write: usize,
    duration: Duration,
) -> Result<StreamResult> {
    if msg_size == 0 || msgs_per_write == 0 || duration.is_zero() {
        return Err(BenchError::InvalidArgument(
            "stream needs non-empty messages, at least one per write and a duration".into(),
        ));
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let port = listener.local_addr()?.port();
    let received = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let reader = sc.spawn(|| {
            let r = stream_reader(&listener, &received);
            if r.is_err() {
                failed.store(true, Ordering::Relaxed);
            }
            r
        });
        let writer = stream_writer(
            port,
            msg_size * msgs_per_write,
            duration,
            &received,
            &failed,
        );
        let read = reader
            .join()
            .unwrap_or_else(|_| Err(thread_panicked("reader")));
        let (bytes, secs) = writer?;
        read?;
        let bytes_per_sec = bytes as f64 / secs;
        Ok(StreamResult {
            msg_size,
            msgs_per_write,
            gbps: bytes_per_sec * 8.0 / 1e9,
            msgs_per_sec: bytes_per_sec / msg_size as f64,
            secs,
        })
    })
}

/// Writes until the window closes; returns (bytes received in the window,
/// window seconds). Closing the socket on return ends the reader.
fn stream_writer(
    port: u16,
    chunk: usize,
    duration: Duration,
    received: &AtomicU64,
    failed: &AtomicBool,
) -> Result<(u64, f64)> {
    let mut s = connect(port)?;
    let buf = vec![0xA5u8; chunk];
    let mut off = 0;
    let begin = Instant::now();
    let mut window: Option<(Instant, u64)> = None;
    let mut idle = Idle::default();
    loop {
        match s.write(&buf[off..]) {
            Ok(n) => {
                off = (off + n) % chunk;
                idle.reset();
            }
            Err(e) if would_block(&e) => idle.spin("stream writer")?,
            Err(e) => return Err(e.into()),
        }
        if failed.load(Ordering::Relaxed) {
            return Err(io::Error::other("stream reader failed").into());
        }
        let now = Instant::now();
        match window {
            None if now - begin >= STREAM_WARMUP => {
                window = Some((now, received.load(Ordering::Acquire)));
            }
            Some((t0, r0)) if now - t0 >= duration => {
                let r1 = received.load(Ordering::Acquire);
                return Ok((r1 - r0, (now - t0).as_secs_f64()));
            }
            _ => {}
        }
    }
}

fn stream_reader(listener: &TcpListener, received: &AtomicU64) -> Result<()> {
    let mut s = accept(listener)?;
    let mut buf = vec![0u8; STREAM_READ_BUF];
    let mut idle = Idle::default();
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                received.fetch_add(n as u64, Ordering::Release);
                idle.reset();
            }
            Err(e) if would_block(&e) => idle.spin("stream reader")?,
            Err(e) => return Err(e.into()),
        }
    }
}

fn connect(port: u16) -> Result<TcpStream> {
    let s = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// Accepts one connection within [`ACCEPT_TIMEOUT`] (polling, so a client
/// that failed before connecting cannot leave this thread blocked forever).
fn accept(listener: &TcpListener) -> Result<TcpStream> {
    listener.set_nonblocking(true)?;
    let start = Instant::now();
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nodelay(true)?;
                s.set_nonblocking(true)?;
                return Ok(s);
            }
            Err(e) if would_block(&e) && start.elapsed() < ACCEPT_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn spin_write_all(s: &mut TcpStream, mut buf: &[u8]) -> Result<()> {
    let mut idle = Idle::default();
    while !buf.is_empty() {
        match s.write(buf) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero).into()),
            Ok(n) => {
                buf = &buf[n..];
                idle.reset();
            }
            Err(e) if would_block(&e) => idle.spin("write")?,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn spin_read_exact(s: &mut TcpStream, buf: &mut [u8]) -> Result<()> {
    let mut got = 0;
    let mut idle = Idle::default();
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => {
                got += n;
                idle.reset();
            }
            Err(e) if would_block(&e) => idle.spin("read")?,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

fn thread_panicked(what: &str) -> BenchError {
    BenchError::Io(io::Error::other(format!("raw TCP {what} thread panicked")))
}

/// Yields the core while nothing moves; fails after [`STALL_TIMEOUT`].
#[derive(Debug, Default)]
struct Idle(Option<Instant>);

impl Idle {
    fn reset(&mut self) {
        self.0 = None;
    }

    fn spin(&mut self, what: &str) -> Result<()> {
        let now = Instant::now();
        if now - *self.0.get_or_insert(now) > STALL_TIMEOUT {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("raw TCP {what}: no progress for {STALL_TIMEOUT:?}"),
            )
            .into());
        }
        std::thread::yield_now();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_is_positive() {
        let f = raw_tcp_floor(&RawTcpOpts {
            pingpong_msg_size: 16,
            round_trips: 2000,
            stream_msg_size: 4096,
            msgs_per_write: 64,
            duration: Duration::from_millis(200),
        })
        .expect("raw tcp floor");
        assert_eq!(f.spin_rtt.count, 2000);
        assert!(f.spin_rtt.p50_us > 0.0, "{f:?}");
        assert!(f.spin_rtt.p99_us >= f.spin_rtt.p50_us, "{f:?}");
        assert!(f.gbps > 0.0 && f.msgs_per_sec > 0.0, "{f:?}");
        assert!(
            (f.msgs_per_sec * 4096.0 * 8.0 / 1e9 - f.gbps).abs() < 1e-6 * f.gbps,
            "{f:?}"
        );
        assert_eq!(f.rows().len(), 2);
    }

    #[test]
    fn rejects_empty_runs() {
        assert!(spin_pingpong(0, 10).is_err());
        assert!(spin_stream(4096, 0, Duration::from_millis(10)).is_err());
    }
}
