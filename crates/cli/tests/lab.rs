//! Networks that split, hosts that vanish: clusters in the network lab (each process
//! on a host of its own behind a switch), with faults no single host can stage. A
//! load writes counters to registers and reads them back; every op is recorded and
//! the history is checked as a linearizable register (testkit's `history`): no
//! stale read, no read of bytes no write put there, no read going back in time.
//!
//! Needs root, `ip` and `nft` (scripts/env.sh installs nftables). Without them each
//! test says why and skips; with `CI=true` a missing lab fails instead.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::{bin, eventually, server_stats};
use farcache_client::{Cache, Client, ClientConfig, ClientError, CreateOptions, OpError};
use farcache_proto::ServerId;
use farcache_proto::control::ServerState;
use farcache_testkit::history::{self, Event, History, Kind, Outcome, outcome_of};
use farcache_testkit::{ClusterOptions, EtcdCluster, Lab, ProcessCluster};

const REGION: u64 = 64 << 10;
const REGIONS: u64 = 4;
const DEAD_AFTER: Duration = Duration::from_millis(1000);
/// The lease servers hold under that timeout (0.8 of it).
const LEASE: Duration = Duration::from_millis(800);

/// The lab, or `None` (with the reason printed) where it cannot run.
fn lab() -> Option<Arc<Lab>> {
    match Lab::create(&["c0"]) {
        Ok(l) => Some(Arc::new(l)),
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI runs as root with iproute2 and nftables; the lab must work: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            None
        }
    }
}

fn options(servers: usize) -> ClusterOptions {
    let mut o = ClusterOptions::default()
        .servers(servers)
        .region_size(REGION)
        .server_memory(16 << 20)
        // For `split_brain_us`.
        .server_args(["--ack-windows"]);
    o.heartbeat_interval = Duration::from_millis(100);
    o.heartbeat_timeout = DEAD_AFTER;
    o
}

fn client(cluster: &ProcessCluster, op_timeout: Duration) -> Client {
    cluster
        .client_with(ClientConfig::new("").op_timeout(op_timeout))
        .expect("client")
}

/// The cluster index of the server that owns region `r` of `cache`, and its id.
fn owner_of(cluster: &ProcessCluster, cache: &Cache, r: u64) -> (usize, ServerId) {
    let info = cache.refresh().expect("table");
    let id = info.regions[r as usize];
    let addr = &info.server(id).expect("owner in table").addr;
    let i = (0..cluster.server_count())
        .find(|&i| cluster.server_addr(i) == addr)
        .expect("owner is a cluster server");
    (i, id)
}

/// One writer and one reader per register, each recording every op.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
    history: Arc<History>,
    /// Writes acknowledged so far (for waiting on progress).
    acked: Arc<AtomicU64>,
}

impl Load {
    fn start(cache: &Cache, addrs: &[u64]) -> Self {
        Self::start_into(cache, addrs, Arc::new(History::default()), 0, true)
    }

    /// Writers (values from `base` up, unique per address) and, with `readers`,
    /// readers, recording into `history`.
    fn start_into(
        cache: &Cache,
        addrs: &[u64],
        history: Arc<History>,
        base: u64,
        readers: bool,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for &addr in addrs {
            let (c, s, h, a) = (cache.clone(), stop.clone(), history.clone(), acked.clone());
            threads.push(thread::spawn(move || {
                let mut next = (addr << 24) + base;
                while !s.load(Ordering::Relaxed) {
                    next += 1;
                    let invoked = Instant::now();
                    let r = c.write(addr, &next.to_le_bytes());
                    let outcome = outcome_of(&r);
                    if outcome == Outcome::Ok {
                        a.fetch_add(1, Ordering::Relaxed);
                    } else if let Err(e) = &r {
                        // Says why, for a failure the test did not expect.
                        eprintln!("write {next} to {addr} failed: {e}");
                    }
                    h.record(Event {
                        addr,
                        kind: Kind::Write(next),
                        invoked,
                        completed: Instant::now(),
                        outcome,
                    });
                    thread::sleep(Duration::from_millis(2));
                }
            }));
            if !readers {
                continue;
            }
            let (c, s, h) = (cache.clone(), stop.clone(), history.clone());
            threads.push(thread::spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    let invoked = Instant::now();
                    let r = c.read(addr, 8);
                    let completed = Instant::now();
                    if let Ok(b) = &r {
                        let mut w = [0u8; 8];
                        w.copy_from_slice(&b[..8]);
                        h.record(Event {
                            addr,
                            kind: Kind::Read(u64::from_le_bytes(w)),
                            invoked,
                            completed,
                            outcome: Outcome::Ok,
                        });
                    }
                    thread::sleep(Duration::from_millis(1));
                }
            }));
        }
        Self {
            stop,
            threads,
            history,
            acked,
        }
    }

    fn wait_acked(&self, more: u64, limit: Duration) {
        let from = self.acked.load(Ordering::Relaxed);
        eventually(
            "writes acknowledged",
            limit,
            Duration::from_millis(10),
            || (self.acked.load(Ordering::Relaxed) >= from + more).then_some(()),
        );
    }

    fn stop(self) -> Vec<Event> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().expect("load thread");
        }
        self.history.events()
    }
}

