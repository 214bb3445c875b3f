//! Several managers on etcd (a 3-member etcd on loopback), as real processes: the
//! leader is SIGKILLed and a standby takes over with the whole catalogue, while the
//! data path keeps serving; a leader that pauses past its etcd lease is deposed and
//! never answers again with its stale view.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{bin, eventually, pattern, within};
use farcache_client::{Client, ClientConfig};
use farcache_proto::control::{ControlErrorCode, ServerState};
use farcache_testkit::{ClusterOptions, ProcessCluster};

const REGION: u64 = 64 << 10;
const CALL_LIMIT: Duration = Duration::from_secs(30);

fn client(cluster: &ProcessCluster) -> Client {
    let mut cfg = ClientConfig::new("").op_timeout(Duration::from_secs(5));
    // A paused manager accepts connections but never answers: a client whose call
    // was on it waits 15 connect timeouts for the reply before it tries the next.
    cfg.connect_timeout = Duration::from_secs(1);
    cluster.client_with(cfg).expect("client")
}

/// `servers` servers and two managers on a 3-member etcd; servers are declared dead
/// after `dead_after` (their leases, 0.8 of it, outlast a failover: an etcd lease of
/// 1 s).
fn on_etcd(servers: usize, dead_after: Duration) -> ProcessCluster {
    let mut opts = ClusterOptions::default()
        .servers(servers)
        .managers(2)
        .region_size(REGION)
        .server_memory(16 << 20);
    opts.heartbeat_timeout = dead_after;
    ProcessCluster::start(bin(), &opts).expect("start cluster on etcd")
}

fn wait_leader(cluster: &mut ProcessCluster, want: usize, what: &str) -> Duration {
    let t = Instant::now();
    while cluster.leader() != Some(want) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{what}: manager {want} did not take over (leader: {:?})",
            cluster.leader()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    t.elapsed()
}

fn all_alive(c: &Client, n: usize) {
    eventually(
        "every server registered with the new leader",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || {
            let st = c.status().ok()?;
            (st.servers.len() == n && st.servers.iter().all(|s| s.state == ServerState::Alive))
                .then_some(())
        },
    );
}

