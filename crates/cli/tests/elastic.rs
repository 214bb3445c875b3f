//! Servers that leave, on real processes: a reclaimed server (SIGTERM, or a reclaim
//! request) moves its regions live while clients keep reading and writing; a killed
//! server's regions come back empty and answer `DataLost` until overwritten; a grace
//! too short for the data announces its losses; nothing ever returns wrong bytes.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{bin, client, cluster, diff, eventually, pattern, server_index};
use farcache_client::{Client, ClientConfig, ClientError, OpError};
use farcache_proto::ServerId;
use farcache_proto::control::{MigrationMode, ServerState};
use farcache_testkit::{ClusterOptions, ProcessCluster, Verifier};

const REGION: u64 = 1 << 20;
/// Regions big enough that a copy takes a while (for the interrupted move).
const BIG_REGION: u64 = 32 << 20;

fn regions_on(client: &Client, name: &str, id: ServerId) -> Vec<usize> {
    let st = client.status().expect("status");
    let info = st.caches.iter().find(|c| c.name == name).expect("cache");
    (0..info.regions.len())
        .filter(|&i| info.regions[i] == id)
        .collect()
}

/// SIGTERM a server under load: its regions move to the others, no op fails, no read
/// is wrong, every acknowledged write is there afterwards, and the server exits.
#[test]
fn sigterm_moves_every_region_under_load() {
    let mut c = cluster(3, REGION, 64 << 20);
    let client = client(&c);
    let cache = client.create("elastic", 24 * REGION).expect("create");
    let victim = cache.info().regions[0];
    let moving = regions_on(&client, "elastic", victim);
    assert!(!moving.is_empty());
    let load = Verifier::start(&cache, 24 * REGION / 8);
    std::thread::sleep(Duration::from_millis(300));
    let i = server_index(&c, &client, victim);
    c.terminate_server(i).expect("SIGTERM");
    eventually(
        "the reclaimed server holds no region",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || {
            regions_on(&client, "elastic", victim)
                .is_empty()
                .then_some(())
        },
    );
    assert!(
        c.wait_server_exit(i, Duration::from_secs(30))
            .expect("wait"),
        "the server exits once drained"
    );
    std::thread::sleep(Duration::from_millis(300));
    // `stop` also reads every slot back against the acknowledged values.
    let r = load.stop();
    common::assert_clean(&r);
    assert!(r.reads + r.writes > 200, "the load ran ({r:?})");
    let st = client.status().expect("status");
    let moved: Vec<_> = st.migrations.iter().filter(|m| m.from == victim).collect();
    assert_eq!(
        moved.len(),
        moving.len(),
        "one migration per region: {moved:?}"
    );
    assert!(moved.iter().all(|m| m.bytes >= REGION && m.to != victim));
    assert!(st.lost.is_empty(), "nothing lost: {:?}", st.lost);
    // A client that never saw the move reads the same bytes.
    let fresh = client.open("elastic").expect("open");
    let a = cache.read(0, 24 * REGION).expect("read");
    assert!(diff(&fresh.read(0, 24 * REGION).expect("fresh read"), &a).is_none());
}

/// Both migration modes through the manager API, with a stale handle: the move is
/// seen through `WRONG_SERVER` answers, and the cache stays fully usable.
#[test]
fn reclaim_request_in_both_modes_and_stale_handles_follow() {
    let c = cluster(3, REGION, 64 << 20);
    let client = client(&c);
    let cache = client.create("modes", 12 * REGION).expect("create");
    let image = pattern(3, (12 * REGION) as usize);
    cache.write(0, &image).expect("fill");
    let stale = client.open("modes").expect("open");
    let mut left = Vec::new();
    for (mode, victim) in [
        (MigrationMode::PauseRegion, cache.info().regions[0]),
        (MigrationMode::DirtyTracking, cache.info().regions[1]),
    ] {
        let victim = if left.contains(&victim) {
            *cache
                .info()
                .regions
                .iter()
                .find(|s| !left.contains(*s))
                .expect("a server")
        } else {
            victim
        };
        client
            .reclaim(victim, Duration::from_secs(20), mode)
            .expect("reclaim");
        eventually(
            "drained",
            Duration::from_secs(30),
            Duration::from_millis(50),
            || {
                regions_on(&client, "modes", victim)
                    .is_empty()
                    .then_some(())
            },
        );
        left.push(victim);
        let st = client.status().expect("status");
        assert_eq!(
            st.servers.iter().find(|s| s.id == victim).map(|s| s.state),
            Some(ServerState::Leaving)
        );
        assert!(
            st.migrations
                .iter()
                .filter(|m| m.from == victim)
                .all(|m| m.mode == mode)
        );
        // Only two servers are left for 12 regions, then one: placement never goes
        // back to a leaving server.
        if left.len() == 2 {
            break;
        }
    }
    let got = stale.read(0, 12 * REGION).expect("stale read");
    if let Some(d) = diff(&got, &image) {
        panic!("after two drains: {d}");
    }
    stale
        .write(5, b"still writable")
        .expect("write through a stale handle");
    assert_eq!(&cache.read(5, 14).expect("read")[..], b"still writable");
}