/// The application saw no op fail (`what` says what it would have seen).
fn assert_unfailed(events: &[Event], what: &str) {
    let failed: Vec<&Event> = events
        .iter()
        .filter(|e| e.outcome != Outcome::Ok)
        .take(5)
        .collect();
    assert_eq!(failures(events), 0, "{what}: {failed:?}");
}

/// Ops on the affected registers that the application saw fail.
fn failures(events: &[Event]) -> usize {
    events.iter().filter(|e| e.outcome != Outcome::Ok).count()
}

/// Time (µs) two servers acknowledged writes to one region at once, from the
/// servers' own acknowledgement windows (they share this machine's clock).
fn split_brain_us(cluster: &ProcessCluster) -> (u64, usize) {
    let mut w: Vec<(usize, u32, u32, u64, u64)> = Vec::new();
    for i in 0..cluster.server_count() {
        for a in server_stats(cluster, i).ack_windows {
            w.push((i, a.cache, a.region, a.first_us, a.last_us));
        }
    }
    let mut us = 0;
    for (k, a) in w.iter().enumerate() {
        for b in &w[k + 1..] {
            if a.0 != b.0 && (a.1, a.2) == (b.1, b.2) {
                us += a.4.min(b.4).saturating_sub(a.3.max(b.3));
            }
        }
    }
    (us, w.len())
}

fn two_copies(admin: &Client, name: &str) -> Cache {
    let two = CreateOptions {
        replicas: 2,
        ..Default::default()
    };
    admin
        .create_with(name, REGIONS * REGION, &two)
        .expect("create")
}

/// Waits until server `i` (id `owner`) was fenced and registered again.
fn wait_fenced(cluster: &ProcessCluster, admin: &Client, i: usize, owner: ServerId) {
    eventually(
        "the server is fenced and registers again",
        Duration::from_secs(15),
        Duration::from_millis(20),
        || {
            let st = server_stats(cluster, i);
            (st.guard.fenced >= 1 && server_state(admin, owner) == Some(ServerState::Alive))
                .then_some(())
        },
    );
}

fn server_state(c: &Client, id: ServerId) -> Option<ServerState> {
    c.status()
        .ok()?
        .servers
        .iter()
        .find(|s| s.id == id)
        .map(|s| s.state)
}

