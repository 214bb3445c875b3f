//! Hostile peers against a real cache server: truncated frames, oversized length
//! fields, unknown op codes and frame kinds, bad addresses, random garbage, requests
//! before the handshake and manager-only control ops from a client.
//!
//! The cluster has one server with one worker thread, so the hostile connections share
//! the event loop with the well-behaved clients. After every attack a client that was
//! connected before it and a client connected after it must still read and write
//! correctly, and the server must drop the hostile connection (its connection count
//! returns to the baseline). Every socket has read and write timeouts.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use common::{Body, decode_replies, diff, encode_request, eventually, pattern, request, rss_kib};
use farcache_client::{Cache, ClientConfig};
use farcache_proto::blocking::{RpcError, control_call, handshake, read_frame, write_frame};
use farcache_proto::control::{ControlErrorCode, ControlRequest, ControlResponse};
use farcache_proto::{
    Challenge, ClusterSecret, Credential, FrameHeader, FrameKind, HEADER_LEN, HelloAck,
    MAX_OP_BYTES, Op, OpCode, RequestDecoder, Role, Status,
};
use farcache_testkit::{ClusterOptions, LocalCluster};
use rand::{Rng, SeedableRng};

const REGION: u64 = 64 << 10;
const CAPACITY: u64 = 4 * REGION;
/// Bytes the health checks compare; probes write only past this point.
const IMAGE: u64 = CAPACITY - 4096;
const PROBE: u64 = IMAGE;
const IO_TIMEOUT: Duration = Duration::from_secs(5);

struct Fixture {
    cluster: LocalCluster,
    cred: Credential,
    server: SocketAddr,
    name: &'static str,
    cache_id: u32,
    /// A client connected (with an open server connection) before any attack.
    before: Cache,
    image: Vec<u8>,
    baseline_conns: u64,
}

fn client_config() -> ClientConfig {
    ClientConfig::new("").op_timeout(Duration::from_secs(5))
}

impl Fixture {
    fn new(name: &'static str) -> Self {
        let opts = ClusterOptions::default()
            .servers(1)
            .server_threads(1)
            .region_size(REGION)
            .server_memory(16 << 20);
        let cluster = LocalCluster::start(&opts).expect("start cluster");
        let server = cluster.servers()[0].addr();
        let client = cluster.client_with(client_config()).expect("client");
        let before = client.create(name, CAPACITY).expect("create");
        let image = pattern(name.len() as u64, IMAGE as usize);
        before.write(0, &image).expect("fill");
        assert_eq!(&before.read(0, IMAGE).expect("read")[..], &image[..]);
        let cache_id = before.id();
        let f = Self {
            cred: Credential::Cluster(cluster.secret().clone()),
            server,
            name,
            cache_id,
            before,
            image,
            baseline_conns: 0,
            cluster,
        };
        let baseline_conns = f.connections();
        Self {
            baseline_conns,
            ..f
        }
    }

    fn connections(&self) -> u64 {
        self.cluster.servers()[0].stats().connections
    }

    fn protocol_errors(&self) -> u64 {
        self.cluster.servers()[0].stats().protocol_errors
    }

    /// Both the client connected before the attack and a brand-new one read the cache
    /// image intact and can write; a fresh raw connection can handshake and ping.
    fn assert_healthy(&self, ctx: &str) {
        let check = |cache: &Cache, who: &str, probe: u64| {
            let got = cache
                .read(0, IMAGE)
                .unwrap_or_else(|e| panic!("{ctx}: {who} client cannot read: {e}"));
            if let Some(d) = diff(&got, &self.image) {
                panic!("{ctx}: {who} client reads a changed image: {d}");
            }
            let data = pattern(probe, 1000);
            cache
                .write(PROBE + probe * 8, &data)
                .unwrap_or_else(|e| panic!("{ctx}: {who} client cannot write: {e}"));
            let back = cache
                .read(PROBE + probe * 8, 1000)
                .unwrap_or_else(|e| panic!("{ctx}: {who} client cannot read back: {e}"));
            assert_eq!(&back[..], &data[..], "{ctx}: {who} client read-back");
            let old = cache
                .fetch_add(CAPACITY - 8, 1)
                .unwrap_or_else(|e| panic!("{ctx}: {who} client fetch_add: {e}"));
            let now = cache
                .fetch_add(CAPACITY - 8, 0)
                .unwrap_or_else(|e| panic!("{ctx}: {who} client fetch_add: {e}"));
            assert_eq!(now, old.wrapping_add(1), "{ctx}: {who} client counter");
        };
        check(&self.before, "pre-attack", 1);
        {
            let client = self
                .cluster
                .client_with(client_config())
                .unwrap_or_else(|e| panic!("{ctx}: new client cannot connect: {e}"));
            let cache = client
                .open(self.name)
                .unwrap_or_else(|e| panic!("{ctx}: new client cannot open: {e}"));
            check(&cache, "new", 2);
        }
        let mut s = self.connect();
        self.handshake(&mut s, Role::Client)
            .expect("handshake after attack");
        let r = request(&mut s, 1, &[Op::Ping]);
        assert_eq!(
            r,
            vec![(OpCode::Ping, Status::Ok, Body::None)],
            "{ctx}: ping"
        );
    }

