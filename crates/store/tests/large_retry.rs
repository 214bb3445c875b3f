//! A GET of an erasure-coded value whose chunk reads fail for a moment (their
//! server answers NOT_SERVING past the client's op timeout, as while a region fails
//! over) reads them again and returns the value, as other store calls retry
//! transient failures. Its own test binary: the failpoint is global to the process.

use std::time::{Duration, Instant};

use farcache_client::ClientConfig;
use farcache_kvformat::hash::PLACED;
use farcache_store::{PutOptions, StoreExt, StoreOptions};
use farcache_testkit::{ClusterOptions, LocalCluster};

#[test]
fn a_coded_get_reads_chunks_again_after_a_transient_failure() {
    let opts = ClusterOptions::default()
        .servers(3)
        .region_size(1 << 20)
        .server_memory(96 << 20)
        .server_threads(2);
    let c = LocalCluster::start(&opts).expect("start local cluster");
    // The client retries a refused op itself until its op timeout: a short one, so
    // the refusal reaches the store's GET.
    let s = c
        .client_with(ClientConfig::new("").op_timeout(Duration::from_millis(150)))
        .expect("client")
        .create_store(
            "retry",
            48 << 20,
            &StoreOptions {
                large_threshold: 64 << 10,
                ec_data: 2,
                ec_parity: 1,
                ..StoreOptions::default()
            },
        )
        .expect("create store");
    let v: Vec<u8> = (0..(1 << 20) + 3).map(|i| (i * 7 % 251) as u8).collect();
    assert!(s.put_large(b"obj", &v, PutOptions::default()).expect("put"));
    // Every piece lookup names a placed key: refuse them all for 600 ms.
    let hex: String = PLACED.iter().map(|b| format!("{b:02x}")).collect();
    fail::cfg("execute-refuse-args", &format!("return({hex})")).expect("failpoint");
    let lifted = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(600));
        fail::remove("execute-refuse-args");
    });
    let t = Instant::now();
    let got = s.get(b"obj");
    lifted.join().expect("lift");
    let got = got.expect("the GET retried its chunks").expect("present");
    assert!(got[..] == v[..], "the value came back different");
    assert!(
        t.elapsed() >= Duration::from_millis(550),
        "the chunks were refused for {:?} only: the failpoint did not apply",
        t.elapsed()
    );
    // Lifted: read at once.
    assert!(s.get(b"obj").expect("get").is_some_and(|g| g[..] == v[..]));
}
