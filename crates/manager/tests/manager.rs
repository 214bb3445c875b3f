//! End-to-end tests: a real manager on loopback with fake cache servers.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use common::{Conn, FakeServer, R, config, error_code, is_eof, secret, start, wait_for};
use farcache_manager::Manager;
use farcache_proto::blocking::{read_frame, write_frame};
use farcache_proto::control::{
    CacheInfo, ControlErrorCode, ControlRequest, ControlResponse, ServerState,
};
use farcache_proto::{Challenge, Credential, FrameKind, MAX_FRAME_DEFAULT, Role};

fn cache(resp: ControlResponse) -> CacheInfo {
    match resp {
        ControlResponse::Cache(c) | ControlResponse::Created { cache: c, .. } => c,
        other => panic!("expected a cache, got {other:?}"),
    }
}

#[test]
fn create_spreads_over_equal_price_servers_and_prefers_cheaper() {
    let dir = tempfile::tempdir().unwrap();
    let m = start(dir.path());
    let mut c = Conn::connect(m.addr());
    let (fa, fb, fc) = (
        FakeServer::start(),
        FakeServer::start(),
        FakeServer::start(),
    );
    let a = c.register(None, &fa, 4 * R, 1.0);
    let b = c.register(None, &fb, 4 * R, 1.0);
    let expensive = c.register(None, &fc, 8 * R, 2.0);
    assert!(a < b && b < expensive, "ids are handed out in order");

    let one = cache(c.create("one", 4 * R));
    assert_eq!((one.capacity, one.region_size, one.epoch), (4 * R, R, 1));
    assert_eq!(one.regions, vec![a, b, a, b], "equal prices fill evenly");
    assert_eq!(
        one.servers.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![a, b]
    );
    assert_eq!(fa.allocs(), vec![(one.id, 0), (one.id, 2)]);
    assert_eq!(fb.allocs(), vec![(one.id, 1), (one.id, 3)]);
    assert!(
        fc.allocs().is_empty(),
        "the expensive server is not needed yet"
    );
    let allocs = |f: &FakeServer| -> Vec<ControlRequest> {
        f.calls()
            .into_iter()
            .filter(|r| !matches!(r, ControlRequest::SetRoutes { .. }))
            .collect()
    };
    assert!(allocs(&fa).iter().all(|r| matches!(
        r,
        ControlRequest::AllocRegion { region_size, capacity, .. } if *region_size == R && *capacity == 4 * R
    )));
    // Every holder then learns the whole region table (for procedures moving between
    // servers); a server without regions of the cache does not.
    for f in [&fa, &fb] {
        let routes: Vec<_> = f
            .calls()
            .into_iter()
            .filter_map(|r| match r {
                ControlRequest::SetRoutes {
                    cache,
                    epoch,
                    owners,
                    ..
                } => Some((cache, epoch, owners)),
                _ => None,
            })
            .collect();
        let addr = |id| one.server(id).map(|s| s.addr.clone()).unwrap_or_default();
        assert_eq!(
            routes,
            vec![(one.id, 1, vec![addr(a), addr(b), addr(a), addr(b)])]
        );
    }
    assert!(
        !fc.calls()
            .iter()
            .any(|r| matches!(r, ControlRequest::SetRoutes { .. }))
    );
    assert_eq!(
        cache(c.call(&ControlRequest::OpenCache { name: "one".into() })),
        one
    );

    // Cheap servers are full after two more regions each; the rest spills over.
    let two = cache(c.create("two", 5 * R + 1));
    assert!(two.id > one.id);
    assert_eq!(two.regions, vec![a, b, a, b, expensive, expensive]);
    assert_eq!(c.server(a).used, 4 * R);
    assert_eq!(c.server(expensive).used, 2 * R);

    // Explicit region size, and validation.
    let three = cache(c.call(&ControlRequest::CreateCache {
        slo: None,
        name: "three".into(),
        capacity: 3 * R,
        region_size: Some(2 * R),
        replicas: 1,
        from_file: None,
    }));
    assert_eq!((three.region_size, three.regions.len()), (2 * R, 2));
    let dup = c.create("one", R);
    assert_eq!(error_code(&dup), Some(ControlErrorCode::AlreadyExists));
    for bad in [
        ControlRequest::CreateCache {
            slo: None,
            name: "z".into(),
            capacity: 0,
            region_size: None,
            replicas: 1,
            from_file: None,
        },
        ControlRequest::CreateCache {
            slo: None,
            name: String::new(),
            capacity: R,
            region_size: None,
            replicas: 1,
            from_file: None,
        },
        ControlRequest::CreateCache {
            slo: None,
            name: "x".repeat(129),
            capacity: R,
            region_size: None,
            replicas: 1,
            from_file: None,
        },
        ControlRequest::CreateCache {
            slo: None,
            name: "z".into(),
            capacity: R,
            region_size: Some(1000),
            replicas: 1,
            from_file: None,
        },
        ControlRequest::CreateCache {
            slo: None,
            name: "z".into(),
            capacity: R,
            region_size: Some(0),
            replicas: 1,
            from_file: None,
        },
    ] {
        assert_eq!(
            error_code(&c.call(&bad)),
            Some(ControlErrorCode::InvalidArgument),
            "{bad:?}"
        );
    }
    let missing = c.call(&ControlRequest::OpenCache {
        name: "nope".into(),
    });
    assert_eq!(error_code(&missing), Some(ControlErrorCode::NotFound));

    let status = c.status();
    assert_eq!(
        status
            .caches
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["one", "two", "three"]
    );
    assert_eq!(m.status(), status);
    m.shutdown();
}

