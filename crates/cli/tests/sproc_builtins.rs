//! Built-in stored procedures on a 3-server cluster, checked against the same
//! computation done at the client; invocations hop between servers through their
//! continuations.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use farcache_client::{Cache, ClientConfig, ClientError, OpError};
use farcache_proto::Status;
use farcache_sproc::builtin::{AggFn, Aggregate, Chase, Cmp, Flow, Gather, KHop, NULL, Scan};
use farcache_sproc::memory::VecMemory;
use farcache_sproc::{Outcome, Registry};
use farcache_testkit::{ClusterOptions, LocalCluster};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const REGION: u64 = 64 << 10;
const REGIONS: u64 = 12;

fn cluster() -> (LocalCluster, Cache, Vec<u8>) {
    cluster_with(true)
}

fn cluster_with(peer_batching: bool) -> (LocalCluster, Cache, Vec<u8>) {
    let opts = ClusterOptions::default()
        .servers(3)
        .region_size(REGION)
        .server_memory(8 << 20)
        .peer_batching(peer_batching);
    let cluster = LocalCluster::start(&opts).expect("cluster");
    let client = cluster
        .client_with(ClientConfig::new("").op_timeout(Duration::from_secs(10)))
        .expect("client");
    let cache = client
        .create_with_region_size("sprocs", REGIONS * REGION, Some(REGION))
        .expect("create");
    let owners: HashSet<u32> = cache.info().regions.iter().copied().collect();
    assert_eq!(owners.len(), 3, "cache must span all three servers");
    let mut rng = StdRng::seed_from_u64(7);
    let mut model = vec![0u8; (REGIONS * REGION) as usize];
    rng.fill(&mut model[..]);
    for (i, chunk) in model.chunks(REGION as usize).enumerate() {
        cache.write(i as u64 * REGION, chunk).expect("fill");
    }
    (cluster, cache, model)
}

/// 64 distinct 32-byte node slots in random order, spread over the whole cache.
fn random_nodes(rng: &mut StdRng) -> Vec<u64> {
    let slots = (REGIONS * REGION / 32) as usize;
    let mut nodes: Vec<u64> = (0..slots).map(|s| s as u64 * 32).collect();
    for i in (1..nodes.len()).rev() {
        nodes.swap(i, rng.gen_range(0..=i));
    }
    nodes.truncate(64);
    nodes
}

fn u64_at(b: &[u8], a: u64) -> u64 {
    u64::from_le_bytes(b[a as usize..a as usize + 8].try_into().expect("8 bytes"))
}

/// The same procedure run at the client over a full local copy (every region local).
fn run_locally(model: &[u8], name: &str, addr: u64, args: Vec<u8>) -> Vec<u8> {
    let local = vec![true; REGIONS as usize];
    let mem = VecMemory {
        bytes: model,
        region_size: REGION,
        local: &local,
    };
    let reg = Registry::with_builtins();
    match reg.get(name).expect("builtin").run(&mem, addr, &args) {
        Ok(Outcome::Done(r)) => r,
        other => panic!("local run of {name}: {other:?}"),
    }
}