/// An owner cut off from the manager, both ways, while clients still reach it: it
/// stops serving once its lease runs out, the manager promotes the backup only after
/// that, the load never reads a stale value and sees no failure at all (ops the old
/// owner refused were not applied, and go to the new owner), and when the link heals
/// the old owner is fenced: it drops its stale copies before it serves again.
#[test]
fn an_owner_cut_off_from_the_manager_stops_before_its_backup_takes_over() {
    let Some(lab) = lab() else { return };
    let l = lab.clone();
    lab.run_on("c0", move || {
        let cluster = ProcessCluster::start_in_lab(bin(), &options(3), l.clone()).expect("cluster");
        let admin = client(&cluster, Duration::from_secs(10));
        let cache = two_copies(&admin, "reg");
        let (i, owner) = owner_of(&cluster, &cache, 0);
        let host = ProcessCluster::server_host(i);
        let load = Load::start(&cache, &[0, 8, REGION]);
        load.wait_acked(50, Duration::from_secs(10));

        let cut = Instant::now();
        l.partition("manager", &host).expect("partition");
        // The owner's lease runs out; the manager waits out the timeout, then promotes.
        let promoted = eventually(
            "the backup takes region 0 over",
            Duration::from_secs(15),
            Duration::from_millis(20),
            || {
                let st = admin.status().ok()?;
                st.promotions
                    .iter()
                    .find(|p| p.cache == cache.id() && p.region == 0 && p.from == owner)
                    .map(|_| cut.elapsed())
            },
        );
        assert!(
            promoted >= LEASE,
            "promoted {promoted:?} after the cut, before the owner's lease ({LEASE:?}) could end"
        );
        // A second application, started after the failover, writes through the new
        // owner while the first keeps its old table: were the old owner still
        // serving, the first one's reads would come back stale.
        let late = client(&cluster, Duration::from_secs(10));
        let late_load = Load::start_into(
            &late.open("reg").expect("open"),
            &[0, 8],
            load.history.clone(),
            1 << 23,
            false,
        );
        late_load.wait_acked(50, Duration::from_secs(10));
        load.wait_acked(50, Duration::from_secs(10));
        // Cut off, the old owner refused what still reached it instead of serving it.
        let refused = server_stats(&cluster, i).guard;

        l.heal().expect("heal");
        wait_fenced(&cluster, &admin, i, owner);
        load.wait_acked(50, Duration::from_secs(10));
        late_load.stop();
        let events = load.stop();
        let v = history::check(&events, 0);
        eprintln!(
            "cut at 0, promoted after {promoted:?}; {} reads, {} writes acknowledged; {:?}",
            v.reads, v.writes_ok, v.samples
        );
        assert_eq!(v.violations(), 0, "{:?}", v.samples);
        let (overlap, windows) = split_brain_us(&cluster);
        assert!(
            windows >= 2,
            "the old and the new owner both acknowledged writes"
        );
        assert_eq!(
            overlap, 0,
            "two servers acknowledged writes to one region at once"
        );
        assert!(
            refused.unleased > 0,
            "the cut-off owner never refused a batch: {refused:?}"
        );
        assert_unfailed(&events, "the application saw the failover");
        // The fenced server holds none of the regions it lost.
        let info = cache.refresh().expect("table");
        let now_owned = info.regions.iter().filter(|&&s| s == owner).count();
        assert_eq!(
            now_owned, 0,
            "the fenced server still owns regions: {info:?}"
        );
    })
    .expect("lab thread");
}

