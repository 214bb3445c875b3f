//! Hostile load against real server processes: thousands of half-open connections, a
//! peer that never reads its replies, a FETCH flood from a peer holding the cluster
//! secret. In each, the server stays up, its resident memory stays under a stated
//! bound, and a legitimate client keeps at least half its normal throughput (batched
//! reads, measured right before the attack on the same machine).

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::{bin, encode_request, eventually, pattern, rss_kib};
use farcache_client::{Cache, ClientConfig};
use farcache_proto::blocking::{control_call, handshake};
use farcache_proto::control::{ControlRequest, ControlResponse, ServerStats};
use farcache_proto::peer::{PeerEncoder, PeerMsg};
use farcache_proto::{Credential, MAX_OP_BYTES, Op, Role};
use farcache_testkit::{ClusterOptions, ProcessCluster};

const REGION: u64 = 1 << 20;
const CAPACITY: u64 = 16 * REGION;
const WINDOW: Duration = Duration::from_millis(1500);

/// The tests measure throughput: they run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Batched 8-byte reads per second over `window`, every value checked.
fn read_rate(cache: &Cache, img: &[u8], window: Duration) -> f64 {
    let start = Instant::now();
    let mut ops = 0u64;
    let mut at = 0u64;
    while start.elapsed() < window {
        let mut b = cache.batch();
        let ids: Vec<_> = (0..256)
            .map(|_| {
                at = (at + 4104) % (CAPACITY - 8);
                (at, b.read(at, 8))
            })
            .collect();
        let r = b.submit().wait();
        for (addr, id) in ids {
            let got = r.data(id).expect("legitimate read during the attack");
            assert_eq!(got, &img[addr as usize..addr as usize + 8]);
        }
        ops += 256;
    }
    ops as f64 / start.elapsed().as_secs_f64()
}

struct Fixture {
    cluster: ProcessCluster,
    cache: Cache,
    img: Vec<u8>,
    cred: Credential,
}

impl Fixture {
    fn start(servers: usize, args: &[&str]) -> Self {
        farcache_net::guard::raise_fd_limit();
        let opts = ClusterOptions::default()
            .servers(servers)
            .server_threads(1)
            .region_size(REGION)
            .server_memory(64 << 20)
            .server_args(args.iter().copied());
        let cluster = ProcessCluster::start(bin(), &opts).expect("start cluster");
        let client = cluster
            .client_with(ClientConfig::new("").batch_size(256).queue_depth(4))
            .expect("client");
        let cache = client.create("load", CAPACITY).expect("create");
        let img = pattern(3, CAPACITY as usize);
        cache.write(0, &img).expect("fill");
        let cred = Credential::Cluster(cluster.secret().clone());
        Self {
            cluster,
            cache,
            img,
            cred,
        }
    }

