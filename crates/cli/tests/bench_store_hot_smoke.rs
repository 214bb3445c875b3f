//! `farcache bench store-hot` and `bench store-evict` end to end on tiny keyspaces: the
//! JSON carries the load balance and hit-ratio fields, the hot-key layer serves some
//! reads from copies, and bad arguments are refused before any cluster starts.

mod common;

use std::process::Command;

use serde_json::Value;

fn f(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {field} in {v:#}"))
}

fn u(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no count {field} in {v:#}"))
}

#[test]
fn bench_store_hot_balances_with_the_layer() {
    let out = tempfile::tempdir().expect("tempdir");
    let json_path = out.path().join("nested").join("hot.json");
    let chart = out.path().join("copy.png");
    let mut cmd = Command::new(common::bin());
    cmd.args([
        "bench",
        "store-hot",
        "--quick",
        "--servers",
        "6",
        "--keys",
        "20000",
        "--seconds",
        "1",
        "--json",
    ])
    .arg(&json_path)
    .arg("--chart")
    .arg(&chart);
    let stdout = common::run_ok(&mut cmd, "farcache bench store-hot");
    assert!(stdout.contains("max/mean load"), "{stdout}");

    let json: Value =
        serde_json::from_slice(&std::fs::read(&json_path).expect("--json file")).expect("json");
    assert_eq!(json["bench"], "store-hot");
    assert_eq!(u(&json, "keys"), 20_000);
    assert_eq!(json["hot_options"]["max_keys"], 64);
    let rows = json["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{rows:#?}");
    for (r, layer) in rows.iter().zip([false, true]) {
        assert_eq!(r["hot_key_layer"], layer, "{r:#}");
        assert_eq!(u(r, "servers"), 6);
        assert_eq!(u(r, "errors"), 0, "{r:#}");
        // Only keys a full bucket evicted during the load can miss.
        assert_eq!(u(r, "live_after_load") + u(r, "evicted_by_load"), 20_000);
        if u(r, "evicted_by_load") == 0 {
            assert_eq!(u(r, "misses"), 0, "{r:#}");
        }
        assert!(
            f(r, "mops") > 0.0 && f(r, "p99_us") >= f(r, "p50_us"),
            "{r:#}"
        );
        let loads: Vec<u64> = r["server_loads"]
            .as_array()
            .expect("server_loads")
            .iter()
            .map(|l| l.as_u64().expect("load"))
            .collect();
        assert_eq!(loads.len(), 6, "{r:#}");
        assert!(loads.iter().all(|&l| l > 0), "{r:#}");
        // max/mean as the loads say.
        let mean = loads.iter().sum::<u64>() as f64 / 6.0;
        let max = *loads.iter().max().expect("loads") as f64;
        assert!((f(r, "max_mean_load") - max / mean).abs() < 1e-9, "{r:#}");
        assert!(f(r, "max_mean_load") >= 1.0);
        assert_eq!(r["server_shards"].as_array().map(Vec::len), Some(6));
    }
    let (off, on) = (&rows[0], &rows[1]);
    assert_eq!(u(off, "copy_reads"), 0, "{off:#}");
    assert!(u(on, "copy_reads") > 0, "no read served by a copy: {on:#}");
    assert!(u(on, "hot_keys") > 0, "{on:#}");
    assert_eq!(on["target"], "max/mean load <= 1.25");
    assert!(on["meets_target"].is_boolean());
    assert!(json_path.with_extension("png").is_file(), "no chart");
    assert!(chart.is_file(), "chart not copied");
}

#[test]
fn bench_store_evict_compares_clock_with_lru() {
    let out = tempfile::tempdir().expect("tempdir");
    let json_path = out.path().join("evict.json");
    let mut cmd = Command::new(common::bin());
    cmd.args([
        "bench",
        "store-evict",
        "--keys",
        "20000",
        "--requests",
        "60000",
        "--warmup",
        "20000",
        "--json",
    ])
    .arg(&json_path);
    let stdout = common::run_ok(&mut cmd, "farcache bench store-evict");
    assert!(stdout.contains("exact LRU"), "{stdout}");

    let json: Value =
        serde_json::from_slice(&std::fs::read(&json_path).expect("--json file")).expect("json");
    assert_eq!(json["bench"], "store-evict");
    assert_eq!(u(&json, "errors"), 0, "{json:#}");
    let (store, lru) = (f(&json, "store_hit_ratio"), f(&json, "lru_hit_ratio"));
    assert!(
        store > 0.0 && store < 1.0 && lru > 0.0 && lru < 1.0,
        "{json:#}"
    );
    assert!(
        (f(&json, "points_below_lru") - (lru - store) * 100.0).abs() < 1e-9,
        "{json:#}"
    );
    // The store was full: it evicted, and held a fraction of the keys.
    assert!(u(&json, "evictions") > 0, "{json:#}");
    let live = u(&json, "live_at_end");
    assert!((500..10_000).contains(&live), "{json:#}");
    assert_eq!(u(&json, "sim_capacity"), live);
    assert_eq!(
        u(&json["store"], "hits") + u(&json["store"], "misses"),
        40_000
    );
    assert!(json["rows"][0]["meets_target"].is_boolean());
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
fn bench_store_hot_and_evict_reject_bad_arguments() {
    let hot = |extra: &[&'static str]| [&["bench", "store-hot"][..], extra].concat();
    refused_saying(&hot(&["--servers", "1"]), "servers must be between 2");
    refused_saying(&hot(&["--servers", "0"]), "not a positive number");
    refused_saying(&hot(&["--keys", "10"]), "keys must be between 1000");
    refused_saying(&hot(&["--zipf", "0"]), "zipf exponent must be above 0");
    refused_saying(&hot(&["--zipf", "nan"]), "zipf exponent must be above 0");
    refused_saying(&hot(&["--seconds", "0"]), "must be positive");
    refused_saying(
        &hot(&["--value-size", "1MiB"]),
        "value size must be between",
    );
    refused_saying(&hot(&["--hot-keys", "0"]), "not a positive number");
    let evict = |extra: &[&'static str]| [&["bench", "store-evict"][..], extra].concat();
    refused_saying(&evict(&["--keys", "0"]), "keys must be between 1000");
    refused_saying(&evict(&["--cache-fraction", "1.5"]), "cache fraction");
    refused_saying(
        &evict(&["--requests", "100", "--warmup", "200"]),
        "must exceed the warm-up",
    );
    refused_saying(&evict(&["--zipf=-1"]), "zipf exponent must be above 0");
}
