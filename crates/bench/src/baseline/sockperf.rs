//! Raw-TCP baseline with `sockperf` over loopback: ping-pong latency and
//! one-way streaming throughput.

use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ChildServer, free_port, run_checked, strip_ansi};
use crate::error::{BenchError, Result, parse_err};
use crate::row::{BenchRow, nan_as_null};
use crate::tools::{Tool, ensure_tools};

/// Parameters of the sockperf baseline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SockperfOpts {
    /// Duration of each client run (`-t`), in whole seconds (sockperf spends
    /// the first ~400 ms of a ping-pong run warming up).
    pub seconds: u32,
    /// Message size for the ping-pong latency run (`-m`).
    pub pingpong_msg_size: usize,
    /// Message size for the throughput run (`-m`).
    pub throughput_msg_size: usize,
}

impl SockperfOpts {
    /// 5 s runs (2 s when `quick`), 16 B ping-pong, 4 KiB throughput.
    pub fn new(quick: bool) -> Self {
        SockperfOpts {
            seconds: if quick { 2 } else { 5 },
            pingpong_msg_size: 16,
            throughput_msg_size: 4096,
        }
    }
}

impl Default for SockperfOpts {
    fn default() -> Self {
        Self::new(false)
    }
}

/// Result of `sockperf ping-pong`.
///
/// sockperf reports *half* the round-trip time; the `rtt_*` fields are
/// twice the `half_rtt_*` fields. All values in microseconds; fields not
/// found in the output are NaN.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PingPongResult {
    pub msg_size: usize,
    /// Observations in the valid (post-warm-up) period, if reported.
    pub observations: Option<u64>,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub half_rtt_avg_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub half_rtt_p50_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub half_rtt_p99_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub half_rtt_p999_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub half_rtt_max_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub rtt_avg_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub rtt_p50_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub rtt_p99_us: f64,
    /// All `(percentile, half-RTT µs)` pairs printed by sockperf.
    pub percentiles: Vec<(f64, f64)>,
}

/// Result of `sockperf throughput` (client-side send rate; the server does
/// not reply in this mode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputResult {
    pub msg_size: usize,
    pub msgs_per_sec: f64,
    pub bytes_per_sec: f64,
    /// Bandwidth in Gbit/s (10^9 bits per second).
    pub gbps: f64,
}

/// Both sockperf measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SockperfBaseline {
    pub pingpong: PingPongResult,
    pub throughput: ThroughputResult,
}

impl SockperfBaseline {
    /// Full loopback TCP round-trip median in µs (= 2 × sockperf's p50).
    pub fn rtt_p50_us(&self) -> f64 {
        self.pingpong.rtt_p50_us
    }

    /// Report rows: the ping-pong latency (full RTT) and the throughput run.
    pub fn rows(&self) -> Vec<BenchRow> {
        let pp = &self.pingpong;
        let tp = &self.throughput;
        vec![
            BenchRow {
                name: format!("raw TCP ping-pong {}B (RTT)", pp.msg_size),
                system: "sockperf".into(),
                op: "ping-pong".into(),
                record_size: pp.msg_size,
                distribution: "-".into(),
                c: Some(1),
                q: Some(1),
                mops: if pp.rtt_avg_us > 0.0 {
                    1.0 / pp.rtt_avg_us
                } else {
                    f64::NAN
                },
                p50_us: pp.rtt_p50_us,
                p99_us: pp.rtt_p99_us,
                p999_us: 2.0 * pp.half_rtt_p999_us,
                ..BenchRow::default()
            },
            BenchRow {
                name: format!("raw TCP stream {}B", tp.msg_size),
                system: "sockperf".into(),
                op: "stream".into(),
                record_size: tp.msg_size,
                distribution: "-".into(),
                c: Some(1),
                mops: tp.msgs_per_sec / 1e6,
                p50_us: f64::NAN,
                p99_us: f64::NAN,
                p999_us: f64::NAN,
                bandwidth_gbps: Some(tp.gbps),
                ..BenchRow::default()
            },
        ]
    }
}

/// A private `sockperf server --tcp` on a free 127.0.0.1 port, killed on drop.
#[derive(Debug)]
pub struct SockperfServer {
    inner: ChildServer,
}

