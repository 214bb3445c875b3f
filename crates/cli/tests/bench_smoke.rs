//! `farcache bench io` end to end: baselines measured, farcache rows carry ratios,
//! the best peer, the in-process ceiling and targets; JSON and PNG written. Needs
//! redis-server, redis-benchmark, memcached and sockperf (the bench installs them
//! when run as root).

mod common;

use std::process::Command;

#[test]
fn bench_io_writes_rows_with_ratios() {
    let out = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_farcache"));
    cmd.args([
        "bench", "io", "--quick", "--sizes", "8,4KiB", "--dist", "uniform",
    ])
    .args(["--seconds", "0.3", "--records", "4096", "--out"])
    .arg(out.path());
    let stdout = common::run_ok(&mut cmd, "farcache bench io");
    assert!(stdout.contains("farcache read 8B uniform"), "{stdout}");

    let latest = out.path().join("io-latest.json");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&latest).expect("io-latest.json")).expect("json");
    let rows = json["rows"].as_array().expect("rows");
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no row {name:?} in {rows:#?}"))
    };
    for system in [
        "redis",
        "memcached",
        "sockperf",
        "rawtcp",
        "in-process",
        "farcache",
    ] {
        assert!(
            rows.iter().any(|r| r["system"] == system),
            "no {system} rows"
        );
    }

    let read8 = row("farcache read 8B uniform");
    let mops = read8["mops"].as_f64().expect("mops");
    assert!(mops > 0.0, "{read8}");
    let base = read8["baseline_mops"].as_f64().expect("baseline_mops");
    let ratio = read8["ratio_vs_redis"].as_f64().expect("ratio_vs_redis");
    assert!(
        (ratio - mops / base).abs() < 1e-9 * ratio.max(1.0),
        "{read8}"
    );
    // The best peer is the fastest peer row of the same op, size and keyspace.
    let peer = read8["best_peer"].as_str().expect("best_peer");
    let peer_mops = read8["best_peer_mops"].as_f64().expect("best_peer_mops");
    let fastest = rows
        .iter()
        .filter(|r| {
            (r["system"] == "redis" || r["system"] == "memcached")
                && r["op"] == "GET"
                && r["record_size"] == 8
                && r["b"].as_u64().is_some_and(|b| b > 1)
        })
        .filter_map(|r| r["mops"].as_f64())
        .fold(0.0f64, f64::max);
    assert!(
        peer_mops >= fastest * (1.0 - 1e-9),
        "{peer} at {peer_mops} Mops is not the fastest GET row ({fastest})"
    );
    let vs_peer = read8["ratio_vs_best_peer"]
        .as_f64()
        .expect("ratio_vs_best_peer");
    assert!((vs_peer - mops / peer_mops).abs() < 1e-9 * vs_peer.max(1.0));
    let ceiling = row("ceiling read 8B uniform")["mops"]
        .as_f64()
        .expect("ceiling");
    let frac = read8["fraction_of_ceiling"]
        .as_f64()
        .expect("fraction_of_ceiling");
    assert!(
        (frac - mops / ceiling).abs() < 1e-9 * frac.max(1.0),
        "{read8}"
    );
    assert_eq!(read8["working_set_bytes"], 4096 * 8);
    assert!(
        read8["meets_target"].is_boolean(),
        "8 B read carries the best-peer and ceiling targets"
    );
    assert_eq!(read8["c"], 1);
    assert_eq!(read8["b"], 1024);

    let lat = row("farcache unbatched read 8B");
    assert!(lat["p50_us"].as_f64().is_some_and(|v| v > 0.0), "{lat}");
    assert!(
        lat["latency_ratio_vs_raw_tcp"]
            .as_f64()
            .is_some_and(|v| v > 0.0),
        "{lat}"
    );
    assert!(lat["meets_target"].is_boolean());

    let big = row("farcache read 4096B uniform");
    assert!(
        big["bandwidth_ratio_vs_stream"]
            .as_f64()
            .is_some_and(|v| v > 0.0),
        "{big}"
    );

    let pngs = std::fs::read_dir(out.path())
        .expect("read out dir")
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "png"))
        .count();
    assert!(pngs >= 1, "no chart written");
}

#[test]
fn bench_io_rejects_bad_arguments() {
    for args in [
        &["bench", "io", "--sizes", "0"][..],
        &["bench", "io", "--ops", "delete"],
        &["bench", "io", "--dist", "pareto"],
        &["bench", "io", "-b", "0", "--no-baselines"],
        &["bench", "io", "--working-sets", "0", "--no-baselines"],
        &["bench", "io", "--working-sets", "lots", "--no-baselines"],
        &["bench", "io", "--records", "0", "--no-baselines"],
    ] {
        common::assert_refused(args);
    }
}

/// `farcache bench control`, small: create and delete rows on redb and on etcd, a
/// failover row, each with latencies; the etcd rows carry their targets.
#[test]
fn bench_control_measures_both_catalogues_and_a_failover() {
    let out = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_farcache"));
    cmd.args(["bench", "control", "--creates", "20", "--failovers", "1"])
        .args(["--catalogue", "200x10", "--catalogue-servers", "5"])
        .arg("--out")
        .arg(out.path());
    let stdout = common::run_ok(&mut cmd, "farcache bench control");
    let latest = out.path().join("control-latest.json");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&latest).expect("control-latest.json"))
            .expect("json");
    let rows = json["rows"].as_array().expect("rows");
    for name in [
        "create, redb (1 manager)",
        "delete, redb (1 manager)",
        "create, etcd (3 managers)",
        "delete, etcd (3 managers)",
        "leader failover, etcd (kill -> create answered)",
    ] {
        let r = rows
            .iter()
            .find(|r| r["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no row {name:?}: {stdout}"));
        let p50 = r["p50_us"].as_f64().expect("p50_us");
        assert!(p50 > 0.0 && p50 <= r["p999_us"].as_f64().unwrap(), "{r}");
    }
    let failover = rows
        .iter()
        .find(|r| r["op"] == "failover")
        .expect("failover row");
    assert!(failover["meets_target"].is_boolean(), "{failover}");
    for op in ["upkeep", "commit", "load"] {
        let r = rows
            .iter()
            .find(|r| r["op"] == op && r["name"].as_str().is_some_and(|n| n.contains("200x10")))
            .unwrap_or_else(|| panic!("no catalogue {op} row: {stdout}"));
        assert!(r["p50_us"].as_f64().unwrap() > 0.0, "{r}");
    }
    // A failover waits at least for the dead leader's etcd lease (1 s) to lapse.
    assert!(
        failover["p50_us"].as_f64().unwrap() > 500_000.0,
        "{failover}"
    );
}
