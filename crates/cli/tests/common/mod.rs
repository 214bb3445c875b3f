//! Helpers shared by the cluster integration tests.
//!
//! Each test binary uses a different subset, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use std::io::Write;
use std::net::TcpStream;

use farcache_client::{ClientError, OpError, OpOutput, OpResult};
use farcache_proto::blocking::read_frame;
use farcache_proto::response::ReplyBody;
use farcache_proto::{FrameKind, Op, OpCode, RequestEncoder, ResponseDecoder, Status};

/// Path of the `farcache` binary built for these tests.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_farcache")
}

struct FlagWaker {
    thread: Thread,
    woken: AtomicBool,
}

impl Wake for FlagWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// A minimal executor: polls `f` on this thread and only polls again after its waker
/// fired. A future that stays pending without waking its waker for `lost_wakeup`
/// fails the test (so a lost wake-up is reported, not hidden by re-polling).
pub fn block_on<F: Future>(f: F, lost_wakeup: Duration) -> F::Output {
    let mut f = std::pin::pin!(f);
    let flag = Arc::new(FlagWaker {
        thread: std::thread::current(),
        woken: AtomicBool::new(false),
    });
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    loop {
        flag.woken.store(false, Ordering::Release);
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        let deadline = Instant::now() + lost_wakeup;
        while !flag.woken.load(Ordering::Acquire) {
            let now = Instant::now();
            assert!(
                now < deadline,
                "future pending and its waker not woken within {lost_wakeup:?}"
            );
            std::thread::park_timeout(deadline - now);
        }
    }
}

/// Runs `f` on a helper thread and fails the test if it takes longer than `limit`
/// (the thread is left behind; the test fails rather than hangs).
pub fn within<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(format!("within:{what}"))
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawn helper thread");
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: did not finish within {limit:?}")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            panic!("{what}: helper thread panicked")
        }
    }
}

/// Polls `f` every `every` until it returns `Some`, failing after `limit`.
pub fn eventually<T>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: condition not reached within {limit:?}"
        );
        std::thread::sleep(every);
    }
}

/// A blocking call's result in the shape of a batch op result, so both API styles are
/// checked the same way. Anything but a per-op error is a test failure.
pub fn as_op_result<T>(r: Result<T, ClientError>, ok: impl FnOnce(T) -> OpOutput) -> OpResult {
    match r {
        Ok(v) => Ok(ok(v)),
        Err(ClientError::Op(e)) => Err(e),
        Err(other) => panic!("expected an op result, got the call error {other}"),
    }
}

/// Deterministic bytes for a seed (splitmix64), so large payloads cost no strategy work.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut x = seed;
    while out.len() < len {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Describes where two byte strings differ, without dumping them.
pub fn diff(actual: &[u8], expected: &[u8]) -> Option<String> {
    if actual == expected {
        return None;
    }
    if actual.len() != expected.len() {
        return Some(format!(
            "length {} but {} expected",
            actual.len(),
            expected.len()
        ));
    }
    let first = actual
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(0);
    let last = actual
        .iter()
        .zip(expected)
        .rposition(|(a, b)| a != b)
        .unwrap_or(first);
    let show = |b: &[u8]| b[first..(first + 16).min(b.len())].to_vec();
    Some(format!(
        "bytes differ in [{first}, {}] of {}: got {:02x?}.. expected {:02x?}..",
        last,
        actual.len(),
        show(actual),
        show(expected)
    ))
}

/// True for the errors a client reports when a server is gone or silent.
pub fn is_unavailable(e: &OpError, server: u32) -> bool {
    matches!(e, OpError::ServerUnavailable { server: s, .. } | OpError::Timeout { server: s, .. } if *s == server)
}

/// Resident memory of a process, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// True when every thread of `pid` is in the stopped state (`T` in /proc).
pub fn all_threads_stopped(pid: libc::pid_t) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut any = false;
    for t in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            return false;
        };
        // The state follows the parenthesised command name, which may contain spaces.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        if state != Some("T") {
            return false;
        }
        any = true;
    }
    any
}

// ---------------------------------------------------------------------------------
// Raw request batches, for tests that speak the wire protocol themselves.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    None,
    Data(Vec<u8>),
    Value(u64),
    Owner(Option<String>),
}

pub type Reply = (OpCode, Status, Body);

