//! The keyed store on real server processes under failure: with two copies of every
//! region, a server killed with SIGKILL while clients put and get loses no
//! acknowledged put; a reclaimed server's shards move live under the same load.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{client, cluster, eventually, server_index};
use farcache_proto::control::MigrationMode;
use farcache_store::{Store, StoreExt, StoreOptions};

const REGION: u64 = 1 << 20;

fn value(key: u64, version: u64) -> Vec<u8> {
    format!("{key}:{version}:")
        .repeat(1 + (key % 9) as usize)
        .into_bytes()
}

/// Puts versions of keys `[0, keys)` until `stop`; returns the last acknowledged
/// version of each key. A put error during the fault is retried, never ignored.
fn writer(store: Store, keys: u64, stop: Arc<AtomicBool>) -> HashMap<u64, u64> {
    let mut acked = HashMap::new();
    let mut version = 1;
    while !stop.load(Ordering::Relaxed) {
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..64)
            .map(|i| {
                let k = (version * 64 + i) % keys;
                (format!("k{k}").into_bytes(), value(k, version))
            })
            .collect();
        for (i, r) in store.mput(&pairs).into_iter().enumerate() {
            if r.is_ok() {
                acked.insert((version * 64 + i as u64) % keys, version);
            }
        }
        version += 1;
    }
    acked
}

fn check(store: &Store, keys: u64, acked: &HashMap<u64, u64>, base: u64) {
    let names: Vec<Vec<u8>> = (0..keys).map(|k| format!("k{k}").into_bytes()).collect();
    for (ci, chunk) in names.chunks(256).enumerate() {
        for (j, got) in store.mget(chunk).expect("mget").into_iter().enumerate() {
            let k = (ci * 256 + j) as u64;
            let got = got.unwrap_or_else(|e| panic!("k{k}: {e}"));
            let want = acked.get(&k).copied().unwrap_or(base);
            assert_eq!(
                got.as_deref(),
                Some(&value(k, want)[..]),
                "k{k}: last acknowledged version {want}"
            );
        }
    }
}

fn load(store: &Store, keys: u64) {
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..keys)
        .map(|k| (format!("k{k}").into_bytes(), value(k, 0)))
        .collect();
    for chunk in pairs.chunks(256) {
        for r in store.mput(chunk) {
            r.expect("load");
        }
    }
}

#[test]
fn a_killed_server_loses_no_acknowledged_put() {
    let mut c = cluster(4, REGION, 64 << 20);
    let cl = client(&c);
    let store = cl
        .create_store(
            "kv",
            8 * REGION,
            &StoreOptions {
                replicas: 2,
                avg_value_size: 40,
                ..StoreOptions::default()
            },
        )
        .expect("create store");
    let keys = 5000;
    load(&store, keys);
    let stop = Arc::new(AtomicBool::new(false));
    let w = {
        let (s, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || writer(s, keys, stop))
    };
    std::thread::sleep(Duration::from_millis(300));
    let victim = store.cache().info().regions[3];
    let i = server_index(&c, &cl, victim);
    c.kill_server(i).expect("SIGKILL");
    eventually(
        "backups take over",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || {
            let st = cl.status().ok()?;
            st.promotions.iter().any(|p| p.from == victim).then_some(())
        },
    );
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let acked = w.join().expect("writer");
    assert!(
        acked.len() as u64 > keys / 2,
        "the load ran: {}",
        acked.len()
    );
    assert!(cl.status().expect("status").lost.is_empty());
    check(&store, keys, &acked, 0);
    // A second handle (another client process would do the same) reads it all too.
    let reopened = cl.open_store("kv").expect("open");
    check(&reopened, keys, &acked, 0);
}

#[test]
fn a_reclaimed_servers_shards_move_under_load() {
    let c = cluster(3, REGION, 64 << 20);
    let cl = client(&c);
    let store = cl
        .create_store("kv", 6 * REGION, &StoreOptions::default())
        .expect("create store");
    let keys = 4000;
    load(&store, keys);
    let stop = Arc::new(AtomicBool::new(false));
    let w = {
        let (s, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || writer(s, keys, stop))
    };
    let victim = store.cache().info().regions[0];
    cl.reclaim(
        victim,
        Duration::from_secs(20),
        MigrationMode::DirtyTracking,
    )
    .expect("reclaim");
    eventually(
        "regions leave the reclaimed server",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || {
            let i = store.cache().refresh().ok()?;
            (!i.regions.contains(&victim)).then_some(())
        },
    );
    stop.store(true, Ordering::Relaxed);
    let acked = w.join().expect("writer");
    check(&store, keys, &acked, 0);
}