#[test]
fn a_standby_takes_over_with_the_catalogue_and_a_paused_leader_is_deposed() {
    let mut cluster = on_etcd(3, Duration::from_secs(3));
    assert_eq!(cluster.leader(), Some(0), "the first manager leads");
    let c = client(&cluster);
    let alpha = c.create("alpha", 5 * REGION).expect("create alpha");
    let image = pattern(7, alpha.capacity() as usize);
    alpha.write(0, &image).expect("write alpha");
    let before = c.open("alpha").unwrap().info();

    // A reader and writer on the data path through the failover.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let load = {
        let (cache, stop, ok, failed) = (alpha.clone(), stop.clone(), ok.clone(), failed.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let at = (i * 4096) % (4 * REGION);
                let r = cache
                    .write(at, &i.to_le_bytes())
                    .and_then(|()| cache.read(at, 8));
                match r {
                    Ok(b) if b[..] == i.to_le_bytes() => ok.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
                i += 1;
            }
            i
        })
    };
    std::thread::sleep(Duration::from_millis(200));

    cluster.kill_manager(0).expect("kill the leader");
    let took = wait_leader(&mut cluster, 1, "after SIGKILL");
    eprintln!("failover: manager 1 listens {took:?} after the leader was killed");
    all_alive(&c, 3);
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    let (ok_n, failed_n) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(ok_n > 0, "the load ran");
    assert_eq!(
        failed_n, 0,
        "data-path ops failed during the failover ({ok_n} ok)"
    );

    // The same client follows the leader: the catalogue is whole, and changes work.
    let after = within("open after failover", CALL_LIMIT, {
        let c = c.clone();
        move || c.open("alpha")
    })
    .expect("open alpha on the new leader")
    .info();
    assert_eq!(
        (after.id, after.epoch, &after.regions, after.capacity),
        (before.id, before.epoch, &before.regions, before.capacity)
    );
    let got = alpha.read(0, alpha.capacity()).unwrap();
    assert_eq!(got[4 * REGION as usize..], image[4 * REGION as usize..]);
    let beta = c
        .create("beta", 2 * REGION)
        .expect("create on the new leader");
    assert!(beta.id() > before.id, "ids are not reused across leaders");
    beta.write(0, b"beta").unwrap();
    match c.create("alpha", REGION) {
        Err(e) => assert_eq!(e.code(), Some(ControlErrorCode::AlreadyExists)),
        Ok(_) => panic!("alpha created twice"),
    }

    // Manager 0 comes back as a standby; manager 1 pauses past its lease.
    cluster
        .start_manager_again(0)
        .expect("start manager 0 again");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(cluster.leader(), Some(1), "a returning manager stands by");
    let paused = cluster.manager_pids()[1].expect("manager 1 runs");
    signal(paused, "STOP");
    let took = wait_leader(&mut cluster, 0, "while the leader is paused");
    eprintln!("failover: manager 0 listens {took:?} into manager 1's pause");
    let gamma = within("create while the old leader is paused", CALL_LIMIT, {
        let c = c.clone();
        move || c.create("gamma", REGION)
    })
    .expect("create gamma on manager 0");
    signal(paused, "CONT");
    // The woken manager knows it lost the lead: it closes its port rather than
    // answer from a catalogue without gamma.
    eventually(
        "the deposed manager stops listening",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || (cluster.leader() == Some(0)).then_some(()),
    );
    let names = |c: &Client| -> Vec<String> {
        let mut n: Vec<String> = c
            .status()
            .unwrap()
            .caches
            .into_iter()
            .map(|c| c.name)
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&c), ["alpha", "beta", "gamma"]);
    all_alive(&c, 3);
    c.delete("beta").expect("delete on manager 0");
    assert_eq!(names(&client(&cluster)), ["alpha", "gamma"]);
    let b = beta.clone();
    assert!(
        within("read deleted beta", CALL_LIMIT, move || b.read(0, 4)).is_err(),
        "beta's regions were dropped"
    );
    assert_eq!(c.open("gamma").unwrap().id(), gamma.id());
}

/// etcd loses its quorum (two of three members frozen): the leader can no longer
/// renew its lease, so it steps down and stops answering, and neither manager
/// exits; the data path keeps serving. When the quorum is back a manager leads
/// again with the whole catalogue.
#[test]
fn managers_wait_out_an_etcd_without_quorum() {
    // Server leases outlast the outage below (one heartbeat timeout each).
    let mut cluster = on_etcd(2, Duration::from_secs(10));
    let c = client(&cluster);
    let cache = c.create("quorum", 4 * REGION).expect("create");
    let image = pattern(5, cache.capacity() as usize);
    cache.write(0, &image).expect("write");

    let etcd = cluster.etcd().expect("etcd");
    etcd.pause_member(1).expect("pause etcd 1");
    etcd.pause_member(2).expect("pause etcd 2");
    eventually(
        "the leader steps down without etcd",
        Duration::from_secs(15),
        Duration::from_millis(50),
        || cluster.leader().is_none().then_some(()),
    );
    // Campaigns fail meanwhile; both managers wait and try again.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        cluster.manager_running(0) && cluster.manager_running(1),
        "a manager exited while etcd had no quorum"
    );
    assert!(cluster.leader().is_none(), "a manager led without etcd");
    cache
        .write(8, b"no manager")
        .expect("the data path serves without a manager");

    let etcd = cluster.etcd().expect("etcd");
    etcd.resume_member(1).expect("resume etcd 1");
    etcd.resume_member(2).expect("resume etcd 2");
    let t = Instant::now();
    eventually(
        "a manager leads again",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || cluster.leader().map(|_| ()),
    );
    eprintln!(
        "a manager leads {:?} after etcd's quorum came back",
        t.elapsed()
    );
    all_alive(&c, 2);
    let info = within("open after the outage", CALL_LIMIT, {
        let c = c.clone();
        move || c.open("quorum")
    })
    .expect("open on the new leader")
    .info();
    assert_eq!(info.id, cache.id());
    let mut want = image.clone();
    want[8..18].copy_from_slice(b"no manager");
    assert_eq!(cache.read(0, cache.capacity()).unwrap(), want);
    c.create("after", REGION).expect("create after the outage");
}

