//! Race windows reached with named failpoints (`farcache_server::failpoints`) in real
//! server processes, instead of sleeps and SIGSTOP. Built only with the feature:
//! `cargo test -p farcache-cli --features failpoints --test failpoints` (scripts/test.sh
//! runs it).
#![cfg(feature = "failpoints")]

mod common;

use std::time::{Duration, Instant};

use common::{bin, eventually, server_index};
use farcache_client::CreateOptions;
use farcache_testkit::{ClusterOptions, ProcessCluster};

const REGION: u64 = 1 << 20;

/// The tests run one at a time: each times a race against its own cluster, and two
/// clusters on two cores slow each other past a lease (a backup that slow is dropped).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
/// How long the backup holds the first replication frame it reads: long enough for
/// the owner to give up on that connection (a send blocked 500 ms), reconnect, send
/// everything again and have newer writes acknowledged.
const HOLD_MS: u64 = 3000;

/// Two servers with `FAILPOINTS` set to `points`, and a one-region cache with two
/// copies on them.
struct TwoCopies {
    c: ProcessCluster,
    client: farcache_client::Client,
    cache: farcache_client::Cache,
    owner: u32,
    backup: u32,
}

fn two_copies(threads: usize, points: &str) -> TwoCopies {
    copies_on(2, threads, points, Duration::from_secs(5))
}

/// `two_copies` on `servers` servers, with a client whose ops wait `op_timeout`.
fn copies_on(servers: usize, threads: usize, points: &str, op_timeout: Duration) -> TwoCopies {
    let opts = ClusterOptions::default()
        .servers(servers)
        .server_threads(threads)
        .region_size(REGION)
        .server_memory(16 << 20)
        .server_env("FAILPOINTS", points);
    let c = ProcessCluster::start(bin(), &opts).expect("start cluster");
    let client = c
        .client_with(farcache_client::ClientConfig::new("").op_timeout(op_timeout))
        .expect("client");
    let two = CreateOptions {
        replicas: 2,
        ..CreateOptions::default()
    };
    let cache = client.create_with("fp", REGION, &two).expect("create");
    let st = client.status().expect("status");
    let info = st.caches.iter().find(|c| c.name == "fp").expect("cache");
    assert_eq!(info.backups[0].len(), 1, "{info:?}");
    let (owner, backup) = (info.regions[0], info.backups[0][0]);
    TwoCopies {
        c,
        client,
        cache,
        owner,
        backup,
    }
}