/// The leading manager cut off from etcd, both ways, while servers and clients still
/// reach it: it stops acting once it can no longer renew its etcd lease (it closes
/// its listener and stands by), the standby leads once etcd expired that lease, and
/// servers' leases, renewed by the new leader before they run out, carry the data
/// path through: no server is declared dead, nothing is promoted, the load sees no
/// failure and no stale read, and a cache can be created again. Healed, the old
/// leader stands by, and leads again when the new one is killed.
#[test]
fn a_leader_cut_off_from_etcd_steps_down_and_its_standby_takes_over() {
    let Some(lab) = lab() else { return };
    let l = lab.clone();
    lab.run_on("c0", move || {
        let mut o = options(3).managers(2);
        // Servers' leases (0.8 of it) outlast a change of leader: etcd lease 1 s,
        // campaign, and the servers' next heartbeats finding the new leader.
        o.heartbeat_timeout = Duration::from_millis(2500);
        let mut cluster = ProcessCluster::start_in_lab(bin(), &o, l.clone()).expect("cluster");
        let admin = client(&cluster, Duration::from_secs(10));
        let cache = two_copies(&admin, "reg");
        let load = Load::start(&cache, &[0, 8, REGION, 3 * REGION]);
        load.wait_acked(50, Duration::from_secs(10));
        assert_eq!(cluster.leader(), Some(0), "manager 0 leads at the start");

        let cut = Instant::now();
        for j in 0..cluster.etcd().map_or(0, EtcdCluster::members) {
            l.partition("manager", &EtcdCluster::lab_host(j))
                .expect("partition");
        }
        let took_over = eventually(
            "the standby leads",
            Duration::from_secs(15),
            Duration::from_millis(20),
            || (cluster.leader() == Some(1)).then(|| cut.elapsed()),
        );
        assert!(
            cluster.manager_running(0),
            "the cut-off leader stands by; it must not exit"
        );
        let created = eventually(
            "a create through the new leader",
            Duration::from_secs(10),
            Duration::from_millis(50),
            || admin.create("after-the-cut", 2 * REGION).ok(),
        );
        created
            .write(REGION - 2, b"fresh")
            .expect("write the new cache");
        assert_eq!(
            created.read(REGION - 2, 5).expect("read the new cache")[..],
            b"fresh"[..]
        );
        load.wait_acked(100, Duration::from_secs(10));
        // Every server reports to the new leader (its next heartbeats), none was
        // declared dead (it would have been fenced) and nothing was promoted.
        let st = eventually(
            "every server alive under the new leader",
            Duration::from_secs(10),
            Duration::from_millis(50),
            || {
                let st = admin.status().ok()?;
                st.servers
                    .iter()
                    .all(|s| s.state == ServerState::Alive)
                    .then_some(st)
            },
        );
        assert!(
            st.promotions.is_empty(),
            "a backup was promoted though no owner failed: {:?}",
            st.promotions
        );
        for i in 0..cluster.server_count() {
            assert_eq!(
                server_stats(&cluster, i).guard.fenced,
                0,
                "server {i} was declared dead and fenced"
            );
        }
        l.heal().expect("heal");
        // Healed, the old leader campaigns again and stands by behind the new one.
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(cluster.leader(), Some(1), "the new leader keeps leading");
        cluster.kill_manager(1).expect("kill the new leader");
        let back = Instant::now();
        eventually(
            "the healed manager leads again",
            Duration::from_secs(20),
            Duration::from_millis(20),
            || (cluster.leader() == Some(0)).then_some(()),
        );
        let back = back.elapsed();
        load.wait_acked(50, Duration::from_secs(10));
        let events = load.stop();
        let v = history::check(&events, 0);
        eprintln!(
            "leader cut off from etcd: standby led after {took_over:?}; healed manager led \
             again {back:?} after the second kill; {} reads, {} writes acknowledged",
            v.reads, v.writes_ok
        );
        assert_eq!(v.violations(), 0, "{:?}", v.samples);
        assert_unfailed(&events, "the application saw the control plane fail over");
        let info = cache.refresh().expect("table");
        let back_data = cache.read(0, 8).expect("read after both failovers");
        assert_eq!(back_data.len(), 8);
        assert_eq!(info.regions.len() as u64, REGIONS);
    })
    .expect("lab thread");
}

/// A host that vanishes (no RST, no FIN: silence) is found by its lease and
/// heartbeats running out, not by a refused connection; its regions are served by
/// their backups within the lease plus detection, and when it comes back it is
/// fenced. (1 MiB regions, as the target states it.)
#[test]
fn a_vanished_owner_is_replaced_within_the_lease_and_fenced_on_return() {
    vanish_and_return(1 << 20, REGIONS);
}

/// The same with 256 MiB regions, every byte written: failover does not wait behind
/// the copies that give the promoted regions a second copy again (256 MiB each).
#[test]
fn a_vanished_owner_of_256_mib_regions_is_replaced_as_fast() {
    vanish_and_return(256 << 20, 2);
}