fn coded_store(c: &farcache_testkit::ProcessCluster, name: &str, capacity: u64) -> Store {
    client(c)
        .create_store(
            name,
            capacity,
            &StoreOptions {
                large_threshold: 64 << 10,
                ec_data: 2,
                ec_parity: 1,
                ..StoreOptions::default()
            },
        )
        .expect("create store")
}

fn object(i: u64) -> Vec<u8> {
    let len = 200_000 + (i as usize * 97_331) % 1_300_000;
    (0..len).map(|j| (j as u64 * 31 + i * 7) as u8).collect()
}

/// The server holding shard `shard` of `store`.
fn server_of(store: &Store, shard: u32) -> farcache_proto::ServerId {
    let info = store.cache().info();
    info.regions[(u64::from(shard) * store.descriptor().shard_size / info.region_size) as usize]
}

fn wait_regions_leave(store: &Store, victim: farcache_proto::ServerId) {
    eventually(
        "the dead server's regions are placed again",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || {
            let i = store.cache().refresh().ok()?;
            (!i.regions.contains(&victim)).then_some(())
        },
    );
}

/// RS(2+1), one copy of every region: kill a server (SIGKILL) and every object still
/// reads back; a repair pass rebuilds the lost chunks on live servers, so a second
/// server can die afterwards and still nothing is lost.
#[test]
fn erasure_coded_objects_survive_dead_servers_and_are_rebuilt() {
    // Shards of 4 MiB: room for the pieces, so nothing is evicted.
    let mut c = cluster(5, 4 * REGION, 128 << 20);
    let cl = client(&c);
    let store = coded_store(&c, "ec", 160 * REGION);
    let n = 12;
    for i in 0..n {
        store
            .put(format!("o{i}").as_bytes(), &object(i))
            .expect("put");
    }
    for round in 0..2 {
        // A server holding a data chunk of some object.
        let m = store
            .manifest(format!("o{round}").as_bytes())
            .expect("manifest")
            .expect("coded");
        let victim = server_of(&store, m.shards[1][0]);
        let i = server_index(&c, &cl, victim);
        c.kill_server(i).expect("SIGKILL");
        wait_regions_leave(&store, victim);
        for i in 0..n {
            let got = store
                .get(format!("o{i}").as_bytes())
                .unwrap_or_else(|e| panic!("o{i}: {e}"));
            assert!(
                got.as_deref() == Some(&object(i)[..]),
                "round {round}: o{i} wrong or missing"
            );
        }
        let r = store.repair().expect("repair");
        assert!(r.shards_reset > 0, "{r:?}");
        assert!(r.objects_rebuilt > 0 && r.unrecoverable == 0, "{r:?}");
        // Rebuilt: every object has all chunks again, none on a dead server.
        let again = store.repair().expect("repair");
        assert_eq!(
            (again.objects_rebuilt, again.unrecoverable),
            (0, 0),
            "{again:?}"
        );
    }
    for i in 0..n {
        let got = store.get(format!("o{i}").as_bytes()).expect("get");
        assert!(
            got.as_deref() == Some(&object(i)[..]),
            "o{i} after two deaths"
        );
    }
}

/// Three servers and an RS(2+1) store "ec" holding objects `o0..on`.
fn coded_objects(n: u64) -> (farcache_testkit::ProcessCluster, Store) {
    let c = cluster(3, REGION, 96 << 20);
    let store = coded_store(&c, "ec", 48 * REGION);
    for i in 0..n {
        store
            .put(format!("o{i}").as_bytes(), &object(i))
            .expect("put");
    }
    (c, store)
}