#[test]
fn insufficient_memory_allocates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let m = start(dir.path());
    let mut c = Conn::connect(m.addr());
    let f = FakeServer::start();
    let s = c.register(None, &f, 2 * R + R / 2, 1.0);

    let resp = c.create("big", 3 * R);
    let ControlResponse::Error { code, message } = resp else {
        panic!("{resp:?}")
    };
    assert_eq!(code, ControlErrorCode::InsufficientMemory);
    assert!(
        message.contains("need") && message.contains("free"),
        "{message}"
    );
    assert!(f.calls().is_empty(), "nothing may be allocated");
    assert!(c.status().caches.is_empty());
    assert_eq!(c.server(s).used, 0);

    // What does fit still works.
    assert_eq!(cache(c.create("fits", 2 * R)).regions, vec![s, s]);
}

#[test]
fn failing_server_alloc_rolls_back() {
    let dir = tempfile::tempdir().unwrap();
    let m = start(dir.path());
    let mut c = Conn::connect(m.addr());
    let (fa, fb) = (FakeServer::start(), FakeServer::start());
    let a = c.register(None, &fa, 8 * R, 1.0);
    let b = c.register(None, &fb, 8 * R, 1.0);
    fb.set_fail_alloc(true);

    let resp = c.create("c", 4 * R);
    assert_eq!(
        error_code(&resp),
        Some(ControlErrorCode::Unavailable),
        "{resp:?}"
    );
    // Region 0 went to a, region 1 failed on b: a must get its region freed again.
    let failed_id = fa.allocs()[0].0;
    assert_eq!(fa.allocs(), vec![(failed_id, 0)]);
    assert_eq!(fa.frees(), vec![(failed_id, 0)]);
    assert_eq!(fb.allocs(), vec![(failed_id, 1)]);
    assert!(c.status().caches.is_empty());
    assert_eq!((c.server(a).used, c.server(b).used), (0, 0));

    fb.set_fail_alloc(false);
    let ok = cache(c.create("c", 4 * R));
    assert!(ok.id > failed_id, "cache ids are never reused");
    assert_eq!(ok.regions, vec![a, b, a, b]);
}

