//! `farcache bench replication` end to end, at its smallest: two caches on a 3-server
//! cluster, one with a backup per region; every row measured, the ratios and the
//! servers' replication counters in the JSON.

mod common;

use std::process::Command;

use serde_json::Value;

fn f(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {field} in {v:#}"))
}

#[test]
fn bench_replication_reports_both_caches() {
    let out = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_farcache"));
    cmd.args([
        "bench",
        "replication",
        "--seconds",
        "0.3",
        "--cache-size",
        "4MiB",
        "--out",
    ])
    .arg(out.path());
    let stdout = common::run_ok(&mut cmd, "farcache bench replication");
    for row in [
        "writes r=1",
        "writes r=2",
        "reads r=1",
        "reads r=2",
        "write p50/p99 r=1",
        "write p50/p99 r=2",
        "writes r=2 / r=1",
        "reads r=2 / r=1",
        "target: r=2 writes ≥ 50 % of r=1",
    ] {
        assert!(stdout.contains(row), "no {row:?} in\n{stdout}");
    }

    let latest = out.path().join("replication-latest.json");
    let json: Value =
        serde_json::from_slice(&std::fs::read(&latest).expect("replication-latest.json"))
            .expect("json");
    assert_eq!(json["bench"], "replication");
    for field in [
        "write_mops_r1",
        "write_mops_r2",
        "read_mops_r1",
        "read_mops_r2",
        "write_ratio",
        "read_ratio",
        "write_p50_us_r1",
        "write_p50_us_r2",
        "write_p99_us_r1",
        "write_p99_us_r2",
    ] {
        assert!(f(&json, field) > 0.0, "{field}: {json:#}");
    }
    assert!(f(&json, "write_mops_r2") > 0.0);
    assert!(
        (f(&json, "write_ratio") - f(&json, "write_mops_r2") / f(&json, "write_mops_r1")).abs()
            < 1e-9
    );
    assert_eq!(json["batch"], 64);
    assert_eq!(json["depth"], 8);
    assert!((f(&json, "seconds") - 0.3).abs() < 1e-9);
    assert!(f(&json, "timestamp_unix") > 0.0);
    assert!(json["target_met"].is_boolean());
    assert_eq!(json["errors"], 0, "op errors: {json:#}");
    assert_eq!(json["rows"].as_array().map(Vec::len), Some(6));
    // The servers forwarded every r=2 write to its backup, and no r=1 write.
    assert_eq!(f(&json, "backup_writes_per_write_r1"), 0.0);
    let fwd = f(&json, "backup_writes_per_write_r2");
    assert!((fwd - 1.0).abs() < 0.01, "{fwd}");
    // Every region of the r=2 cache has one backup: as many backups as regions.
    let placement = json["placement"].as_array().expect("placement");
    let sum = |replicas: u64, field: &str| -> u64 {
        placement
            .iter()
            .filter(|p| p["replicas"] == replicas)
            .filter_map(|p| p[field].as_u64())
            .sum()
    };
    assert_eq!((sum(1, "regions"), sum(1, "backups")), (4, 0));
    assert_eq!((sum(2, "regions"), sum(2, "backups")), (4, 4));
}

#[test]
fn bench_replication_rejects_bad_arguments() {
    for args in [
        &["bench", "replication", "--seconds", "0"][..],
        &["bench", "replication", "--seconds", "-1"],
        &["bench", "replication", "--cache-size", "1000"],
        &["bench", "replication", "-b", "0"],
        &["bench", "replication", "--depth", "0"],
    ] {
        common::assert_refused(args);
    }
}