#[test]
fn builtins_match_client_side_computation() {
    let (cluster, cache, mut model) = cluster();
    let mut rng = StdRng::seed_from_u64(11);

    // aggregate: every function, ranges that cross servers.
    for _ in 0..40 {
        let base = rng.gen_range(0..(REGIONS - 1) * REGION) / 8 * 8;
        let stride = 8 * rng.gen_range(1..64u32);
        let n =
            rng.gen_range(0..=((REGIONS * REGION - base - 8) / u64::from(stride)).min(5000)) as u32;
        let vals: Vec<u64> = (0..n)
            .map(|i| u64_at(&model, base + u64::from(i * stride)))
            .collect();
        for (f, want) in [
            (
                AggFn::Sum,
                vals.iter().fold(0u64, |a, v| a.wrapping_add(*v)),
            ),
            (AggFn::Min, vals.iter().copied().min().unwrap_or(u64::MAX)),
            (AggFn::Max, vals.iter().copied().max().unwrap_or(0)),
            (
                AggFn::Count,
                vals.iter().filter(|v| **v != 0).count() as u64,
            ),
        ] {
            let r = cache
                .execute(Aggregate::NAME, base, &Aggregate::args(f, base, n, stride))
                .expect("aggregate");
            assert_eq!(
                Aggregate::result(&r).expect("decode"),
                want,
                "{f:?} base {base} n {n}"
            );
            let r = cache
                .execute(Aggregate::NAME, base, &Aggregate::call(f, n, stride))
                .expect("aggregate, short arguments");
            assert_eq!(
                Aggregate::result(&r).expect("decode"),
                want,
                "{f:?} short form, base {base} n {n}"
            );
        }
    }

    // chase: a 64-node chain through random slots on all servers.
    let nodes = random_nodes(&mut rng);
    let mut b = cache.batch();
    for (i, &n) in nodes.iter().enumerate() {
        let next = nodes.get(i + 1).copied().unwrap_or(NULL);
        b.write(n + 16, &next.to_le_bytes());
        model[(n + 16) as usize..(n + 24) as usize].copy_from_slice(&next.to_le_bytes());
    }
    assert!(b.run().first_error().is_none());
    let spread: HashSet<u32> = nodes
        .iter()
        .map(|n| cache.info().regions[(n / REGION) as usize])
        .collect();
    assert_eq!(spread.len(), 3);
    for hops in [0u32, 1, 5, 63, 64, 100] {
        let r = cache
            .execute(Chase::NAME, nodes[0], &Chase::args(nodes[0], 16, hops))
            .expect("chase");
        let want = if (hops as usize) < nodes.len() {
            (nodes[hops as usize], hops)
        } else {
            (NULL, nodes.len() as u32)
        };
        assert_eq!(Chase::result(&r).expect("decode"), want, "hops {hops}");
    }

    // gather: ranges on every server, each inside one region.
    let ranges: Vec<(u64, u32)> = (0..50)
        .map(|_| {
            let a = rng.gen_range(0..REGIONS * REGION - 100);
            let l = rng.gen_range(0..100u32).min((REGION - a % REGION) as u32);
            (a, l)
        })
        .collect();
    let r = cache
        .execute(Gather::NAME, ranges[0].0, &Gather::args(&ranges))
        .expect("gather");
    let want: Vec<u8> = ranges
        .iter()
        .flat_map(|&(a, l)| model[a as usize..(a + u64::from(l)) as usize].to_vec())
        .collect();
    assert_eq!(&r[..], &want[..]);

    // scan: 48-byte rows over the whole cache.
    let rows = (REGIONS * REGION / 64) as u32;
    for cmp in [Cmp::Lt, Cmp::Ge, Cmp::Ne] {
        let c = u64::MAX / 3;
        let args = Scan::args(0, rows, 64, 8, cmp, c, 40);
        let r = cache.execute(Scan::NAME, 0, &args).expect("scan");
        let (mut count, mut sum) = (0u64, 0u64);
        for i in 0..u64::from(rows) {
            if cmp.test(u64_at(&model, i * 64 + 8), c) {
                count += 1;
                sum = sum.wrapping_add(u64_at(&model, i * 64 + 40));
            }
        }
        assert_eq!(Scan::result(&r).expect("decode"), (count, sum), "{cmp:?}");
        assert_eq!(&r[..], &run_locally(&model, Scan::NAME, 0, args)[..]);
    }

    // khop: a random graph in CSR layout spread over the cache.
    let n = 2000u32;
    let vbase = 0u64;
    let ebase = REGION * 2 + 4;
    let mut adj: Vec<Vec<u32>> = vec![Vec::new(); n as usize];
    for _ in 0..12_000 {
        // Skewed sources, like a power-law graph.
        let a = (rng.gen_range(0f64..1.0).powi(3) * f64::from(n)) as u32;
        adj[a as usize].push(rng.gen_range(0..n));
    }
    let mut b = cache.batch();
    let mut e = 0u64;
    let mut edges = Vec::new();
    for (v, list) in adj.iter().enumerate() {
        let mut entry = e.to_le_bytes().to_vec();
        entry.extend_from_slice(&(list.len() as u32).to_le_bytes());
        b.write(vbase + 16 * v as u64, &entry);
        model[(vbase + 16 * v as u64) as usize..][..12].copy_from_slice(&entry);
        for &u in list {
            edges.extend_from_slice(&u.to_le_bytes());
        }
        e += list.len() as u64;
    }
    b.write(ebase, &edges);
    model[ebase as usize..ebase as usize + edges.len()].copy_from_slice(&edges);
    assert!(b.run().first_error().is_none());
    for (src, k) in [(0u32, 1u8), (0, 2), (3, 3), (1999, 2)] {
        let mut seen = HashSet::from([src]);
        let mut frontier = vec![src];
        for _ in 0..k {
            let mut next = Vec::new();
            for v in frontier {
                for &u in &adj[v as usize] {
                    if seen.insert(u) {
                        next.push(u);
                    }
                }
            }
            frontier = next;
        }
        let at = vbase + 16 * u64::from(src);
        for flow in [Flow::Ship, Flow::Pull] {
            let r = cache
                .execute(
                    KHop::NAME,
                    at,
                    &KHop::args_with(vbase, ebase, n, src, k, flow),
                )
                .expect("khop");
            assert_eq!(
                KHop::result(&r).expect("decode"),
                seen.len() as u64 - 1,
                "src {src} k {k} {flow:?}"
            );
        }
    }
    drop(cache);
    cluster.shutdown();
}

