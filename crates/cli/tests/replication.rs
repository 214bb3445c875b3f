//! Replicated regions and read-only caches on real processes: a primary killed with
//! SIGKILL under a verifying load loses no acknowledged write (a backup takes over,
//! and the region gets a new backup); a reclaimed server's copies move while two
//! copies of every region exist throughout; a cache loaded from a file reloads the
//! regions a dead server held instead of reporting them lost.

mod common;

use std::time::Duration;

use common::{bin, client, cluster, diff, eventually, pattern, server_index};
use farcache_client::{Client, ClientError, CreateOptions, OpError, Status};
use farcache_proto::ServerId;
use farcache_proto::control::{CacheInfo, ControlErrorCode, MigrationMode};
use farcache_testkit::{ClusterOptions, ProcessCluster, Verifier};

const REGION: u64 = 1 << 20;

fn replicated(replicas: u32) -> CreateOptions {
    CreateOptions {
        replicas,
        ..CreateOptions::default()
    }
}

fn info(client: &Client, name: &str) -> CacheInfo {
    let st = client.status().expect("status");
    st.caches
        .into_iter()
        .find(|c| c.name == name)
        .expect("cache")
}

/// Every region has `n` copies on `n` distinct servers, none on `not_on`.
fn fully_copied(i: &CacheInfo, n: usize, not_on: Option<ServerId>) -> bool {
    (0..i.regions.len()).all(|r| {
        let mut copies = vec![i.regions[r]];
        copies.extend(i.backups.get(r).into_iter().flatten().copied());
        let mut d = copies.clone();
        d.sort_unstable();
        d.dedup();
        d.len() == n && copies.len() == n && not_on.is_none_or(|s| !copies.contains(&s))
    })
}

/// Kill a primary (SIGKILL) under load with two copies: its backups take over, no
/// acknowledged write is lost or reported lost, and the regions get a second copy
/// again; then kill another server and still lose nothing.
#[test]
fn killed_primaries_lose_no_acknowledged_write() {
    let mut c = cluster(4, REGION, 64 << 20);
    let client = client(&c);
    let n = 12u64;
    let cache = client
        .create_with("safe", n * REGION, &replicated(2))
        .expect("create");
    let first = info(&client, "safe");
    assert_eq!(first.replicas, 2);
    assert!(fully_copied(&first, 2, None), "{first:?}");
    let load = Verifier::start(&cache, n * REGION / 8);
    std::thread::sleep(Duration::from_millis(400));
    let mut killed = Vec::new();
    for round in 0..2 {
        let now = info(&client, "safe");
        let victim = now.regions[round * 5];
        let owned = now.regions.iter().filter(|&&s| s == victim).count();
        let i = server_index(&c, &client, victim);
        c.kill_server(i).expect("SIGKILL");
        killed.push(victim);
        let st = eventually(
            "backups take over",
            Duration::from_secs(20),
            Duration::from_millis(20),
            || {
                let st = client.status().ok()?;
                let p = st.promotions.iter().filter(|p| p.from == victim).count();
                (p == owned).then_some(st)
            },
        );
        assert!(st.lost.is_empty(), "nothing lost: {:?}", st.lost);
        // Re-replication puts every region back to two copies on live servers.
        let again = eventually(
            "two copies again",
            Duration::from_secs(30),
            Duration::from_millis(50),
            || {
                let i = info(&client, "safe");
                (killed.iter().all(|&k| fully_copied(&i, 2, Some(k)))).then_some(i)
            },
        );
        assert!(again.epoch > now.epoch);
        std::thread::sleep(Duration::from_millis(300));
    }
    let r = load.stop();
    assert_eq!(
        (
            r.wrong_reads,
            r.acked_writes_lost,
            r.acked_writes_lost_reported
        ),
        (0, 0, 0),
        "{:?}",
        r.samples
    );
    assert!(r.writes > 100, "the load ran: {r:?}");
    // The owners counted what they forwarded.
    let owner = server_index(&c, &client, info(&client, "safe").regions[0]);
    let stats = common::server_stats(&c, owner);
    assert!(stats.replication.frames > 0, "{:?}", stats.replication);
}

/// A reclaimed server's copies (owned and backed up) move live: every acknowledged
/// write survives, and every region ends with two copies, none on the leaver.
#[test]
fn reclaim_moves_owned_and_backup_copies() {
    let mut c = cluster(4, REGION, 64 << 20);
    let client = client(&c);
    let n = 8u64;
    let cache = client
        .create_with("moving", n * REGION, &replicated(2))
        .expect("create");
    let load = Verifier::start(&cache, n * REGION / 8);
    std::thread::sleep(Duration::from_millis(300));
    let victim = cache.info().regions[0];
    let i = server_index(&c, &client, victim);
    client
        .reclaim(
            victim,
            Duration::from_secs(30),
            MigrationMode::DirtyTracking,
        )
        .expect("reclaim");
    eventually(
        "the leaver holds no copy",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || fully_copied(&info(&client, "moving"), 2, Some(victim)).then_some(()),
    );
    let r = load.stop();
    common::assert_clean(&r);
    let st = client.status().expect("status");
    assert!(st.lost.is_empty() && st.promotions.is_empty(), "{st:?}");
    assert!(st.migrations.iter().any(|m| m.from == victim));
    // Now the old server can die without anyone noticing.
    c.kill_server(i).expect("SIGKILL");
    let a = cache.read(0, n * REGION).expect("read after");
    assert_eq!(a.len() as u64, n * REGION);
}