fn vanish_and_return(region: u64, regions: u64) {
    let Some(lab) = lab() else { return };
    let l = lab.clone();
    lab.run_on("c0", move || {
        let opts = options(3)
            .region_size(region)
            .server_memory((regions * 2 * region).max(16 << 20));
        let cluster = ProcessCluster::start_in_lab(bin(), &opts, l.clone()).expect("cluster");
        let admin = client(&cluster, Duration::from_secs(10));
        let two = CreateOptions {
            replicas: 2,
            ..Default::default()
        };
        let cache = admin
            .create_with("vanish", regions * region, &two)
            .expect("create");
        // Every byte written (and so copied to the backups), so a re-replication
        // after the failover has the whole region to copy.
        let chunk = vec![0x5Au8; region.min(1 << 20) as usize];
        let mut at = 0;
        while at < regions * region {
            let mut b = cache.batch();
            for _ in 0..8 {
                if at < regions * region {
                    b.write(at, &chunk);
                    at += chunk.len() as u64;
                }
            }
            let r = b.run();
            assert!(r.first_error().is_none(), "{:?}", r.first_error());
        }
        cache.write(0, &7u64.to_le_bytes()).expect("write");
        let (i, owner) = owner_of(&cluster, &cache, 0);
        let host = ProcessCluster::server_host(i);
        // Fetch-adds back to back on the owner (10 s op timeout), so one is in flight
        // when it vanishes: it must neither fail nor wait out the op timeout (the
        // client notices the silence and sends it to the new owner) nor add twice.
        let start_count = u64::from_le_bytes(
            cache.read(8, 8).expect("read")[..8].try_into().expect("8 bytes"),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let adder = {
            let (cache, stop) = (cache.clone(), stop.clone());
            thread::spawn(move || {
                let (mut acked, mut errors, mut slowest) = (0u64, 0u64, Duration::ZERO);
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    match cache.fetch_add(8, 1) {
                        Ok(_) => acked += 1,
                        Err(_) => errors += 1,
                    }
                    slowest = slowest.max(t.elapsed());
                }
                (acked, errors, slowest)
            })
        };
        thread::sleep(Duration::from_millis(200));

        let gone = Instant::now();
        l.vanish(&host).expect("vanish");
        // A fresh client with short op timeouts probes the region until it is served.
        let probe = client(&cluster, Duration::from_millis(300));
        let pc = probe.open("vanish").expect("open");
        let back = eventually(
            "region 0 served again",
            Duration::from_secs(20),
            Duration::from_millis(10),
            || match pc.read(0, 8) {
                Ok(b) => Some((gone.elapsed(), b)),
                Err(_) => None,
            },
        );
        eprintln!(
            "vanished owner's region ({} MiB) served again after {:?} (lease {LEASE:?}, dead after {DEAD_AFTER:?})",
            region >> 20,
            back.0
        );
        assert_eq!(&back.1[..], &7u64.to_le_bytes(), "the backup lost the write");
        assert_eq!(server_state(&admin, owner), Some(ServerState::Dead));
        // Detection by silence: the bound is the lease plus 1 s (1.0–1.3 s
        // measured), with room for a loaded CI. It once took 6.4 s: the manager asked
        // the silent server what it held while holding the lock promotions take.
        assert!(
            back.0 < LEASE + Duration::from_millis(2200),
            "a vanished owner's region took {:?} to come back",
            back.0
        );
        thread::sleep(Duration::from_millis(1500));
        stop.store(true, Ordering::Relaxed);
        let (acked, errors, slowest) = adder.join().expect("adder");
        let now = u64::from_le_bytes(pc.read(8, 8).expect("read")[..8].try_into().expect("8"));
        eprintln!("fetch-adds across the vanish: {acked} acknowledged, {errors} failed, slowest {slowest:?}");
        assert_eq!(errors, 0, "an add in flight at the vanish failed");
        assert_eq!(now - start_count, acked, "each acknowledged add counted once");
        assert!(
            slowest < LEASE + Duration::from_millis(2200),
            "the add in flight waited {slowest:?} (op timeout 10 s)"
        );
        pc.write(0, &8u64.to_le_bytes()).expect("write to the new owner");
        assert_eq!(
            &pc.read(region - 8, 8).expect("read the region's end")[..],
            &[0x5A; 8],
            "the promoted copy holds every byte"
        );

        l.heal().expect("heal");
        wait_fenced(&cluster, &admin, i, owner);
        assert_eq!(&pc.read(0, 8).expect("read")[..], &8u64.to_le_bytes());
    })
    .expect("lab thread");
}