fn is_lost<T>(r: &Result<T, ClientError>) -> bool {
    matches!(r, Err(ClientError::Op(OpError::DataLost { .. })))
}

/// SIGKILL with one copy: the regions come back empty, reads of them fail with
/// `DataLost` (never zeros), overwritten bytes are data again, `clear_lost` turns the
/// rest into zeros; the other regions never noticed.
#[test]
fn killed_server_regions_are_lost_until_overwritten() {
    let mut c = cluster(3, REGION, 64 << 20);
    let client = client(&c);
    let n = 9u64;
    let cache = client.create("lossy", n * REGION).expect("create");
    let image = pattern(9, (n * REGION) as usize);
    cache.write(0, &image).expect("fill");
    let victim = cache.info().regions[1];
    let dead = regions_on(&client, "lossy", victim);
    let i = server_index(&c, &client, victim);
    c.kill_server(i).expect("SIGKILL");
    let st = eventually(
        "the loss is reported",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || {
            let st = client.status().ok()?;
            (st.lost.len() == dead.len()).then_some(st)
        },
    );
    assert!(
        st.lost
            .iter()
            .all(|l| l.was_on == victim && l.reason == "killed" && l.now_on != victim)
    );
    for r in 0..n as usize {
        let at = r as u64 * REGION;
        let got = eventually(
            "ops on the region settle",
            Duration::from_secs(20),
            Duration::from_millis(50),
            || {
                let g = cache.read(at, REGION);
                match &g {
                    Err(ClientError::Op(
                        OpError::ServerUnavailable { .. } | OpError::Timeout { .. },
                    )) => None,
                    _ => Some(g),
                }
            },
        );
        if dead.contains(&r) {
            assert!(
                is_lost(&got),
                "region {r} of the dead server: {:?}",
                got.map(|b| b.len())
            );
            assert!(is_lost(&cache.read(at + 100, 8)), "a word of region {r}");
            assert!(
                matches!(
                    cache.fetch_add(at + 64, 1),
                    Err(ClientError::Op(OpError::DataLost { .. }))
                ),
                "an atomic on lost bytes"
            );
        } else {
            let got = got.expect("live region");
            assert!(
                diff(&got, &image[at as usize..(at + REGION) as usize]).is_none(),
                "region {r}"
            );
        }
    }
    let r = dead[0] as u64 * REGION;
    // Overwrite part of a lost region: that part is data, the rest still lost.
    cache.write(r + 4096, &[7u8; 4096]).expect("overwrite");
    assert_eq!(
        &cache.read(r + 4096, 4096).expect("overwritten")[..],
        &[7u8; 4096][..]
    );
    assert!(is_lost(&cache.read(r, 4097)), "a read reaching lost bytes");
    assert!(is_lost(&cache.read(r + 8192, 8)));
    // Acknowledge the rest of that region: zeros, as data.
    cache.clear_lost(r, REGION).expect("clear_lost");
    let got = cache.read(r, REGION).expect("after clear_lost");
    assert!(got[..4096].iter().all(|&b| b == 0));
    assert_eq!(&got[4096..8192], &[7u8; 4096][..]);
    assert!(got[8192..].iter().all(|&b| b == 0));
    // A restarted server rejoins under its old id, holding nothing. (Once, in CI on a
    // loaded machine, it was not back within 20 s: the wait is longer now, and a
    // miss prints what the manager last said of the servers.)
    c.restart_server(i).expect("restart");
    let t0 = Instant::now();
    let mut last;
    loop {
        match client.status() {
            Ok(st)
                if st
                    .servers
                    .iter()
                    .any(|s| s.id == victim && s.state == ServerState::Alive) =>
            {
                break;
            }
            other => last = Some(other.map(|st| st.servers)),
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "server {victim} (restarted at {}) not back within 60 s; last status: {last:?}",
            c.server_addr(i)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A grace too short for the data: the regions that could not move are announced as
/// lost (before the server exits) and read as `DataLost`; the moved ones are intact.
#[test]
fn a_grace_too_short_announces_its_losses() {
    let mut c = cluster(3, REGION, 256 << 20);
    let client = client(&c);
    let n = 48u64;
    let cache = client.create("hurried", n * REGION).expect("create");
    let image = pattern(4, (n * REGION) as usize);
    cache.write(0, &image).expect("fill");
    let victim = cache.info().regions[0];
    let on_victim = regions_on(&client, "hurried", victim);
    let i = server_index(&c, &client, victim);
    let t0 = Instant::now();
    // 500 ms of the grace is the manager's margin: it has almost no time to move.
    client
        .reclaim(
            victim,
            Duration::from_millis(520),
            MigrationMode::DirtyTracking,
        )
        .expect("reclaim");
    let st = eventually(
        "every region moved or lost",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || {
            let st = client.status().ok()?;
            regions_on(&client, "hurried", victim)
                .is_empty()
                .then_some(st)
        },
    );
    let lost: Vec<usize> = st
        .lost
        .iter()
        .filter(|l| l.was_on == victim)
        .map(|l| l.region as usize)
        .collect();
    let moved = st.migrations.iter().filter(|m| m.from == victim).count();
    assert_eq!(
        lost.len() + moved,
        on_victim.len(),
        "lost {lost:?}, moved {moved}"
    );
    assert!(
        !lost.is_empty(),
        "a 20 ms window cannot move {} MiB",
        on_victim.len()
    );
    assert!(st.lost.iter().all(|l| l.reason == "grace"));
    assert!(
        c.server_running(i),
        "announced while the server still runs ({:?})",
        t0.elapsed()
    );
    for r in 0..n as usize {
        let at = r as u64 * REGION;
        if lost.contains(&r) {
            // The leaving server serves its copy until it is told to retire it,
            // just after the commit `status` already shows.
            eventually(
                "a lost region reads as DataLost",
                Duration::from_secs(5),
                Duration::from_millis(20),
                || is_lost(&cache.read(at, REGION)).then_some(()),
            );
        } else {
            let got = cache.read(at, REGION);
            let got = got.expect("region");
            assert!(
                diff(&got, &image[at as usize..(at + REGION) as usize]).is_none(),
                "region {r}"
            );
        }
    }
}

/// Procedures keep their answers while the regions they walk move: FFlow hand-offs
/// and DFlow pulls that reach a region's old owner are forwarded to the new one.
#[test]
fn chases_across_moving_regions_stay_right() {
    use farcache_sproc::builtin::{Chase, Flow, NULL};
    let c = cluster(3, REGION, 64 << 20);
    let client = client(&c);
    let n = 12u64;
    let cache = client.create("walk", n * REGION).expect("create");
    // A chain visiting every region twice, in a scrambled order.
    let nodes: Vec<u64> = (0..2 * n)
        .map(|i| ((i * 7) % n) * REGION + 4096 * (i + 1))
        .collect();
    for (i, &at) in nodes.iter().enumerate() {
        let next = nodes.get(i + 1).copied().unwrap_or(NULL);
        cache.write(at, &next.to_le_bytes()).expect("link");
    }
    let want = (NULL, nodes.len() as u32);
    let stop = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicU64::new(0));
    let walkers: Vec<_> = [Flow::Ship, Flow::Pull]
        .into_iter()
        .map(|flow| {
            let (cache, stop, runs) = (cache.clone(), stop.clone(), runs.clone());
            let head = nodes[0];
            std::thread::spawn(move || {
                let mut bad = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let args = Chase::args_with(head, 0, 1000, flow);
                    match cache.execute(Chase::NAME, head, &args) {
                        Ok(r) => match Chase::result(&r) {
                            Ok(got) if got == want => {}
                            other => bad.push(format!("{flow:?}: {other:?}")),
                        },
                        Err(e) => bad.push(format!("{flow:?}: {e}")),
                    }
                    runs.fetch_add(1, Ordering::Relaxed);
                }
                bad
            })
        })
        .collect();
    let servers: Vec<ServerId> = client
        .status()
        .expect("status")
        .servers
        .iter()
        .map(|s| s.id)
        .collect();
    for round in 0..3 {
        for r in 0..n as u32 {
            let owner = client.status().expect("status").caches[0].regions[r as usize];
            let to = servers[(servers.iter().position(|&s| s == owner).unwrap_or(0) + 1 + round)
                % servers.len()];
            let to = if to == owner {
                servers[(servers.iter().position(|&s| s == owner).unwrap_or(0) + 1) % servers.len()]
            } else {
                to
            };
            client
                .move_region("walk", r, Some(to), MigrationMode::DirtyTracking)
                .expect("move");
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in walkers {
        let bad = w.join().expect("walker");
        assert!(
            bad.is_empty(),
            "{} wrong chases, first: {:?}",
            bad.len(),
            &bad[..bad.len().min(3)]
        );
    }
    assert!(runs.load(Ordering::Relaxed) > 20, "the walkers ran");
    assert_eq!(
        client.status().expect("status").migrations.len(),
        3 * n as usize
    );
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// The manager dies in the middle of a move (the target is stopped, so the copy
/// cannot finish): the restarted manager never committed it, so the move is rolled
/// back — the source takes writes again, the target's partial copy is freed, and the
/// region has one owner throughout.
#[test]
fn a_manager_killed_mid_migration_rolls_the_move_back() {
    let opts = ClusterOptions::default()
        .servers(3)
        .region_size(BIG_REGION)
        .server_memory(256 << 20);
    let mut c = ProcessCluster::start(bin(), &opts).expect("start process cluster");
    let client = c
        .client_with(ClientConfig::new("").op_timeout(Duration::from_secs(30)))
        .expect("client");
    let cache = client
        .create("interrupted", 3 * BIG_REGION)
        .expect("create");
    let image = pattern(11, (3 * BIG_REGION) as usize);
    cache.write(0, &image).expect("fill");
    let source = cache.info().regions[0];
    let st = client.status().expect("status");
    let target = st
        .servers
        .iter()
        .map(|s| s.id)
        .find(|&s| s != source)
        .expect("target");
    let ti = server_index(&c, &client, target);
    let tpid = c.server_pid(ti).expect("target pid");
    let before = common::server_stats(&c, ti).regions;
    let mover = {
        let client = c.client().expect("client");
        std::thread::spawn(move || {
            client.move_region("interrupted", 0, Some(target), MigrationMode::PauseRegion)
        })
    };
    // Stop the target as soon as it placed the region: the copy cannot finish.
    eventually(
        "the target placed the region",
        Duration::from_secs(10),
        Duration::from_micros(200),
        || (common::server_stats(&c, ti).regions > before).then_some(()),
    );
    signal(tpid, "STOP");
    std::thread::sleep(Duration::from_millis(300));
    c.restart_manager().expect("restart manager");
    assert!(
        mover.join().expect("mover").is_err(),
        "the interrupted move reports failure"
    );
    // A write to the region lands once the restarted manager's table reaches the
    // source and the move is abandoned there.
    cache
        .write(10, b"after the manager died")
        .expect("write after restart");
    signal(tpid, "CONT");
    let st = eventually(
        "one owner, the source, and no copy left on the target",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || {
            let st = client.status().ok()?;
            let info = st.caches.iter().find(|x| x.name == "interrupted")?;
            (info.regions[0] == source).then_some(st)
        },
    );
    assert!(
        st.migrations.is_empty(),
        "nothing was committed: {:?}",
        st.migrations
    );
    let mut want = image.clone();
    want[10..32].copy_from_slice(b"after the manager died");
    let got = cache.read(0, 3 * BIG_REGION).expect("read");
    if let Some(d) = diff(&got, &want) {
        panic!("after the rollback: {d}");
    }
    eventually(
        "the target's partial copy is freed",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || {
            let held = common::server_stats(&c, ti).regions;
            (held == before).then_some(())
        },
    );
    let fresh = c
        .client()
        .expect("client")
        .open("interrupted")
        .expect("open");
    assert_eq!(
        &fresh.read(10, 22).expect("read")[..],
        b"after the manager died"
    );
}