/// The replication reconnect race: a frame of the old connection is still inside the
/// backup when the owner's new connection sends it again and newer writes are
/// acknowledged. Applied late, the old frame would put back bytes an acknowledged
/// write replaced, and a failover would serve them. The backup must refuse it (its
/// stream is older than the owner's newest), so the promoted copy holds the newer
/// write. With the stream check removed from `conn.rs` this test fails: it reads
/// the first write back.
#[test]
fn a_frame_held_past_a_reconnect_never_lands_over_newer_writes() {
    let _serial = serial();
    let points = format!("backup-before-stream-check=1*sleep({HOLD_MS})");
    let TwoCopies {
        mut c,
        client,
        cache,
        owner,
        ..
    } = two_copies(4, &points);

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

/// Counters the exactly-once tests add to (64 bytes apart), and adds per counter.
const COUNTERS: u64 = 8;
const ADDS: u64 = 8;

/// Sends `ADDS` fetch-adds of 1 to each of the `COUNTERS` counters in one batch, on a
/// thread of its own (the test fails servers meanwhile); the batch's results and how
/// long it waited.
fn spawn_adds(
    cache: &farcache_client::Cache,
) -> std::thread::JoinHandle<(farcache_client::BatchResults, Duration)> {
    let cache = cache.clone();
    std::thread::spawn(move || {
        let mut b = cache.batch();
        for _ in 0..ADDS {
            for k in 0..COUNTERS {
                b.fetch_add(k * 64, 1);
            }
        }
        let t0 = Instant::now();
        let r = b.run();
        (r, t0.elapsed())
    })
}

/// Waits until server `i` holds a completion record of every add.
fn wait_records(c: &ProcessCluster, i: usize, what: &str) {
    eventually(
        what,
        Duration::from_secs(10),
        Duration::from_millis(10),
        || (common::server_stats(c, i).completions.records >= COUNTERS * ADDS).then_some(()),
    );
}

/// Every add succeeded once: each counter's old values are 0..ADDS exactly once, and
/// each counter reads ADDS (2 × ADDS had the adds sent again been applied again).
fn assert_added_once(cache: &farcache_client::Cache, r: &farcache_client::BatchResults) {
    assert!(
        r.first_error().is_none(),
        "an op in flight at the failover failed: {:?}",
        r.first_error()
    );
    let mut olds = vec![Vec::new(); COUNTERS as usize];
    for n in 0..(COUNTERS * ADDS) as usize {
        olds[n % COUNTERS as usize].push(r.value(n).expect("an old value"));
    }
    for (k, mut o) in olds.into_iter().enumerate() {
        o.sort_unstable();
        assert_eq!(o, (0..ADDS).collect::<Vec<_>>(), "counter {k}'s old values");
        let now = cache.read(k as u64 * 64, 8).expect("read a counter");
        assert_eq!(
            u64::from_le_bytes(now[..8].try_into().expect("8 bytes")),
            ADDS,
            "counter {k} counts each add once"
        );
    }
}

/// A region with two copies on servers whose answers wait 40 s at
/// `owner-before-release`, a third server without that failpoint (it answers at
/// once when it owns the region next), and the adds applied: the owner's answers
/// wait and its backup holds the adds. Returns the copies, the owner's and the
/// backup's cluster index, and the adder.
fn adds_held_with_a_spare() -> (
    TwoCopies,
    (usize, usize),
    std::thread::JoinHandle<(farcache_client::BatchResults, Duration)>,
) {
    let mut t = copies_on(
        2,
        2,
        "owner-before-release=1*sleep(40000)",
        Duration::from_secs(60),
    );
    t.c.add_server_without_env(&[], &["FAILPOINTS"])
        .expect("a third server");
    eventually(
        "the third server joins",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || (t.client.status().ok()?.servers.len() == 3).then_some(()),
    );
    let adder = spawn_adds(&t.cache);
    let (i, j) = (
        server_index(&t.c, &t.client, t.owner),
        server_index(&t.c, &t.client, t.backup),
    );
    wait_records(&t.c, j, "the owner's backup holds the adds");
    (t, (i, j), adder)
}

/// Exactly once across a failover: an owner applies 64 tagged FETCH_ADDs, its backup
/// holds them, and the owner dies before answering any (its replies wait at
/// `owner-before-release`). The client sends them again to the promoted backup, which
/// answers each from its completion record instead of adding again: every op
/// succeeds, each counter's old values are 0..8 exactly once, and the counters read
/// 8. Without the records each counter would read 16.
#[test]
fn fetch_adds_sent_again_after_a_failover_add_once() {
    let _serial = serial();
    let TwoCopies {
        mut c,
        client,
        cache,
        owner,
        backup,
    } = two_copies(2, "owner-before-release=1*sleep(6000)");
    let adder = spawn_adds(&cache);
    // The owner applied the batch and its backup holds it; the answers wait.
    let (i, j) = (
        server_index(&c, &client, owner),
        server_index(&c, &client, backup),
    );
    wait_records(&c, j, "the owner's backup holds the adds");
    c.kill_server(i).expect("SIGKILL the owner");
    let (r, waited) = adder.join().expect("adder thread");
    assert!(
        waited < Duration::from_secs(6),
        "answered only after {waited:?}"
    );
    assert_added_once(&cache, &r);
    let repeats = common::server_stats(&c, j).completions.repeats;
    assert_eq!(
        repeats,
        COUNTERS * ADDS,
        "every add came again and was answered from its record"
    );
}

/// Exactly once when the copy that takes over was added after the ops ran: an owner
/// applies 64 tagged FETCH_ADDs and its backup holds them, the owner's answers wait
/// (`owner-before-release`), and the backup dies. The region is copied to a third
/// server as its new backup; the copy must carry the ops' completion records, for
/// the owner dies next and the new backup is promoted. The client sends the adds
/// again, and each is answered from its record: the counters read 8, not 16.
#[test]
fn a_new_backup_answers_retries_of_ops_that_ran_before_it_was_copied() {
    let _serial = serial();
    let (t, (i, j), adder) = adds_held_with_a_spare();
    let TwoCopies {
        mut c,
        client,
        cache,
        owner,
        backup,
    } = t;
    c.kill_server(j).expect("SIGKILL the backup");
    let fresh = eventually(
        "a third server becomes the region's backup",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || {
            let st = client.status().ok()?;
            let info = st.caches.iter().find(|c| c.name == "fp")?;
            let b = *info.backups.first()?.first()?;
            (b != backup && b != owner).then_some(b)
        },
    );
    let k = server_index(&c, &client, fresh);
    wait_records(&c, k, "the new backup holds the adds' completion records");
    c.kill_server(i).expect("SIGKILL the owner");
    let (r, _) = adder.join().expect("adder thread");
    assert_added_once(&cache, &r);
    assert_eq!(
        common::server_stats(&c, k).completions.repeats,
        COUNTERS * ADDS,
        "every add came again and was answered from its record"
    );
}

/// Exactly once across a live move: the owner applies 64 tagged FETCH_ADDs (its
/// backup holds them, its answers wait), then is reclaimed (SIGTERM) and moves the
/// region to a third server before it exits. The move must carry the ops'
/// completion records: the client sends the adds again to the new owner, which
/// answers each from its record.
#[test]
fn a_moved_region_answers_retries_of_ops_that_ran_before_the_move() {
    let _serial = serial();
    let (t, (i, _), adder) = adds_held_with_a_spare();
    let TwoCopies {
        mut c,
        client,
        cache,
        owner,
        backup,
    } = t;
    c.terminate_server(i).expect("SIGTERM the owner");
    let moved_to = eventually(
        "the region moves off the reclaimed owner",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || {
            let st = client.status().ok()?;
            let info = st.caches.iter().find(|c| c.name == "fp")?;
            (info.regions[0] != owner).then_some(info.regions[0])
        },
    );
    assert_ne!(
        moved_to, backup,
        "the region moved, its backup was not promoted"
    );
    let t0 = Instant::now();
    if !c.wait_server_exit(i, Duration::from_secs(5)).expect("wait") {
        c.kill_server(i).expect("SIGKILL the old owner");
    }
    let (r, _) = adder.join().expect("adder thread");
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "the retries were answered only after {:?}",
        t0.elapsed()
    );
    assert_added_once(&cache, &r);
}