    /// The server let go of every hostile connection.
    fn assert_connections_released(&self, ctx: &str) {
        eventually(
            &format!("{ctx}: connections back to the baseline"),
            Duration::from_secs(10),
            Duration::from_millis(10),
            || (self.connections() == self.baseline_conns).then_some(()),
        );
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect_timeout(&self.server, IO_TIMEOUT).expect("connect");
        s.set_read_timeout(Some(IO_TIMEOUT))
            .expect("set read timeout");
        s.set_write_timeout(Some(IO_TIMEOUT))
            .expect("set write timeout");
        s.set_nodelay(true).expect("set nodelay");
        s
    }

    fn connect_client(&self) -> (TcpStream, HelloAck) {
        let mut s = self.connect();
        let ack = self.handshake(&mut s, Role::Client).expect("handshake");
        (s, ack)
    }

    /// Proves `role` with the cluster secret (a server as 127.0.0.1:1).
    fn handshake(&self, s: &mut TcpStream, role: Role) -> Result<HelloAck, RpcError> {
        let identity = if role == Role::Server {
            "127.0.0.1:1"
        } else {
            ""
        };
        handshake(s, role, 77, identity, &self.cred)
    }

    /// Connected, the server's challenge read, nothing sent.
    fn connect_challenged(&self) -> (TcpStream, Challenge) {
        let mut s = self.connect();
        let (h, payload) = read_frame(&mut s, 1 << 10).expect("challenge");
        assert_eq!(h.kind, FrameKind::Challenge, "the server speaks first");
        (s, Challenge::decode(&payload).expect("challenge decodes"))
    }

    fn finish(self, ctx: &str) {
        self.assert_healthy(ctx);
        self.assert_connections_released(ctx);
        self.cluster.shutdown();
    }
}

/// Sends bytes a hostile peer would; the server may already have hung up.
fn send(s: &mut TcpStream, bytes: &[u8]) {
    match s.write_all(bytes) {
        Ok(()) => {}
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
            ) => {}
        Err(e) => panic!("send: {e}"),
    }
}

enum Next {
    Frame(FrameHeader, Vec<u8>),
    Closed,
}

/// The next frame, or the end of the connection. A read timeout fails the test.
fn next(s: &mut TcpStream) -> Next {
    match read_frame(s, u32::MAX) {
        Ok((h, p)) => Next::Frame(h, p),
        Err(RpcError::Io(e))
            if matches!(
                e.kind(),
                ErrorKind::UnexpectedEof
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::BrokenPipe
            ) =>
        {
            Next::Closed
        }
        Err(e) => panic!("the server neither answered nor closed the connection: {e}"),
    }
}

/// The server sends an `Error` frame (whose text is returned) and closes.
fn expect_error_and_close(s: &mut TcpStream, ctx: &str) -> String {
    let text = match next(s) {
        Next::Frame(h, p) => {
            let text = String::from_utf8_lossy(&p).into_owned();
            assert_eq!(
                h.kind,
                FrameKind::Error,
                "{ctx}: expected an Error frame: {text}"
            );
            text
        }
        Next::Closed => panic!("{ctx}: connection closed without an Error frame"),
    };
    expect_closed(s, ctx);
    text
}

/// Nothing more but the end of the connection (an `Error` frame first is fine).
fn expect_closed(s: &mut TcpStream, ctx: &str) {
    for _ in 0..2 {
        match next(s) {
            Next::Closed => return,
            Next::Frame(h, p) if h.kind == FrameKind::Error => {
                let _ = String::from_utf8_lossy(&p);
            }
            Next::Frame(h, p) => panic!(
                "{ctx}: unexpected {:?} frame instead of a close: {}",
                h.kind,
                String::from_utf8_lossy(&p)
            ),
        }
    }
    panic!("{ctx}: more than one Error frame");
}

/// After `shutdown(Write)` the server must close its side without sending data.
fn expect_quiet_close(s: &mut TcpStream, ctx: &str) {
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("{ctx}: server sent {n} bytes to a truncated frame"),
        Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset) => {}
        Err(e) => panic!("{ctx}: server did not close: {e}"),
    }
}

fn header(kind: u8, len: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&len.to_le_bytes());
    h[4] = kind;
    h[8..16].copy_from_slice(&5u64.to_le_bytes());
    h
}

/// A well-formed Hello frame answering `challenge` with `cred`.
fn hello_frame_for(cred: &Credential, role: Role, challenge: &Challenge) -> Vec<u8> {
    let mut out = Vec::new();
    let hello = cred.hello(role, 1, "", challenge);
    farcache_proto::frame::encode_frame(&mut out, FrameKind::Hello, 0, &hello.encode());
    out
}