#[test]
fn unreachable_server_fails_create_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let m = start(dir.path());
    let mut c = Conn::connect(m.addr());
    // Bind then drop, so nothing listens on that port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let req = ControlRequest::RegisterServer {
        server_id: None,
        addr: format!("127.0.0.1:{port}"),
        memory: 4 * R,
        cores: 1,
        threads: 1,
        price_class: farcache_proto::control::PriceClass::Spot,
        price_per_gib_hour: 0.1,
        tls_addr: None,
    };
    assert!(matches!(c.call(&req), ControlResponse::Registered { .. }));
    let resp = c.create("c", R);
    assert_eq!(
        error_code(&resp),
        Some(ControlErrorCode::Unavailable),
        "{resp:?}"
    );
    assert!(c.status().caches.is_empty());
}

#[test]
fn reshape_grows_and_shrinks() {
    let dir = tempfile::tempdir().unwrap();
    let m = start(dir.path());
    let mut c = Conn::connect(m.addr());
    let (fa, fb) = (FakeServer::start(), FakeServer::start());
    let a = c.register(None, &fa, 8 * R, 1.0);
    let b = c.register(None, &fb, 8 * R, 1.0);
    let orig = cache(c.create("r", 2 * R));
    assert_eq!(orig.regions, vec![a, b]);
    fa.clear();
    fb.clear();

    let reshape = |c: &mut Conn, capacity| {
        c.call(&ControlRequest::ReshapeCache {
            name: "r".into(),
            capacity,
        })
    };
    let grown = cache(reshape(&mut c, 5 * R));
    assert_eq!((grown.id, grown.capacity, grown.epoch), (orig.id, 5 * R, 2));
    assert_eq!(grown.regions, vec![a, b, a, b, a]);
    assert_eq!(fa.allocs(), vec![(orig.id, 2), (orig.id, 4)]);
    assert_eq!(fb.allocs(), vec![(orig.id, 3)]);
    assert!(fa.calls().iter().all(|r| matches!(
        r,
        ControlRequest::AllocRegion { capacity, epoch: 2, .. } if *capacity == 5 * R
    ) || matches!(r, ControlRequest::ResizeCache { capacity, epoch: 2, .. } if *capacity == 5 * R)
        || matches!(r, ControlRequest::SetRoutes { epoch: 2, owners, .. } if owners.len() == 5)));
    // Holders of the old regions learn the new capacity before the new table goes out.
    for f in [&fa, &fb] {
        let kinds: Vec<String> = f.calls().iter().map(ControlRequest::name).collect();
        let resize = kinds.iter().position(|k| k == "resize_cache");
        let routes = kinds.iter().position(|k| k == "set_routes");
        assert!(resize.is_some() && resize < routes, "{kinds:?}");
    }
    assert_eq!(c.server(a).used, 3 * R);
    fa.clear();
    fb.clear();

    let shrunk = cache(reshape(&mut c, R + 1));
    assert_eq!((shrunk.capacity, shrunk.epoch), (R + 1, 3));
    assert_eq!(shrunk.regions, vec![a, b]);
    assert_eq!(fa.frees(), vec![(orig.id, 2), (orig.id, 4)]);
    assert_eq!(fb.frees(), vec![(orig.id, 3)]);
    // The holder of the new last region stops serving (and zeroes) what lies past it.
    assert!(fb.calls().iter().any(|r| matches!(
        r,
        ControlRequest::ResizeCache { capacity, epoch: 3, .. } if *capacity == R + 1
    )));
    assert!(fa.allocs().is_empty() && fb.allocs().is_empty());
    assert_eq!((c.server(a).used, c.server(b).used), (R, R));
    assert_eq!(
        shrunk.servers.iter().map(|s| s.used).collect::<Vec<_>>(),
        vec![R, R]
    );

    // Same region count: only capacity and epoch change (the new table goes out).
    fa.clear();
    let same = cache(reshape(&mut c, 2 * R));
    assert_eq!((same.regions.clone(), same.epoch), (vec![a, b], 4));
    assert!(fa.calls().iter().all(|r| matches!(
        r,
        ControlRequest::SetRoutes { epoch: 4, .. } | ControlRequest::ResizeCache { epoch: 4, .. }
    )));
    assert!(fa.allocs().is_empty() && fa.frees().is_empty());

    // A grow that does not fit changes nothing.
    let too_big = reshape(&mut c, 100 * R);
    assert_eq!(
        error_code(&too_big),
        Some(ControlErrorCode::InsufficientMemory)
    );
    assert_eq!(
        cache(c.call(&ControlRequest::OpenCache { name: "r".into() })),
        same
    );

    assert_eq!(
        error_code(&reshape(&mut c, 0)),
        Some(ControlErrorCode::InvalidArgument)
    );
    let missing = c.call(&ControlRequest::ReshapeCache {
        name: "zz".into(),
        capacity: R,
    });
    assert_eq!(error_code(&missing), Some(ControlErrorCode::NotFound));
}