/// Regions of cache `name` the catalogue places on server `id` (`None` while no
/// manager answers).
fn placed_on(client: &farcache_client::Client, name: &str, id: u32) -> Option<usize> {
    let st = client.status().ok()?;
    let info = st.caches.iter().find(|c| c.name == name)?;
    Some(info.regions.iter().filter(|&&s| s == id).count())
}

/// A reclamation outlives the manager that started it: the leader (one of two
/// managers on etcd) is SIGKILLed while the reclaimed server's regions move, one
/// copy at a time (each held back 700 ms by `migration-before-copy`). The standby
/// finds the reclamation in the catalogue, rolls back the copy left half done (its
/// table still names the source), and moves the rest before the grace ends; every
/// byte reads back.
#[test]
fn a_reclaim_goes_on_after_the_leader_is_killed_mid_drain() {
    use farcache_proto::control::{MigrationMode, ServerState};
    let _g = serial();
    let mut opts = ClusterOptions::default()
        .servers(3)
        .managers(2)
        .region_size(REGION)
        .server_memory(64 << 20)
        .server_env("FAILPOINTS", "migration-before-copy=sleep(700)");
    // Server leases outlast a failover (an etcd lease of 1 s).
    opts.heartbeat_timeout = Duration::from_secs(3);
    let mut c = ProcessCluster::start(bin(), &opts).expect("start cluster on etcd");
    let mut cfg = farcache_client::ClientConfig::new("").op_timeout(Duration::from_secs(5));
    cfg.connect_timeout = Duration::from_secs(1);
    let client = c.client_with(cfg).expect("client");
    let cache = client.create("drain", 9 * REGION).expect("create");
    let image = common::pattern(11, (9 * REGION) as usize);
    cache.write(0, &image).expect("fill");
    let victim = cache.info().regions[0];
    let before = placed_on(&client, "drain", victim).expect("status");
    assert!(before >= 2, "the victim holds {before} regions");

    let grace = Duration::from_secs(40);
    let t0 = Instant::now();
    client
        .reclaim(victim, grace, MigrationMode::DirtyTracking)
        .expect("reclaim");
    eventually(
        "a first region moved",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || (placed_on(&client, "drain", victim)? < before).then_some(()),
    );
    let left = placed_on(&client, "drain", victim).expect("status");
    assert!(
        left > 0,
        "the drain ended before the leader could be killed"
    );
    c.kill_manager(0).expect("kill the leader");
    eventually(
        "the standby takes over",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || (c.leader() == Some(1)).then_some(()),
    );
    eventually(
        "the new leader finishes the drain",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || (placed_on(&client, "drain", victim)? == 0).then_some(()),
    );
    let took = t0.elapsed();
    assert!(took < grace, "drained after {took:?}, past the grace");
    eprintln!("drain of {before} regions across a failover: {took:?} ({left} left at the kill)");
    let st = client.status().expect("status");
    assert_eq!(
        st.servers.iter().find(|s| s.id == victim).map(|s| s.state),
        Some(ServerState::Leaving),
        "the reclaimed server stays leaving under the new leader"
    );
    let got = cache.read(0, 9 * REGION).expect("read after the drain");
    if let Some(d) = common::diff(&got, &image) {
        panic!("after a drain across a failover: {d}");
    }
    cache.write(3, b"writable").expect("write after the drain");
}

