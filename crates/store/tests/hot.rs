//! The hot-key layer on a 3-server cluster (in-process servers): a key read far more
//! than the rest gets a second copy that serves reads, and while a writer keeps
//! changing it, no read returns a value older than the last acknowledged write.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use farcache_store::{HotOptions, StoreExt, StoreOptions};
use farcache_testkit::{ClusterOptions, LocalCluster};

fn version_of(v: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(v);
    text.split('|')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a versioned value: {text}"))
}

fn value(version: u64) -> Vec<u8> {
    format!("{version}|").repeat(8).into_bytes()
}

#[test]
fn hot_keys_get_a_copy_and_reads_never_go_stale() {
    let opts = ClusterOptions::default()
        .servers(3)
        .region_size(1 << 20)
        .server_memory(64 << 20)
        .server_threads(2);
    let c = LocalCluster::start(&opts).expect("cluster");
    let client = c.client().expect("client");
    let store = client
        .create_store("hot", 6 << 20, &StoreOptions::default())
        .expect("store");
    store.put(b"hot", &value(0)).expect("put");
    let others: Vec<Vec<u8>> = (0..500).map(|i| format!("k{i}").into_bytes()).collect();
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = others.iter().map(|k| (k.clone(), value(0))).collect();
    for r in store.mput(&pairs) {
        r.expect("mput");
    }
    let _controller = store.spawn_hot_keys(HotOptions {
        every: Duration::from_millis(20),
        max_keys: 4,
        min_count: 4,
    });
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (s, acked, stop) = (store.clone(), acked.clone(), stop.clone());
            let others = others.clone();
            std::thread::spawn(move || {
                let mut reads = 0u64;
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    let floor = acked.load(Ordering::Acquire);
                    let v = s.get(b"hot").expect("get").expect("present");
                    let got = version_of(&v);
                    assert!(
                        got >= floor,
                        "read version {got} after version {floor} was acknowledged"
                    );
                    reads += 1;
                    i += 1;
                    if i % 8 == 0 {
                        s.get(&others[i % others.len()]).expect("get");
                    }
                }
                reads
            })
        })
        .collect();
    // Reads alone make it hot, and copies start serving.
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.copy_reads() == 0 {
        assert!(Instant::now() < deadline, "no read was served by a copy");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(store.hot_keys().contains(&b"hot".to_vec()));
    let before = store.copy_reads();
    let waits = store.lease_waits();
    // Writes while copies serve: each acknowledged only once no stale copy is live.
    for version in 1..=20u64 {
        store.put(b"hot", &value(version)).expect("put");
        acked.store(version, Ordering::Release);
        std::thread::sleep(Duration::from_millis(15));
    }
    assert!(
        store.lease_waits() >= waits + 20,
        "every hot write waits out the lease"
    );
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|h| h.join().expect("reader")).sum();
    assert!(
        store.copy_reads() > before,
        "copies kept serving between writes"
    );
    assert!(reads > 100, "{reads}");
    // Not-hot keys write without waiting (counted, not timed: a slow machine may
    // take longer than a lease for any put).
    let waits = store.lease_waits();
    store.put(b"k1", &value(9)).expect("put");
    assert_eq!(store.lease_waits(), waits);
}

/// The heavy-hitter report is the whole server's, but a caller only sees keys of its
/// own cache: another tenant's hot key stays private.
#[test]
fn hot_key_reports_stay_within_the_callers_cache() {
    let opts = ClusterOptions::default()
        .servers(1)
        .region_size(1 << 20)
        .server_memory(64 << 20);
    let c = LocalCluster::start(&opts).expect("cluster");
    let client = c.client().expect("client");
    let a = client
        .create_store("tenant-a", 2 << 20, &StoreOptions::default())
        .expect("store a");
    let b = client
        .create_store("tenant-b", 2 << 20, &StoreOptions::default())
        .expect("store b");
    a.put(b"secret-key", b"v").expect("put");
    b.put(b"other", b"v").expect("put");
    for _ in 0..2000 {
        a.get(b"secret-key").expect("get");
    }
    let report = |s: &farcache_store::Store| {
        let raw = s
            .cache()
            .execute(farcache_kvformat::wire::KV_HOT, 0, &[])
            .expect("kv_hot");
        farcache_kvformat::wire::decode_hot(&raw).expect("decode").1
    };
    assert!(
        report(&a).iter().any(|h| h.key == b"secret-key"),
        "the owner sees its hot key"
    );
    assert!(
        report(&b).iter().all(|h| h.key != b"secret-key"),
        "another cache's caller must not see it"
    );
}