#[test]
fn delete_drops_the_cache_on_every_holder() {
    let dir = tempfile::tempdir().unwrap();
    let m = start(dir.path());
    let mut c = Conn::connect(m.addr());
    let (fa, fb, fc) = (
        FakeServer::start(),
        FakeServer::start(),
        FakeServer::start(),
    );
    let a = c.register(None, &fa, 8 * R, 1.0);
    let _b = c.register(None, &fb, 8 * R, 1.0);
    let _c = c.register(None, &fc, 8 * R, 5.0);
    let d = cache(c.create("d", 4 * R));
    assert_eq!(
        c.call(&ControlRequest::DeleteCache { name: "d".into() }),
        ControlResponse::Ok
    );
    assert_eq!(fa.drops(), vec![d.id], "one DropCache per holding server");
    assert_eq!(fb.drops(), vec![d.id]);
    assert!(
        fc.drops().is_empty(),
        "servers without regions are not bothered"
    );
    assert_eq!(c.server(a).used, 0);
    let open = c.call(&ControlRequest::OpenCache { name: "d".into() });
    assert_eq!(error_code(&open), Some(ControlErrorCode::NotFound));
    let again = c.call(&ControlRequest::DeleteCache { name: "d".into() });
    assert_eq!(error_code(&again), Some(ControlErrorCode::NotFound));
    // The name is free again.
    assert!(cache(c.create("d", R)).id > d.id);
}