    fn connect(&self, i: usize, role: Role, identity: &str) -> TcpStream {
        let mut s = TcpStream::connect(self.cluster.server_addr(i)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        handshake(&mut s, role, 1, identity, &self.cred).expect("handshake");
        s
    }

    fn stats(&self, i: usize) -> ServerStats {
        let mut s = self.connect(i, Role::Client, "");
        match control_call(&mut s, &ControlRequest::ServerStats) {
            Ok(ControlResponse::Stats(st)) => st,
            other => panic!("stats: {other:?}"),
        }
    }

    fn rate(&self) -> f64 {
        read_rate(&self.cache, &self.img, WINDOW)
    }

    /// Runs `attack` on a thread until the closure returns, measuring the legitimate
    /// client meanwhile; asserts that it keeps `min_ratio` of its rate and that the
    /// server's memory grows by less than `rss_bound_mib`.
    fn under_attack(
        &self,
        what: &str,
        rss_bound_mib: u64,
        min_ratio: f64,
        attack: impl FnOnce(Arc<AtomicBool>) + Send + 'static,
    ) {
        let pid = self.cluster.server_pid(0).expect("pid");
        let base = self.rate();
        let rss0 = rss_kib(pid);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let attacker = thread::spawn(move || attack(flag));
        // Let the attack build up before measuring.
        thread::sleep(Duration::from_millis(700));
        let during = self.rate();
        let grown = rss_kib(pid).saturating_sub(rss0) >> 10;
        stop.store(true, Ordering::SeqCst);
        attacker.join().expect("attacker");
        eprintln!(
            "{what}: {base:.0} reads/s before, {during:.0} during ({:.2}x), server RSS +{grown} MiB",
            during / base
        );
        assert!(
            during >= base * min_ratio,
            "{what}: legitimate throughput fell from {base:.0} to {during:.0} reads/s (floor {min_ratio}x)"
        );
        assert!(
            grown < rss_bound_mib,
            "{what}: server RSS grew by {grown} MiB (bound {rss_bound_mib} MiB)"
        );
        assert!(
            self.cluster.server_pid(0).is_some()
                && std::fs::metadata(format!("/proc/{pid}")).is_ok(),
            "{what}: the server died"
        );
    }
}

#[test]
fn five_thousand_half_open_connections_lock_nobody_out() {
    let _one = serial();
    let f = Fixture::start(
        1,
        &[
            "--max-unauthenticated",
            "256",
            "--handshake-timeout-ms",
            "2000",
        ],
    );
    let addr = f.cluster.server_addr(0).to_string();
    f.under_attack("5000 half-open connections", 64, 0.5, move |stop| {
        // Open 5,000 and keep them; reopen what the server evicts, until told to stop.
        let mut held: Vec<TcpStream> = Vec::with_capacity(5000);
        while !stop.load(Ordering::SeqCst) {
            if held.len() < 5000 {
                match TcpStream::connect(&addr) {
                    Ok(s) => held.push(s),
                    Err(_) => thread::sleep(Duration::from_millis(1)),
                }
            } else {
                held.drain(..500);
            }
        }
    });
    // A brand-new client still gets in during a flood (the oldest half-open go first).
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let addr = f.cluster.server_addr(0).to_string();
    let flood = thread::spawn(move || {
        let mut held = Vec::new();
        while !flag.load(Ordering::SeqCst) && held.len() < 5000 {
            if let Ok(s) = TcpStream::connect(&addr) {
                held.push(s);
            }
        }
        held
    });
    thread::sleep(Duration::from_millis(300));
    let fresh = f.cluster.client().expect("a new client during the flood");
    let cache = fresh.open("load").expect("open");
    assert_eq!(&cache.read(4096, 64).expect("read")[..], &f.img[4096..4160]);
    stop.store(true, Ordering::SeqCst);
    let held = flood.join().expect("flood");
    let g = f.stats(0).guard;
    assert!(g.evicted > 0, "{g:?}");
    drop(held);
    // Every half-open connection is gone once the flood stops.
    eventually(
        "half-open connections closed",
        Duration::from_secs(15),
        Duration::from_millis(100),
        || (f.stats(0).connections <= 4).then_some(()),
    );
}

#[test]
fn a_peer_that_never_reads_its_replies_is_cut_off() {
    let _one = serial();
    let f = Fixture::start(1, &["--stall-timeout-ms", "1500"]);
    let mut s = f.connect(0, Role::Client, "");
    s.set_write_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let cache = f.cache.id();
    f.under_attack("a peer that never reads", 160, 0.5, move |stop| {
        // Batches of 1 MiB reads, pipelined, never a reply read: the server stops
        // reading this connection at its output cap, then cuts it off.
        let ops: Vec<Op<'_>> = (0..8)
            .map(|i| Op::Read {
                cache,
                addr: i * u64::from(MAX_OP_BYTES),
                len: MAX_OP_BYTES,
            })
            .collect();
        let mut seq = 0;
        while !stop.load(Ordering::SeqCst) {
            seq += 1;
            if s.write_all(&encode_request(seq, &ops)).is_err() {
                thread::sleep(Duration::from_millis(20));
            }
        }
    });
    eventually(
        "the non-reading peer cut off",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || (f.stats(0).guard.cut_off >= 1).then_some(()),
    );
}

#[test]
fn a_fetch_flood_from_a_peer_is_bounded() {
    let _one = serial();
    let f = Fixture::start(2, &[]);
    // The flooder holds the cluster secret and claims to be the second server, so the
    // first one sends every answer (1 MiB each) to a real peer.
    let victim_peer = f.cluster.server_addr(1).to_string();
    let mut s = f.connect(0, Role::Server, &victim_peer);
    s.set_write_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let info = f.cache.info();
    let owner0 = info
        .servers
        .iter()
        .find(|sv| sv.addr == f.cluster.server_addr(0));
    let id0 = owner0.expect("server 0 holds regions").id;
    let local: Vec<u64> = (0..info.regions.len() as u64)
        .filter(|&r| info.regions[r as usize] == id0)
        .map(|r| r * REGION)
        .collect();
    let cache = f.cache.id();
    // Memory stays bounded (the answering session's cap), and the client keeps being
    // served. Measured 0.48-0.76x on this 2-core machine (the flooder, both servers
    // and the client share it); 0.05-0.08x while the rest of a frame went back in
    // front of the buffer re-encoded, with a copy of all buffered behind it, at every
    // turn (a frame of 2,000 FETCHes served one per turn cost 2,000 times its size).
    // The floor catches that coming back, with room for a loaded machine.
    f.under_attack("a FETCH flood from a peer", 64, 0.15, move |stop| {
        let mut frame = Vec::new();
        let mut enc = PeerEncoder::begin(&mut frame);
        for t in 0..2000u64 {
            enc.push(
                &mut frame,
                &PeerMsg::Fetch {
                    ticket: t,
                    origin: &victim_peer,
                    cache,
                    addr: local[t as usize % local.len()],
                    len: farcache_proto::peer::MAX_FETCH,
                },
            );
        }
        enc.finish(&mut frame);
        while !stop.load(Ordering::SeqCst) {
            if s.write_all(&frame).is_err() {
                thread::sleep(Duration::from_millis(5));
            }
        }
    });
    // The flood was answered (it was real work), only as fast as the peer took it.
    let sent = f.stats(0).peer.msgs_sent;
    eprintln!("{sent} FETCH answers sent");
    assert!(sent > 10, "{sent} answers sent");
}

/// FETCH frames from strangers, on connection after connection: each is refused at
/// its first frame (before any handshake), which costs the server next to nothing.
#[test]
fn a_fetch_flood_from_strangers_is_refused_cheaply() {
    let _one = serial();
    let f = Fixture::start(1, &[]);
    let addr = f.cluster.server_addr(0).to_string();
    let cache = f.cache.id();
    // The attacker, the server and the measuring client share two cores: the ratio
    // ranged 0.48–1.07 over runs on this VM, so the floor leaves room for that.
    f.under_attack("a FETCH flood from strangers", 64, 0.35, move |stop| {
        let mut frame = Vec::new();
        let mut enc = PeerEncoder::begin(&mut frame);
        for t in 0..1000u64 {
            enc.push(
                &mut frame,
                &PeerMsg::Fetch {
                    ticket: t,
                    origin: "127.0.0.1:9",
                    cache,
                    addr: 0,
                    len: MAX_OP_BYTES,
                },
            );
        }
        enc.finish(&mut frame);
        // Paced to about 5,000 connections a second: on this 2-core machine an
        // unpaced attacker thread takes a core from the client and the server itself.
        while !stop.load(Ordering::SeqCst) {
            let t = Instant::now();
            if let Ok(mut s) = TcpStream::connect(&addr) {
                let _ = s.write_all(&frame);
            }
            let spent = t.elapsed();
            if spent < Duration::from_micros(200) {
                thread::sleep(Duration::from_micros(200) - spent);
            }
        }
    });
    assert!(f.stats(0).protocol_errors > 0);
}
