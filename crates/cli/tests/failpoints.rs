//! Race windows reached with named failpoints (`farcache_server::failpoints`) in real
//! server processes, instead of sleeps and SIGSTOP. Built only with the feature:
//! `cargo test -p farcache-cli --features failpoints --test failpoints` (scripts/test.sh
//! runs it).
#![cfg(feature = "failpoints")]

mod common;

use std::time::{Duration, Instant};

use common::{bin, client, eventually, server_index};
use farcache_client::CreateOptions;
use farcache_testkit::{ClusterOptions, ProcessCluster};

const REGION: u64 = 1 << 20;
/// How long the backup holds the first replication frame it reads: long enough for
/// the owner to give up on that connection (a send blocked 500 ms), reconnect, send
/// everything again and have newer writes acknowledged.
const HOLD_MS: u64 = 3000;

/// The replication reconnect race: a frame of the old connection is still inside the
/// backup when the owner's new connection sends it again and newer writes are
/// acknowledged. Applied late, the old frame would put back bytes an acknowledged
/// write replaced, and a failover would serve them. The backup must refuse it (its
/// stream is older than the owner's newest), so the promoted copy holds the newer
/// write. With the stream check removed from `conn.rs` this test fails: it reads
/// the first write back.
#[test]
fn a_frame_held_past_a_reconnect_never_lands_over_newer_writes() {
    let opts = ClusterOptions::default()
        .servers(2)
        .server_threads(4)
        .region_size(REGION)
        .server_memory(16 << 20)
        .server_env(
            "FAILPOINTS",
            &format!("backup-before-stream-check=1*sleep({HOLD_MS})"),
        );
    let mut c = ProcessCluster::start(bin(), &opts).expect("start cluster");
    let client = client(&c);
    let cache = client
        .create_with(
            "race",
            REGION,
            &CreateOptions {
                replicas: 2,
                ..CreateOptions::default()
            },
        )
        .expect("create");
    let st = client.status().expect("status");
    let info = st.caches.iter().find(|c| c.name == "race").expect("cache");
    let owner = info.regions[0];
    assert_eq!(info.backups[0].len(), 1, "{info:?}");

    // 24 writes of the whole region in one batch: the backup holds the first frame
    // and reads nothing more, the owner's sends fill both socket buffers and time out
    // (500 ms), and it sends everything unacknowledged again on a new connection,
    // which another of the backup's workers serves while the first one still holds
    // the old frame.
    let t0 = Instant::now();
    let mut b = cache.batch();
    for i in 0..24u8 {
        b.write(0, &vec![i + 1; REGION as usize]);
    }
    let r = b.run();
    assert!(r.first_error().is_none(), "{:?}", r.first_error());
    let waited = t0.elapsed();
    assert!(
        waited < Duration::from_millis(HOLD_MS - 700),
        "the batch waited for the held frame ({waited:?}) instead of a new connection"
    );
    // A newer write, acknowledged on the new connection while the old frame waits.
    cache.write(0, &[0xBB; 64]).expect("newer write");
    assert!(
        t0.elapsed() < Duration::from_millis(HOLD_MS - 200),
        "the newer write came too late to race the held frame ({:?})",
        t0.elapsed()
    );
    // Let the held frame run into the check, then fail the owner over.
    std::thread::sleep(Duration::from_millis(HOLD_MS + 500).saturating_sub(t0.elapsed()));
    let i = server_index(&c, &client, owner);
    c.kill_server(i).expect("SIGKILL the owner");
    eventually(
        "the backup takes over",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || {
            let st = client.status().ok()?;
            st.promotions.iter().any(|p| p.from == owner).then_some(())
        },
    );
    let got = eventually(
        "a read from the promoted copy",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || cache.read(0, 64).ok(),
    );
    assert_eq!(
        &got[..],
        &[0xBB; 64][..],
        "the promoted copy lost the acknowledged newer write"
    );
    let rest = cache.read(64, REGION - 64).expect("read the rest");
    assert!(
        rest.iter().all(|&x| x == 24),
        "the batch's last write is what the rest of the region holds"
    );
}
