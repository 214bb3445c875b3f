//! `farcache bench migrate --quick` end to end: every mode on its own cluster, regions
//! moved under load, JSON rows with the migration figures and timelines, a chart.

mod common;

use std::process::Command;

use serde_json::Value;

fn f(row: &Value, field: &str) -> f64 {
    row[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {field} in {row:#}"))
}

fn sum(row: &Value, series: &str) -> u64 {
    row["timeline"][series]
        .as_array()
        .unwrap_or_else(|| panic!("no timeline.{series}"))
        .iter()
        .filter_map(Value::as_u64)
        .sum()
}

#[test]
fn bench_migrate_quick_reports_every_mode() {
    let out = tempfile::tempdir().expect("tempdir");
    let chart = out.path().join("copy.png");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_farcache"));
    cmd.args(["bench", "migrate", "--quick", "--out"])
        .arg(out.path())
        .arg("--chart")
        .arg(&chart);
    let stdout = common::run_ok(&mut cmd, "farcache bench migrate");

    let latest = out.path().join("migrate-latest.json");
    let json: Value = serde_json::from_slice(&std::fs::read(&latest).expect("migrate-latest.json"))
        .expect("json");
    assert_eq!(json["bench"], "migrate");
    assert_eq!(json["config"]["regions"], 7);
    let rows = json["rows"].as_array().expect("rows");
    let modes: Vec<&str> = rows.iter().filter_map(|r| r["mode"].as_str()).collect();
    assert_eq!(modes, ["dirty_tracking", "pause_region", "pause_all"]);
    for r in rows {
        assert!(
            stdout.contains(r["mode"].as_str().unwrap_or("?")),
            "{stdout}"
        );
        assert_eq!(r["errors"], 0, "op errors: {r:#}");
        assert!(f(r, "migration_gib_per_s") > 0.0, "{}", r["mode"]);
        assert!(f(r, "read_ratio_during") > 0.0, "{}", r["mode"]);
        assert!(f(r, "write_ratio_during") >= 0.0, "{}", r["mode"]);
        assert!(f(r, "max_write_pause_ms") > 0.0, "{}", r["mode"]);
        assert!(f(r, "reads_per_s_before") > 0.0 && f(r, "writes_per_s_before") > 0.0);
        assert!(sum(r, "reads") > 0 && sum(r, "writes") > 0, "{}", r["mode"]);
        // Every region moved, 1 then 2 then 4, each a whole region at least.
        let steps: Vec<u64> = r["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .filter_map(|s| s["regions"].as_u64())
            .collect();
        assert_eq!(steps, [1, 2, 4]);
        let moves = r["migrations"].as_array().expect("migrations");
        assert_eq!(moves.len(), 7, "{}", r["mode"]);
        assert!(moves.iter().all(|m| m["mode"] == r["mode"]));
        assert!(f(r, "bytes_moved") >= 7.0 * f(&json["config"], "region_size"));
    }

    assert!(out.path().join("migrate-latest.png").exists(), "no chart");
    let png = std::fs::read(&chart).expect("chart copy");
    assert_eq!(&png[1..4], b"PNG");
}

#[test]
fn bench_migrate_rejects_bad_arguments() {
    for args in [
        &["bench", "migrate", "--modes", "teleport"][..],
        &["bench", "migrate", "--region-size", "1000"],
        &["bench", "migrate", "--timeline", "-1"],
        &["bench", "migrate", "--timeline", "0.5"],
        &["bench", "migrate", "-b", "0"],
    ] {
        common::assert_refused(args);
    }
}