/// With one copy, a partitioned owner's regions cannot move with their bytes: once
/// its lease ends they read as lost (`DataLost`) at their new home, never as zeros
/// and never as a stale value served by the old owner.
#[test]
fn with_one_copy_a_partitioned_owner_loses_its_regions_as_data_lost_never_stale() {
    let Some(lab) = lab() else { return };
    let l = lab.clone();
    lab.run_on("c0", move || {
        let cluster = ProcessCluster::start_in_lab(bin(), &options(2), l.clone()).expect("cluster");
        let admin = client(&cluster, Duration::from_secs(5));
        let cache = admin.create("one", REGIONS * REGION).expect("create");
        cache.write(0, &5u64.to_le_bytes()).expect("write");
        let (i, owner) = owner_of(&cluster, &cache, 0);
        let host = ProcessCluster::server_host(i);
        l.partition("manager", &host).expect("partition");
        let t0 = Instant::now();
        // Until the lease ends the old owner may serve 5; after it, nobody serves a
        // value at all until the region is re-placed, and then it is lost.
        let lost = eventually(
            "region 0 reported lost",
            Duration::from_secs(20),
            Duration::from_millis(20),
            || match cache.read(0, 8) {
                Err(ClientError::Op(OpError::DataLost { .. })) => Some(t0.elapsed()),
                Ok(b) => {
                    assert_eq!(&b[..], &5u64.to_le_bytes(), "read bytes no write put there");
                    assert!(
                        t0.elapsed() < DEAD_AFTER,
                        "the cut-off owner served after its lease"
                    );
                    None
                }
                Err(_) => None,
            },
        );
        assert!(
            lost >= LEASE,
            "re-placed after {lost:?}, inside the old lease"
        );
        l.heal().expect("heal");
        eventually(
            "the old owner is fenced",
            Duration::from_secs(15),
            Duration::from_millis(20),
            || (server_stats(&cluster, i).guard.fenced >= 1).then_some(()),
        );
        assert_ne!(cache.refresh().expect("table").regions[0], owner);
        assert!(matches!(
            cache.read(0, 8),
            Err(ClientError::Op(OpError::DataLost { .. }))
        ));
    })
    .expect("lab thread");
}

/// The lab itself: one-way cuts drop exactly one direction, and the lab's own round
/// trip is measured (reported beside lab results).
#[test]
fn the_lab_cuts_one_way_and_reports_its_round_trip() {
    let Some(lab) = lab() else { return };
    lab.add_host("a").expect("host a");
    lab.add_host("b").expect("host b");
    let rtt = lab.rtt("a", "b", 200).expect("rtt");
    eprintln!("lab round trip (median of 200 one-byte TCP echoes): {rtt:?}");
    assert!(rtt < Duration::from_millis(50), "{rtt:?}");
    let (a, b) = (lab.host("a").expect("a"), lab.host("b").expect("b"));
    let udp = |from: &farcache_testkit::lab::Host, to: &farcache_testkit::lab::Host| {
        let (from, to) = (from.clone(), to.clone());
        let l = lab.clone();
        let rx = {
            let to = to.clone();
            thread::spawn(move || {
                farcache_testkit::lab::enter(&to).expect("enter");
                let s = std::net::UdpSocket::bind((to.ip, 9999)).expect("bind");
                s.set_read_timeout(Some(Duration::from_millis(500)))
                    .expect("timeout");
                let mut b = [0u8; 4];
                s.recv(&mut b).is_ok()
            })
        };
        thread::sleep(Duration::from_millis(100));
        l.run_on(&from.name, move || {
            let s = std::net::UdpSocket::bind((from.ip, 0)).expect("bind");
            for _ in 0..3 {
                s.send_to(b"ping", (to.ip, 9999)).expect("send");
            }
        })
        .expect("send thread");
        rx.join().expect("receiver")
    };
    assert!(udp(&a, &b) && udp(&b, &a), "healthy lab drops packets");
    lab.cut("a", "b").expect("cut");
    assert!(!udp(&a, &b), "a -> b still delivered after the cut");
    assert!(udp(&b, &a), "b -> a must still be delivered");
    lab.heal().expect("heal");
    assert!(udp(&a, &b), "a -> b not delivered after healing");
    lab.vanish("b").expect("vanish");
    assert!(!udp(&a, &b) && !udp(&b, &a), "a vanished host still talks");
    lab.heal().expect("heal");
}