/// A server dies with the leader (both SIGKILLed at once): the standby takes over,
/// declares the silent server dead a heartbeat timeout after it took over, and
/// promotes the backups of the regions it owned. Every byte written before reads
/// back, every region's owner is alive, and writes go on.
#[test]
fn a_server_dying_with_the_leader_has_its_regions_promoted_by_the_next_one() {
    let mut cluster = on_etcd(3, Duration::from_secs(3));
    let c = client(&cluster);
    let two = farcache_client::CreateOptions {
        replicas: 2,
        ..farcache_client::CreateOptions::default()
    };
    let cache = c.create_with("pair", 6 * REGION, &two).expect("create");
    let image = pattern(9, cache.capacity() as usize);
    cache.write(0, &image).expect("fill");
    let victim = cache.info().regions[0];
    let owned = cache
        .info()
        .regions
        .iter()
        .filter(|&&s| s == victim)
        .count();
    let i = common::server_index(&cluster, &c, victim);

    cluster.kill_server(i).expect("kill the server");
    cluster.kill_manager(0).expect("kill the leader");
    wait_leader(&mut cluster, 1, "with a server dead too");
    let st = eventually(
        "the new leader promotes the dead server's regions",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            let st = c.status().ok()?;
            let dead = st
                .servers
                .iter()
                .any(|s| s.id == victim && s.state == ServerState::Dead);
            let info = st.caches.iter().find(|x| x.name == "pair")?;
            let alive = |id: &u32| {
                st.servers
                    .iter()
                    .any(|s| s.id == *id && s.state == ServerState::Alive)
            };
            (dead && info.regions.iter().all(alive)).then_some(st)
        },
    );
    // Whichever leader saw the server die, the promotions are in the catalogue (the
    // old leader may have promoted before its own death).
    assert!(
        st.promotions.len() >= owned,
        "{} promotions for {owned} regions the dead server owned",
        st.promotions.len()
    );
    let got = eventually(
        "every byte reads back",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || cache.read(0, cache.capacity()).ok(),
    );
    if let Some(d) = common::diff(&got, &image) {
        panic!("after a server died with the leader: {d}");
    }
    cache.write(1, b"after").expect("write after the promotion");
    assert_eq!(cache.read(1, 5).unwrap()[..], b"after"[..]);
}

/// A reclamation announced while no manager leads (the leader just SIGKILLed): the
/// client's call waits for the standby to take over, and the server's regions move
/// before its grace ends, every byte with them.
#[test]
fn a_reclaim_announced_during_a_failover_drains_within_its_grace() {
    let mut cluster = on_etcd(3, Duration::from_secs(3));
    let c = client(&cluster);
    let cache = c.create("leaving", 6 * REGION).expect("create");
    let image = pattern(13, cache.capacity() as usize);
    cache.write(0, &image).expect("fill");
    let victim = cache.info().regions[0];

    cluster.kill_manager(0).expect("kill the leader");
    let grace = Duration::from_secs(15);
    let t0 = Instant::now();
    c.reclaim(
        victim,
        grace,
        farcache_proto::control::MigrationMode::DirtyTracking,
    )
    .expect("the reclaim reaches the next leader");
    let announced = t0.elapsed();
    eventually(
        "the reclaimed server's regions move",
        grace,
        Duration::from_millis(50),
        || {
            let st = c.status().ok()?;
            let info = st.caches.iter().find(|x| x.name == "leaving")?;
            (!info.regions.contains(&victim)).then_some(())
        },
    );
    eprintln!(
        "reclaim announced {announced:?} after the leader died; drained {:?} after",
        t0.elapsed()
    );
    assert!(t0.elapsed() < grace, "drained past the grace");
    let got = cache.read(0, cache.capacity()).expect("read");
    if let Some(d) = common::diff(&got, &image) {
        panic!("after a drain announced during a failover: {d}");
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig} {pid}");
}