#[test]
fn silent_servers_die_get_no_placements_and_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.heartbeat_interval = Duration::from_millis(100);
    cfg.heartbeat_timeout = Duration::from_millis(300);
    let m = Manager::start(cfg).expect("start");
    let mut c = Conn::connect(m.addr());
    let (fa, fb) = (FakeServer::start(), FakeServer::start());
    let reg = |c: &mut Conn, f: &FakeServer| {
        c.call(&ControlRequest::RegisterServer {
            server_id: None,
            addr: f.addr.to_string(),
            memory: 8 * R,
            cores: 2,
            threads: 1,
            price_class: farcache_proto::control::PriceClass::OnDemand,
            // b is cheaper, so only its death keeps regions off it.
            price_per_gib_hour: if f.addr == fb.addr { 0.5 } else { 1.0 },
            tls_addr: None,
        })
    };
    let ControlResponse::Registered {
        server_id: a,
        heartbeat_ms,
        lease_ms,
        fenced,
    } = reg(&mut c, &fa)
    else {
        panic!("register a")
    };
    assert_eq!(heartbeat_ms, 100);
    // Leases end before the manager could declare the server dead.
    assert_eq!(lease_ms, 240);
    assert!(!fenced, "a new server has nothing to drop");
    let ControlResponse::Registered { server_id: b, .. } = reg(&mut c, &fb) else {
        panic!("register b")
    };

    // Keep a alive from its own connection; b stays silent.
    let beat_a = Beater::start(m.addr(), a, &fa);
    assert!(wait_for(Duration::from_secs(5), || c.server(b).state
        == ServerState::Dead));
    assert_eq!(c.server(a).state, ServerState::Alive);

    let placed = cache(c.create("x", 3 * R));
    assert_eq!(
        placed.regions,
        vec![a, a, a],
        "dead servers get no placements"
    );
    assert!(fb.calls().is_empty());

    // Heartbeats alone do not bring a dead server back: it is fenced, and must
    // register again, told to drop the copies it held.
    let mut hb = Conn::as_server(m.addr(), &fb.addr.to_string());
    match hb.call(&ControlRequest::Heartbeat {
        server_id: b,
        used: 0,
        regions: 0,
        digest: 0,
    }) {
        ControlResponse::Error { code, message } => {
            assert_eq!(code, ControlErrorCode::Fenced, "{message}");
        }
        other => panic!("heartbeat of a dead server answered {other:?}"),
    }
    assert_eq!(c.server(b).state, ServerState::Dead);
    let ControlResponse::Registered {
        server_id, fenced, ..
    } = c.call(&ControlRequest::RegisterServer {
        server_id: Some(b),
        addr: fb.addr.to_string(),
        memory: 8 * R,
        cores: 2,
        threads: 1,
        price_class: farcache_proto::control::PriceClass::OnDemand,
        price_per_gib_hour: 0.5,
        tls_addr: None,
    })
    else {
        panic!("register b again")
    };
    assert_eq!(server_id, b);
    assert!(
        fenced,
        "a dead server that registers again must drop its copies"
    );
    // Registered, its heartbeats keep it alive, and being cheaper it wins the next
    // placement.
    let beat_b = Beater::start(m.addr(), b, &fb);
    assert!(wait_for(Duration::from_secs(5), || c.server(b).state
        == ServerState::Alive));
    assert_eq!(cache(c.create("y", R)).regions, vec![b]);
    beat_b.stop();

    // Dead again, then back through registration under the same id.
    assert!(wait_for(Duration::from_secs(5), || c.server(b).state
        == ServerState::Dead));
    let ControlResponse::Registered { server_id, .. } = c.call(&ControlRequest::RegisterServer {
        server_id: Some(b),
        addr: fb.addr.to_string(),
        memory: 16 * R,
        cores: 2,
        threads: 1,
        price_class: farcache_proto::control::PriceClass::OnDemand,
        price_per_gib_hour: 0.5,
        tls_addr: None,
    }) else {
        panic!("re-register b")
    };
    assert_eq!(server_id, b);
    // b held the only copy of y's region: on its death the region was placed again,
    // empty and marked lost, on the live server.
    let info = c.server(b);
    assert_eq!(
        (info.state, info.memory, info.used),
        (ServerState::Alive, 16 * R, 0)
    );
    let ControlResponse::Status(st) = c.call(&ControlRequest::Status) else {
        panic!("status")
    };
    let y = st.caches.iter().find(|x| x.name == "y").expect("y");
    assert_eq!(y.regions, vec![a]);
    assert!(
        st.lost
            .iter()
            .any(|l| l.cache == y.id && l.was_on == b && l.now_on == a && l.reason == "killed"),
        "{:?}",
        st.lost
    );

    let unknown = c.call(&ControlRequest::Heartbeat {
        server_id: 999,
        used: 0,
        regions: 0,
        digest: 0,
    });
    assert_eq!(error_code(&unknown), Some(ControlErrorCode::UnknownServer));

    beat_a.stop();
}

/// Heartbeats for one server from its own connection until stopped.
struct Beater {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<()>,
}

impl Beater {
    fn start(addr: std::net::SocketAddr, server_id: u32, fake: &FakeServer) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let identity = fake.addr.to_string();
        let thread = thread::spawn(move || {
            let mut hb = Conn::as_server(addr, &identity);
            while !flag.load(Ordering::SeqCst) {
                let resp = hb.call(&ControlRequest::Heartbeat {
                    server_id,
                    used: 0,
                    regions: 0,
                    digest: 0,
                });
                assert!(
                    matches!(resp, ControlResponse::Lease { lease_ms } if lease_ms > 0),
                    "{resp:?}"
                );
                thread::sleep(Duration::from_millis(50));
            }
        });
        Self { stop, thread }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("heartbeat thread");
    }
}