/// A well-formed Hello frame from a stranger (another cluster's secret).
fn hello_frame(role: Role) -> Vec<u8> {
    let stranger = Credential::Cluster(ClusterSecret::generate());
    hello_frame_for(&stranger, role, &Challenge::new([1; 32]))
}

// ---------------------------------------------------------------------------------

#[test]
fn truncated_frames_then_close() {
    let f = Fixture::new("truncated");
    let hello = hello_frame(Role::Client);
    let write = encode_request(
        3,
        &[Op::Write {
            cache: f.cache_id,
            addr: 0,
            data: &[0xEE; 600],
        }],
    );
    let cases: Vec<(&str, bool, Vec<u8>)> = vec![
        ("partial header", false, hello[..7].to_vec()),
        (
            "header without its payload",
            false,
            hello[..HEADER_LEN + 5].to_vec(),
        ),
        ("request header only", true, write[..HEADER_LEN].to_vec()),
        (
            "request cut inside the count",
            true,
            write[..HEADER_LEN + 2].to_vec(),
        ),
        (
            "request cut inside the write data",
            true,
            write[..write.len() - 100].to_vec(),
        ),
    ];
    for (what, after_hello, bytes) in cases {
        let mut s = if after_hello {
            f.connect_client().0
        } else {
            f.connect_challenged().0
        };
        send(&mut s, &bytes);
        // While the partial frame sits in the server's buffer, everyone else is served.
        f.assert_healthy(&format!("{what}, connection still open"));
        s.shutdown(Shutdown::Write).unwrap();
        expect_quiet_close(&mut s, what);
        f.assert_healthy(what);
    }
    // None of the truncated writes landed.
    f.finish("truncated frames");
}

#[test]
fn length_field_over_the_maximum_is_refused() {
    let f = Fixture::new("oversized");
    let (_, ack) = f.connect_client();
    let max = ack.max_frame;
    assert!(max > 0);
    for (what, handshake_first, len) in [
        ("u32::MAX before the handshake", false, u32::MAX),
        ("u32::MAX after the handshake", true, u32::MAX),
        ("max + 1 after the handshake", true, max + 1),
    ] {
        let errors = f.protocol_errors();
        let mut s = if handshake_first {
            f.connect_client().0
        } else {
            f.connect_challenged().0
        };
        let kind = if handshake_first {
            FrameKind::Request
        } else {
            FrameKind::Hello
        };
        send(&mut s, &header(kind as u8, len));
        let text = expect_error_and_close(&mut s, what);
        assert!(text.contains("exceeds the maximum"), "{what}: {text}");
        assert!(
            f.protocol_errors() > errors,
            "{what}: counted as a protocol error"
        );
        f.assert_healthy(what);
    }
    // A frame exactly at the limit is legal: the server waits for it, and a peer that
    // then goes away is simply dropped.
    let (mut s, _) = f.connect_client();
    send(&mut s, &header(FrameKind::Request as u8, max));
    send(&mut s, &[0u8; 1000]);
    f.assert_healthy("max-size frame pending");
    s.shutdown(Shutdown::Write).unwrap();
    expect_quiet_close(&mut s, "max-size frame abandoned");
    f.finish("oversized length");
}