/// More copies than servers is refused with a clear error; reshaping a replicated
/// cache is refused rather than half done.
#[test]
fn impossible_copies_are_refused() {
    let c = cluster(2, REGION, 64 << 20);
    let client = client(&c);
    match client.create_with("three", 2 * REGION, &replicated(3)) {
        Err(ClientError::Rejected { code, message }) => {
            assert_eq!(code, ControlErrorCode::InsufficientMemory);
            assert!(message.contains("3 copies"), "{message}");
        }
        other => panic!("{:?}", other.err()),
    }
    client
        .create_with("two", 2 * REGION, &replicated(2))
        .expect("two copies fit");
    assert!(client.reshape("two", 4 * REGION).is_err());
}

/// A read-only cache loaded from a file: reads return the file, writes are refused,
/// and the regions of a killed server come back from the file, not as lost.
#[test]
fn file_caches_are_read_only_and_reload_lost_regions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = dir.path().join("images");
    std::fs::create_dir(&files).expect("mkdir");
    let opts = ClusterOptions::default()
        .servers(3)
        .region_size(REGION)
        .server_memory(64 << 20)
        .server_args(["--load-dir".to_string(), files.display().to_string()]);
    let mut c = ProcessCluster::start(bin(), &opts).expect("start process cluster");
    let client = client(&c);
    let n = 6u64;
    let image = pattern(42, (n * REGION - 1000) as usize);
    let path = files.join("image.bin");
    std::fs::write(&path, &image).expect("write file");
    // Servers load only files under their --load-dir.
    let outside = dir.path().join("secret.bin");
    std::fs::write(&outside, b"not for the cache").expect("write file");
    let sneaky = CreateOptions {
        from_file: Some(outside.display().to_string()),
        ..CreateOptions::default()
    };
    match client.create_with("sneaky", 17, &sneaky) {
        Err(e) => assert!(e.to_string().contains("--load-dir"), "{e}"),
        Ok(_) => panic!("a file outside --load-dir was loaded"),
    }
    let opts = CreateOptions {
        from_file: Some(path.to_string_lossy().into_owned()),
        ..CreateOptions::default()
    };
    let cache = client
        .create_with("image", image.len() as u64, &opts)
        .expect("create from file");
    assert!(info(&client, "image").from_file.is_some());
    let got = cache.read(0, image.len() as u64).expect("read");
    assert!(diff(&got, &image).is_none());
    match cache.write(10, b"nope") {
        Err(ClientError::Op(OpError::Status(Status::ReadOnly))) => {}
        other => panic!("a write to a read-only cache: {other:?}"),
    }
    assert!(cache.fetch_add(64, 1).is_err());
    let victim = cache.info().regions[1];
    let i = server_index(&c, &client, victim);
    c.kill_server(i).expect("SIGKILL");
    let st = eventually(
        "the dead server's regions are placed again",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || {
            let st = client.status().ok()?;
            (!st.lost.is_empty()).then_some(st)
        },
    );
    assert!(st.lost.iter().all(|l| l.reloaded), "{:?}", st.lost);
    let got = eventually(
        "reads succeed again",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || cache.read(0, image.len() as u64).ok(),
    );
    assert!(diff(&got, &image).is_none(), "the file's bytes, not zeros");
    // A missing file is a clear error.
    let bad = CreateOptions {
        from_file: Some("/nonexistent/farcache-image".into()),
        ..CreateOptions::default()
    };
    assert!(client.create_with("bad", REGION, &bad).is_err());
}

/// A server restarted at once on its address and data directory comes back empty
/// under its old id: its owned regions pass to their backups, its backups are
/// replaced, and every byte written before reads back; a manager restart meanwhile
/// keeps the copies it committed.
#[test]
fn a_restarted_server_and_manager_lose_nothing() {
    let mut c = cluster(3, REGION, 64 << 20);
    let client = client(&c);
    let n = 9u64;
    let cache = client
        .create_with("restart", n * REGION, &replicated(2))
        .expect("create");
    let image = pattern(5, (n * REGION) as usize);
    cache.write(0, &image).expect("fill");
    let victim = cache.info().regions[0];
    let i = server_index(&c, &client, victim);
    c.restart_server(i).expect("restart");
    let after = eventually(
        "two copies again, none lost",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || {
            let i = info(&client, "restart");
            let owned = i.regions.iter().filter(|&&s| s == victim).count();
            (owned == 0 && fully_copied(&i, 2, None)).then_some(i)
        },
    );
    let st = client.status().expect("status");
    assert!(st.lost.is_empty(), "nothing lost: {:?}", st.lost);
    assert!(st.promotions.iter().any(|p| p.from == victim));
    let got = cache.read(0, n * REGION).expect("read");
    assert!(
        diff(&got, &image).is_none(),
        "every byte survived the restart"
    );
    // The manager restarts: the committed table stands, and the cache still reads.
    c.restart_manager().expect("restart manager");
    let again = eventually(
        "the manager is back with the same table",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || {
            client
                .status()
                .ok()
                .and_then(|s| s.caches.into_iter().find(|x| x.name == "restart"))
        },
    );
    assert_eq!(again.regions, after.regions);
    assert_eq!(again.backups, after.backups);
    let got = cache
        .read(0, n * REGION)
        .expect("read after the manager restart");
    assert!(diff(&got, &image).is_none());
}

