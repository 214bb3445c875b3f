//! Who may say what to the manager, and what one peer can make it hold.

mod common;

use std::io::Write;
use std::time::Duration;

use common::{Conn, FakeServer, R, config, error_code, secret, wait_for};
use farcache_manager::Manager;
use farcache_proto::blocking::{RpcError, handshake, read_frame};
use farcache_proto::control::{
    CacheTokens, ControlErrorCode, ControlRequest, ControlResponse, HeldRegion, PriceClass,
    region_digest,
};
use farcache_proto::{
    CacheToken, ClusterSecret, Credential, FrameKind, MAX_FRAME_DEFAULT, Rights, Role,
};

fn register_req(addr: &str, id: Option<u32>) -> ControlRequest {
    ControlRequest::RegisterServer {
        server_id: id,
        addr: addr.into(),
        memory: 8 * R,
        cores: 2,
        threads: 1,
        price_class: PriceClass::Spot,
        price_per_gib_hour: 1.0,
        tls_addr: None,
    }
}

fn forbidden(resp: &ControlResponse) -> bool {
    error_code(resp) == Some(ControlErrorCode::Forbidden)
}

#[test]
fn strangers_and_spoofed_roles_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let m = Manager::start(config(dir.path())).unwrap();

    // Another cluster's secret: the handshake fails with a clear reason.
    let mut s = std::net::TcpStream::connect(m.addr()).unwrap();
    let other = Credential::Cluster(ClusterSecret::generate());
    match handshake(&mut s, Role::Manager, 1, "", &other) {
        Err(RpcError::PeerError(msg)) => assert!(msg.contains("authentication failed"), "{msg}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // A token cannot claim a cluster role.
    let token = Credential::Token(secret().token(1, Rights::ReadWrite));
    let mut s = std::net::TcpStream::connect(m.addr()).unwrap();
    match handshake(&mut s, Role::Server, 1, "127.0.0.1:1", &token) {
        Err(RpcError::PeerError(msg)) => assert!(msg.contains("cluster secret"), "{msg}"),
        other => panic!("expected a refusal, got {other:?}"),
    }

    // A client cannot register or heartbeat; a server cannot make client requests.
    let f = FakeServer::start();
    let mut client = Conn::connect(m.addr());
    assert!(forbidden(
        &client.call_raw(&register_req(&f.addr.to_string(), None))
    ));
    let hb = ControlRequest::Heartbeat {
        server_id: 1,
        used: 0,
        regions: 0,
        digest: 0,
    };
    assert!(forbidden(&client.call_raw(&hb)));
    let mut server = Conn::as_server(m.addr(), &f.addr.to_string());
    assert!(forbidden(&server.call_raw(&ControlRequest::Status)));
    assert!(forbidden(&server.create("x", R)));

    // A server registers only the address it proved, and cannot take over an alive
    // server's id from another address.
    let mut liar = Conn::as_server(m.addr(), "10.9.9.9:1");
    assert!(forbidden(
        &liar.call_raw(&register_req(&f.addr.to_string(), None))
    ));
    let a = client.register(None, &f, 8 * R, 1.0);
    let f2 = FakeServer::start();
    let mut thief = Conn::as_server(m.addr(), &f2.addr.to_string());
    let resp = thief.call_raw(&register_req(&f2.addr.to_string(), Some(a)));
    assert_eq!(
        error_code(&resp),
        Some(ControlErrorCode::AlreadyExists),
        "{resp:?}"
    );
    // Nor heartbeat for it.
    let hb = ControlRequest::Heartbeat {
        server_id: a,
        used: 0,
        regions: 0,
        digest: 0,
    };
    assert!(forbidden(&thief.call_raw(&hb)));
    // Only an owner reports a backup it cannot reach, for itself: a client (even
    // with the cluster secret) and another server speaking for it are refused.
    let stalled = |server_id| ControlRequest::BackupStalled {
        server_id,
        backup: f2.addr.to_string(),
        stalled_ms: 5000,
    };
    assert!(forbidden(&client.call_raw(&stalled(a))));
    assert!(forbidden(&thief.call_raw(&stalled(a))));
    let mut owner = Conn::as_server(m.addr(), &f.addr.to_string());
    assert_eq!(
        owner.call_raw(&stalled(a)),
        ControlResponse::Ok,
        "the owner itself may (a backup that is no live server: nothing to drop)"
    );
    let status = client.status();
    assert_eq!(status.servers.len(), 1);
    assert_eq!(
        status.servers[0].addr,
        f.addr.to_string(),
        "the registry is intact"
    );
}

#[test]
fn a_token_reaches_its_own_cache_only() {
    let dir = tempfile::tempdir().unwrap();
    let m = Manager::start(config(dir.path())).unwrap();
    let f = FakeServer::start();
    let mut admin = Conn::connect(m.addr());
    admin.register(None, &f, 16 * R, 1.0);
    let created = |resp: ControlResponse| match resp {
        ControlResponse::Created { cache, tokens } => (cache, tokens),
        other => panic!("{other:?}"),
    };
    let (
        one,
        CacheTokens {
            read_write,
            read_only,
        },
    ) = created(admin.create("one", R));
    let (two, _) = created(admin.create("two", R));
    let rw: CacheToken = read_write.parse().unwrap();
    let ro: CacheToken = read_only.parse().unwrap();
    assert_eq!((rw.cache(), rw.rights()), (one.id, Rights::ReadWrite));
    assert_eq!((ro.cache(), ro.rights()), (one.id, Rights::ReadOnly));

    let mut tenant = Conn::with(m.addr(), Role::Client, "", &Credential::Token(rw.clone()));
    let open = |name: &str| ControlRequest::OpenCache { name: name.into() };
    assert!(matches!(tenant.call(&open("one")), ControlResponse::Cache(c) if c.id == one.id));
    for req in [
        open("two"),
        open("nosuch"),
        ControlRequest::Status,
        ControlRequest::CreateCache {
            slo: None,
            name: "three".into(),
            capacity: R,
            region_size: None,
            replicas: 1,
            from_file: None,
        },
        ControlRequest::DeleteCache { name: "two".into() },
        ControlRequest::ReshapeCache {
            name: "two".into(),
            capacity: 2 * R,
        },
        ControlRequest::IssueToken {
            name: "one".into(),
            rights: Rights::ReadWrite,
        },
        // Moving servers and regions is the cluster's business, and another
        // tenant's losses are not this token's to acknowledge.
        ControlRequest::ReclaimServer {
            server_id: 1,
            grace_ms: 1000,
            mode: Default::default(),
        },
        ControlRequest::MoveRegion {
            name: "one".into(),
            region: 0,
            to: None,
            mode: Default::default(),
        },
        ControlRequest::ClearLost {
            name: "two".into(),
            addr: 0,
            len: 8,
        },
    ] {
        let resp = tenant.call(&req);
        assert!(forbidden(&resp), "{req:?} -> {resp:?}");
    }

    let mut reader = Conn::with(m.addr(), Role::Client, "", &Credential::Token(ro));
    assert!(matches!(
        reader.call(&open("one")),
        ControlResponse::Cache(_)
    ));
    for req in [
        ControlRequest::DeleteCache { name: "one".into() },
        ControlRequest::ReshapeCache {
            name: "one".into(),
            capacity: 2 * R,
        },
        ControlRequest::RegisterProc {
            cache: "one".into(),
            proc_name: "p".into(),
            code: b"(module)".to_vec(),
        },
        ControlRequest::ClearLost {
            name: "one".into(),
            addr: 0,
            len: 8,
        },
    ] {
        assert!(forbidden(&reader.call(&req)), "{req:?}");
    }

    // The admin can hand out the same tokens again; the tenant can delete its cache.
    let issued = admin.call(&ControlRequest::IssueToken {
        name: "one".into(),
        rights: Rights::ReadWrite,
    });
    assert_eq!(issued, ControlResponse::Token { token: read_write });
    assert_eq!(
        tenant.call(&ControlRequest::DeleteCache { name: "one".into() }),
        ControlResponse::Ok
    );
    let names: Vec<String> = admin.status().caches.into_iter().map(|c| c.name).collect();
    assert_eq!(names, vec![two.name]);
}

#[test]
fn regions_no_cache_owns_are_freed() {
    let dir = tempfile::tempdir().unwrap();
    let m = Manager::start(config(dir.path())).unwrap();
    let f = FakeServer::start();
    let mut admin = Conn::connect(m.addr());
    let id = admin.register(None, &f, 16 * R, 1.0);
    let info = match admin.create("c", 2 * R) {
        ControlResponse::Created { cache, .. } => cache,
        other => panic!("{other:?}"),
    };
    let mine = |r| HeldRegion {
        cache: info.id,
        region: r,
    };
    // The server holds both regions of the cache, a region past it, and a region of a
    // cache the catalogue never committed (a manager that died mid-create).
    let held = vec![
        mine(0),
        mine(1),
        mine(7),
        HeldRegion {
            cache: 99,
            region: 0,
        },
    ];
    f.set_held(held.clone());
    f.clear();
    let mut server = Conn::as_server(m.addr(), &f.addr.to_string());
    let beat = ControlRequest::Heartbeat {
        server_id: id,
        used: 0,
        regions: held.len() as u64,
        digest: region_digest(held),
    };
    assert!(matches!(
        server.call_raw(&beat),
        ControlResponse::Lease { lease_ms } if lease_ms > 0
    ));
    assert!(
        wait_for(Duration::from_secs(10), || f.drops() == vec![99]
            && f.frees() == vec![(info.id, 7)]),
        "calls: {:?}",
        f.calls()
    );
    // Agreement stops the reconciler.
    f.set_held(vec![mine(0), mine(1)]);
    let beat = ControlRequest::Heartbeat {
        server_id: id,
        used: 0,
        regions: 2,
        digest: region_digest([mine(0), mine(1)]),
    };
    assert!(matches!(
        server.call_raw(&beat),
        ControlResponse::Lease { lease_ms } if lease_ms > 0
    ));
    std::thread::sleep(Duration::from_millis(1500));
    f.clear();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(f.calls().is_empty(), "{:?}", f.calls());
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

#[test]
fn connections_cost_no_thread_and_idle_ones_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.guard.handshake_timeout = Duration::from_millis(300);
    cfg.guard.frame_timeout = Duration::from_millis(300);
    let m = Manager::start(cfg).unwrap();
    let before = threads();
    let mut conns: Vec<Conn> = (0..300).map(|_| Conn::connect(m.addr())).collect();
    for c in &mut conns {
        assert!(c.status().servers.is_empty());
    }
    // Other tests of this binary start threads meanwhile; a thread per connection
    // would add 300.
    let grew = threads().saturating_sub(before);
    assert!(grew < 50, "300 connections added {grew} threads");

    // A connection that never answers the challenge, and one stuck inside a frame.
    let (mut silent, _) = Conn::unauthenticated(m.addr());
    let mut partial = Conn::connect(m.addr());
    let mut head = vec![0u8; 16];
    head[0..4].copy_from_slice(&(1u32 << 20).to_le_bytes());
    head[4] = FrameKind::Control as u8;
    partial.raw().write_all(&head).unwrap();
    partial.raw().write_all(b"{\"type\":").unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    for (what, s) in [("silent", &mut silent), ("partial", partial.raw())] {
        match read_frame(s, MAX_FRAME_DEFAULT) {
            Ok((h, payload)) => {
                assert_eq!(h.kind, FrameKind::Error, "{what}");
                assert!(!payload.is_empty());
                assert!(
                    read_frame(s, MAX_FRAME_DEFAULT).is_err(),
                    "{what}: closed after"
                );
            }
            Err(e) => assert!(common::is_eof(&e), "{what}: {e:?}"),
        }
    }
    // Everyone else is still served.
    assert!(conns[7].status().caches.is_empty());
}
