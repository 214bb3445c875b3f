//! `--metrics-listen`: counters reflect served ops, errors and protocol violations.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use farcache_proto::blocking::{handshake, read_frame};
use farcache_proto::{FrameKind, Op, RequestEncoder, ResponseDecoder, Role, Status};
use farcache_server::{Server, ServerConfig};

fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).expect("connect metrics");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    out
}

fn value(text: &str, metric: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(metric)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{metric} missing in\n{text}"))
}

#[test]
fn metrics_count_ops_errors_and_protocol_violations() {
    let secret = farcache_proto::ClusterSecret::generate();
    let mut cfg = ServerConfig::new(
        "127.0.0.1:0".parse().expect("addr"),
        64 << 20,
        secret.clone(),
    );
    cfg.metrics_listen = Some("127.0.0.1:0".parse().expect("addr"));
    let server = Server::start(cfg).expect("start server");
    let maddr = server.metrics_addr().expect("metrics bound");

    let before = scrape(maddr);
    assert_eq!(value(&before, "farcache_ops_total{op=\"ping\"}"), 0);

    let mut s = TcpStream::connect(server.addr()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let cred = farcache_proto::Credential::Cluster(secret);
    handshake(&mut s, Role::Client, 7, "", &cred).expect("handshake");
    let mut out = Vec::new();
    let mut enc = RequestEncoder::begin(&mut out, 1);
    enc.push(&mut out, &Op::Ping);
    enc.push(&mut out, &Op::Ping);
    // No cache 99 here: counted as a read error.
    enc.push(
        &mut out,
        &Op::Read {
            cache: 99,
            addr: 0,
            len: 8,
        },
    );
    enc.finish(&mut out);
    s.write_all(&out).expect("send batch");
    let (hdr, payload) = read_frame(&mut s, 1 << 20).expect("response");
    assert_eq!(hdr.kind, FrameKind::Response);
    let statuses: Vec<Status> = ResponseDecoder::new(&payload)
        .expect("decode")
        .map(|r| r.expect("reply").status)
        .collect();
    assert_eq!(statuses, [Status::Ok, Status::Ok, Status::NoSuchCache]);

    // A peer that sends garbage instead of a handshake.
    let mut bad = TcpStream::connect(server.addr()).expect("connect");
    bad.write_all(&[0xFF; 64]).expect("send garbage");

    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let m = scrape(maddr);
        let done = value(&m, "farcache_protocol_errors_total") >= 1;
        if done || Instant::now() > deadline {
            assert_eq!(value(&m, "farcache_ops_total{op=\"ping\"}"), 2, "{m}");
            assert_eq!(value(&m, "farcache_ops_total{op=\"read\"}"), 1, "{m}");
            assert_eq!(value(&m, "farcache_op_errors_total{op=\"read\"}"), 1, "{m}");
            assert_eq!(value(&m, "farcache_protocol_errors_total"), 1, "{m}");
            assert_eq!(value(&m, "farcache_memory_bytes"), 64 << 20, "{m}");
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    server.shutdown();
}