impl SockperfServer {
    /// Installs sockperf if needed, starts the server and waits until it
    /// accepts TCP connections.
    pub fn start() -> Result<Self> {
        ensure_tools(&[Tool::Sockperf])?;
        let mut last_err = None;
        for _ in 0..3 {
            let port = free_port()?;
            let mut cmd = Command::new("sockperf");
            cmd.args(["server", "--tcp", "-i", "127.0.0.1", "-p"])
                .arg(port.to_string());
            match ChildServer::spawn("sockperf", cmd, port, Duration::from_secs(10), accepts) {
                Ok(inner) => return Ok(SockperfServer { inner }),
                Err(e) => {
                    eprintln!("[farcache-bench] sockperf server failed to start: {e}");
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| BenchError::InvalidArgument("unreachable".into())))
    }

    pub fn port(&self) -> u16 {
        self.inner.port()
    }

    /// `sockperf ping-pong --tcp --mps=max -t S -m M` against this server.
    pub fn pingpong(&self, seconds: u32, msg_size: usize) -> Result<PingPongResult> {
        let out = self.client("ping-pong", seconds, msg_size)?;
        parse_pingpong(&out, msg_size)
    }

    /// `sockperf throughput --tcp --mps=max -t S -m M` against this server.
    pub fn throughput(&self, seconds: u32, msg_size: usize) -> Result<ThroughputResult> {
        let out = self.client("throughput", seconds, msg_size)?;
        parse_throughput(&out, msg_size)
    }

    fn client(&self, mode: &str, seconds: u32, msg_size: usize) -> Result<String> {
        let mut cmd = Command::new("sockperf");
        cmd.args([mode, "--tcp", "-i", "127.0.0.1", "-p"])
            .arg(self.port().to_string())
            .args(["--mps=max", "-t"])
            .arg(seconds.max(1).to_string())
            .arg("-m")
            .arg(msg_size.to_string());
        let out = run_checked(cmd)?;
        let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
        s.push('\n');
        s.push_str(&String::from_utf8_lossy(&out.stderr));
        Ok(s)
    }
}

fn accepts(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    )
    .is_ok()
}

/// Runs ping-pong then throughput against one private sockperf server.
pub fn sockperf_baseline(opts: &SockperfOpts) -> Result<SockperfBaseline> {
    let server = SockperfServer::start()?;
    let pingpong = server.pingpong(opts.seconds, opts.pingpong_msg_size)?;
    let throughput = server.throughput(opts.seconds, opts.throughput_msg_size)?;
    Ok(SockperfBaseline {
        pingpong,
        throughput,
    })
}

/// Leading floating-point number of `s` (after trimming), e.g. `"11.5 (std"` -> 11.5.
fn leading_f64(s: &str) -> Option<f64> {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E')))
        .unwrap_or(s.len());
    s[..end].parse().ok()
}

/// Parses `sockperf ping-pong` output (values are half-RTT, in µs).
///
/// Uses `====> avg-latency=X` (or `Summary: Latency is X usec`),
/// `---> percentile P = X`, `---> <MAX> observation = X` and
/// `Total N observations`; ANSI colour codes are ignored. Fails if no
/// median (percentile 50) is found.
pub fn parse_pingpong(out: &str, msg_size: usize) -> Result<PingPongResult> {
    let text = strip_ansi(out);
    let mut avg = f64::NAN;
    let mut summary_avg = f64::NAN;
    let mut max = f64::NAN;
    let mut observations = None;
    let mut percentiles: Vec<(f64, f64)> = Vec::new();
    for line in text.lines() {
        if let Some((_, rest)) = line.split_once("avg-latency=") {
            avg = leading_f64(rest).unwrap_or(f64::NAN);
        } else if let Some((_, rest)) = line.split_once("Latency is") {
            summary_avg = leading_f64(rest).unwrap_or(f64::NAN);
        } else if let Some((_, rest)) = line.split_once("Total ")
            && rest.contains("observations")
        {
            observations = rest.split_whitespace().next().and_then(|n| n.parse().ok());
        } else if let Some((_, rest)) = line.split_once("percentile ") {
            if let Some((p, v)) = rest.split_once('=')
                && let (Some(p), Some(v)) = (leading_f64(p), leading_f64(v))
            {
                percentiles.push((p, v));
            }
        } else if line.contains("<MAX>")
            && let Some((_, v)) = line.split_once('=')
        {
            max = leading_f64(v).unwrap_or(f64::NAN);
        }
    }
    if avg.is_nan() {
        avg = summary_avg;
    }
    let pct = |p: f64| {
        percentiles
            .iter()
            .find(|(q, _)| (q - p).abs() < 1e-6)
            .map_or(f64::NAN, |&(_, v)| v)
    };
    let p50 = pct(50.0);
    if p50.is_nan() {
        return Err(parse_err(
            "sockperf ping-pong",
            format!(
                "no `percentile 50.000 = X` line in output: {:?}",
                text.trim()
            ),
        ));
    }
    let (p99, p999) = (pct(99.0), pct(99.9));
    Ok(PingPongResult {
        msg_size,
        observations,
        half_rtt_avg_us: avg,
        half_rtt_p50_us: p50,
        half_rtt_p99_us: p99,
        half_rtt_p999_us: p999,
        half_rtt_max_us: max,
        rtt_avg_us: 2.0 * avg,
        rtt_p50_us: 2.0 * p50,
        rtt_p99_us: 2.0 * p99,
        percentiles,
    })
}