#[test]
fn dead_holders_are_skipped_on_delete() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.heartbeat_interval = Duration::from_millis(50);
    cfg.heartbeat_timeout = Duration::from_millis(200);
    let m = Manager::start(cfg).expect("start");
    let mut c = Conn::connect(m.addr());
    let f = FakeServer::start();
    let s = c.register(None, &f, 4 * R, 1.0);
    cache(c.create("d", R));
    assert!(wait_for(Duration::from_secs(5), || c.server(s).state
        == ServerState::Dead));
    assert_eq!(
        c.call(&ControlRequest::DeleteCache { name: "d".into() }),
        ControlResponse::Ok
    );
    assert!(f.drops().is_empty(), "a dead server is not contacted");
    assert!(c.status().caches.is_empty());
}

#[test]
fn state_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeServer::start();
    let (server, before, reshaped) = {
        let m = start(dir.path());
        let mut c = Conn::connect(m.addr());
        let server = c.register(None, &f, 16 * R, 1.0);
        let before = cache(c.create("kept", 3 * R));
        let reshaped = cache(c.create("reshaped", R));
        let reshaped = cache(c.call(&ControlRequest::ReshapeCache {
            name: reshaped.name,
            capacity: 2 * R,
        }));
        cache(c.create("gone", R));
        assert_eq!(
            c.call(&ControlRequest::DeleteCache {
                name: "gone".into()
            }),
            ControlResponse::Ok
        );
        m.shutdown();
        (server, before, reshaped)
    };

    let same_table = |a: &CacheInfo, b: &CacheInfo| {
        (
            a.id,
            &a.name,
            a.capacity,
            a.region_size,
            a.epoch,
            &a.regions,
        ) == (
            b.id,
            &b.name,
            b.capacity,
            b.region_size,
            b.epoch,
            &b.regions,
        )
    };
    {
        let m = start(dir.path());
        let mut c = Conn::connect(m.addr());
        let after = cache(c.call(&ControlRequest::OpenCache {
            name: "kept".into(),
        }));
        assert!(same_table(&after, &before), "{after:?} vs {before:?}");
        let after = cache(c.call(&ControlRequest::OpenCache {
            name: "reshaped".into(),
        }));
        assert!(same_table(&after, &reshaped), "{after:?} vs {reshaped:?}");
        assert_eq!(after.epoch, 2);
        let gone = c.call(&ControlRequest::OpenCache {
            name: "gone".into(),
        });
        assert_eq!(error_code(&gone), Some(ControlErrorCode::NotFound));

        let info = c.server(server);
        assert_eq!(
            (info.state, info.used, info.memory),
            (ServerState::Unknown, 5 * R, 16 * R)
        );
        assert_eq!(info.addr, f.addr.to_string());
        // Unknown servers get nothing; while they have not reported, the lack of
        // room is passing, not final.
        let placed = c.create("new", R);
        assert_eq!(
            error_code(&placed),
            Some(ControlErrorCode::Unavailable),
            "unknown servers get nothing: {placed:?}"
        );

        assert_eq!(c.register(Some(server), &f, 16 * R, 1.0), server);
        assert_eq!(c.server(server).state, ServerState::Alive);
        let fresh = cache(c.create("new", R));
        assert!(
            fresh.id > reshaped.id + 1,
            "ids (including the deleted cache's) are not reused"
        );
        let f2 = FakeServer::start();
        assert!(c.register(None, &f2, R, 1.0) > server);
        // Dropping the handle also shuts down and releases the store.
        drop(m);
    }
    let m = start(dir.path());
    assert_eq!(m.status().caches.len(), 3);
    assert_eq!(m.status().servers.len(), 2);
}

#[test]
fn a_second_manager_on_the_same_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _m = start(dir.path());
    assert!(Manager::start(config(dir.path())).is_err());
}