/// A server-role connection to `addr` that claims to be `owner`'s replication stream
/// `generation` (any holder of the cluster secret can; the backup checks the rest).
fn stream_to(c: &ProcessCluster, addr: &str, owner: &str, generation: u64) -> std::net::TcpStream {
    use farcache_proto::blocking::handshake;
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let cred = farcache_proto::Credential::Cluster(c.secret().clone());
    handshake(
        &mut s,
        farcache_proto::Role::Server,
        generation,
        owner,
        &cred,
    )
    .expect("handshake as the owner's stream");
    s
}

fn write_op(cache: u32, addr: u64, data: &[u8]) -> farcache_proto::Op<'_> {
    farcache_proto::Op::Write { cache, addr, data }
}

/// The replication reconnect race, reached deterministically: an owner's frame on an
/// old connection reaches the backup only after the frames the owner sent again on a
/// new connection. Before stream generations the backup applied it last, and an
/// older snapshot overwrote a newer acknowledged one (a write lost at the next
/// failover); now the old stream's frame is refused and nothing it carries lands.
/// Writes from a server that is not the region's owner in the backup's table are
/// refused too: `PAUSED` while the table may lag behind a move, `WRONG_SERVER` from a
/// stale owner once the backup owns the region.
#[test]
fn a_backup_applies_only_the_owners_newest_stream() {
    let mut c = cluster(3, REGION, 16 << 20);
    let client = client(&c);
    let cache = client
        .create_with("streams", 2 * REGION, &replicated(2))
        .expect("create");
    let i = info(&client, "streams");
    let addr_of = |id: ServerId| i.server(id).expect("server").addr.clone();
    let (owner, backup) = (addr_of(i.regions[0]), addr_of(i.backups[0][0]));
    let id = cache.id();
    let mut old = stream_to(&c, &backup, &owner, 100);
    let mut new = stream_to(&c, &backup, &owner, 101);
    // The new stream carries the newer snapshot and is acknowledged...
    let r = common::request(&mut new, 1, &[write_op(id, 0, b"newer..")]);
    assert_eq!(r[0].1, Status::Ok, "{r:?}");
    // ...then the old stream's frame, held up somewhere, arrives: it must not land.
    let r = common::request(&mut old, 1, &[write_op(id, 0, b"older..")]);
    assert_eq!(
        r[0].1,
        Status::NotServing,
        "an old stream's frame applied: {r:?}"
    );
    // An old stream cannot even open once a newer one exists.
    let mut late = std::net::TcpStream::connect(&backup).expect("connect");
    late.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let cred = farcache_proto::Credential::Cluster(c.secret().clone());
    assert!(
        farcache_proto::blocking::handshake(
            &mut late,
            farcache_proto::Role::Server,
            99,
            &owner,
            &cred
        )
        .is_err(),
        "a stream older than the newest opened"
    );

    // A server the backup's table does not name the owner: maybe a move the table
    // has not caught up with, so "later".
    let third = (0..c.server_count())
        .map(|k| c.server_addr(k).to_owned())
        .find(|a| *a != owner && *a != backup)
        .expect("a third server");
    let mut other = stream_to(&c, &backup, &third, 200);
    let r = common::request(&mut other, 1, &[write_op(id, 0, b"other..")]);
    assert_eq!(r[0].1, Status::Paused, "{r:?}");

    // The backup owns a region of its own: the "owner" writing it is stale.
    let owned = (0..i.regions.len())
        .find(|&r| addr_of(i.regions[r]) == backup)
        .map(|r| r as u64 * REGION);
    if let Some(at) = owned {
        let r = common::request(&mut new, 4, &[write_op(id, at, b"stale..")]);
        assert_eq!(r[0].1, Status::WrongServer, "{r:?}");
    }
    // What the backup holds shows at the next failover: the newer snapshot, neither
    // the old stream's nor the refused third server's.
    let k = common::server_index(&c, &client, i.regions[0]);
    c.kill_server(k).expect("kill the owner");
    let got = eventually(
        "the backup serves region 0",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || cache.read(0, 8).ok(),
    );
    assert_eq!(
        &got[..7],
        b"newer..",
        "the backup applied a stale or refused frame"
    );
}
