//! Server failure with real processes: a cache spans three `farcache server` processes;
//! one is SIGKILLed (or SIGSTOPped). Ops on its regions must fail with a clear error
//! in bounded time, ops on the other servers' regions keep working, and the manager
//! marks the server dead.

mod common;

use std::time::{Duration, Instant};

use common::{
    all_threads_stopped, bin, block_on, diff, eventually, is_unavailable, pattern, within,
};
use farcache_client::{Cache, CacheInfo, Client, ClientConfig, ClientError, OpError, OpOutput};
use farcache_proto::ServerId;
use farcache_proto::control::ServerState;
use farcache_testkit::{ClusterOptions, ProcessCluster};

const REGION: u64 = 64 << 10;
const NREG: u64 = 6;
const CAPACITY: u64 = NREG * REGION;
/// Generous bound for "fails fast": well above the client timeouts used here, far
/// below "hangs".
const FAIL_WITHIN: Duration = Duration::from_secs(15);
/// Bound on any single call, so a hang fails the test instead of stalling it.
const CALL_LIMIT: Duration = Duration::from_secs(30);

fn start_cluster() -> ProcessCluster {
    let mut opts = ClusterOptions::default()
        .servers(3)
        .region_size(REGION)
        .server_memory(16 << 20);
    // Long enough that the fail-fast checks run before the manager declares the
    // server dead (and places its regions again, empty and lost).
    opts.heartbeat_timeout = Duration::from_secs(4);
    ProcessCluster::start(bin(), &opts).expect("start process cluster")
}

fn client(cluster: &ProcessCluster, op_timeout: Duration) -> Client {
    cluster
        .client_with(ClientConfig::new("").op_timeout(op_timeout))
        .expect("client")
}

/// Server id of the process started as server `i`.
fn server_id_of(cluster: &ProcessCluster, info: &CacheInfo, i: usize) -> ServerId {
    let addr = cluster.server_addr(i);
    info.servers
        .iter()
        .find(|s| s.addr == addr)
        .unwrap_or_else(|| panic!("server {i} ({addr}) holds no region: {info:?}"))
        .id
}

fn regions_of(info: &CacheInfo, id: ServerId) -> Vec<u64> {
    (0..info.regions.len() as u64)
        .filter(|&r| info.regions[r as usize] == id)
        .collect()
}

fn state_of(client: &Client, id: ServerId) -> Option<ServerState> {
    client
        .status()
        .ok()?
        .servers
        .iter()
        .find(|s| s.id == id)
        .map(|s| s.state)
}

/// Runs a cache call on a helper thread, bounded by `CALL_LIMIT`, and times it.
fn timed<T: Send + 'static>(
    what: &str,
    cache: &Cache,
    f: impl FnOnce(&Cache) -> T + Send + 'static,
) -> (T, Duration) {
    let cache = cache.clone();
    let t0 = Instant::now();
    let r = within(what, CALL_LIMIT, move || f(&cache));
    (r, t0.elapsed())
}

/// The op failed because server `id` is unavailable (or timed out), quickly enough.
fn assert_fails_fast<T: std::fmt::Debug>(
    what: &str,
    r: Result<T, ClientError>,
    took: Duration,
    id: ServerId,
) {
    match &r {
        Err(ClientError::Op(e)) if is_unavailable(e, id) => {
            // The message names the server so an operator can act on it.
            let text = e.to_string();
            assert!(text.contains(&format!("server {id}")), "{what}: '{text}'");
        }
        other => panic!("{what}: expected server {id} unavailable, got {other:?}"),
    }
    assert!(took < FAIL_WITHIN, "{what}: failing took {took:?}");
}

fn assert_region_data(cache: &Cache, image: &[u8], region: u64, what: &str) {
    let got = cache
        .read(region * REGION, REGION)
        .unwrap_or_else(|e| panic!("{what}: read of live region {region} failed: {e}"));
    let a = (region * REGION) as usize;
    if let Some(d) = diff(&got, &image[a..a + REGION as usize]) {
        panic!("{what}: region {region}: {d}");
    }
}