pub fn encode_request(seq: u64, ops: &[Op<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = RequestEncoder::begin(&mut out, seq);
    for op in ops {
        enc.push(&mut out, op);
    }
    enc.finish(&mut out);
    out
}

pub fn decode_replies(payload: &[u8]) -> Vec<Reply> {
    let mut d = ResponseDecoder::new(payload).expect("response payload");
    let replies = d
        .by_ref()
        .map(|r| {
            let r = r.expect("reply");
            let body = match r.body {
                ReplyBody::None => Body::None,
                ReplyBody::Data(b) => Body::Data(b.to_vec()),
                ReplyBody::Value(v) => Body::Value(v),
                ReplyBody::Owner(o) => Body::Owner(o.map(str::to_owned)),
                // A DONE_RUN output reads as the EXECUTE reply it stands for.
                ReplyBody::Done(b) => {
                    let mut d = Vec::with_capacity(1 + b.len());
                    farcache_proto::reply::push_done(&mut d, b);
                    Body::Data(d)
                }
            };
            (r.op, r.status, body)
        })
        .collect();
    d.finish().expect("well-formed response");
    replies
}

/// One request batch and its response on an established connection.
pub fn request(s: &mut TcpStream, seq: u64, ops: &[Op<'_>]) -> Vec<Reply> {
    s.write_all(&encode_request(seq, ops))
        .expect("send request");
    let (h, payload) = read_frame(s, u32::MAX).expect("response frame");
    assert_eq!(
        h.kind,
        FrameKind::Response,
        "expected a response, got {:?}: {}",
        h.kind,
        String::from_utf8_lossy(&payload)
    );
    assert_eq!(h.seq, seq, "response seq");
    let r = decode_replies(&payload);
    assert_eq!(r.len(), ops.len(), "one reply per op");
    r
}

/// Server `i`'s counters, asked over a connection holding the cluster secret.
pub fn server_stats(
    c: &farcache_testkit::ProcessCluster,
    i: usize,
) -> farcache_proto::control::ServerStats {
    use farcache_proto::blocking::{control_call, handshake};
    use farcache_proto::control::{ControlRequest, ControlResponse};
    let mut s = TcpStream::connect(c.server_addr(i)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let cred = farcache_proto::Credential::Cluster(c.secret().clone());
    handshake(&mut s, farcache_proto::Role::Client, 1, "", &cred).expect("handshake");
    match control_call(&mut s, &ControlRequest::ServerStats) {
        Ok(ControlResponse::Stats(st)) => st,
        other => panic!("stats: {other:?}"),
    }
}

/// Runs a `farcache` command with `CI=true` and returns its stdout; fails the test with
/// both outputs if it does not succeed.
pub fn run_ok(cmd: &mut std::process::Command, what: &str) -> String {
    let run = cmd
        .env("CI", "true")
        .output()
        .unwrap_or_else(|e| panic!("run {what}: {e}"));
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{what} failed: {}\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    stdout
}

/// A process cluster of `servers` servers with `memory` each and regions of
/// `region_size` bytes.
pub fn cluster(servers: usize, region_size: u64, memory: u64) -> farcache_testkit::ProcessCluster {
    let opts = farcache_testkit::ClusterOptions::default()
        .servers(servers)
        .region_size(region_size)
        .server_memory(memory);
    farcache_testkit::ProcessCluster::start(bin(), &opts).expect("start process cluster")
}

/// A cluster-secret client with a 5 s op timeout.
pub fn client(c: &farcache_testkit::ProcessCluster) -> farcache_client::Client {
    c.client_with(farcache_client::ClientConfig::new("").op_timeout(Duration::from_secs(5)))
        .expect("client")
}

/// The index (in the cluster) of the server with id `id`.
pub fn server_index(
    c: &farcache_testkit::ProcessCluster,
    client: &farcache_client::Client,
    id: farcache_proto::ServerId,
) -> usize {
    let st = client.status().expect("status");
    let addr = &st.servers.iter().find(|s| s.id == id).expect("server").addr;
    (0..c.server_count())
        .find(|&i| c.server_addr(i) == addr)
        .expect("server index")
}

/// A verifying load saw nothing wrong: no wrong read, no acknowledged write lost
/// (silently or reported), and no failed op.
pub fn assert_clean(r: &farcache_testkit::VerifyReport) {
    assert_eq!(
        (
            r.wrong_reads,
            r.acked_writes_lost,
            r.acked_writes_lost_reported,
            r.op_errors
        ),
        (0, 0, 0, 0),
        "{:?}",
        r.samples
    );
}

/// `farcache ARGS` exits with an error message, without panicking.
pub fn assert_refused(args: &[&str]) {
    let run = std::process::Command::new(bin())
        .args(args)
        .output()
        .expect("run farcache");
    assert!(!run.status.success(), "{args:?} should fail");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(!err.trim().is_empty(), "{args:?}: no error message");
}