/// The lab's delay line (no `netem` here): a round trip to a delayed host grows by at
/// least twice its delay (a frame is never sent before it is due), bulk data still
/// crosses it (64 KiB GSO frames relayed whole), and a cut still works behind it.
#[test]
fn the_delay_line_adds_its_delay_to_every_round_trip() {
    let Some(lab) = lab() else { return };
    lab.add_host("a").expect("host a");
    lab.add_host("b").expect("host b");
    let base = lab.rtt("a", "b", 200).expect("rtt");
    lab.delay("b", Duration::ZERO, Duration::ZERO)
        .expect("delay line");
    let relayed = lab.rtt("a", "b", 200).expect("rtt");
    for us in [50u64, 250] {
        let d = Duration::from_micros(us);
        lab.delay("b", d, Duration::ZERO).expect("delay");
        let rtt = lab.rtt("a", "b", 200).expect("rtt");
        eprintln!(
            "round trip: {base:?} direct, {relayed:?} through the line at 0, {rtt:?} at {us} µs each way"
        );
        assert!(rtt >= 2 * d, "{rtt:?} under twice the {d:?} delay");
        assert!(rtt < 2 * d + Duration::from_millis(20), "{rtt:?}");
    }
    // Jitter delays but never reorders: an echo stream stays intact.
    lab.delay("b", Duration::from_micros(20), Duration::from_micros(200))
        .expect("jitter");
    assert!(lab.rtt("a", "b", 100).is_ok());
    // 32 MiB over TCP through the line.
    let b = lab.host("b").expect("b");
    let to = b.ip;
    let sink = thread::spawn(move || {
        farcache_testkit::lab::enter(&b).expect("enter");
        let l = std::net::TcpListener::bind((b.ip, 9998)).expect("bind");
        let (mut s, _) = l.accept().expect("accept");
        let mut n = 0usize;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match std::io::Read::read(&mut s, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
        n
    });
    thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    lab.run_on("a", move || {
        let mut s = std::net::TcpStream::connect((to, 9998)).expect("connect");
        let chunk = vec![7u8; 1 << 20];
        for _ in 0..32 {
            std::io::Write::write_all(&mut s, &chunk).expect("send");
        }
    })
    .expect("sender");
    assert_eq!(sink.join().expect("sink"), 32 << 20);
    let (frames, dropped) = lab.delay_counts("b").expect("a line");
    eprintln!(
        "32 MiB through the line in {:?} ({frames} frames relayed, {dropped} dropped)",
        t0.elapsed()
    );
    lab.cut("a", "b").expect("cut");
    assert!(lab.rtt("a", "b", 3).is_err(), "a cut host still answers");
    lab.heal().expect("heal");
}

/// `farcache lab` runs a cluster in the lab and takes fault commands from a script:
/// a server partitioned from the manager is declared dead, and lives again once
/// healed (fenced and registered anew).
#[test]
fn farcache_lab_runs_a_scripted_partition() {
    let Some(_lab) = lab() else { return };
    let out = common::run_ok(
        std::process::Command::new(bin()).args([
            "lab",
            "--script",
            "partition manager s0; sleep 3000; status; heal; sleep 3000; status; quit",
        ]),
        "farcache lab",
    );
    let statuses: Vec<&str> = out.split("> status").skip(1).collect();
    assert_eq!(statuses.len(), 2, "{out}");
    assert!(
        statuses[0].contains("Dead"),
        "s0 not dead while cut off:\n{out}"
    );
    assert!(
        !statuses[1]
            .split("> ")
            .next()
            .unwrap_or_default()
            .contains("Dead"),
        "a server still dead after healing:\n{out}"
    );
    assert!(out.contains("tearing the lab down"), "{out}");
}

/// A server falls silent for a client while the manager is out of the client's reach
/// too (both cuts: no RST). The client asks the manager, again and again, whether
/// the silent server still owns its regions; those calls wait out their timeouts.
/// They must not hold the connection lane: another thread's reads on the same lane,
/// to a server that answers, go on at once.
#[test]
fn a_manager_out_of_reach_does_not_hold_up_reads_of_servers_that_answer() {
    let Some(lab) = lab() else { return };
    let l = lab.clone();
    lab.run_on("c0", move || {
        let cluster = ProcessCluster::start_in_lab(bin(), &options(2), l.clone()).expect("cluster");
        // One lane, so both threads share it.
        let cfg = ClientConfig::new("")
            .op_timeout(Duration::from_secs(20))
            .connections(1);
        let client = cluster.client_with(cfg).expect("client");
        let cache = client.create("lane", REGIONS * REGION).expect("create");
        let owners: Vec<(usize, ServerId)> = (0..REGIONS)
            .map(|r| owner_of(&cluster, &cache, r))
            .collect();
        let silent_r = 0u64;
        let live_r = (1..REGIONS)
            .find(|&r| owners[r as usize].0 != owners[0].0)
            .expect("regions on both servers");
        // Connections (and the manager's) are open before the cuts.
        cache.read(silent_r * REGION, 8).expect("read");
        cache.read(live_r * REGION, 8).expect("read");
        client.status().expect("status");

        let silent_host = ProcessCluster::server_host(owners[0].0);
        l.partition("c0", &silent_host).expect("cut the server");
        l.partition("c0", "manager").expect("cut the manager");
        let waiting = {
            let cache = cache.clone();
            thread::spawn(move || cache.read(silent_r * REGION, 8))
        };
        // Past `suspect_after` (1 s): the lane has asked about the silent server.
        thread::sleep(Duration::from_millis(1500));
        let mut worst = Duration::ZERO;
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            let t0 = Instant::now();
            cache
                .read(live_r * REGION, 8)
                .expect("read a server that answers");
            worst = worst.max(t0.elapsed());
            thread::sleep(Duration::from_millis(5));
        }
        l.heal().expect("heal");
        let late = waiting.join().expect("waiting thread");
        eprintln!("slowest read of the live server: {worst:?}; the silent one's: {late:?}");
        assert!(
            worst < Duration::from_millis(500),
            "a read of a live server waited {worst:?} behind calls to the manager"
        );
    })
    .expect("lab thread");
}