/// RS(2+1) objects on three servers; the process (pid) of the server holding o0's
/// second data chunk, to be stopped, and the objects whose key (home) is elsewhere,
/// to be read meanwhile.
fn stopped_setup() -> (farcache_testkit::ProcessCluster, Store, u32, Vec<u64>) {
    let n = 6;
    let (c, store) = coded_objects(n);
    let m = store.manifest(b"o0").expect("manifest").expect("coded");
    let victim = server_of(&store, m.shards[1][0]);
    let cl = client(&c);
    let pid = c.server_pid(server_index(&c, &cl, victim)).expect("pid");
    let readable: Vec<u64> = (0..n)
        .filter(|i| {
            let m = store
                .manifest(format!("o{i}").as_bytes())
                .expect("manifest")
                .expect("coded");
            server_of(&store, m.shards[0][0]) != victim
        })
        .collect();
    assert!(!readable.is_empty());
    (c, store, pid, readable)
}

/// A stopped server (SIGSTOP: alive to the network, silent) holds a data chunk: GETs
/// decode from the first two chunks that arrive and do not wait for it.
#[test]
fn a_stopped_server_does_not_hold_up_coded_gets() {
    let (_c, store, pid, readable) = stopped_setup();
    // SAFETY: signalling a child process we started.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    let started = std::time::Instant::now();
    for &i in &readable {
        let t = std::time::Instant::now();
        let got = store.get(format!("o{i}").as_bytes()).expect("get");
        assert!(got.as_deref() == Some(&object(i)[..]), "o{i}");
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "o{i} waited {:?}",
            t.elapsed()
        );
    }
    let took = started.elapsed();
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    assert!(
        took < Duration::from_secs(4),
        "{} GETs took {took:?}",
        readable.len()
    );
}

/// A stopped server is the *home* of coded objects (their manifests live there):
/// after `HEDGE_AFTER` a GET reads the newest manifest copy from the other servers
/// and decodes from their chunks, instead of waiting out the op timeout, also once
/// the op timeout has failed the home's connection.
#[test]
fn a_stopped_home_does_not_hold_up_coded_gets() {
    let n = 6;
    let (c, store) = coded_objects(n);
    // Overwritten once, so older copies may linger beside the newest.
    store.put(b"o0", &object(100)).expect("put");
    let want = |i: u64| if i == 0 { object(100) } else { object(i) };
    let home_of = |i: u64| {
        let m = store
            .manifest(format!("o{i}").as_bytes())
            .expect("manifest")
            .expect("coded");
        server_of(&store, m.shards[0][0])
    };
    let victim = home_of(0);
    let homed: Vec<u64> = (0..n).filter(|&i| home_of(i) == victim).collect();
    for i in 0..n {
        // Connections to every server, opened before the stop.
        store.get(format!("o{i}").as_bytes()).expect("get");
    }
    // A reader whose op timeout passes during the stop: GETs after it (the home's
    // connection failed, redials hang in the handshake) must not wait either.
    let op_timeout = Duration::from_millis(500);
    let store = c
        .client_with(farcache_client::ClientConfig::new("").op_timeout(op_timeout))
        .expect("client")
        .open_store("ec")
        .expect("open store");
    for i in 0..n {
        store.get(format!("o{i}").as_bytes()).expect("get");
    }
    let cl = client(&c);
    let pid = c.server_pid(server_index(&c, &cl, victim)).expect("pid");
    // SAFETY: signalling a child process we started.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    let mut took = Vec::new();
    let started = std::time::Instant::now();
    while started.elapsed() < 4 * op_timeout {
        for &i in &homed {
            let t = std::time::Instant::now();
            let got = store.get(format!("o{i}").as_bytes());
            took.push(t.elapsed());
            let got = got.unwrap_or_else(|e| panic!("o{i}: {e}"));
            assert!(got.as_deref() == Some(&want(i)[..]), "o{i}: wrong value");
        }
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    let slowest = took.iter().max().copied().unwrap_or_default();
    assert!(
        slowest < op_timeout,
        "a GET with its home stopped waited {slowest:?} (op timeout {op_timeout:?})"
    );
    // Once read around, the home stays suspect for a while: later GETs homed there
    // go to the copies without waiting out the hedge again.
    took.sort();
    let median = took[took.len() / 2];
    assert!(
        median < farcache_store::HEDGE_AFTER,
        "median {median:?} of {} GETs: each waited for the hedge",
        took.len()
    );
}

fn versioned(i: u64, version: u64) -> Vec<u8> {
    let len = 150_000 + (i as usize * 7_919) % 100_000;
    (0..len)
        .map(|j| (j as u64 * 13 + i * 7 + version * 101) as u8)
        .collect()
}

/// Repair rebuilds objects while a client keeps putting new versions of them: no
/// acknowledged put is replaced by the older version a repair decoded, and an object
/// rebuilt keeps its TTL.
#[test]
fn repair_never_replaces_a_newer_put_and_keeps_ttls() {
    let mut c = cluster(5, 4 * REGION, 128 << 20);
    let cl = client(&c);
    let store = coded_store(&c, "ec", 160 * REGION);
    let (raced, quiet) = (12u64, 4u64);
    let key = |i: u64| format!("r{i}").into_bytes();
    let ttl = Duration::from_secs(3600);
    for i in 0..raced + quiet {
        let opts = if i >= raced {
            farcache_store::PutOptions::ttl(ttl)
        } else {
            farcache_store::PutOptions::default()
        };
        assert!(
            store
                .put_large(&key(i), &versioned(i, 0), opts)
                .expect("put")
        );
    }
    // A server holding a data chunk of the first quiet object.
    let m = store
        .manifest(&key(raced))
        .expect("manifest")
        .expect("coded");
    let victim = server_of(&store, m.shards[1][0]);
    c.kill_server(server_index(&c, &cl, victim))
        .expect("SIGKILL");
    wait_regions_leave(&store, victim);

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut acked = HashMap::new();
            let mut version = 1;
            while !stop.load(Ordering::Relaxed) {
                // Last keys first: the repair goes through them in the other order.
                for i in (0..raced).rev() {
                    if store.put(&key(i), &versioned(i, version)).is_ok() {
                        acked.insert(i, version);
                    }
                }
                version += 1;
            }
            acked
        })
    };
    let mut rebuilt = 0;
    for _ in 0..3 {
        let r = store.repair().expect("repair");
        rebuilt += r.objects_rebuilt;
    }
    stop.store(true, Ordering::Relaxed);
    let acked = writer.join().expect("writer");
    assert!(rebuilt > 0, "nothing was rebuilt");
    for i in 0..raced {
        let want = acked.get(&i).copied().unwrap_or(0);
        let got = store.get(&key(i)).expect("get").expect("present");
        assert!(
            got[..] == versioned(i, want)[..],
            "r{i}: not the last acknowledged version {want}"
        );
    }
    for i in raced..raced + quiet {
        let e = store.entry(&key(i)).expect("entry").expect("present");
        assert!(e.value[..] == versioned(i, 0)[..], "r{i}: wrong value");
        let left = e.ttl().expect("the TTL survives the repair");
        assert!(left > ttl - Duration::from_secs(120), "r{i}: TTL {left:?}");
    }
    let again = store.repair().expect("repair");
    assert_eq!(again.unrecoverable, 0, "{again:?}");
}