/// Two managers on etcd with `FAILPOINTS` set to `points` in both, two servers, and
/// a client that follows the leader.
fn etcd_cluster(points: &str) -> (ProcessCluster, farcache_client::Client) {
    let mut opts = ClusterOptions::default()
        .servers(2)
        .managers(2)
        .region_size(REGION)
        .server_memory(32 << 20)
        .manager_env("FAILPOINTS", points);
    // Server leases outlast a failover (an etcd lease of 1 s).
    opts.heartbeat_timeout = Duration::from_secs(3);
    let c = ProcessCluster::start(bin(), &opts).expect("start cluster on etcd");
    let mut cfg = farcache_client::ClientConfig::new("").op_timeout(Duration::from_secs(5));
    cfg.connect_timeout = Duration::from_secs(1);
    let client = c.client_with(cfg).expect("client");
    (c, client)
}

fn caches_named(client: &farcache_client::Client, name: &str) -> usize {
    let st = client.status().expect("status");
    st.caches.iter().filter(|c| c.name == name).count()
}

/// A create whose etcd answer is lost after it landed: the manager reads the keys
/// back in one snapshot, finds its own write under its own leadership, and goes on
/// leading. The cache exists once, and later commits on the same keys (a delete)
/// pass their revision checks, so the read-back recorded the right revision.
#[test]
fn a_commit_whose_answer_is_lost_is_read_back_and_kept() {
    let _g = serial();
    let (mut c, client) = etcd_cluster("etcd-cache-commit-answer-lost=1*return");
    let cache = client
        .create("lost-answer", 2 * REGION)
        .expect("a create whose answer was lost");
    cache.write(0, b"kept").expect("write");
    assert_eq!(c.leader(), Some(0), "the manager kept the lead");
    assert_eq!(caches_named(&client, "lost-answer"), 1);
    client.create("after", REGION).expect("the next create");
    client
        .delete("lost-answer")
        .expect("a delete conditioned on the read-back revision");
    assert_eq!(caches_named(&client, "lost-answer"), 0);
    assert_eq!(c.leader(), Some(0), "still leading after the delete");
}