/// A standby listens and answers every request with the leader's address: a status
/// call to it is redirected (not refused), a client given only the standby's address
/// creates and uses a cache through the leader, and a server given only the
/// standby's address registers with the leader and takes regions.
#[test]
fn a_standby_names_the_leader_to_clients_and_servers() {
    use farcache_proto::blocking::{RpcError, control_call, handshake};
    use farcache_proto::control::ControlRequest;

    let mut cluster = on_etcd(1, Duration::from_secs(3));
    assert_eq!(cluster.leader(), Some(0), "the first manager leads");
    let (leader, standby) = (
        cluster.manager_listen(0).to_owned(),
        cluster.manager_listen(1).to_owned(),
    );
    let mut s = std::net::TcpStream::connect(&standby).expect("the standby listens");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let cred = farcache_proto::Credential::Cluster(cluster.secret().clone());
    handshake(&mut s, farcache_proto::Role::Client, 1, "", &cred).expect("handshake");
    match control_call(&mut s, &ControlRequest::Status) {
        Err(RpcError::Redirect { leader: named, .. }) => assert_eq!(named, leader),
        other => panic!("the standby answered {other:?}, not a redirect to {leader}"),
    }

    let cfg = ClientConfig::new(standby.clone())
        .secret(cluster.secret().clone())
        .op_timeout(Duration::from_secs(5));
    let c = Client::with_config(cfg).expect("a client given only the standby");
    let server = cluster
        .add_server(&["--manager", &standby])
        .expect("a server given only the standby");
    all_alive(&c, 2);
    let cache = c
        .create("via-standby", 4 * REGION)
        .expect("create via the standby");
    let image = pattern(11, cache.capacity() as usize);
    cache.write(0, &image).expect("write");
    assert_eq!(cache.read(0, cache.capacity()).expect("read"), image);
    let on_new = cache
        .info()
        .regions
        .iter()
        .filter(|&&id| {
            cache
                .info()
                .server(id)
                .is_some_and(|s| s.addr == cluster.server_addr(server))
        })
        .count();
    assert!(
        on_new > 0,
        "the server that found the leader through the standby holds no region"
    );
}

/// Promotions and losses are part of the catalogue: a server dies, the leader
/// promotes the backups of one cache and places another's only copies again (lost),
/// then the leader is killed: the next leader's status reports both, as the first
/// one did.
#[test]
fn promotions_and_losses_outlive_the_leader_that_made_them() {
    let mut cluster = on_etcd(3, Duration::from_secs(3));
    let c = client(&cluster);
    let two = farcache_client::CreateOptions {
        replicas: 2,
        ..farcache_client::CreateOptions::default()
    };
    let pair = c
        .create_with("pair", 6 * REGION, &two)
        .expect("create pair");
    let single = c.create("single", 6 * REGION).expect("create single");
    let (p, s) = (pair.info().regions.clone(), single.info().regions.clone());
    let victim = *p
        .iter()
        .find(|id| s.contains(id))
        .expect("a server owning regions of both caches (6 each on 3 servers)");
    let i = common::server_index(&cluster, &c, victim);
    cluster.kill_server(i).expect("kill the server");
    let seen = eventually(
        "the leader promotes and re-places the dead server's regions",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || {
            let st = c.status().ok()?;
            let promoted = st.promotions.iter().filter(|p| p.from == victim).count();
            let lost = st.lost.iter().filter(|l| l.was_on == victim).count();
            (promoted > 0 && lost > 0).then_some((promoted, lost))
        },
    );
    cluster.kill_manager(0).expect("kill the leader");
    wait_leader(&mut cluster, 1, "after the promotions");
    let st = within("status from the new leader", CALL_LIMIT, {
        let c = c.clone();
        move || c.status()
    })
    .expect("status");
    let promoted = st.promotions.iter().filter(|p| p.from == victim).count();
    let lost = st.lost.iter().filter(|l| l.was_on == victim).count();
    assert_eq!(
        (promoted, lost),
        seen,
        "the new leader reports the promotions and losses its predecessor made"
    );
}