/// First-d GETs go on past the op timeout of a stopped server (SIGSTOP): its chunk
/// reads pile up behind a full connection (one frame in flight), which then times
/// out and is dialled again, and no GET waits for any of it.
#[test]
fn first_d_gets_never_wait_for_a_stopped_server() {
    let (c, _store, pid, readable) = stopped_setup();
    let op_timeout = Duration::from_secs(1);
    let reader = c
        .client_with(
            farcache_client::ClientConfig::new("")
                .op_timeout(op_timeout)
                .batch_size(1)
                .queue_depth(1),
        )
        .expect("client")
        .open_store("ec")
        .expect("open store");
    for &i in &readable {
        // Connections to every server, opened before the stop.
        reader.get(format!("o{i}").as_bytes()).expect("get");
    }
    // SAFETY: signalling a child process we started.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    let started = std::time::Instant::now();
    let (mut gets, mut slowest) = (0, Duration::ZERO);
    while started.elapsed() < Duration::from_millis(2500) {
        for &i in &readable {
            let t = std::time::Instant::now();
            let got = reader.get(format!("o{i}").as_bytes());
            slowest = slowest.max(t.elapsed());
            let got = got.unwrap_or_else(|e| panic!("o{i}: {e}"));
            assert!(got.as_deref() == Some(&object(i)[..]), "o{i}");
            gets += 1;
        }
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    assert!(
        slowest < op_timeout,
        "a GET waited {slowest:?} (op timeout {op_timeout:?})"
    );
    assert!(gets >= 2 * readable.len(), "only {gets} GETs");
}
