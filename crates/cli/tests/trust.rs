//! Who may say what, on a multi-process cluster: a wrong secret, spoofed roles, a
//! token used on another tenant's cache, a read-only token writing, peer frames from a
//! client — each refused with a clear error — while the legitimate client keeps
//! working with its data intact. Also: TLS clients, and plaintext clients refused by a
//! server that serves clients over TLS.

mod common;

use std::net::TcpStream;
use std::time::Duration;

use common::{Body, bin, diff, pattern, request};
use farcache_client::{
    CacheToken, ClientConfig, ClientError, ClusterSecret, OpError, TlsConnector,
};
use farcache_proto::blocking::{RpcError, control_call, handshake, read_frame, write_frame};
use farcache_proto::control::{ControlErrorCode, ControlRequest};
use farcache_proto::peer::{PeerEncoder, PeerMsg};
use farcache_proto::{Credential, FrameKind, Op, Role, Status};
use farcache_sproc::builtin::{AggFn, Aggregate};
use farcache_testkit::{ClusterOptions, ProcessCluster};

const REGION: u64 = 64 << 10;
const CAPACITY: u64 = 4 * REGION;

fn cluster(tls: bool) -> ProcessCluster {
    let opts = ClusterOptions::default()
        .servers(2)
        .region_size(REGION)
        .server_memory(16 << 20)
        .tls(tls);
    ProcessCluster::start(bin(), &opts).expect("start cluster")
}

fn raw(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s
}

fn refused_with(e: &ClientError, code: ControlErrorCode) -> bool {
    e.code() == Some(code)
}