#[test]
fn killed_server_fails_fast_and_the_rest_keeps_working() {
    let mut cluster = start_cluster();
    let client = client(&cluster, Duration::from_secs(3));
    let cache = client.create("spread", CAPACITY).unwrap();
    let info = cache.info();
    let victim = server_id_of(&cluster, &info, 1);
    let dead_regions = regions_of(&info, victim);
    let live_regions: Vec<u64> = (0..NREG).filter(|r| !dead_regions.contains(r)).collect();
    assert!(
        !dead_regions.is_empty() && live_regions.len() >= 2,
        "{info:?}"
    );
    for i in 0..3 {
        server_id_of(&cluster, &info, i); // every server holds a region
    }
    let mut image = pattern(11, CAPACITY as usize);
    cache.write(0, &image).unwrap();
    assert_eq!(&cache.read(0, CAPACITY).unwrap()[..], &image[..]);
    // A second, idle handle opened before the kill.
    let other_client = client_for_later(&cluster);
    let other = other_client.open("spread").unwrap();

    cluster.kill_server(1).unwrap();

    for &r in &dead_regions {
        let addr = r * REGION + 100;
        let (res, took) = timed("read", &cache, move |c| c.read(addr, 64));
        assert_fails_fast(&format!("read of dead region {r}"), res, took, victim);
        let (res, took) = timed("write", &cache, move |c| c.write(addr, b"lost"));
        assert_fails_fast(&format!("write to dead region {r}"), res, took, victim);
        let (res, took) = timed("fetch_add", &cache, move |c| c.fetch_add(addr - 4, 1));
        assert_fails_fast(&format!("fetch_add on dead region {r}"), res, took, victim);
        let (res, took) = timed("cas", &cache, move |c| c.cas(addr - 4, 0, 1));
        assert_fails_fast(&format!("cas on dead region {r}"), res, took, victim);
        let (res, took) = timed("read_async", &cache, move |c| {
            block_on(c.read_async(addr, 8), CALL_LIMIT)
        });
        assert_fails_fast(
            &format!("awaited read of dead region {r}"),
            res,
            took,
            victim,
        );
        let (res, took) = timed("idle handle", &other, move |c| c.read(addr, 8));
        assert_fails_fast(&format!("idle handle, dead region {r}"), res, took, victim);
    }
    // Failing again and again stays fast (reconnect attempts are refused, not hung).
    let r = dead_regions[0];
    let (all_failed, took) = timed("repeated", &cache, move |c| {
        (0..20).all(|_| {
            matches!(c.read(r * REGION, 8), Err(ClientError::Op(e)) if is_unavailable(&e, victim))
        })
    });
    assert!(all_failed, "every repeated op on the dead server fails");
    assert!(took < FAIL_WITHIN, "20 failing ops took {took:?}");

    // Live regions: old data intact, new writes land.
    for &r in &live_regions {
        assert_region_data(&cache, &image, r, "after kill");
        let data = pattern(r, 5000);
        let at = r * REGION + 777;
        cache.write(at, &data).unwrap();
        image[at as usize..at as usize + data.len()].copy_from_slice(&data);
        assert_region_data(&cache, &image, r, "after kill and write");
        assert_region_data(&other, &image, r, "idle handle after kill");
    }
    // A batch over every region: exactly the dead server's ops fail.
    let mut b = cache.batch();
    for r in 0..NREG {
        b.read(r * REGION, REGION);
    }
    let (results, took) = timed("batch", &cache, move |_| b.run());
    assert!(took < FAIL_WITHIN, "batch took {took:?}");
    for r in 0..NREG {
        let res = results.get(r as usize).unwrap();
        if dead_regions.contains(&r) {
            assert!(
                matches!(&res, Err(e) if is_unavailable(e, victim)),
                "region {r}: {res:?}"
            );
        } else {
            let a = (r * REGION) as usize;
            assert_eq!(
                res,
                Ok(OpOutput::Data(
                    image[a..a + REGION as usize].to_vec().into()
                )),
                "region {r}"
            );
        }
    }
    // An op spanning a live and the dead region fails as a whole.
    let dead = dead_regions[0];
    let span_at = if dead > 0 {
        dead * REGION - 10
    } else {
        REGION - 10
    };
    let (res, took) = timed("spanning", &cache, move |c| c.read(span_at, 20));
    assert_fails_fast("spanning read", res, took, victim);

    // A client connected after the kill sees the same.
    let late = client_for_later(&cluster).open("spread").unwrap();
    for &r in &live_regions {
        assert_region_data(&late, &image, r, "new client");
    }
    let (res, took) = timed("new client", &late, move |c| c.read(dead * REGION, 8));
    assert_fails_fast("new client, dead region", res, took, victim);

    // The manager notices the missing heartbeats.
    eventually(
        "manager marks the killed server dead",
        Duration::from_secs(15),
        Duration::from_millis(50),
        || (state_of(&client, victim) == Some(ServerState::Dead)).then_some(()),
    );
    let status = client.status().unwrap();
    for s in &status.servers {
        if s.id != victim {
            assert_eq!(s.state, ServerState::Alive, "{s:?}");
        }
    }
    // New caches are placed on live servers only.
    let fresh = client.create("after-death", 4 * REGION).unwrap();
    assert!(
        !fresh.info().regions.contains(&victim),
        "placed on a dead server: {:?}",
        fresh.info().regions
    );
    fresh.write(0, &pattern(5, (4 * REGION) as usize)).unwrap();
    assert_eq!(
        &fresh.read(0, 4 * REGION).unwrap()[..],
        &pattern(5, (4 * REGION) as usize)[..]
    );
    // The live part of the old cache still works after the server was declared dead.
    for &r in &live_regions {
        assert_region_data(&cache, &image, r, "after dead");
    }
}

