//! `farcache bench resp --quick` end to end: both systems measured by the same
//! redis-benchmark over SET/GET/INCR/MSET, every farcache row carries its ratio to
//! the better Redis row of the same test.

mod common;

use std::process::Command;

#[test]
fn bench_resp_compares_the_front_end_with_redis() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("resp.json");
    let mut bench = Command::new(common::bin());
    bench
        .args(["bench", "resp", "--quick", "--json"])
        .arg(&json);
    let out = common::run_ok(&mut bench, "farcache bench resp");
    assert!(out.contains("vs redis"), "{out}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("json");
    let rows = v["rows"].as_array().expect("rows");
    let of = |system: &str, op: &str| {
        rows.iter()
            .filter(|r| {
                r["system"] == system && r["op"].as_str().is_some_and(|o| o.starts_with(op))
            })
            .count()
    };
    for op in [
        "SET",
        "GET",
        "INCR",
        "MSET",
        "MGET x10",
        "MGET x100",
        "APPEND",
        "SETRANGE",
    ] {
        assert!(of("farcache-resp", op) >= 1, "no farcache {op} row: {v}");
        assert!(of("redis", op) >= 1, "no redis {op} row: {v}");
    }
    for r in rows.iter().filter(|r| r["system"] == "farcache-resp") {
        let ratio = r["ratio_vs_redis"].as_f64().expect("ratio");
        let rps = r["mops"].as_f64().expect("mops");
        assert!(ratio > 0.0 && rps > 0.0, "{r}");
        // The ratio is this row over the Redis row it names.
        let base = r["baseline_mops"].as_f64().expect("baseline");
        assert!((ratio - rps / base).abs() < 1e-6 * ratio.max(1.0), "{r}");
    }
}