/// A create whose commit never reached etcd, so the manager cannot tell whether it
/// landed: it steps down rather than act on a view that may be stale (the leader key
/// is created anew by whoever leads next), and nothing is left half done — the
/// regions failed attempts placed on servers are freed, and the cache exists once.
/// (The client may retry the create on the next leader by itself.)
#[test]
fn a_commit_of_unknown_outcome_steps_the_leader_down_and_leaves_no_half_create() {
    let _g = serial();
    // Each manager's first cache commit is lost: the first leader, and maybe the
    // next, step down; the one after that has used its point up.
    let (c, client) = etcd_cluster("etcd-cache-commit-unsent=1*return");
    let etcd = c.etcd().expect("etcd");
    let first = etcd
        .create_revision("/farcache/leader")
        .expect("read the leader key");
    assert!(first > 0, "a manager leads");
    let t0 = Instant::now();
    let mut failed = 0;
    let cache = loop {
        match client.create("unsent", 2 * REGION) {
            Ok(cache) => break cache,
            Err(e) => {
                failed += 1;
                assert!(
                    t0.elapsed() < Duration::from_secs(40) && failed <= 6,
                    "the create never succeeded: {e}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    eprintln!("create succeeded after {failed} failed calls");
    let now = etcd
        .create_revision("/farcache/leader")
        .expect("read the leader key");
    assert!(
        now > first,
        "the leader whose commit was lost stepped down (leader key {first} -> {now})"
    );
    assert_eq!(caches_named(&client, "unsent"), 1, "one cache, once");
    cache.write(0, b"whole").expect("write");
    assert_eq!(cache.read(0, 5).expect("read")[..], b"whole"[..]);
    // What failed attempts allocated is freed: the servers hold exactly the two
    // regions of the one cache.
    eventually(
        "the servers hold only what the catalogue places",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || {
            let held: u64 = (0..2).map(|i| common::server_stats(&c, i).regions).sum();
            (held == 2).then_some(())
        },
    );
}

/// Regions the two servers of an `etcd_cluster` hold, all caches together.
fn held_regions(c: &ProcessCluster) -> u64 {
    (0..2).map(|i| common::server_stats(c, i).regions).sum()
}

/// A second client on the cluster, for status calls while the first one waits.
fn observer(c: &ProcessCluster) -> farcache_client::Client {
    let mut cfg = farcache_client::ClientConfig::new("").op_timeout(Duration::from_secs(5));
    cfg.connect_timeout = Duration::from_secs(1);
    c.client_with(cfg).expect("client")
}

/// The leader is SIGKILLed in the middle of a create (its regions placed on servers,
/// the cache not committed). The standby knows nothing of it: what was placed is
/// freed, and the create, asked again, exists once and works.
#[test]
fn a_create_cut_short_by_the_leaders_death_is_not_half_done() {
    let _g = serial();
    let (mut c, client) = etcd_cluster("manager-before-create-commit=1*sleep(4000)");
    let watch = observer(&c);
    let creator = {
        let client = client.clone();
        std::thread::spawn(move || client.create("midway", 2 * REGION).map(|_| ()))
    };
    eventually(
        "the create placed its regions",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || (held_regions(&c) == 2).then_some(()),
    );
    assert_eq!(caches_named(&watch, "midway"), 0, "not committed yet");
    c.kill_manager(0).expect("kill the leader mid-create");
    // The call fails, or the client asked the next leader (which commits it).
    let first = creator.join().expect("creator thread");
    eprintln!("the interrupted create returned {first:?}");
    let t0 = Instant::now();
    let cache = loop {
        match client.open("midway") {
            Ok(cache) => break cache,
            Err(_) => match client.create("midway", 2 * REGION) {
                Ok(cache) => break cache,
                Err(e) => {
                    assert!(t0.elapsed() < Duration::from_secs(40), "no create: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            },
        }
    };
    assert_eq!(caches_named(&watch, "midway"), 1, "one cache, once");
    cache
        .write(REGION - 2, b"whole")
        .expect("write across regions");
    assert_eq!(cache.read(REGION - 2, 5).expect("read")[..], b"whole"[..]);
    eventually(
        "the regions the dead leader placed are freed",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || (held_regions(&c) == 2).then_some(()),
    );
}

/// The leader is SIGKILLed in the middle of a reshape that grows a cache (new regions
/// placed, servers told the new capacity, the table not committed). Afterwards the
/// cache has one table that every byte written before agrees with, servers hold
/// exactly its regions, and it can be grown and written again.
#[test]
fn a_reshape_cut_short_by_the_leaders_death_leaves_one_table() {
    let _g = serial();
    let (mut c, client) = etcd_cluster("manager-before-reshape-commit=1*sleep(4000)");
    let watch = observer(&c);
    let cache = client.create("grow", 2 * REGION).expect("create");
    let image = common::pattern(17, (2 * REGION) as usize);
    cache.write(0, &image).expect("fill");
    let grower = {
        let client = client.clone();
        std::thread::spawn(move || client.reshape("grow", 4 * REGION).map(|_| ()))
    };
    eventually(
        "the reshape placed its new regions",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || (held_regions(&c) == 4).then_some(()),
    );
    c.kill_manager(0).expect("kill the leader mid-reshape");
    let first = grower.join().expect("reshape thread");
    eprintln!("the interrupted reshape returned {first:?}");
    let info = eventually(
        "a manager leads and answers",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || watch.open("grow").ok(),
    )
    .info();
    let regions = info.regions.len() as u64;
    assert!(
        info.capacity == 2 * REGION || info.capacity == 4 * REGION,
        "capacity {} after the interrupted reshape",
        info.capacity
    );
    eventually(
        "servers hold exactly the table's regions",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || (held_regions(&c) == regions).then_some(()),
    );
    let grown = eventually(
        "grow to four regions",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || {
            client.reshape("grow", 4 * REGION).ok()?;
            client.open("grow").ok()
        },
    );
    let got = grown
        .read(0, 2 * REGION)
        .expect("read the first two regions");
    if let Some(d) = common::diff(&got, &image) {
        panic!("after an interrupted reshape: {d}");
    }
    grown
        .write(3 * REGION + 1, b"grown")
        .expect("write in a new region");
    assert_eq!(
        grown.read(3 * REGION + 1, 5).expect("read")[..],
        b"grown"[..]
    );
}

/// A move whose writers are throttled (`migration-throttle`: from the first round at
/// most 4 dirty chunks, so nearly every write to a fresh chunk is answered `PAUSED`
/// while the region copies) loses no acknowledged write: each refused write is sent
/// again and lands, here or at the new owner, and the copy carries it.
#[test]
fn a_move_that_throttles_its_writers_loses_no_write() {
    const BIG: u64 = 16 << 20;
    let _serial = serial();
    let opts = ClusterOptions::default()
        .servers(2)
        .region_size(BIG)
        .server_memory(64 << 20)
        .server_env("FAILPOINTS", "migration-throttle=return(4)");
    let c = ProcessCluster::start(bin(), &opts).expect("start cluster");
    let client = c
        .client_with(farcache_client::ClientConfig::new("").op_timeout(Duration::from_secs(20)))
        .expect("client");
    let cache = client.create("thr", BIG).expect("create");
    let owner = client.status().expect("status").caches[0].regions[0];
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let batches = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writer = {
        let (cache, stop, batches) = (cache.clone(), stop.clone(), batches.clone());
        std::thread::spawn(move || {
            // The last value written to each 8-byte slot; slots are spread over
            // the whole region so writes keep finding clean chunks.
            let mut model = std::collections::HashMap::new();
            let mut n = 1u64;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                let mut b = cache.batch();
                let mut sent = Vec::new();
                for _ in 0..64 {
                    let addr = (n.wrapping_mul(0x9E37_79B9_7F4A_7C15) % (BIG / 8)) * 8;
                    b.write(addr, &n.to_le_bytes());
                    sent.push((addr, n));
                    n += 1;
                }
                let r = b.run();
                assert!(
                    r.first_error().is_none(),
                    "a write failed: {:?}",
                    r.first_error()
                );
                model.extend(sent);
                batches.fetch_add(1, std::sync::atomic::Ordering::Release);
            }
            model
        })
    };
    eventually(
        "the writer is under way",
        Duration::from_secs(10),
        Duration::from_millis(5),
        || (batches.load(std::sync::atomic::Ordering::Acquire) >= 20).then_some(()),
    );
    let target = client
        .status()
        .expect("status")
        .servers
        .iter()
        .map(|s| s.id)
        .find(|&s| s != owner)
        .expect("a second server");
    client
        .move_region(
            "thr",
            0,
            Some(target),
            farcache_proto::control::MigrationMode::DirtyTracking,
        )
        .expect("move");
    // Some writes land at the new owner too.
    let at_move = batches.load(std::sync::atomic::Ordering::Acquire);
    eventually(
        "writes go on after the move",
        Duration::from_secs(10),
        Duration::from_millis(5),
        || (batches.load(std::sync::atomic::Ordering::Acquire) >= at_move + 20).then_some(()),
    );
    stop.store(true, std::sync::atomic::Ordering::Release);
    let model = writer.join().expect("writer thread");
    let st = client.status().expect("status");
    assert_eq!(st.caches[0].regions[0], target, "the region moved");
    let rec = st
        .migrations
        .iter()
        .rev()
        .find(|m| m.region == 0 && m.to == target)
        .expect("the move's record");
    assert!(
        rec.throttled_writes > 0,
        "no write was throttled, so this test shows nothing: {rec:?}"
    );
    let mut b = cache.batch();
    let slots: Vec<(u64, u64)> = model.into_iter().collect();
    for &(addr, _) in &slots {
        b.read(addr, 8);
    }
    let r = b.run();
    for (i, &(addr, v)) in slots.iter().enumerate() {
        let got = r.bytes(i).expect("read back");
        assert_eq!(
            u64::from_le_bytes(got[..8].try_into().expect("8 bytes")),
            v,
            "slot {addr} lost its last acknowledged write"
        );
    }
}

/// Exactly once for procedures that write: a store's counters on a region with two
/// copies are stepped by one `kv_medit` call (what INCR runs), the owner applies it
/// and its backup holds it with the call's reply, and the owner dies before answering
/// (every answer waits at `owner-before-release`). The client sends the call again
/// to the promoted backup, which answers with the recorded reply instead of running
/// it again: every counter reads 1 and each step answered 1. Before writing
/// EXECUTEs were tagged, the counters read 2 (the Redis front end's INCR counted
/// twice after a failover).
#[test]
fn counter_steps_sent_again_after_a_failover_step_once() {
    use farcache_store::{Edit, Edited, StoreExt, StoreOptions};
    let _serial = serial();
    let opts = ClusterOptions::default()
        .servers(2)
        .server_threads(2)
        .region_size(REGION)
        .server_memory(16 << 20)
        .server_env("FAILPOINTS", "owner-before-release=sleep(1500)");
    let mut c = ProcessCluster::start(bin(), &opts).expect("start cluster");
    let client = c
        .client_with(farcache_client::ClientConfig::new("").op_timeout(Duration::from_secs(30)))
        .expect("client");
    let store = client
        .create_store(
            "counters",
            REGION,
            &StoreOptions {
                replicas: 2,
                avg_value_size: 16,
                region_size: Some(REGION),
                ..StoreOptions::default()
            },
        )
        .expect("create store");
    let info = store.cache().info();
    let owner = info.regions[0];
    let st = client.status().expect("status");
    let backup = st
        .caches
        .iter()
        .find(|x| x.name == "counters")
        .and_then(|x| x.backups.first()?.first().copied())
        .expect("a backup");
    let (i, j) = (
        server_index(&c, &client, owner),
        server_index(&c, &client, backup),
    );
    let keys: Vec<Vec<u8>> = (0..8).map(|k| format!("counter{k}").into_bytes()).collect();
    let before = common::server_stats(&c, j).completions;
    let sent = common::server_stats(&c, i).replication;
    let stepper = {
        let (store, keys) = (store.clone(), keys.clone());
        std::thread::spawn(move || {
            let steps = vec![vec![Edit::Step(1)]; keys.len()];
            store.edit_values(&keys, &steps)
        })
    };
    // Applied by the owner and acknowledged by its backup; the answer waits.
    eventually(
        "the backup holds the steps",
        Duration::from_secs(10),
        Duration::from_millis(5),
        || {
            let now = common::server_stats(&c, i).replication;
            (now.held > sent.held && now.unacked == 0).then_some(())
        },
    );
    c.kill_server(i).expect("SIGKILL the owner");
    let got = stepper.join().expect("stepper thread");
    for (k, r) in got.into_iter().enumerate() {
        assert_eq!(r.expect("a step"), vec![Edited::Int(1)], "key {k}'s answer");
    }
    let values = store.mget(&keys).expect("mget");
    for (k, v) in values.into_iter().enumerate() {
        assert_eq!(
            v.expect("get").as_deref(),
            Some(&b"1"[..]),
            "counter {k} is stepped once"
        );
    }
    let after = common::server_stats(&c, j).completions;
    assert!(
        after.repeats > before.repeats,
        "the call came again and was answered from its record: {after:?}"
    );
}