#[test]
fn unknown_op_codes_frame_kinds_and_malformed_batches() {
    let f = Fixture::new("unknown-op");
    let write_then_bad = {
        let mut v = encode_request(
            4,
            &[Op::Write {
                cache: f.cache_id,
                addr: 0,
                data: b"MUST NOT LAND",
            }],
        );
        // Append an op with an unknown code and bump the count to 2.
        v.push(0xEE);
        v.extend_from_slice(&[0u8; 16]);
        let len = (v.len() - HEADER_LEN) as u32;
        v[0..4].copy_from_slice(&len.to_le_bytes());
        v[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&2u32.to_le_bytes());
        v
    };
    let bad_count = {
        let mut v = encode_request(5, &[Op::Ping, Op::Ping]);
        v[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&3u32.to_le_bytes());
        v
    };
    let trailing = {
        let mut v = encode_request(6, &[Op::Ping]);
        v.extend_from_slice(&[0, 0]);
        let len = (v.len() - HEADER_LEN) as u32;
        v[0..4].copy_from_slice(&len.to_le_bytes());
        v
    };
    let mut unknown_op = encode_request(7, &[Op::Ping]);
    unknown_op[HEADER_LEN + 4] = 0x7F;
    let mut reserved = encode_request(8, &[Op::Ping]);
    reserved[6] = 1;
    let bad_utf8 = {
        let mut v = encode_request(
            9,
            &[Op::Execute {
                cache: f.cache_id,
                addr: 0,
                proc_name: "ab",
                args: b"",
            }],
        );
        // name bytes follow: opcode(1) cache(4) addr(8) name_len(1)
        v[HEADER_LEN + 4 + 14] = 0xFF;
        v
    };
    // A WRITE, then an EXECUTE_RUN of `calls` calls with `body` as their bytes, in a
    // batch declaring `declared` ops.
    let run = |seq: u64, declared: u32, calls: u32, body: &[u8]| {
        let mut v = encode_request(
            seq,
            &[Op::Write {
                cache: f.cache_id,
                addr: 0,
                data: b"MUST NOT LAND",
            }],
        );
        v.push(farcache_proto::request::EXECUTE_RUN);
        v.extend_from_slice(&f.cache_id.to_le_bytes());
        v.push(9);
        v.extend_from_slice(b"aggregate");
        v.extend_from_slice(&9u32.to_le_bytes());
        v.extend_from_slice(&calls.to_le_bytes());
        v.extend_from_slice(body);
        let len = (v.len() - HEADER_LEN) as u32;
        v[0..4].copy_from_slice(&len.to_le_bytes());
        v[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&declared.to_le_bytes());
        v
    };
    let calls = [0u8; 2 * 17];
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "execute run with more calls than the batch has ops",
            run(11, 2, 2, &calls),
            "malformed execute run",
        ),
        (
            "execute run of no calls",
            run(12, 2, 0, &[]),
            "malformed execute run",
        ),
        (
            "execute run past the payload's end",
            run(13, 4, 3, &calls),
            "truncated run calls",
        ),
        ("unknown op code", unknown_op, "unknown op code 0x7f"),
        (
            "valid op then unknown op",
            write_then_bad,
            "unknown op code 0xee",
        ),
        ("count larger than the ops", bad_count, "truncated"),
        ("trailing bytes", trailing, "trailing bytes"),
        (
            "unknown frame kind",
            header(10, 0).to_vec(),
            "unknown frame kind 10",
        ),
        ("reserved header bits", reserved, "reserved header bits"),
        ("invalid utf-8 procedure name", bad_utf8, "utf-8"),
        (
            "response frame from a client",
            {
                let mut v = encode_request(10, &[Op::Ping]);
                v[4] = FrameKind::Response as u8;
                v
            },
            "not allowed",
        ),
        (
            "second hello",
            hello_frame(Role::Client),
            "frame not allowed: a hello frame after the handshake",
        ),
    ];
    for (what, bytes, expect) in cases {
        let errors = f.protocol_errors();
        let (mut s, _) = f.connect_client();
        send(&mut s, &bytes);
        let text = expect_error_and_close(&mut s, what);
        assert!(
            text.to_lowercase().contains(expect),
            "{what}: error text '{text}' should mention '{expect}'"
        );
        assert!(f.protocol_errors() > errors, "{what}: counted");
        f.assert_healthy(what);
    }
    // The batch with a bad op ran nothing, not even the valid write before it.
    f.finish("unknown op codes");
}

#[test]
fn bad_addresses_get_per_op_statuses_and_the_connection_lives_on() {
    let f = Fixture::new("statuses");
    let id = f.cache_id;
    let (mut s, ack) = f.connect_client();
    assert_eq!(ack.version, farcache_proto::PROTOCOL_VERSION);
    let probe = PROBE + 2048;
    let ops = [
        Op::Read {
            cache: id,
            addr: CAPACITY - 4,
            len: 8,
        },
        Op::Read {
            cache: id,
            addr: CAPACITY + 1,
            len: 0,
        },
        Op::Read {
            cache: id,
            addr: u64::MAX - 3,
            len: 8,
        },
        Op::Write {
            cache: id,
            addr: CAPACITY + 100,
            data: b"x",
        },
        // Servers only take ranges within one region (clients split at boundaries).
        Op::Write {
            cache: id,
            addr: REGION - 2,
            data: b"span",
        },
        Op::Cas {
            cache: id,
            addr: 12,
            expected: 0,
            new: 1,
        },
        Op::FetchAdd {
            cache: id,
            addr: CAPACITY,
            delta: 1,
        },
        Op::FetchAdd {
            cache: id,
            addr: !7u64,
            delta: 1,
        },
        Op::Read {
            cache: id,
            addr: 0,
            len: MAX_OP_BYTES + 1,
        },
        Op::Read {
            cache: id ^ 0x5A5A_0000,
            addr: 0,
            len: 8,
        },
        Op::Execute {
            cache: id,
            addr: 0,
            proc_name: "sum",
            args: b"",
        },
        Op::Write {
            cache: id,
            addr: probe,
            data: b"raw!",
        },
        Op::Read {
            cache: id,
            addr: probe,
            len: 4,
        },
        Op::Ping,
    ];
    let r = request(&mut s, 11, &ops);
    use Status::*;
    let statuses: Vec<Status> = r.iter().map(|(_, st, _)| *st).collect();
    assert_eq!(
        statuses,
        vec![
            OutOfRange,
            OutOfRange,
            OutOfRange,
            OutOfRange,
            OutOfRange,
            Misaligned,
            OutOfRange,
            OutOfRange,
            TooLarge,
            NoSuchCache,
            NoSuchProc,
            Ok,
            Ok,
            Ok
        ],
        "{r:?}"
    );
    for ((code, _, _), op) in r.iter().zip(&ops) {
        assert_eq!(*code, op.code(), "replies echo the op code");
    }
    assert_eq!(r[12].2, Body::Data(b"raw!".to_vec()));
    // The connection is still good for the next batch.
    let r = request(
        &mut s,
        12,
        &[
            Op::Read {
                cache: id,
                addr: 0,
                len: 16,
            },
            Op::FetchAdd {
                cache: id,
                addr: probe + 8,
                delta: 5,
            },
            Op::FetchAdd {
                cache: id,
                addr: probe + 8,
                delta: 0,
            },
        ],
    );
    assert_eq!(r[0].2, Body::Data(f.image[..16].to_vec()));
    let Body::Value(old) = r[1].2 else {
        panic!("{r:?}")
    };
    assert_eq!(r[2].2, Body::Value(old.wrapping_add(5)));
    // The raw write is visible to a library client; the rejected ops changed nothing.
    assert_eq!(&f.before.read(probe, 4).unwrap()[..], b"raw!");
    drop(s);
    f.finish("per-op statuses");
}

