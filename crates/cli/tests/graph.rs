//! Graphs in a cache on a 3-server process cluster: every traversal answer checked
//! against a local BFS, with regions moving under a client whose table is stale, and
//! the `farcache graph` commands end to end.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{bin, eventually};
use farcache_client::{MigrationMode, ServerState};
use farcache_graph::{Csr, GraphCache, LoadOptions, kronecker_edges};
use farcache_testkit::{ClusterOptions, ProcessCluster};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn cluster() -> ProcessCluster {
    let opts = ClusterOptions::default()
        .servers(3)
        .region_size(64 << 10)
        .server_memory(64 << 20);
    ProcessCluster::start(bin(), &opts).expect("start process cluster")
}

/// A scale-12 Kronecker graph (seed `seed`) and the cache `name` it is loaded into,
/// 6 partitions of up to 64 KiB, `replicas` copies of each.
fn kronecker_in(
    client: &farcache_client::Client,
    name: &str,
    seed: u64,
    replicas: u32,
) -> (Csr, GraphCache) {
    let scale = 12;
    let g = Csr::from_edges(
        1 << scale,
        &kronecker_edges(scale, 16, seed).expect("edges"),
        true,
    )
    .expect("csr");
    let opts = LoadOptions {
        region_size: 64 << 10,
        min_parts: 6,
        undirected: true,
        replicas,
    };
    let gc = GraphCache::create(client, name, &g, &opts, |_, _| {}).expect("load");
    (g, gc)
}

fn sources(g: &Csr, n: usize, seed: u64) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut s = Vec::new();
    while s.len() < n {
        let v = rng.gen_range(0..g.vertices());
        if g.degree(v) > 0 {
            s.push(v);
        }
    }
    s
}

#[test]
fn traversals_match_a_local_bfs_while_regions_move() {
    let c = cluster();
    let client = c.client().expect("client");
    let scale = 12;
    let (g, gc) = kronecker_in(&client, "kron", 3, 1);
    let mut servers = gc.owners();
    servers.sort_unstable();
    servers.dedup();
    assert_eq!(servers.len(), 3, "the partitions span all three servers");
    let opened = GraphCache::open(client.open("kron").expect("open")).expect("layout");
    assert_eq!(opened.layout, gc.layout);

    let src = sources(&g, 24, 9);
    for k in 1..=4u8 {
        let want: Vec<Vec<u64>> = src.iter().map(|&s| g.levels(s, k)).collect();
        let t = gc.traverse(&src, k).expect("traverse");
        assert_eq!(t.levels, want, "expand traversal, k={k}");
        assert!(
            t.stats.rounds >= u32::from(k.min(want.iter().map(Vec::len).max().unwrap_or(0) as u8))
        );
        let r = gc.traverse_by_reads(&src, k).expect("reads");
        assert_eq!(r.levels, want, "client-side reads, k={k}");
        if k >= 2 {
            assert!(
                t.stats.bytes() < r.stats.bytes(),
                "k={k}: traversal moved {} B, reads {} B",
                t.stats.bytes(),
                r.stats.bytes()
            );
        }
    }

    // A second client keeps its table while the first moves every region of one
    // server away: the traversal's calls meet partitions that are not there (and
    // wrong-server replies) and must still give the exact answer.
    let stale_client = c.client().expect("client");
    let stale = GraphCache::open(stale_client.open("kron").expect("open")).expect("layout");
    assert_eq!(
        stale.traverse(&src[..1], 1).expect("warm").levels[0],
        g.levels(src[0], 1)
    );
    let victim = gc.owners()[0];
    let info = gc.cache.info();
    for (r, &owner) in info.regions.iter().enumerate() {
        if owner == victim {
            client
                .move_region("kron", r as u32, None, MigrationMode::DirtyTracking)
                .expect("move");
        }
    }
    assert!(
        !gc.cache
            .refresh()
            .expect("refresh")
            .regions
            .contains(&victim)
    );
    let want: Vec<Vec<u64>> = src.iter().map(|&s| g.levels(s, 3)).collect();
    assert_eq!(stale.traverse(&src, 3).expect("after moves").levels, want);

    // Bad sources are refused before anything is sent.
    let err = gc.traverse(&[1 << scale], 2).expect_err("out of range");
    assert!(err.to_string().contains("source"), "{err}");
}

/// What the traversal loop saw: answers (all checked), errors, and when.
#[derive(Default)]
struct Seen {
    answers: Vec<Instant>,
    errors: Vec<(Instant, String)>,
}