/// Parses `sockperf throughput` output.
///
/// Uses `Summary: Message Rate is N [msg/sec]` and
/// `Summary: BandWidth is X MBps (Y Mbps)`, where sockperf's MBps is
/// 2^20 bytes/s (`KBps`/`GBps` are scaled likewise). If the bandwidth line is
/// missing, bytes/s = message rate × `msg_size`.
pub fn parse_throughput(out: &str, msg_size: usize) -> Result<ThroughputResult> {
    let text = strip_ansi(out);
    let mut rate = f64::NAN;
    let mut bytes = f64::NAN;
    for line in text.lines() {
        if let Some((_, rest)) = line.split_once("Message Rate is") {
            rate = leading_f64(rest).unwrap_or(f64::NAN);
        } else if let Some((_, rest)) = line.split_once("BandWidth is") {
            let mut it = rest.split_whitespace();
            let value = it.next().and_then(leading_f64);
            let unit = it.next().unwrap_or("MBps");
            let scale = match unit {
                u if u.starts_with("KB") => 1024.0,
                u if u.starts_with("GB") => 1024.0 * 1024.0 * 1024.0,
                u if u.starts_with("B") => 1.0,
                _ => 1024.0 * 1024.0,
            };
            if let Some(v) = value {
                bytes = v * scale;
            }
        }
    }
    if bytes.is_nan() && rate.is_finite() {
        bytes = rate * msg_size as f64;
    }
    if rate.is_nan() && bytes.is_finite() && msg_size > 0 {
        rate = bytes / msg_size as f64;
    }
    if bytes.is_nan() {
        return Err(parse_err(
            "sockperf throughput",
            format!(
                "no `Message Rate is` / `BandWidth is` line in output: {:?}",
                text.trim()
            ),
        ));
    }
    Ok(ThroughputResult {
        msg_size,
        msgs_per_sec: rate,
        bytes_per_sec: bytes,
        gbps: bytes * 8.0 / 1e9,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from sockperf 3.7 on the dev machine:
    /// `sockperf ping-pong --tcp -i 127.0.0.1 -p P --mps=max -t 2 -m 16`.
    const PINGPONG: &str = "sockperf: \u{1b}[2;35m== version #3.7-no.git == \u{1b}[0m
sockperf[CLIENT] send on:sockperf: using recvfrom() to block on socket(s)

[ 0] IP = 127.0.0.1       PORT = 16400 # TCP
sockperf: Warmup stage (sending a few dummy messages)...
sockperf: Starting test...
sockperf: Test end (interrupted by timer)
sockperf: Test ended
sockperf: [Total Run] RunTime=2.000 sec; Warm up time=400 msec; SentMessages=88228; ReceivedMessages=88227
sockperf: ========= Printing statistics for Server No: 0
sockperf: [Valid Duration] RunTime=1.550 sec; SentMessages=66787; ReceivedMessages=66787
sockperf: \u{1b}[2;35m====> avg-latency=11.586 (std-dev=4.486)\u{1b}[0m
sockperf: # dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0
sockperf: Summary: Latency is 11.586 usec
sockperf: \u{1b}[2;35mTotal 66787 observations\u{1b}[0m; each percentile contains 667.87 observations
sockperf: ---> <MAX> observation =  582.345
sockperf: ---> percentile 99.999 =  577.301
sockperf: ---> percentile 99.990 =   83.486
sockperf: ---> percentile 99.900 =   33.652
sockperf: ---> percentile 99.000 =   22.351
sockperf: ---> percentile 90.000 =   13.430
sockperf: ---> percentile 75.000 =   12.182
sockperf: ---> percentile 50.000 =   10.715
sockperf: ---> percentile 25.000 =   10.264
sockperf: ---> <MIN> observation =    8.370
";

    /// Captured from sockperf 3.7 on the dev machine:
    /// `sockperf throughput --tcp -i 127.0.0.1 -p P --mps=max -m 4096 -t 2`.
    const THROUGHPUT: &str = "sockperf: \u{1b}[2;35m== version #3.7-no.git == \u{1b}[0m
sockperf[CLIENT] send on:
[ 0] IP = 127.0.0.1       PORT = 16400 # TCP
sockperf: Warmup stage (sending a few dummy messages)...
sockperf: Starting test...
sockperf: Test end (interrupted by timer)
sockperf: Test ended
sockperf: Total of 840700 messages sent in 2.000 sec

sockperf: \u{1b}[2;35mNOTE: test was performed, using msg-size=4096. For getting maximum throughput consider using --msg-size=1472\u{1b}[0m
sockperf: Summary: Message Rate is 420255 [msg/sec], Packet Rate is about 1260765 [pkt/sec] (3 ip frags / msg)
sockperf: Summary: BandWidth is 1641.621 MBps (13132.969 Mbps)
";

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn parses_pingpong() {
        let r = parse_pingpong(PINGPONG, 16).expect("parse");
        assert!(close(r.half_rtt_avg_us, 11.586));
        assert!(close(r.half_rtt_p50_us, 10.715));
        assert!(close(r.rtt_p50_us, 21.43));
        assert!(close(r.rtt_avg_us, 23.172));
        assert!(close(r.half_rtt_p99_us, 22.351));
        assert!(close(r.half_rtt_p999_us, 33.652));
        assert!(close(r.half_rtt_max_us, 582.345));
        assert_eq!(r.observations, Some(66787));
        assert_eq!(r.percentiles.len(), 8);
    }

    #[test]
    fn parses_pingpong_without_colours_or_avg_line() {
        let plain: String = strip_ansi(PINGPONG)
            .lines()
            .filter(|l| !l.contains("avg-latency"))
            .map(|l| format!("{l}\n"))
            .collect();
        let r = parse_pingpong(&plain, 16).expect("parse");
        assert!(
            close(r.half_rtt_avg_us, 11.586),
            "falls back to Summary line"
        );
        assert!(close(r.half_rtt_p50_us, 10.715));
    }

    #[test]
    fn parses_throughput() {
        let r = parse_throughput(THROUGHPUT, 4096).expect("parse");
        assert!(close(r.msgs_per_sec, 420_255.0));
        assert!(close(r.bytes_per_sec, 1641.621 * 1048576.0));
        // sockperf's MBps is MiB/s: consistent with rate * size to ~0.01%.
        assert!((r.bytes_per_sec / (420_255.0 * 4096.0) - 1.0).abs() < 1e-3);
        assert!(close(r.gbps, 1641.621 * 1048576.0 * 8.0 / 1e9));
    }

    #[test]
    fn parse_errors() {
        assert!(parse_pingpong("sockperf: ERROR: connect failed", 16).is_err());
        assert!(parse_throughput("nothing here", 4096).is_err());
    }

    #[test]
    fn rows_use_full_rtt() {
        let b = SockperfBaseline {
            pingpong: parse_pingpong(PINGPONG, 16).expect("pp"),
            throughput: parse_throughput(THROUGHPUT, 4096).expect("tp"),
        };
        let rows = b.rows();
        assert!(close(rows[0].p50_us, 21.43));
        assert!(rows[1].bandwidth_gbps.is_some_and(|g| g > 10.0));
        assert!(close(b.rtt_p50_us(), 21.43));
    }

    #[test]
    #[ignore = "runs sockperf server and clients (several seconds)"]
    fn live_sockperf_baseline() {
        let b = sockperf_baseline(&SockperfOpts {
            seconds: 1,
            ..SockperfOpts::new(true)
        })
        .expect("sockperf baseline");
        assert!(b.pingpong.half_rtt_p50_us > 0.0 && b.pingpong.half_rtt_p50_us < 10_000.0);
        assert!(b.throughput.bytes_per_sec > 1e6);
    }
}