#[test]
fn random_garbage_is_refused() {
    let f = Fixture::new("garbage");
    let id = f.cache_id;
    for seed in 0..24u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let len = rng.gen_range(1..2048);
        let garbage: Vec<u8> = (0..len).map(|_| rng.r#gen()).collect();
        let ctx = format!("garbage seed {seed} before the handshake");
        let (mut s, _) = f.connect_challenged();
        send(&mut s, &garbage);
        // What a correct server must do follows from the header the garbage starts with.
        match FrameHeader::decode(&garbage, u32::MAX) {
            Err(_) => {
                expect_error_and_close(&mut s, &ctx);
            }
            _ => {
                s.shutdown(Shutdown::Write).unwrap();
                expect_closed(&mut s, &ctx);
            }
        }
        f.assert_healthy(&ctx);

        // Garbage inside a well-formed Request frame after a good handshake.
        let plen = rng.gen_range(0..600usize);
        let payload: Vec<u8> = (0..plen).map(|_| rng.r#gen()).collect();
        let ctx = format!("garbage seed {seed} as a request payload");
        let (mut s, _) = f.connect_client();
        let mut frame = Vec::new();
        farcache_proto::frame::encode_frame(&mut frame, FrameKind::Request, seed, &payload);
        send(&mut s, &frame);
        match RequestDecoder::validate(&payload) {
            Err(_) => {
                expect_error_and_close(&mut s, &ctx);
            }
            Result::Ok(n) => match next(&mut s) {
                Next::Frame(h, p) if h.kind == FrameKind::Response => {
                    assert_eq!(decode_replies(&p).len(), n as usize, "{ctx}");
                }
                _ => panic!("{ctx}: a valid batch got no response"),
            },
        }
        f.assert_healthy(&ctx);

        // One byte of a valid batch flipped (on a cache id that does not exist, so a
        // mutation that still decodes cannot touch the real cache).
        let fake = id ^ 0x7171_0000;
        let valid = encode_request(
            seed,
            &[
                Op::Write {
                    cache: fake,
                    addr: 8,
                    data: b"0123456789",
                },
                Op::Cas {
                    cache: fake,
                    addr: 16,
                    expected: 0x5555_5555_5555_5555,
                    new: 0x6666_6666_6666_6666,
                },
                Op::Read {
                    cache: fake,
                    addr: 0,
                    len: 32,
                },
                Op::FetchAdd {
                    cache: fake,
                    addr: 24,
                    delta: 3,
                },
                Op::Ping,
            ],
        );
        let mut payload = valid[HEADER_LEN..].to_vec();
        let at = rng.gen_range(0..payload.len());
        payload[at] ^= rng.gen_range(1..=255u8);
        let ctx = format!("mutated batch seed {seed} (byte {at})");
        if payload.windows(4).any(|w| w == id.to_le_bytes()) {
            // A misparse could then address the real cache; this seed proves nothing.
            continue;
        }
        let (mut s, _) = f.connect_client();
        let mut frame = Vec::new();
        farcache_proto::frame::encode_frame(&mut frame, FrameKind::Request, seed, &payload);
        send(&mut s, &frame);
        match RequestDecoder::validate(&payload) {
            Err(_) => {
                expect_error_and_close(&mut s, &ctx);
            }
            Result::Ok(n) => match next(&mut s) {
                Next::Frame(h, p) if h.kind == FrameKind::Response => {
                    let r = decode_replies(&p);
                    assert_eq!(r.len(), n as usize, "{ctx}");
                    assert!(
                        r.iter().all(|(c, st, _)| *st == Status::NoSuchCache
                            || *c == OpCode::Ping
                            || *c == OpCode::Execute
                            || *st == Status::Misaligned
                            || *st == Status::TooLarge),
                        "{ctx}: {r:?}"
                    );
                    s.shutdown(Shutdown::Write).unwrap();
                    expect_closed(&mut s, &ctx);
                }
                _ => panic!("{ctx}: a valid batch got no response"),
            },
        }
        f.assert_healthy(&ctx);
    }

    // Many garbage connections at once.
    let mut socks: Vec<TcpStream> = (0..32).map(|_| f.connect_challenged().0).collect();
    for (i, s) in socks.iter_mut().enumerate() {
        send(s, &[0xFF ^ i as u8; 64]);
    }
    for (i, s) in socks.iter_mut().enumerate() {
        expect_error_and_close(s, &format!("concurrent garbage {i}"));
    }
    f.finish("garbage");
}

#[test]
fn requests_before_the_handshake_and_bad_hellos_are_refused() {
    let f = Fixture::new("no-hello");
    let mut bad_magic = hello_frame(Role::Client);
    bad_magic[HEADER_LEN] = b'X';
    let mut bad_version = hello_frame(Role::Client);
    bad_version[HEADER_LEN + 4..HEADER_LEN + 6].copy_from_slice(&999u16.to_le_bytes());
    let mut bad_role = hello_frame(Role::Client);
    bad_role[HEADER_LEN + 6] = 42;
    let mut short_hello = Vec::new();
    farcache_proto::frame::encode_frame(&mut short_hello, FrameKind::Hello, 0, b"FCAC");
    let mut control = Vec::new();
    farcache_proto::frame::encode_frame(
        &mut control,
        FrameKind::Control,
        0,
        &ControlRequest::DropCache { cache: f.cache_id }.encode(),
    );
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "request first",
            encode_request(
                1,
                &[Op::Write {
                    cache: f.cache_id,
                    addr: 0,
                    data: b"no hello",
                }],
            ),
            "before the handshake",
        ),
        ("control first", control, "before the handshake"),
        ("bad magic", bad_magic, "magic"),
        ("bad version", bad_version, "v999"),
        ("bad role", bad_role, "role"),
        ("short hello", short_hello, "truncated"),
        (
            "another cluster's secret",
            hello_frame(Role::Client),
            "authentication failed",
        ),
    ];
    for (what, bytes, expect) in cases {
        let (mut s, _) = f.connect_challenged();
        send(&mut s, &bytes);
        let text = expect_error_and_close(&mut s, what);
        assert!(
            text.contains(expect),
            "{what}: '{text}' should mention '{expect}'"
        );
        f.assert_healthy(what);
    }
    // The request above never ran (the image check in `finish` covers byte 0).
    f.finish("no handshake");
}