#[test]
fn a_server_killed_mid_traversal_never_gives_a_wrong_answer() {
    let mut c = cluster();
    let client = c.client().expect("client");
    let (g, gc) = kronecker_in(&client, "kron-r2", 5, 2);
    let src = sources(&g, 8, 11);
    let want: Vec<Vec<u64>> = src.iter().map(|&s| g.levels(s, 3)).collect();

    // Another client traverses without pause while a server holding partitions is
    // SIGKILLed; every answer it gets is checked against the local BFS.
    let stop = AtomicBool::new(false);
    let victim_addr = c.server_addr(1).to_owned();
    let victim = client
        .status()
        .expect("status")
        .servers
        .iter()
        .find(|s| s.addr == victim_addr)
        .map(|s| s.id)
        .expect("victim's id");
    assert!(gc.cache.info().regions.contains(&victim));
    let reader = c.client().expect("client");
    let (seen, killed_at, dead_at) = std::thread::scope(|scope| {
        let looper = scope.spawn(|| {
            let gc = GraphCache::open(reader.open("kron-r2").expect("open")).expect("layout");
            let mut seen = Seen::default();
            while !stop.load(Ordering::Acquire) {
                match gc.traverse(&src, 3) {
                    Ok(t) => {
                        assert_eq!(t.levels, want, "a traversal answered wrong");
                        seen.answers.push(Instant::now());
                    }
                    Err(e) => seen.errors.push((Instant::now(), e.to_string())),
                }
            }
            seen
        });
        // Some traversals first (a scale-12 k = 3 one takes a few ms).
        std::thread::sleep(Duration::from_millis(500));
        let killed_at = Instant::now();
        c.kill_server(1).expect("kill");
        eventually(
            "the manager declares the killed server dead",
            Duration::from_secs(30),
            Duration::from_millis(50),
            || {
                client
                    .status()
                    .ok()?
                    .servers
                    .iter()
                    .any(|s| s.id == victim && s.state == ServerState::Dead)
                    .then_some(())
            },
        );
        let dead_at = Instant::now();
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::Release);
        (looper.join().expect("traversal loop"), killed_at, dead_at)
    });
    let before = seen.answers.iter().filter(|&&t| t < killed_at).count();
    let after = seen.answers.iter().filter(|&&t| t > dead_at).count();
    let late_errors: Vec<&String> = seen
        .errors
        .iter()
        .filter(|(t, _)| *t > dead_at + Duration::from_secs(1))
        .map(|(_, e)| e)
        .collect();
    eprintln!(
        "{before} answers before the kill, {after} after the failover, errors: {:?}",
        seen.errors.iter().map(|(_, e)| e).collect::<Vec<_>>()
    );
    assert!(before >= 1, "no traversal finished before the kill");
    assert!(
        after >= 3,
        "only {after} traversals answered after the failover"
    );
    assert!(
        late_errors.is_empty(),
        "traversals still failing a second after the failover: {late_errors:?}"
    );
    // The killed server's partitions are served by their backups now.
    let regions = gc.cache.refresh().expect("refresh").regions.clone();
    assert!(!regions.contains(&victim), "{regions:?}");
}

fn farcache(c: &ProcessCluster, args: &[&str]) -> String {
    let secret = c.secret_path();
    let out = Command::new(bin())
        .args(args)
        .args(["--manager", c.manager_addr(), "--secret-file"])
        .arg(&secret)
        .env("FARCACHE_LOG", "warn")
        .output()
        .expect("run farcache");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "farcache {args:?} failed: {}{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn graph_commands_load_generate_and_count() {
    let c = cluster();
    // A 40 x 40 grid: from a corner, the vertices within k hops are those with
    // row + column ≤ k.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("grid.txt");
    let mut text = String::from("# grid 40x40\n");
    let id = |r: u32, c: u32| r * 40 + c;
    for r in 0..40 {
        for col in 0..40 {
            if col + 1 < 40 {
                text.push_str(&format!("{} {}\n", id(r, col), id(r, col + 1)));
            }
            if r + 1 < 40 {
                text.push_str(&format!("{}\t{}\n", id(r, col), id(r + 1, col)));
            }
        }
    }
    std::fs::write(&file, text).expect("write edge list");
    let out = farcache(
        &c,
        &[
            "graph",
            "load",
            file.to_str().expect("utf-8"),
            "--cache",
            "grid",
            "--region-size",
            "64k",
        ],
    );
    assert!(out.contains("1600 vertices, 3120 edges"), "{out}");
    let out = farcache(
        &c,
        &[
            "graph",
            "khop",
            "--cache",
            "grid",
            "--source",
            "0",
            "41",
            "--k",
            "3",
            "--compare",
        ],
    );
    // Corner: 2 + 3 + 4 cells; (1, 1): the rings at distance 1, 2, 3 clipped at row
    // and column 0: 4 + 6 + 6.
    assert!(
        out.contains("source 0: 9 vertices within 3 hops (per level: [2, 3, 4])"),
        "{out}"
    );
    assert!(
        out.contains("source 41: 16 vertices within 3 hops (per level: [4, 6, 6])"),
        "{out}"
    );
    assert!(out.contains("same counts"), "{out}");

    let out = farcache(
        &c,
        &[
            "graph",
            "generate",
            "--scale",
            "11",
            "--cache",
            "kron",
            "--region-size",
            "64k",
        ],
    );
    assert!(out.contains("2048 vertices"), "{out}");
    let out = farcache(
        &c,
        &[
            "graph",
            "khop",
            "--cache",
            "kron",
            "--source",
            "1",
            "2",
            "3",
            "--k",
            "2",
            "--compare",
        ],
    );
    assert!(out.contains("same counts"), "{out}");
}