/// A client streaming batches of 8-byte reads over every region (several batches in
/// flight, each mostly runs of reads to one server) while a server is SIGKILLed: every
/// batch still completes in bounded time; reads of the dead server's regions fail
/// (unavailable, or lost once the manager has placed them again), every other read
/// returns its own bytes, before and after the kill.
/// What a streamed batch asks of each address: an 8-byte read, or a call of the
/// `aggregate` built-in over that one record (answered in DONE_RUN replies).
#[derive(Clone, Copy, Debug)]
enum Streamed {
    Reads,
    Calls,
}

#[test]
fn a_server_killed_under_streaming_batched_reads_fails_only_its_own_reads() {
    stream_through_a_kill(Streamed::Reads);
}

#[test]
fn a_server_killed_under_streaming_batched_calls_fails_only_its_own_calls() {
    stream_through_a_kill(Streamed::Calls);
}

/// Streams batches at a three-server cache, SIGKILLs one server mid-stream, and
/// checks that every answer is right, and every failure is an op on the dead
/// server's regions failing as unavailable or lost.
fn stream_through_a_kill(what: Streamed) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use farcache_sproc::builtin::{AggFn, Aggregate};

    let mut cluster = start_cluster();
    let client = client(&cluster, Duration::from_secs(3));
    let cache = client.create("stream", CAPACITY).expect("create the cache");
    let info = cache.info();
    let victim = server_id_of(&cluster, &info, 1);
    let dead_regions = regions_of(&info, victim);
    assert!(!dead_regions.is_empty(), "{info:?}");
    let image = Arc::new(pattern(23, CAPACITY as usize));
    cache.write(0, &image).expect("write the image");

    const OPS: u64 = 2048;
    let one_record = Aggregate::call(AggFn::Sum, 1, 8);
    let stop = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(AtomicBool::new(false));
    let streamer = {
        let (cache, image, stop, killed) =
            (cache.clone(), image.clone(), stop.clone(), killed.clone());
        let dead = dead_regions.clone();
        std::thread::spawn(move || {
            // (batches checked, ops failed on the dead server, ops after the kill, slowest batch)
            let (mut batches, mut failed, mut after, mut slowest) =
                (0u64, 0u64, 0u64, Duration::ZERO);
            let mut in_flight = std::collections::VecDeque::new();
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) || !in_flight.is_empty() {
                if !stop.load(Ordering::Relaxed) && in_flight.len() < 4 {
                    // Consecutive ops mostly land in one region: runs on the wire.
                    let addrs: Vec<u64> = (0..OPS)
                        .map(|i| (round * 7_919 + i * 8 * 61) % (CAPACITY - 8) / 8 * 8)
                        .collect();
                    let mut b = cache.batch();
                    for &a in &addrs {
                        match what {
                            Streamed::Reads => b.read(a, 8),
                            Streamed::Calls => b.execute(Aggregate::NAME, a, &one_record),
                        };
                    }
                    let after_kill = killed.load(Ordering::Relaxed);
                    in_flight.push_back((b.submit(), addrs, after_kill, Instant::now()));
                    round += 1;
                    continue;
                }
                let Some((ticket, addrs, after_kill, t0)) = in_flight.pop_front() else {
                    break;
                };
                let r = ticket.wait();
                slowest = slowest.max(t0.elapsed());
                batches += 1;
                for (i, &a) in addrs.iter().enumerate() {
                    let region = a / REGION;
                    let want = &image[a as usize..a as usize + 8];
                    match r.data(i) {
                        Ok(d) => match what {
                            Streamed::Reads => assert_eq!(d, want, "read at {a}"),
                            Streamed::Calls => assert_eq!(
                                Aggregate::result(d).ok(),
                                Some(u64::from_le_bytes(want.try_into().expect("8 bytes"))),
                                "call at {a}"
                            ),
                        },
                        // Unavailable until the manager hears of the death; then the
                        // regions are placed again and their bytes read as lost (a
                        // procedure reading them fails saying so).
                        Err(ClientError::Op(e))
                            if dead.contains(&region)
                                && (is_unavailable(&e, victim)
                                    || matches!(e, OpError::DataLost { .. })
                                    || matches!(&e, OpError::Procedure(m)
                                        if matches!(what, Streamed::Calls)
                                            && m.contains("lost with a failed server"))) =>
                        {
                            failed += 1
                        }
                        Err(e) => panic!("{what:?} at {a} (region {region}): {e}"),
                    }
                    if after_kill {
                        after += 1;
                    }
                }
            }
            (batches, failed, after, slowest)
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    cluster.kill_server(1).expect("kill server 1");
    killed.store(true, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    let (batches, failed, after, slowest) = streamer.join().expect("streamer");
    assert!(
        failed > 0,
        "no op failed over {batches} batches: was the kill seen?"
    );
    assert!(after > 0, "no batch ran after the kill");
    assert!(slowest < FAIL_WITHIN, "a batch took {slowest:?}");
    // The live regions still hold their bytes.
    for r in (0..NREG).filter(|r| !dead_regions.contains(r)) {
        assert_region_data(&cache, &image, r, "after streaming through the kill");
    }
}

fn client_for_later(cluster: &ProcessCluster) -> Client {
    client(cluster, Duration::from_secs(3))
}

/// A stopped (hung, not dead) server: ops time out after `op_timeout`. Once the
/// manager declares it dead, its regions are placed again, empty and lost; after
/// SIGCONT the server is alive again, but its stale copies are never served: the
/// regions read as `DataLost`, not as the old bytes (which writes no longer reach).
#[test]
fn hung_server_times_out_and_recovers() {
    let cluster = start_cluster();
    let op_timeout = Duration::from_secs(1);
    let client = client(&cluster, op_timeout);
    let cache = client.create("hung", CAPACITY).unwrap();
    let info = cache.info();
    let victim = server_id_of(&cluster, &info, 2);
    let stopped = regions_of(&info, victim);
    let image = pattern(23, CAPACITY as usize);
    cache.write(0, &image).unwrap();
    let pid = cluster.server_pid(2).expect("server 2 runs") as libc::pid_t;

    // SAFETY: plain syscall on our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    // Stopping is asynchronous: a busy machine may let a worker thread serve a little
    // longer. Wait until every thread of the server is stopped.
    eventually(
        "every server thread stopped",
        Duration::from_secs(10),
        Duration::from_millis(5),
        || all_threads_stopped(pid).then_some(()),
    );
    let r = stopped[0];
    let (res, took) = timed("read from a stopped server", &cache, move |c| {
        c.read(r * REGION, 8)
    });
    match &res {
        Err(ClientError::Op(OpError::Timeout {
            server, timeout_ms, ..
        })) => {
            assert_eq!(*server, victim);
            assert_eq!(*timeout_ms, 1000);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        took >= op_timeout && took < op_timeout + Duration::from_secs(5),
        "timeout after {took:?}"
    );
    // Meanwhile the other servers answer promptly.
    for rr in (0..NREG).filter(|x| !stopped.contains(x)) {
        let (res, took) = timed("live read", &cache, move |c| c.read(rr * REGION, 16));
        let a = (rr * REGION) as usize;
        assert_eq!(&res.unwrap()[..], &image[a..a + 16]);
        assert!(
            took < Duration::from_secs(2),
            "live region {rr} took {took:?}"
        );
    }
    // A fresh connection to a stopped server fails too (the handshake gets no answer).
    let (res, took) = timed("second read from a stopped server", &cache, move |c| {
        c.read(r * REGION + 8, 8)
    });
    assert_fails_fast("second read", res, took, victim);
    eventually(
        "manager marks the stopped server dead",
        Duration::from_secs(15),
        Duration::from_millis(50),
        || (state_of(&client, victim) == Some(ServerState::Dead)).then_some(()),
    );

    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    eventually(
        "the resumed server is alive again",
        Duration::from_secs(15),
        Duration::from_millis(50),
        || (state_of(&client, victim) == Some(ServerState::Alive)).then_some(()),
    );
    // The manager shows the server dead before its recovery has re-placed the
    // regions (that runs next, under the catalogue's change lock); on a loaded host
    // the server can be back before the report is complete.
    eventually(
        "the stopped server's regions reported lost",
        Duration::from_secs(15),
        Duration::from_millis(50),
        || {
            let st = client.status().ok()?;
            stopped
                .iter()
                .all(|r| {
                    st.lost.iter().any(|l| {
                        u64::from(l.region) == *r && l.was_on == victim && l.reason == "killed"
                    })
                })
                .then_some(())
        },
    );
    // Its regions answer DataLost from their new owners (the client follows the
    // manager's table), never the bytes the resumed server still had.
    for &r in &stopped {
        let c = cache.clone();
        eventually(
            "a re-placed region answers",
            Duration::from_secs(15),
            Duration::from_millis(100),
            || {
                within("read", CALL_LIMIT, {
                    let c = c.clone();
                    move || match c.read(r * REGION, REGION) {
                        Err(ClientError::Op(OpError::DataLost { .. })) => Some(()),
                        _ => None,
                    }
                })
            },
        );
    }
    for rr in (0..NREG).filter(|x| !stopped.contains(x)) {
        assert_region_data(&cache, &image, rr, "untouched region after resume");
    }
}