#[test]
fn manager_control_ops_from_a_client_are_refused() {
    let f = Fixture::new("roles");
    let id = f.cache_id;
    let regions_before = f.cluster.servers()[0].stats().regions;
    for role in [Role::Client, Role::Server] {
        let mut s = f.connect();
        f.handshake(&mut s, role).unwrap();
        for req in [
            ControlRequest::FreeRegion {
                cache: id,
                region: 0,
                moved_to: Some("127.0.0.1:1".into()),
            },
            ControlRequest::DropCache { cache: id },
            ControlRequest::AllocRegion {
                cache: id + 1000,
                region: 0,
                region_size: REGION,
                capacity: REGION,
                epoch: 1,
                lost: false,
                incoming: false,
                // Only the manager may make a server read a file.
                load: Some(farcache_proto::control::FileSlice {
                    path: "/etc/passwd".into(),
                    offset: 0,
                    len: 64,
                }),
            },
            ControlRequest::SetRoutes {
                cache: id,
                epoch: 1 << 40,
                owners: vec!["127.0.0.1:1".into(); 4],
                capacity: 1,
                backups: vec![vec!["127.0.0.1:1".into()]; 4],
            },
            ControlRequest::ResizeCache {
                cache: id,
                capacity: 1,
                epoch: 1 << 40,
            },
            ControlRequest::ListRegions,
            ControlRequest::MigrateRegion {
                cache: id,
                region: 0,
                to: "127.0.0.1:1".into(),
                mode: farcache_proto::control::MigrationMode::PauseAll,
                replicate: true,
            },
            ControlRequest::MigrationStatus {
                cache: id,
                region: 0,
                wait_ms: 5,
            },
            ControlRequest::AbortMigration {
                cache: id,
                region: 0,
            },
            ControlRequest::ForgetLost {
                cache: id,
                addr: 0,
                len: u64::MAX,
            },
            ControlRequest::CreateCache {
                slo: None,
                name: "sneaky".into(),
                capacity: REGION,
                region_size: None,
                replicas: 2,
                from_file: None,
            },
        ] {
            // Manager requests are forbidden to every other role; manager-side
            // requests are misdirected.
            let want = if matches!(req, ControlRequest::CreateCache { .. }) {
                ControlErrorCode::InvalidArgument
            } else {
                ControlErrorCode::Forbidden
            };
            match control_call(&mut s, &req) {
                Err(RpcError::Remote { code, message }) => {
                    assert_eq!(code, want, "{role:?} {req:?}: {message}");
                    assert!(!message.is_empty());
                }
                other => panic!("{role:?} {req:?} was not refused: {other:?}"),
            }
        }
        // A refusal is not fatal: the same connection still answers stats and data.
        match control_call(&mut s, &ControlRequest::ServerStats).unwrap() {
            ControlResponse::Stats(st) => assert_eq!(st.regions, regions_before),
            other => panic!("stats: {other:?}"),
        }
        let r = request(
            &mut s,
            2,
            &[Op::Read {
                cache: id,
                addr: 0,
                len: 8,
            }],
        );
        assert_eq!(r[0].2, Body::Data(f.image[..8].to_vec()), "{role:?}");
        f.assert_healthy(&format!("control ops as {role:?}"));
    }
    assert_eq!(f.cluster.servers()[0].stats().regions, regions_before);
    // A malformed control message is a protocol error.
    let (mut s, _) = f.connect_client();
    write_frame(&mut s, FrameKind::Control, 0, b"{\"type\":\"drop_cache\",").unwrap();
    let text = expect_error_and_close(&mut s, "malformed control json");
    assert!(text.contains("control"), "{text}");
    f.finish("control roles");
}

