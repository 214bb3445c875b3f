//! `farcache bench store` end to end on a tiny keyspace: Redis measured on the same keys,
//! the store's rows carry their ratios (to Redis's best, to an 8-byte read), every key
//! is found, and the JSON is written where `--json` says. Needs redis-server and
//! redis-benchmark (the bench installs them when run as root; `scripts/test.sh` does).

mod common;

use std::process::Command;

use serde_json::Value;

fn f(row: &Value, field: &str) -> f64 {
    row[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {field} in {row:#}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn bench_store_writes_rows_with_ratios() {
    let out = tempfile::tempdir().expect("tempdir");
    let json_path = out.path().join("nested").join("store.json");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_farcache"));
    cmd.args([
        "bench", "store", "--quick", "--keys", "2000", "--sizes", "64", "--json",
    ])
    .arg(&json_path);
    let stdout = common::run_ok(&mut cmd, "farcache bench store");
    assert!(stdout.contains("farcache store GET (mget) 64B"), "{stdout}");
    assert!(stdout.contains("ratio_vs_byte_read"), "{stdout}");

    let json: Value =
        serde_json::from_slice(&std::fs::read(&json_path).expect("--json file")).expect("json");
    assert_eq!(json["bench"], "store");
    assert_eq!(
        (json["keys"].as_u64(), json["batch"].as_u64()),
        (Some(2000), Some(64))
    );
    let rows = json["rows"].as_array().expect("rows");
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no row {name:?} in {rows:#?}"))
    };
    for r in rows {
        assert!(f(r, "mops") > 0.0, "{r:#}");
    }

    // Redis: every mode on the same keys and batch shape, and the unpipelined calls.
    for name in [
        "redis MGET b=64 q=4 c=1 64B",
        "redis pipelined GET P=64 q=4 c=2 64B",
        "redis MSET b=64 q=4 c=1 64B",
        "redis pipelined SET P=64 q=4 c=2 64B",
        "redis unpipelined spin GET 64B",
        "redis unpipelined spin SET 64B",
    ] {
        assert_eq!(row(name)["system"], "redis");
    }

    // The store's rows: found under their plain names (no error or miss suffix).
    for name in [
        "farcache store load (mput) 64B",
        "farcache store first GET (mget) 64B",
        "farcache store GET (mget) 64B",
        "farcache store PUT (mput) 64B",
        "farcache store unbatched GET 64B",
        "farcache unbatched read 8B (beside 64B GET)",
        "farcache store unbatched PUT 64B",
    ] {
        let r = row(name);
        assert_eq!(r["system"], "farcache");
        assert_eq!(r["errors"], 0, "{r:#}");
        assert!(r["misses"].is_null() || r["misses"] == 0, "{r:#}");
        assert!(
            f(r, "p50_us") > 0.0 && f(r, "p99_us") >= f(r, "p50_us"),
            "{r:#}"
        );
    }

    // Batched rows against Redis's best run of the same op, named in best_peer: any
    // batch, redis-benchmark's MGET/MSET of 1,000 keys included.
    assert!(
        rows.iter()
            .any(|x| x["name"] == "redis redis-benchmark MGET b=1000 P=4 c=4 64B"),
        "Redis's own tool at its best batch is among the peers"
    );
    for (name, op) in [
        ("farcache store GET (mget) 64B", "GET"),
        ("farcache store PUT (mput) 64B", "SET"),
        ("farcache store load (mput) 64B", "SET"),
    ] {
        let r = row(name);
        assert_eq!((r["b"].as_u64(), r["q"].as_u64()), (Some(64), Some(4)));
        let best = f(r, "best_peer_mops");
        assert!(close(f(r, "ratio_vs_redis"), f(r, "mops") / best), "{r:#}");
        assert!(
            close(f(r, "ratio_vs_best_peer"), f(r, "mops") / best),
            "{r:#}"
        );
        let fastest = rows
            .iter()
            .filter(|x| x["system"] == "redis" && x["op"] == op && x["b"].as_u64() > Some(1))
            .map(|x| f(x, "mops"))
            .fold(0.0f64, f64::max);
        assert!(
            close(best, fastest),
            "{r:#} vs fastest redis {op} {fastest}"
        );
        assert!(
            r["best_peer"]
                .as_str()
                .is_some_and(|p| p.starts_with("redis ")),
            "{r:#}"
        );
    }

    // Batched 64 B GETs carry the throughput target; its verdict agrees with
    // the ratio.
    let mget = row("farcache store GET (mget) 64B");
    assert_eq!(mget["target"], ">= 5x best peer");
    assert_eq!(
        mget["meets_target"].as_bool(),
        Some(f(mget, "ratio_vs_best_peer") >= 5.0),
        "{mget:#}"
    );

    // Unbatched GET: its p50 over the 8-byte read's, against the 1.3x target.
    let get = row("farcache store unbatched GET 64B");
    let read = row("farcache unbatched read 8B (beside 64B GET)");
    let ratio = f(get, "ratio_vs_byte_read");
    assert!(
        close(ratio, f(get, "p50_us") / f(read, "p50_us")),
        "{get:#}"
    );
    assert_eq!(get["target"], "p50 <= 1.3x 8B read");
    assert!(get["meets_target"].is_boolean());
    assert!(f(get, "ratio_vs_redis") > 0.0, "{get:#}");

    // The store held every key.
    let stores = json["stores"].as_array().expect("stores");
    assert_eq!(stores.len(), 1);
    assert_eq!(stores[0]["stats"]["live"], 2000, "{:#}", stores[0]);
}

/// `farcache ARGS` fails with a message containing `want`.
fn refused_saying(args: &[&str], want: &str) {
    common::assert_refused(args);
    let run = Command::new(common::bin())
        .args(args)
        .output()
        .expect("run farcache");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains(want), "{args:?}: {err}");
}

#[test]
fn bench_store_rejects_bad_arguments() {
    refused_saying(
        &["bench", "store", "--sizes", "0"],
        "sizes must be between 1",
    );
    refused_saying(&["bench", "store", "--keys", "0"], "keys must be between 1");
    refused_saying(
        &["bench", "store", "--sizes", "64,1MiB"],
        "sizes must be between 1",
    );
    refused_saying(&["bench", "store", "--sizes", "lots"], "not a size");
    refused_saying(&["bench", "store", "-b", "0"], "not a positive number");
    refused_saying(&["bench", "store", "--seconds", "0"], "must be positive");
}
