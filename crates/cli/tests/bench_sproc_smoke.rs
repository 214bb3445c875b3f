//! `farcache bench sproc` end to end on tiny sizes: Redis EVALSHA baselines measured,
//! procedure rows carry their ratios, round trips counted by the servers, targets, JSON
//! and PNG written. Needs redis-server and redis-benchmark (`scripts/test.sh` installs
//! them).

mod common;

use std::process::Command;

use serde_json::Value;

fn f(row: &Value, field: &str) -> f64 {
    row[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {field} in {row:#}"))
}

#[test]
fn bench_sproc_writes_rows_with_ratios() {
    let out = tempfile::tempdir().expect("tempdir");
    // A 30 x 30 grid as a text edge list: the file graph's rows.
    let grid = out.path().join("grid.txt");
    let mut edges = String::from("# a grid\n");
    for r in 0..30u32 {
        for c in 0..30u32 {
            let v = r * 30 + c;
            if c + 1 < 30 {
                edges.push_str(&format!("{v} {}\n", v + 1));
            }
            if r + 1 < 30 {
                edges.push_str(&format!("{v} {}\n", v + 30));
            }
        }
    }
    std::fs::write(&grid, edges).expect("write the grid");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_farcache"));
    cmd.args(["bench", "sproc", "--quick", "--seconds", "0.3"])
        .arg("--graph-file")
        .arg(&grid)
        .args([
            "-b",
            "256",
            "-q",
            "2",
            "--records",
            "4096",
            "--edges",
            "20000",
            "--graph-scale",
            "10",
        ])
        .args(["--chains", "16", "--redis-requests", "2000", "--out"])
        .arg(out.path());
    let stdout = common::run_ok(&mut cmd, "farcache bench sproc");
    assert!(stdout.contains("read one record and verify"), "{stdout}");

    let latest = out.path().join("sproc-latest.json");
    let json: Value =
        serde_json::from_slice(&std::fs::read(&latest).expect("sproc-latest.json")).expect("json");
    assert_eq!(json["bench"], "sproc");
    let evals = json["baselines"]["redis_eval"]
        .as_array()
        .expect("redis_eval");
    assert_eq!(evals.len(), 3);
    // Both drivers ran; the faster is named.
    for e in evals {
        assert_eq!(e["spin_runs"].as_array().map(Vec::len), Some(2), "{e:#}");
        let driver = e["best_driver"].as_str().unwrap_or_default();
        let peer = e["best_peer"].as_str().unwrap_or_default();
        match driver {
            "spinning" => assert!(peer.starts_with("redis spinning EVALSHA P="), "{e:#}"),
            "redis-benchmark" => {
                assert!(
                    peer.starts_with("redis-benchmark redis EVALSHA P="),
                    "{e:#}"
                )
            }
            _ => panic!("best_driver {driver:?}: {e:#}"),
        }
        let spin_best = e["spin_runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["errors"] == 0)
            .filter_map(|r| r["mops"].as_f64())
            .fold(0.0, f64::max);
        let tool_best = e["tool_best"]["ops_per_sec"].as_f64().unwrap_or(0.0) / 1e6;
        assert!(
            (f(e, "best_mops") - spin_best.max(tool_best)).abs() < 1e-9,
            "{e:#}"
        );
    }
    let rows = json["rows"].as_array().expect("rows");
    for r in rows {
        let name = r["name"].as_str().unwrap_or_default();
        assert!(!name.contains("errors"), "wrong answers: {r:#}");
    }
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no row {name:?} in {rows:#?}"))
    };
    for name in [
        "redis best EVALSHA verify 1 key",
        "redis spinning EVALSHA verify 1 key",
        "redis-benchmark EVALSHA verify 1 key",
        "redis unpipelined EVALSHA verify 1 key",
        "redis best EVALSHA sum 2 keys",
        "redis best EVALSHA sum 3 keys",
    ] {
        let r = row(name);
        assert_eq!(r["system"], "redis");
        assert!(f(r, "mops") > 0.0, "{r:#}");
    }

    // Row 1: batched, against Redis's best EVALSHA, with the 20x target.
    let verify = row("read one record and verify (built-in)");
    assert_eq!(verify["system"], "farcache");
    assert_eq!(verify["op"], "aggregate");
    assert_eq!(
        (verify["c"].as_u64(), verify["s"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        (verify["b"].as_u64(), verify["q"].as_u64()),
        (Some(256), Some(2))
    );
    let ratio = f(verify, "ratio_vs_redis");
    let want = f(verify, "mops") / f(verify, "baseline_mops");
    assert!((ratio - want).abs() < 1e-9 * want.max(1.0), "{verify:#}");
    // Compared with the faster of the spinning driver and redis-benchmark, named.
    assert_eq!(evals[0]["script"]["label"], "verify 1 key");
    assert_eq!(verify["baseline"], evals[0]["best_peer"], "{verify:#}");
    assert_eq!(verify["best_peer"], evals[0]["best_peer"], "{verify:#}");
    assert_eq!(f(verify, "baseline_mops"), f(&evals[0], "best_mops"));
    assert_eq!(verify["target"], ">= 20x redis EVALSHA best");
    assert!(verify["meets_target"].is_boolean());
    // The WebAssembly variant: within 2x of the built-in's time, and against Redis.
    let wasm = row("read one record and verify (WebAssembly)");
    assert_eq!(
        wasm["target"],
        "<= 2x built-in time, >= 20x redis EVALSHA best"
    );
    assert!(
        f(wasm, "mops") > 0.0 && wasm["meets_target"].is_boolean(),
        "{wasm:#}"
    );
    let unbatched = row("read one record and verify, unbatched");
    assert!(f(unbatched, "p50_us") > 0.0, "{unbatched:#}");

    // Row 2: the procedure's throughput over the client-side read+add's, and Redis's.
    for (k, target) in [
        (2, ">= 1.8x client, >= 20x redis"),
        (3, ">= 2.5x client, >= 20x redis"),
    ] {
        let exec = row(&format!("aggregate {k} records"));
        let local = row(&format!("aggregate {k} records, client read+add"));
        let want = f(exec, "mops") / f(local, "mops");
        let got = f(exec, "ratio_vs_client_side");
        assert!((got - want).abs() < 1e-9 * want.max(1.0), "{exec:#}");
        assert!(f(exec, "ratio_vs_redis") > 0.0, "{exec:#}");
        assert_eq!(exec["target"], target);
        assert!(exec["meets_target"].is_boolean());
        assert_eq!(local["op"], "read");
        assert!(local["ratio_vs_client_side"].is_null());
    }

    // Row 3: round trips come from the servers' op counters, so they are exact: one
    // EXECUTE per chase with either flow (the servers cross between themselves), one
    // read per node at the client; server messages are counted too.
    for flow in ["FFlow", "DFlow"] {
        for label in [
            "pointer chase 64 across 3 servers",
            "pointer chase 64, every hop crosses",
        ] {
            let chase = row(&format!("{label} ({flow})"));
            assert_eq!(chase["op"], "chase");
            assert_eq!(f(chase, "round_trips"), 1.0, "{chase:#}");
            assert_eq!(f(chase, "client_side_round_trips"), 64.0, "{chase:#}");
            assert!(f(chase, "peer_msgs") >= 2.0, "{chase:#}");
            assert!(f(chase, "peer_frames") >= 1.0, "{chase:#}");
            let local = row(&format!("{label}, client reads"));
            let want = f(local, "p50_us") / f(chase, "p50_us");
            assert!((f(chase, "ratio_vs_client_side") - want).abs() < 1e-9 * want.max(1.0));
        }
    }
    let chase = row("pointer chase 64 across 3 servers (FFlow)");
    assert_eq!(chase["target"], ">= 5x client time, >= 10x fewer RT");
    assert!(chase["meets_target"].is_boolean());
    // Every pointer crosses: FFlow hands the invocation over at each of them.
    let worst = row("pointer chase 64, every hop crosses (FFlow)");
    assert!(f(worst, "peer_msgs") >= 63.0, "{worst:#}");
    assert!(worst["target"].is_null());

    // Row 4: k-hop, no target; DFlow with and without per-destination batching.
    for k in [2, 3] {
        let local = row(&format!("k-hop count k={k}, client BFS"));
        let trips = f(local, "round_trips");
        assert!((1.0..=2.0 * k as f64).contains(&trips), "{local:#}");
        for name in [
            "FFlow, batched",
            "DFlow, batched",
            "DFlow, one frame per message",
        ] {
            let exec = row(&format!("k-hop count k={k} ({name})"));
            assert_eq!(exec["op"], "khop");
            assert!(f(exec, "p50_us") > 0.0 && f(local, "p50_us") > 0.0);
            assert_eq!(f(exec, "round_trips"), 1.0, "{exec:#}");
            assert!(exec["target"].is_null());
        }
        let unbatched = row(&format!("k-hop count k={k} (DFlow, one frame per message)"));
        assert_eq!(
            f(unbatched, "peer_msgs"),
            f(unbatched, "peer_frames"),
            "{unbatched:#}"
        );
        let batched = row(&format!("k-hop count k={k} (DFlow, batched)"));
        assert!(
            f(batched, "peer_frames") <= f(batched, "peer_msgs"),
            "{batched:#}"
        );
    }

    // Row 5: the level-synchronous traversal, one `expand` per server per level (one
    // round trip per level against the client's two), checked answers, bytes counted.
    for k in [2u32, 3] {
        for shared in ["", ", 16 sources per traversal"] {
            let t = row(&format!(
                "traversal k={k}{shared} (expand per server per level)"
            ));
            assert_eq!(t["op"], "expand");
            let per_query = if shared.is_empty() { 1.0 } else { 1.0 / 16.0 };
            assert!(
                f(t, "round_trips") <= f64::from(k) * per_query + 1e-9,
                "{t:#}"
            );
            assert!(
                f(t, "client_side_round_trips") > f(t, "round_trips"),
                "{t:#}"
            );
            assert!(f(t, "bytes_per_query") > 0.0, "{t:#}");
            assert!(f(t, "client_bytes_per_query") > 0.0, "{t:#}");
            assert!(f(t, "ratio_vs_client_side") > 0.0, "{t:#}");
            assert!(t["one_way_delay_us"].is_null(), "{t:#}");
            // One source on loopback: "no slower than the client" (issue 34).
            if shared.is_empty() {
                assert_eq!(t["target"], ">= 1x client p50", "{t:#}");
                assert!(t["meets_target"].is_boolean(), "{t:#}");
            } else {
                assert!(t["target"].is_null(), "{t:#}");
            }
            // The file graph's rows, by the file's name, answers checked the same.
            let g = row(&format!(
                "traversal k={k} on grid{shared} (expand per server per level)"
            ));
            assert!(f(g, "ratio_vs_client_side") > 0.0, "{g:#}");
            assert!(f(g, "bytes_per_query") > 0.0, "{g:#}");
            assert!(!g["name"].as_str().unwrap_or_default().contains("errors"));
        }
    }

    let pngs = std::fs::read_dir(out.path())
        .expect("read out dir")
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "png"))
        .count();
    assert!(pngs >= 1, "no chart written");
}

#[test]
fn bench_sproc_rejects_bad_arguments() {
    for args in [
        &["bench", "sproc", "-b", "0", "--no-baselines"][..],
        &["bench", "sproc", "-q", "0", "--no-baselines"],
        &["bench", "sproc", "--seconds", "0", "--no-baselines"],
        &["bench", "sproc", "--edges", "5", "--no-baselines"],
        &["bench", "sproc", "--records", "3", "--no-baselines"],
        &["bench", "sproc", "--chains", "0", "--no-baselines"],
        &["bench", "sproc", "--graph-scale", "0", "--no-baselines"],
        &[
            "bench",
            "sproc",
            "--graph-file",
            "/no/such/graph.gt",
            "--no-baselines",
        ],
    ] {
        common::assert_refused(args);
    }
}