#[test]
fn slow_and_pipelined_peers_are_served_correctly() {
    let f = Fixture::new("slow");
    let id = f.cache_id;
    // One byte at a time: the server must reassemble frames across reads.
    let (mut s, challenge) = f.connect_challenged();
    let mut bytes = hello_frame_for(&f.cred, Role::Client, &challenge);
    bytes.extend(encode_request(
        1,
        &[
            Op::Read {
                cache: id,
                addr: 100,
                len: 50,
            },
            Op::Ping,
        ],
    ));
    for b in &bytes {
        send(&mut s, std::slice::from_ref(b));
        std::thread::sleep(Duration::from_micros(200));
    }
    let Next::Frame(h, p) = next(&mut s) else {
        panic!("no hello ack")
    };
    assert_eq!(h.kind, FrameKind::HelloAck);
    HelloAck::decode(&p).unwrap();
    let Next::Frame(h, p) = next(&mut s) else {
        panic!("no response")
    };
    assert_eq!((h.kind, h.seq), (FrameKind::Response, 1));
    let r = decode_replies(&p);
    assert_eq!(r[0].2, Body::Data(f.image[100..150].to_vec()));

    // Many batches in one write: answered in order, matched by seq.
    let mut all = Vec::new();
    for seq in 0..200u64 {
        all.extend(encode_request(
            1000 + seq,
            &[Op::Read {
                cache: id,
                addr: seq * 16,
                len: 16,
            }],
        ));
    }
    send(&mut s, &all);
    for seq in 0..200u64 {
        let Next::Frame(h, p) = next(&mut s) else {
            panic!("pipelined response {seq} missing")
        };
        assert_eq!((h.kind, h.seq), (FrameKind::Response, 1000 + seq));
        let a = (seq * 16) as usize;
        assert_eq!(
            decode_replies(&p)[0].2,
            Body::Data(f.image[a..a + 16].to_vec())
        );
    }
    drop(s);
    f.finish("slow and pipelined");
}

/// A 16-byte header announcing a frame just under the limit must not make the server
/// commit the whole frame's memory before the bytes arrive: otherwise a few thousand
/// connections cost gigabytes (about 1.25 MiB each, before the buffers grew with what
/// arrives). Before the handshake such a header is refused outright; after it, the
/// buffer grows only with the bytes that arrive.
#[test]
fn frame_headers_do_not_commit_memory_up_front() {
    const CONNS: usize = 2000;
    farcache_net::guard::raise_fd_limit();
    let opts = ClusterOptions::default()
        .servers(1)
        .region_size(REGION)
        .server_memory(16 << 20);
    let cluster =
        farcache_testkit::ProcessCluster::start(common::bin(), &opts).expect("start cluster");
    let pid = cluster.server_pid(0).expect("server pid");
    let addr: SocketAddr = cluster.server_addr(0).parse().expect("server address");
    let connect = || {
        let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).expect("connect");
        s.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
        s.set_write_timeout(Some(IO_TIMEOUT)).expect("timeout");
        s
    };
    let cred = Credential::Cluster(cluster.secret().clone());
    // One control connection for the whole test, so the count only moves with ours.
    let mut control = connect();
    handshake(&mut control, Role::Client, 1, "", &cred).expect("handshake");
    let mut stats = || match control_call(&mut control, &ControlRequest::ServerStats) {
        Ok(ControlResponse::Stats(st)) => st,
        other => panic!("stats: {other:?}"),
    };
    let base_conns = stats().connections;
    let before = rss_kib(pid);
    // Before the handshake: an oversized Hello is refused and the connection closed.
    let mut pre = connect();
    let (h, _) = read_frame(&mut pre, 1 << 10).expect("challenge");
    assert_eq!(h.kind, FrameKind::Challenge);
    send(
        &mut pre,
        &header(
            FrameKind::Hello as u8,
            farcache_proto::MAX_FRAME_DEFAULT - 1,
        ),
    );
    let text = expect_error_and_close(&mut pre, "oversized hello");
    assert!(text.contains("before the handshake"), "{text}");
    // After the handshake: a request header announcing ~64 MiB, then silence.
    let hostile: Vec<TcpStream> = (0..CONNS)
        .map(|i| {
            let mut s = connect();
            handshake(&mut s, Role::Client, 100 + i as u64, "", &cred).expect("handshake");
            send(
                &mut s,
                &header(
                    FrameKind::Request as u8,
                    farcache_proto::MAX_FRAME_DEFAULT - 1,
                ),
            );
            // A few bytes of the announced 64 MiB.
            send(&mut s, &[0x5A; 100]);
            s
        })
        .collect();
    // The server has adopted (and read) every hostile connection once it counts them;
    // two more round trips let its event loop finish the batch that held them.
    eventually(
        "hostile connections adopted",
        Duration::from_secs(10),
        Duration::from_millis(5),
        || (stats().connections == base_conns + CONNS as u64).then_some(()),
    );
    stats();
    stats();
    let grown = rss_kib(pid).saturating_sub(before);
    drop(hostile);
    eprintln!(
        "{CONNS} connections announcing 64 MiB frames grew the server by {} KiB ({} bytes each)",
        grown,
        grown * 1024 / CONNS as u64
    );
    // At most the buffer's constant (16 KiB) and the connection's state per peer.
    assert!(
        grown < 48 << 10,
        "{CONNS} headers of 16 bytes grew the server by {} MiB",
        grown >> 10
    );
}