#[test]
fn strangers_spoofed_roles_and_foreign_tokens_are_refused() {
    let c = cluster(false);
    let admin = c.client().expect("admin client");
    let alpha = admin.create("alpha", CAPACITY).expect("create alpha");
    let beta = admin.create("beta", CAPACITY).expect("create beta");
    let mut a_img = pattern(1, CAPACITY as usize);
    let b_img = pattern(2, CAPACITY as usize);
    alpha.write(0, &a_img).expect("fill alpha");
    beta.write(0, &b_img).expect("fill beta");
    let tokens = alpha.tokens().expect("create hands out tokens").clone();
    let rw: CacheToken = tokens.read_write.parse().expect("token");
    let ro: CacheToken = tokens.read_only.parse().expect("token");
    let server = c.server_addr(0).to_string();

    // Another cluster's secret: the client refuses to start, saying why.
    let err = c
        .client_with(ClientConfig::new("").secret(ClusterSecret::generate()))
        .err()
        .expect("a stranger is refused");
    assert!(err.to_string().contains("authentication failed"), "{err}");

    // A tenant holding alpha's read-write token.
    let tenant = c
        .client_with(ClientConfig::new("").token(rw.clone()))
        .expect("tenant client");
    let t_alpha = tenant.open("alpha").expect("open own cache");
    assert!(diff(&t_alpha.read(0, CAPACITY).expect("read"), &a_img).is_none());
    t_alpha.write(100, b"tenant").expect("write own cache");
    a_img[100..106].copy_from_slice(b"tenant");
    for (what, r) in [
        ("open beta", tenant.open("beta").map(|_| ())),
        ("delete beta", tenant.delete("beta")),
        ("status", tenant.status().map(|_| ())),
        ("create", tenant.create("gamma", CAPACITY).map(|_| ())),
    ] {
        let e = r.expect_err(what);
        assert!(refused_with(&e, ControlErrorCode::Forbidden), "{what}: {e}");
    }
    // The servers check too: ops naming beta on a connection holding alpha's token.
    let mut s = raw(&server);
    handshake(&mut s, Role::Client, 1, "", &Credential::Token(rw.clone())).expect("handshake");
    let r = request(
        &mut s,
        1,
        &[
            Op::Read {
                cache: beta.id(),
                addr: 0,
                len: 8,
            },
            Op::Write {
                cache: beta.id(),
                addr: 0,
                data: b"stolen!!",
            },
            Op::FetchAdd {
                cache: beta.id(),
                addr: 8,
                delta: 1,
            },
        ],
    );
    let statuses: Vec<Status> = r.iter().map(|x| x.1).collect();
    assert_eq!(statuses, [Status::Forbidden; 3]);
    assert!(
        r.iter().all(|x| x.2 == Body::None),
        "no bytes of beta leave"
    );
    // Calls sent as one EXECUTE_RUN are checked call by call: beta's are refused,
    // alpha's (the token's own cache, in the same frame) run.
    let mut frame = Vec::new();
    let mut enc = farcache_proto::RequestEncoder::begin(&mut frame, 2);
    let args = Aggregate::call(AggFn::Sum, 1, 8);
    let calls = [(0u64, &args[..]), (8, &args[..]), (16, &args[..])];
    assert!(enc.push_executes(&mut frame, beta.id(), Aggregate::NAME, 9, calls.into_iter()));
    assert!(enc.push_executes(
        &mut frame,
        alpha.id(),
        Aggregate::NAME,
        9,
        calls.into_iter()
    ));
    enc.finish(&mut frame);
    // To the server holding alpha's first region, so alpha's calls run there.
    let info = alpha.info();
    let owner = info.server(info.regions[0]).expect("owner").addr.clone();
    let mut s2 = raw(&owner);
    handshake(&mut s2, Role::Client, 1, "", &Credential::Token(rw.clone())).expect("handshake");
    std::io::Write::write_all(&mut s2, &frame).expect("send runs");
    let (h, payload) = read_frame(&mut s2, u32::MAX).expect("response to runs");
    assert_eq!(h.kind, FrameKind::Response);
    let r = common::decode_replies(&payload);
    let statuses: Vec<Status> = r.iter().map(|x| x.1).collect();
    assert_eq!(statuses[..3], [Status::Forbidden; 3]);
    assert_eq!(statuses[3..], [Status::Ok; 3]);
    assert!(r[..3].iter().all(|x| x.2 == Body::None), "nothing of beta");

    // A reader holding the read-only token: reads and procedures, nothing else.
    let reader = c
        .client_with(ClientConfig::new("").token(ro))
        .expect("reader client");
    let r_alpha = reader.open("alpha").expect("open read-only");
    assert!(diff(&r_alpha.read(0, CAPACITY).expect("read"), &a_img).is_none());
    let sum = r_alpha
        .execute(Aggregate::NAME, 0, &Aggregate::call(AggFn::Sum, 4, 8))
        .expect("procedures only read");
    assert_eq!(sum.len(), 8);
    for (what, e) in [
        ("write", r_alpha.write(0, b"x").expect_err("write")),
        ("fetch_add", r_alpha.fetch_add(0, 1).expect_err("fetch_add")),
        ("cas", r_alpha.cas(0, 0, 1).expect_err("cas")),
        // Writing procedures are refused before their arguments are read.
        (
            "kv_put",
            r_alpha.execute("kv_put", 0, b"x").expect_err("kv_put"),
        ),
        (
            "kv_mput",
            r_alpha.execute("kv_mput", 0, b"x").expect_err("kv_mput"),
        ),
        (
            "kv_medit",
            r_alpha.execute("kv_medit", 0, b"x").expect_err("kv_medit"),
        ),
    ] {
        assert!(
            matches!(e, ClientError::Op(OpError::Status(Status::Forbidden))),
            "{what}: {e}"
        );
    }
    let e = reader
        .reshape("alpha", 2 * CAPACITY)
        .expect_err("read-only reshape");
    assert!(refused_with(&e, ControlErrorCode::Forbidden), "{e}");

    // Spoofed roles: a token cannot claim to be the manager, a wrong secret cannot
    // either, and a client with the secret cannot send the manager's requests.
    for (what, cred) in [
        ("token as manager", Credential::Token(rw)),
        (
            "wrong secret as manager",
            Credential::Cluster(ClusterSecret::generate()),
        ),
    ] {
        let mut s = raw(&server);
        match handshake(&mut s, Role::Manager, 1, "", &cred) {
            Err(RpcError::PeerError(m)) => {
                assert!(m.contains("authentication failed"), "{what}: {m}")
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    let mut s = raw(&server);
    let secret = Credential::Cluster(c.secret().clone());
    handshake(&mut s, Role::Client, 1, "", &secret).expect("handshake");
    match control_call(&mut s, &ControlRequest::DropCache { cache: alpha.id() }) {
        Err(RpcError::Remote { code, message }) => {
            assert_eq!(code, ControlErrorCode::Forbidden, "{message}");
            assert!(message.contains("manager"), "{message}");
        }
        other => panic!("drop from a client: {other:?}"),
    }

    // Peer frames from a client: a protocol error, the connection closed.
    let mut frame = Vec::new();
    let mut enc = PeerEncoder::begin(&mut frame);
    enc.push(
        &mut frame,
        &PeerMsg::Fetch {
            ticket: 1,
            origin: "127.0.0.1:9",
            cache: beta.id(),
            addr: 0,
            len: 64,
        },
    );
    enc.finish(&mut frame);
    std::io::Write::write_all(&mut s, &frame).expect("send peer frame");
    let (h, p) = read_frame(&mut s, 1 << 20).expect("error frame");
    assert_eq!(h.kind, FrameKind::Error);
    assert!(
        String::from_utf8_lossy(&p).contains("only from servers"),
        "{}",
        String::from_utf8_lossy(&p)
    );
    assert!(read_frame(&mut s, 1 << 20).is_err(), "closed");

    // A Hello that answers another connection's challenge (a replay) fails too.
    let mut first = raw(&server);
    let (h, p) = read_frame(&mut first, 1 << 10).expect("challenge");
    assert_eq!(h.kind, FrameKind::Challenge);
    let old = farcache_proto::Challenge::decode(&p).expect("challenge");
    let hello = secret.hello(Role::Client, 1, "", &old);
    let mut second = raw(&server);
    let _ = read_frame(&mut second, 1 << 10).expect("second challenge");
    write_frame(&mut second, FrameKind::Hello, 0, &hello.encode()).expect("replay");
    let (h, p) = read_frame(&mut second, 1 << 10).expect("refusal");
    assert_eq!(h.kind, FrameKind::Error, "{}", String::from_utf8_lossy(&p));

    // Through all of it the legitimate client's data stayed as it was.
    assert!(diff(&alpha.read(0, CAPACITY).expect("read"), &a_img).is_none());
    assert!(diff(&beta.read(0, CAPACITY).expect("read"), &b_img).is_none());
    let stats = |i: usize| {
        let mut s = raw(c.server_addr(i));
        handshake(&mut s, Role::Client, 1, "", &secret).expect("handshake");
        match control_call(&mut s, &ControlRequest::ServerStats) {
            Ok(farcache_proto::control::ControlResponse::Stats(st)) => st,
            other => panic!("{other:?}"),
        }
    };
    let g = stats(0).guard;
    assert!(g.auth_failures >= 3, "{g:?}");
    assert!(g.forbidden >= 4, "{g:?}");
}

#[test]
fn tls_clients_work_and_plaintext_clients_are_refused() {
    let c = cluster(true);
    // The cluster's own client speaks TLS to the manager and to every server.
    let client = c.client().expect("TLS client");
    let cache = client.create("secure", CAPACITY).expect("create");
    let img = pattern(7, CAPACITY as usize);
    cache.write(0, &img).expect("write over TLS");
    assert!(diff(&cache.read(0, CAPACITY).expect("read"), &img).is_none());
    let mut batch = cache.batch();
    let ids: Vec<_> = (0..64).map(|i| batch.read(i * 4096, 64)).collect();
    let results = batch.submit().wait();
    for (i, id) in ids.into_iter().enumerate() {
        let got = results.data(id).expect("batched read over TLS");
        assert_eq!(got, &img[i * 4096..i * 4096 + 64]);
    }
    let sum = cache
        .execute(Aggregate::NAME, 0, &Aggregate::call(AggFn::Count, 16, 8))
        .expect("procedure over TLS");
    assert_eq!(sum.len(), 8);

    // A client that does not speak TLS is told where to go.
    let secret = Credential::Cluster(c.secret().clone());
    let mut s = raw(c.server_addr(0));
    match handshake(&mut s, Role::Client, 1, "", &secret) {
        Err(RpcError::PeerError(m)) => assert!(m.contains("TLS only"), "{m}"),
        other => panic!("plaintext client accepted: {other:?}"),
    }
    // A client that trusts another certificate does not connect.
    let (other_cert, _) = farcache_net::tls::self_signed(&["127.0.0.1".to_string()]).expect("cert");
    let wrong = TlsConnector::from_ca_pem(other_cert.as_bytes()).expect("connector");
    let cfg = ClientConfig::new(c.manager_tls_addr().expect("TLS address"))
        .secret(c.secret().clone())
        .tls(wrong);
    assert!(farcache_client::Client::with_config(cfg).is_err());
    // The data is still there for the right client.
    assert!(diff(&cache.read(0, CAPACITY).expect("read"), &img).is_none());
}

#[test]
fn operator_commands_refuse_a_cache_token_up_front() {
    // No cluster needed: the refusal comes before any call, naming what is missing.
    let out = std::process::Command::new(bin())
        .args([
            "reclaim",
            "--manager",
            "127.0.0.1:9",
            "--server",
            "1",
            "--grace",
            "1s",
            "--token",
            "not-even-parsed",
        ])
        .output()
        .expect("run farcache reclaim");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("reclaiming a server needs the cluster secret (--secret-file)"),
        "{err}"
    );
}
