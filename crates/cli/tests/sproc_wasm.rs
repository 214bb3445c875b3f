//! WebAssembly procedures on a live cluster: registration, execution across servers,
//! the sandbox under load from other clients, refusal of bad code, growth onto new
//! servers, and hand-offs towards a server that was killed or frozen.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use farcache_client::{ClientConfig, ClientError, OpError};
use farcache_proto::control::ControlErrorCode;
use farcache_sproc::builtin::{AggFn, Aggregate};
use farcache_testkit::{ClusterOptions, LocalCluster, ProcessCluster};

const SUM: &str = include_str!("../../sproc/procs/sum.wat");
const SUM_PULL: &str = include_str!("../../sproc/procs/sum_pull.wat");
const MISBEHAVE: &str = include_str!("../../sproc/procs/misbehave.wat");
const REGION: u64 = 64 << 10;

fn sum_args(base: u64, n: u32) -> Vec<u8> {
    let mut a = base.to_le_bytes().to_vec();
    a.extend_from_slice(&n.to_le_bytes());
    a.extend_from_slice(&[0u8; 12]);
    a
}

fn opts() -> ClusterOptions {
    ClusterOptions::default()
        .servers(3)
        .region_size(REGION)
        .server_memory(8 << 20)
}

#[test]
fn wasm_procedures_run_next_to_the_data_and_stay_sandboxed() {
    let cluster = LocalCluster::start(&opts()).expect("cluster");
    let client = cluster.client().expect("client");
    // One region first, so growing later puts regions on servers that never saw the code.
    let cache = client
        .create_with_region_size("wasm", REGION, Some(REGION))
        .expect("create");
    cache.register("sum", SUM.as_bytes()).expect("register sum");
    cache
        .register("sum_pull", SUM_PULL.as_bytes())
        .expect("register sum_pull");
    cache
        .register("misbehave", MISBEHAVE.as_bytes())
        .expect("register misbehave");
    cache.reshape(12 * REGION).expect("grow");
    let servers: HashSet<u32> = cache.info().regions.iter().copied().collect();
    assert_eq!(servers.len(), 3, "{:?}", cache.info().regions);

    let model: Vec<u8> = (0..12 * REGION).map(|i| (i * 13 % 251) as u8).collect();
    cache.write(0, &model).expect("fill");
    for (base, n) in [
        (0u64, 1u32),
        (8, 3),
        (REGION - 16, 40),
        (0, (12 * REGION / 8) as u32),
    ] {
        let want = (0..u64::from(n)).fold(0u64, |a, i| {
            let at = (base + 8 * i) as usize;
            a.wrapping_add(u64::from_le_bytes(model[at..at + 8].try_into().expect("8")))
        });
        // FFlow (the module ships itself) and DFlow (it pulls the records).
        for name in ["sum", "sum_pull"] {
            let r = cache.execute(name, base, &sum_args(base, n)).expect(name);
            assert_eq!(&r[..], &want.to_le_bytes(), "{name} base {base} n {n}");
        }
    }

    // Misbehaving invocations fail alone while another client keeps reading.
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let other = cluster.client().expect("client");
            let c = other.open("wasm").expect("open");
            while !stop.load(Ordering::Acquire) {
                let r = c.read(REGION * 5, 64).expect("read during misbehaviour");
                assert_eq!(&r[..], &model[(REGION * 5) as usize..][..64]);
                reads.fetch_add(1, Ordering::Relaxed);
            }
        });
        for (mode, needle) in [
            (0u8, "time limit"),
            (1, "unreachable"),
            (2, "memory"),
            (3, "outside the cache"),
            (4, "returned 7"),
        ] {
            let t = Instant::now();
            match cache.execute("misbehave", REGION * 4, &[mode]) {
                Err(ClientError::Op(OpError::Procedure(m))) => {
                    assert!(m.contains(needle), "mode {mode}: {m}")
                }
                other => panic!("mode {mode}: {other:?}"),
            }
            assert!(t.elapsed() < Duration::from_secs(10), "mode {mode}");
        }
        // Still serving procedures after all that.
        let r = cache.execute("sum", 0, &sum_args(0, 1)).expect("sum after");
        assert_eq!(&r[..], &model[..8]);
        stop.store(true, Ordering::Release);
    });
    assert!(reads.load(Ordering::Relaxed) > 0);

    // Bad code and reserved names are refused at registration.
    for (name, code) in [
        ("junk", &b"definitely not wasm"[..]),
        ("noexports", b"(module)"),
        ("aggregate", SUM.as_bytes()),
        ("", SUM.as_bytes()),
    ] {
        match cache.register(name, code) {
            Err(e @ ClientError::Rejected { .. }) => {
                assert_eq!(
                    e.code(),
                    Some(ControlErrorCode::InvalidArgument),
                    "{name}: {e}"
                );
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    assert!(matches!(
        cache.execute("junk", 0, b""),
        Err(ClientError::Op(OpError::Status(
            farcache_proto::Status::NoSuchProc
        )))
    ));
    drop(cache);
    cluster.shutdown();
}

/// A procedure the servers hand along (FFlow) towards a server killed with SIGKILL
/// fails within a bounded time, naming the dead server; it never hangs or returns a
/// wrong answer.
#[test]
fn hand_off_to_a_killed_server_fails_in_bounded_time() {
    let mut cluster =
        ProcessCluster::start(env!("CARGO_BIN_EXE_farcache"), &opts()).expect("cluster");
    let client = cluster
        .client_with(ClientConfig::new("").op_timeout(Duration::from_secs(2)))
        .expect("client");
    let cache = client
        .create_with_region_size("chase", 12 * REGION, Some(REGION))
        .expect("create");
    let regions = cache.info().regions.clone();
    let info = cache.info();
    let victim = regions[regions.len() - 1];
    let index = info
        .servers
        .iter()
        .position(|s| s.id == victim)
        .expect("victim listed");
    // The testkit numbers servers in start order; map the id to that index by address.
    let addr = info.servers[index].addr.clone();
    let i = (0..3)
        .find(|&i| cluster.server_addr(i) == addr)
        .expect("victim process");
    // Sum over the whole cache: starts on region 0's server, must visit the victim.
    let n = (12 * REGION / 8) as u32;
    let args = Aggregate::args(AggFn::Sum, 0, n, 8);
    cache
        .execute(Aggregate::NAME, 0, &args)
        .expect("before the kill");
    cluster.kill_server(i).expect("kill");
    let t = Instant::now();
    match cache.execute(Aggregate::NAME, 0, &args) {
        // Handed along by the servers: the server that could not reach it says so.
        Err(ClientError::Op(OpError::Procedure(m))) => {
            assert!(m.contains(&addr) || m.contains("no answer"), "{m}")
        }
        // Reached through the client (no region table on the servers).
        Err(ClientError::Op(
            OpError::ServerUnavailable { server, .. } | OpError::Timeout { server, .. },
        )) => {
            assert_eq!(server, victim)
        }
        other => panic!("expected the dead server's error, got {other:?}"),
    }
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "took {:?}",
        t.elapsed()
    );
}

/// A procedure handed to a server that hangs (SIGSTOP, its connections stay open):
/// the first server gives up at its flow deadline (5 s by default) and the client gets
/// that error, not a hang; after SIGCONT the same call succeeds.
#[test]
fn hand_off_to_a_frozen_server_times_out_then_recovers() {
    // The manager must not declare the frozen server dead during the test: that would
    // place its regions again (empty, lost) and change what this test looks at.
    let mut o = opts();
    o.heartbeat_timeout = Duration::from_secs(60);
    let cluster = ProcessCluster::start(env!("CARGO_BIN_EXE_farcache"), &o).expect("cluster");
    let client = cluster
        .client_with(ClientConfig::new("").op_timeout(Duration::from_secs(20)))
        .expect("client");
    let cache = client
        .create_with_region_size("frozen", 12 * REGION, Some(REGION))
        .expect("create");
    let info = cache.info();
    // The server of the first region not on region 0's server: the first hand-off.
    let first = info.regions[0];
    let victim = *info
        .regions
        .iter()
        .find(|&&s| s != first)
        .expect("another server");
    let addr = info.server(victim).expect("victim listed").addr.clone();
    let i = (0..3)
        .find(|&i| cluster.server_addr(i) == addr)
        .expect("victim process");
    let pid = cluster.server_pid(i).expect("pid") as libc::pid_t;
    let n = (12 * REGION / 8) as u32;
    let args = Aggregate::args(AggFn::Sum, 0, n, 8);
    let want = cache.execute(Aggregate::NAME, 0, &args).expect("before");
    // SAFETY: signalling a child process this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    // Stopping is asynchronous: wait until no thread of it can answer any more.
    common::eventually(
        "every server thread stopped",
        Duration::from_secs(10),
        Duration::from_millis(5),
        || common::all_threads_stopped(pid).then_some(()),
    );
    let t = Instant::now();
    let got = cache.execute(Aggregate::NAME, 0, &args);
    let waited = t.elapsed();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    match got {
        Err(ClientError::Op(OpError::Procedure(m))) => {
            assert!(m.contains("no answer"), "{m}")
        }
        other => panic!("expected the flow deadline's error, got {other:?}"),
    }
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(15),
        "took {waited:?}"
    );
    assert_eq!(
        cache
            .execute(Aggregate::NAME, 0, &args)
            .expect("after SIGCONT"),
        want
    );
}