fn peer_frame(msgs: &[farcache_proto::peer::PeerMsg<'_>]) -> Vec<u8> {
    let mut v = Vec::new();
    let mut e = farcache_proto::peer::PeerEncoder::begin(&mut v);
    for m in msgs {
        e.push(&mut v, m);
    }
    e.finish(&mut v);
    v
}

/// Server-to-server frames: refused from clients; malformed ones close the session;
/// well-formed ones naming unknown caches, procedures or unreachable origins are
/// answered or dropped without harm.
#[test]
fn hostile_peer_frames() {
    use farcache_proto::peer::PeerMsg;
    let f = Fixture::new("peer");
    let forward = PeerMsg::Forward {
        ticket: 1,
        origin: "127.0.0.1:1",
        cache: f.cache_id,
        addr: 0,
        hops: 0,
        proc_name: "chase",
        state: b"junk",
    };
    let good = peer_frame(&[forward]);

    // From a client connection: not allowed.
    let (mut s, _) = f.connect_client();
    send(&mut s, &good);
    let text = expect_error_and_close(&mut s, "peer frame from a client");
    assert!(text.contains("only from servers"), "{text}");
    // The handshake succeeded: the error must not blame it.
    assert!(!text.contains("handshake"), "{text}");
    f.assert_healthy("peer frame from a client");

    let mut truncated = good.clone();
    truncated.truncate(good.len() - 3);
    let len = (truncated.len() - HEADER_LEN) as u32;
    truncated[0..4].copy_from_slice(&len.to_le_bytes());
    let mut bad_tag = good.clone();
    bad_tag[HEADER_LEN + 4] = 0x55;
    let mut bad_count = good.clone();
    bad_count[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&5u32.to_le_bytes());
    for (what, bytes) in [
        ("truncated peer message", truncated),
        ("unknown peer message", bad_tag),
        ("peer count past the messages", bad_count),
    ] {
        let mut s = f.connect();
        f.handshake(&mut s, Role::Server).expect("handshake");
        send(&mut s, &bytes);
        expect_error_and_close(&mut s, what);
        f.assert_healthy(what);
    }

    // Well-formed but pointless: bad state, unknown cache and procedure, a fetch past
    // the end, answers for tickets nobody issued. Origins do not listen.
    let mut s = f.connect();
    f.handshake(&mut s, Role::Server).expect("handshake");
    let msgs = [
        forward,
        PeerMsg::Forward {
            ticket: 2,
            origin: "127.0.0.1:1",
            cache: 999,
            addr: 0,
            hops: 0,
            proc_name: "nope",
            state: b"",
        },
        PeerMsg::Fetch {
            ticket: 3,
            origin: "127.0.0.1:1",
            cache: f.cache_id,
            addr: CAPACITY - 4,
            len: 64,
        },
        PeerMsg::Result {
            ticket: 4,
            hops: 1,
            body: b"\x00zz",
        },
        PeerMsg::Fetched {
            ticket: 5 | (7 << 56),
            addr: 0,
            status: Status::Ok,
            data: b"abc",
        },
    ];
    send(&mut s, &peer_frame(&msgs));
    f.assert_healthy("well-formed peer messages with bad contents");
    drop(s);
    f.finish("peer frames");
}