/// An owner cut off from its backup only (both still reach the manager, which sees
/// both alive): the owner's writes wait for the backup until it reports the backup
/// (after two leases), and the manager drops it from the owner's regions. Writes go
/// on within two leases and a second, none fails, no read is stale, and once the link
/// heals the region gets a backup again.
#[test]
fn an_owner_cut_off_from_its_backup_drops_it_and_writes_go_on() {
    let Some(lab) = lab() else { return };
    let l = lab.clone();
    lab.run_on("c0", move || {
        let cluster = ProcessCluster::start_in_lab(bin(), &options(2), l.clone()).expect("cluster");
        let admin = client(&cluster, Duration::from_secs(10));
        let cache = two_copies(&admin, "cut");
        let (i, owner) = owner_of(&cluster, &cache, 0);
        let info = cache.refresh().expect("table");
        let backup = info.backups[0][0];
        let j = (0..cluster.server_count())
            .find(|&k| Some(cluster.server_addr(k)) == info.server(backup).map(|s| s.addr.as_str()))
            .expect("backup is a cluster server");
        let load = Load::start(&cache, &[0, 8]);
        load.wait_acked(50, Duration::from_secs(10));

        let cut = Instant::now();
        l.partition(
            &ProcessCluster::server_host(i),
            &ProcessCluster::server_host(j),
        )
        .expect("partition owner and backup");
        // A write queued after the cut waits for the backup until it is dropped.
        thread::sleep(Duration::from_millis(50));
        load.wait_acked(20, Duration::from_secs(10));
        let resumed = cut.elapsed();
        let info = cache.refresh().expect("table");
        assert_eq!(info.regions[0], owner, "the owner kept its region");
        assert!(
            !info.backups[0].contains(&backup),
            "the cut-off backup still backs region 0: {:?}",
            info.backups[0]
        );
        // The owner reports after two leases without an acknowledgement.
        assert!(
            resumed < 2 * LEASE + Duration::from_millis(1000),
            "writes went on only {resumed:?} after the cut"
        );

        l.heal().expect("heal");
        eventually(
            "region 0 has a backup again",
            Duration::from_secs(30),
            Duration::from_millis(50),
            || {
                let info = cache.refresh().ok()?;
                (!info.backups[0].is_empty()).then_some(())
            },
        );
        load.wait_acked(20, Duration::from_secs(10));
        let events = load.stop();
        let v = history::check(&events, 0);
        eprintln!(
            "writes went on {resumed:?} after the cut; {} reads, {} writes acknowledged",
            v.reads, v.writes_ok
        );
        assert_eq!(v.violations(), 0, "{:?}", v.samples);
        assert_unfailed(&events, "the application saw the cut");
        // The register holds the last acknowledged write.
        let now = cache.read(0, 16).expect("read");
        let last = events
            .iter()
            .filter(|e| e.addr == 0 && e.outcome == Outcome::Ok)
            .filter_map(|e| match e.kind {
                Kind::Write(v) => Some(v),
                Kind::Read(_) => None,
            })
            .max()
            .expect("writes to 0");
        assert_eq!(
            u64::from_le_bytes(now[..8].try_into().expect("8 bytes")),
            last
        );
    })
    .expect("lab thread");
}