#[test]
fn procedure_errors_are_clear_and_the_cluster_keeps_serving() {
    let (cluster, cache, model) = cluster();
    let status = |r: Result<_, ClientError>| match r {
        Err(ClientError::Op(e)) => e,
        other => panic!("expected an op error, got {other:?}"),
    };
    assert!(matches!(
        status(cache.execute("no-such-proc", 0, b"")),
        OpError::Status(Status::NoSuchProc)
    ));
    match status(cache.execute(Aggregate::NAME, 0, b"xx")) {
        OpError::Procedure(m) => assert!(m.contains("aggregate"), "{m}"),
        e => panic!("{e}"),
    }
    // An empty name would mean "the previous procedure" on the wire: the client
    // refuses it and the connection stays up for the ops after it.
    let mut b = cache.batch();
    b.execute("", 0, b"");
    b.execute(Aggregate::NAME, 0, &Aggregate::call(AggFn::Count, 1, 8));
    let r = b.run();
    match r.get(0) {
        Some(Err(OpError::Procedure(m))) => assert!(m.contains("1 to 255"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(r.is_ok(1), "{:?}", r.get(1));
    // Reading past the end of the cache is an error, not a hang or a hop.
    let end = REGIONS * REGION;
    match status(cache.execute(
        Aggregate::NAME,
        end - 16,
        &Aggregate::args(AggFn::Sum, end - 16, 4, 8),
    )) {
        OpError::Procedure(m) => assert!(m.contains("outside the cache"), "{m}"),
        e => panic!("{e}"),
    }
    assert!(matches!(
        status(cache.execute(Aggregate::NAME, end, b"")),
        OpError::OutOfRange { .. }
    ));
    // A record that straddles two servers' regions: the server pulls the other half
    // (DFlow) and the result is the one computed over the whole record.
    let regions = cache.info().regions.clone();
    let boundary = (1..REGIONS as usize)
        .find(|&r| regions[r] != regions[r - 1])
        .expect("a server boundary") as u64
        * REGION;
    let rows = Scan::args(boundary - 8, 1, 16, 0, Cmp::Ge, 0, 8);
    let got = cache
        .execute(Scan::NAME, boundary - 8, &rows)
        .expect("scan over a straddling row");
    let at = boundary as usize;
    let want = u64::from_le_bytes(model[at..at + 8].try_into().expect("8 bytes"));
    assert_eq!(Scan::result(&got).expect("decode"), (1, want));
    // Batches mix I/O and procedures; a write before an execute on the same server is
    // seen by it.
    let mut b = cache.batch();
    b.write(8, &5u64.to_le_bytes());
    b.write(16, &6u64.to_le_bytes());
    let agg = b.execute(Aggregate::NAME, 8, &Aggregate::args(AggFn::Max, 8, 2, 8));
    let rd = b.read(24, 8);
    let res = b.run();
    assert_eq!(
        Aggregate::result(res.data(agg).expect("agg")).expect("decode"),
        6
    );
    assert_eq!(res.data(rd).expect("read"), &model[24..32]);
    // Writes to other servers are seen once acknowledged (a continuation and a write
    // in the same batch travel different paths to that server).
    cache.write(REGION * 7, &7u64.to_le_bytes()).expect("write");
    let r = cache
        .execute(
            Aggregate::NAME,
            8,
            &Aggregate::args(AggFn::Max, 8, 2, (REGION * 7 - 8) as u32),
        )
        .expect("agg");
    assert_eq!(Aggregate::result(&r).expect("decode"), 7);
    // Async form.
    let f = cache.execute_async(Chase::NAME, 0, &Chase::args(0, 0, 0));
    assert_eq!(
        Chase::result(&f.wait().expect("chase")).expect("decode"),
        (0, 0)
    );
    drop(cache);
    cluster.shutdown();
}

fn execs_and_peer(cluster: &LocalCluster) -> (u64, u64, u64) {
    let mut t = (0, 0, 0);
    for s in cluster.servers() {
        let st = s.stats();
        t.0 += st
            .ops
            .iter()
            .find(|o| o.op == "execute")
            .map_or(0, |o| o.count);
        t.1 += st.peer.forwards;
        t.2 += st.peer.fetches;
    }
    t
}

/// A chain of 64 nodes over three servers followed with each of the paper's options:
/// FFlow (servers hand the invocation along), DFlow (the first server pulls every
/// remote node) and return (the client calls again where it stopped). Same answers;
/// FFlow and DFlow take one client request.
#[test]
fn fflow_dflow_and_return_agree_across_servers() {
    let (cluster, cache, _) = cluster();
    let mut rng = StdRng::seed_from_u64(21);
    let nodes = random_nodes(&mut rng);
    let mut b = cache.batch();
    for (i, &n) in nodes.iter().enumerate() {
        let next = nodes.get(i + 1).copied().unwrap_or(NULL);
        b.write(n + 8, &next.to_le_bytes());
    }
    assert!(b.run().first_error().is_none());
    let want = |hops: u32| {
        if (hops as usize) < nodes.len() {
            (nodes[hops as usize], hops)
        } else {
            (NULL, nodes.len() as u32)
        }
    };

    for flow in [Flow::Ship, Flow::Pull, Flow::Return] {
        let before = execs_and_peer(&cluster);
        let (mut at, mut left, mut followed, mut calls) = (nodes[0], 64u32, 0u32, 0);
        loop {
            let r = cache
                .execute(Chase::NAME, at, &Chase::args_with(at, 8, left, flow))
                .expect("chase");
            calls += 1;
            let (node, n) = Chase::result(&r).expect("decode");
            followed += n;
            left -= n;
            at = node;
            if node == NULL || left == 0 {
                break;
            }
            assert_eq!(flow, Flow::Return, "only return stops early");
            assert!(n > 0 || calls == 1, "a return makes progress");
        }
        assert_eq!((at, followed), want(64), "{flow:?}");
        let after = execs_and_peer(&cluster);
        let execs = after.0 - before.0;
        match flow {
            Flow::Ship => {
                assert_eq!(execs, 1, "FFlow: one client request");
                assert!(after.1 - before.1 >= 2, "servers handed it along");
            }
            Flow::Pull => {
                assert_eq!(execs, 1, "DFlow: one client request");
                assert!(after.2 - before.2 >= 2, "the first server pulled nodes");
                assert_eq!(after.1, before.1, "no hand-offs");
            }
            Flow::Return => assert!(execs > 2, "return: the client called {execs} times"),
        }
    }

    // Many invocations at once, mixed with reads in one batch: every answer right and
    // the read after them still in its place.
    for flow in [Flow::Ship, Flow::Pull] {
        let mut b = cache.batch();
        let mut asked = Vec::new();
        for _ in 0..200 {
            let hops = rng.gen_range(0..=70u32);
            let i = b.execute(
                Chase::NAME,
                nodes[0],
                &Chase::args_with(nodes[0], 8, hops, flow),
            );
            asked.push((i, hops));
        }
        let rd = b.read(nodes[3] + 8, 8);
        let res = b.run();
        for (i, hops) in asked {
            let r = Chase::result(res.data(i).expect("chase")).expect("decode");
            assert_eq!(r, want(hops), "{flow:?} hops {hops}");
        }
        assert_eq!(res.data(rd).expect("read"), &nodes[4].to_le_bytes());
    }
    drop(cache);
    cluster.shutdown();
}

/// Messages a server has for another in one event-loop turn leave in one frame; with
/// batching off, every message is a frame of its own. Answers are the same.
#[test]
fn peer_messages_are_batched_per_destination() {
    for batching in [true, false] {
        let (cluster, cache, model) = cluster_with(batching);
        // 300 gathers of 8 remote records each (pulled: DFlow), all in one client batch.
        let info = cache.info();
        let first_owner = info.regions[0];
        let remote: Vec<u64> = (0..REGIONS)
            .filter(|&r| info.regions[r as usize] != first_owner)
            .map(|r| r * REGION)
            .collect();
        let mut rng = StdRng::seed_from_u64(3);
        let mut b = cache.batch();
        let mut asked = Vec::new();
        for _ in 0..300 {
            let ranges: Vec<(u64, u32)> = (0..8)
                .map(|_| {
                    (
                        remote[rng.gen_range(0..remote.len())] + rng.gen_range(0..REGION - 64),
                        64,
                    )
                })
                .collect();
            let want: Vec<u8> = ranges
                .iter()
                .flat_map(|&(a, l)| model[a as usize..(a + u64::from(l)) as usize].to_vec())
                .collect();
            // Invoked at region 0, so every range is pulled from another server.
            asked.push((b.execute(Gather::NAME, 0, &Gather::args(&ranges)), want));
        }
        let res = b.run();
        for (i, want) in asked {
            assert_eq!(res.data(i).expect("gather"), &want[..]);
        }
        let (frames, msgs) = cluster.servers().iter().fold((0, 0), |(f, m), s| {
            let p = s.stats().peer;
            (f + p.frames_sent, m + p.msgs_sent)
        });
        assert!(
            msgs >= 600,
            "each invocation fetched and was answered: {msgs}"
        );
        if batching {
            assert!(
                frames * 4 < msgs,
                "batched: {frames} frames for {msgs} messages"
            );
        } else {
            assert_eq!(frames, msgs, "unbatched: one frame per message");
        }
        drop(cache);
        cluster.shutdown();
    }
}

/// The client sends consecutive calls of one procedure with arguments of one length
/// as one EXECUTE_RUN. Streaks of calls broken every way (another procedure, another
/// argument length, arguments too long for a run, reads between, a batch boundary, a
/// call whose address is on another server) each get their own answer.
#[test]
fn calls_sent_as_runs_answer_each_call() {
    let (cluster, cache, model) = cluster();
    let client = cluster
        .client_with(
            ClientConfig::new("")
                .op_timeout(Duration::from_secs(10))
                .batch_size(16)
                .queue_depth(2),
        )
        .expect("small-batch client");
    let cache_small = client.open("sprocs").expect("open");
    let mut rng = StdRng::seed_from_u64(23);
    let span = REGIONS * REGION;
    for c in [&cache, &cache_small] {
        let mut b = c.batch();
        let mut want: Vec<(usize, Vec<u8>)> = Vec::new();
        while want.len() < 1500 {
            let kind = rng.gen_range(0..4);
            for _ in 0..rng.gen_range(1..40) {
                let base = rng.gen_range(0..span - 64) / 8 * 8;
                let (name, args) = match kind {
                    0 => {
                        let n = rng.gen_range(1..=3u32);
                        (Aggregate::NAME, Aggregate::call(AggFn::Sum, n, 8).to_vec())
                    }
                    1 => {
                        let n = rng.gen_range(1..=3u32);
                        (Aggregate::NAME, Aggregate::args(AggFn::Max, base, n, 16))
                    }
                    // Over 32 bytes of arguments: sent call by call.
                    2 => {
                        let ranges = [(base, 8), (base + 16, 4), (base + 40, 2)];
                        (Gather::NAME, Gather::args(&ranges))
                    }
                    _ => {
                        let i = b.read(base, 8);
                        want.push((i, model[base as usize..base as usize + 8].to_vec()));
                        continue;
                    }
                };
                let i = b.execute(name, base, &args);
                want.push((i, run_locally(&model, name, base, args)));
            }
        }
        let res = b.run();
        for (i, w) in want {
            assert_eq!(res.data(i).expect("answered"), &w[..], "op {i}");
        }
    }
    drop((cache, cache_small));
    cluster.shutdown();
}

/// Hundreds of hand-offs arriving at one worker of a server in a few frames: the
/// worker queues them, wakes its idle sibling, and the sibling steals part of the
/// queue. Every answer stays right.
#[test]
fn handed_over_invocations_are_shared_between_workers() {
    const REGIONS: u64 = 8;
    let opts = ClusterOptions::default()
        .servers(2)
        .server_threads(2)
        .region_size(REGION)
        .server_memory(8 << 20);
    let cluster = LocalCluster::start(&opts).expect("cluster");
    let client = cluster
        .client_with(ClientConfig::new("").op_timeout(Duration::from_secs(10)))
        .expect("client");
    let cache = client
        .create_with_region_size("steal", REGIONS * REGION, Some(REGION))
        .expect("create");
    let info = cache.info();
    let (a, b) = (
        info.regions[0],
        info.regions[1..].iter().find(|&&s| s != info.regions[0]),
    );
    let b = *b.expect("cache spans both servers");
    let on = |server: u32| -> Vec<u64> {
        (0..REGIONS)
            .filter(|&r| info.regions[r as usize] == server)
            .map(|r| r * REGION)
            .collect()
    };
    // One chain: a head on server A, then 63 nodes on server B. Every invocation makes
    // one hand-off A -> B and 63 local hops on B.
    let (a_regions, b_regions) = (on(a), on(b));
    let mut rng = StdRng::seed_from_u64(5);
    let head = a_regions[0] + 32 * rng.gen_range(0..REGION / 32);
    let mut chain = vec![head];
    let mut used = HashSet::from([head]);
    while chain.len() < 64 {
        let r = b_regions[rng.gen_range(0..b_regions.len())];
        let n = r + 32 * rng.gen_range(0..REGION / 32);
        if used.insert(n) {
            chain.push(n);
        }
    }
    let mut w = cache.batch();
    for (i, &n) in chain.iter().enumerate() {
        let next = chain.get(i + 1).copied().unwrap_or(NULL);
        w.write(n + 8, &next.to_le_bytes());
    }
    assert!(w.run().first_error().is_none());

    let b_handle = cluster
        .servers()
        .iter()
        .find(|s| s.stats().server_id == b)
        .expect("server B");
    // Whether the sibling wakes before the owner drains its queue is up to the OS
    // scheduler; on a loaded 2-core host it can miss many rounds in a row, so the
    // bound is time, not a round count.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut rounds = 0;
    while b_handle.stats().peer.stolen == 0 {
        rounds += 1;
        assert!(
            Instant::now() < deadline,
            "no steal after {rounds} batches of 400 hand-offs (30 s)"
        );
        let mut batch = cache.batch();
        let asked: Vec<_> = (0..400)
            .map(|_| {
                batch.execute(
                    Chase::NAME,
                    head,
                    &Chase::args_with(head, 8, 64, Flow::Ship),
                )
            })
            .collect();
        let res = batch.run();
        for i in asked {
            let r = Chase::result(res.data(i).expect("chase")).expect("decode");
            assert_eq!(r, (NULL, 64), "round {rounds}");
        }
    }
    let p = b_handle.stats().peer;
    assert!(p.queued >= 400, "hand-offs go through the queue: {p:?}");
    assert!(p.stolen <= p.queued, "{p:?}");
    drop(cache);
    cluster.shutdown();
}

/// Server A's region table says server B holds a region that server C holds. A hands
/// a procedure to B, which knows better and passes it on to C (FFlow); A pulls from
/// B, which answers `wrong server` naming C, and A asks C (DFlow). Answers stay right.
#[test]
fn stale_region_tables_are_corrected_on_the_way() {
    use farcache_proto::Role;
    use farcache_proto::blocking::{control_call, handshake};
    use farcache_proto::control::{ControlRequest, ControlResponse};

    let (cluster, cache, _) = cluster();
    let info = cache.info();
    let a = info.regions[0];
    let r = (1..REGIONS as usize)
        .find(|&i| info.regions[i] != a)
        .expect("a region off server A");
    let c = info.regions[r];
    let b = info
        .servers
        .iter()
        .map(|s| s.id)
        .find(|&id| id != a && id != c)
        .expect("a third server");
    let addr_of = |id: u32| info.server(id).expect("server").addr.clone();
    let handle = |id: u32| {
        cluster
            .servers()
            .iter()
            .find(|s| s.server_id() == id)
            .expect("handle")
    };

    // A two-node chain: the head in region 0 (on A), the second node in region r (C).
    let (n0, n1) = (64, r as u64 * REGION + 96);
    cache.write(n0 + 8, &n1.to_le_bytes()).expect("link");
    cache.write(n1 + 8, &NULL.to_le_bytes()).expect("end");

    // Tell A, with a newer epoch than the manager's, that B holds region r.
    let mut owners: Vec<String> = info.regions.iter().map(|&id| addr_of(id)).collect();
    owners[r] = addr_of(b);
    let mut s = std::net::TcpStream::connect(addr_of(a)).expect("connect A");
    let cred = farcache_proto::Credential::Cluster(cluster.secret().clone());
    handshake(&mut s, Role::Manager, 77, "", &cred).expect("hello");
    let req = ControlRequest::SetRoutes {
        cache: info.id,
        epoch: info.epoch + 1000,
        owners,
        capacity: 0,
        backups: Vec::new(),
    };
    assert!(matches!(
        control_call(&mut s, &req),
        Ok(ControlResponse::Ok)
    ));

    let before_b = handle(b).stats().peer;
    let got = cache
        .execute(Chase::NAME, n0, &Chase::args_with(n0, 8, 2, Flow::Ship))
        .expect("FFlow through a stale table");
    assert_eq!(Chase::result(&got).expect("decode"), (NULL, 2));
    let after_b = handle(b).stats().peer;
    assert!(
        after_b.forwards > before_b.forwards,
        "B passed the hand-off on: {after_b:?}"
    );

    let before_a = handle(a).stats().peer;
    let got = cache
        .execute(Chase::NAME, n0, &Chase::args_with(n0, 8, 2, Flow::Pull))
        .expect("DFlow through a stale table");
    assert_eq!(Chase::result(&got).expect("decode"), (NULL, 2));
    let after_a = handle(a).stats().peer;
    assert!(
        after_a.fetches >= before_a.fetches + 2,
        "A asked B, then C: {after_a:?}"
    );
    drop(cache);
    cluster.shutdown();
}