#[test]
fn registering_with_an_id_the_store_lost_keeps_that_id() {
    let dir = tempfile::tempdir().unwrap();
    let m = start(dir.path());
    let mut c = Conn::connect(m.addr());
    let (f, f2) = (FakeServer::start(), FakeServer::start());
    assert_eq!(c.register(Some(42), &f, R, 1.0), 42);
    assert_eq!(
        c.register(None, &f2, R, 1.0),
        43,
        "new ids stay above adopted ones"
    );
    let bad = c.call(&ControlRequest::RegisterServer {
        server_id: None,
        addr: String::new(),
        memory: R,
        cores: 1,
        threads: 1,
        price_class: farcache_proto::control::PriceClass::Spot,
        price_per_gib_hour: 1.0,
        tls_addr: None,
    });
    assert_eq!(error_code(&bad), Some(ControlErrorCode::InvalidArgument));
}

#[test]
fn garbage_gets_an_error_frame_and_the_manager_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let m = start(dir.path());

    // Not a frame at all.
    let (mut bad, _) = Conn::unauthenticated(m.addr());
    std::io::Write::write_all(&mut bad, b"GET / HTTP/1.1\r\nHost: farcache\r\n\r\n").unwrap();
    let (h, payload) = read_frame(&mut bad, MAX_FRAME_DEFAULT).expect("error frame");
    assert_eq!(h.kind, FrameKind::Error);
    assert!(!payload.is_empty());
    let end = read_frame(&mut bad, MAX_FRAME_DEFAULT).expect_err("connection closed");
    assert!(is_eof(&end), "{end:?}");

    // A request before the handshake.
    let (mut bad, _) = Conn::unauthenticated(m.addr());
    write_frame(
        &mut bad,
        FrameKind::Control,
        1,
        &ControlRequest::Status.encode(),
    )
    .unwrap();
    let (h, payload) = read_frame(&mut bad, MAX_FRAME_DEFAULT).expect("error frame");
    assert_eq!(h.kind, FrameKind::Error);
    assert!(
        String::from_utf8_lossy(&payload).contains("handshake"),
        "{payload:?}"
    );

    // A frame after the handshake, but not a control payload.
    let mut bad = Conn::connect(m.addr());
    write_frame(bad.raw(), FrameKind::Control, 1, b"{not json").unwrap();
    let (h, payload) = read_frame(bad.raw(), MAX_FRAME_DEFAULT).expect("error frame");
    assert_eq!(h.kind, FrameKind::Error);
    assert!(
        String::from_utf8_lossy(&payload).contains("control"),
        "{payload:?}"
    );

    // A second Hello after the handshake.
    let mut bad = Conn::connect(m.addr());
    let hello = Credential::Cluster(secret()).hello(Role::Client, 1, "", &Challenge::new([0; 32]));
    write_frame(bad.raw(), FrameKind::Hello, 0, &hello.encode()).unwrap();
    let (h, _) = read_frame(bad.raw(), MAX_FRAME_DEFAULT).expect("error frame");
    assert_eq!(h.kind, FrameKind::Error);

    // Server-only requests are refused politely, and the connection stays usable.
    let mut c = Conn::connect(m.addr());
    for req in [
        ControlRequest::AllocRegion {
            cache: 1,
            region: 0,
            region_size: R,
            capacity: R,
            epoch: 1,
            lost: false,
            incoming: false,
            load: None,
        },
        ControlRequest::FreeRegion {
            cache: 1,
            region: 0,
            moved_to: None,
        },
        ControlRequest::DropCache { cache: 1 },
        ControlRequest::ServerStats,
    ] {
        let resp = c.call(&req);
        let ControlResponse::Error { code, message } = resp else {
            panic!("{resp:?}")
        };
        assert_eq!(code, ControlErrorCode::InvalidArgument);
        assert!(message.contains("server request"), "{message}");
    }
    assert!(c.status().servers.is_empty());
    m.shutdown();
}

#[test]
fn shutdown_closes_open_connections() {
    let dir = tempfile::tempdir().unwrap();
    let m = start(dir.path());
    let mut c = Conn::connect(m.addr());
    assert!(c.status().caches.is_empty());
    let addr = m.addr();
    m.shutdown();
    let end = read_frame(c.raw(), MAX_FRAME_DEFAULT).expect_err("closed by shutdown");
    assert!(is_eof(&end), "{end:?}");
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "listener closed"
    );
}
