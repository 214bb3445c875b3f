//! `farcache bench drain` end to end on a small cache: a server holding every region is
//! reclaimed under load, drains to a second server, and every byte reads back as
//! written.

mod common;

use std::process::Command;

use serde_json::Value;

fn f(json: &Value, field: &str) -> f64 {
    json[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {field} in {json:#}"))
}

fn u(json: &Value, field: &str) -> u64 {
    json[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no integer {field} in {json:#}"))
}

#[test]
fn bench_drain_moves_every_region_and_loses_nothing() {
    let out = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_farcache"));
    cmd.args([
        "bench",
        "drain",
        "--size",
        "64MiB",
        "--region-size",
        "8MiB",
        "--out",
    ])
    .arg(out.path());
    let stdout = common::run_ok(&mut cmd, "farcache bench drain");
    assert!(stdout.contains("target: drain ≤ grace"), "{stdout}");

    let latest = out.path().join("drain-latest.json");
    let json: Value =
        serde_json::from_slice(&std::fs::read(&latest).expect("drain-latest.json")).expect("json");
    let stamped = out
        .path()
        .join(format!("drain-{}.json", u(&json, "timestamp_unix")));
    assert!(stamped.exists(), "no {}", stamped.display());
    assert_eq!(json["bench"], "drain");
    assert!(json["build"].is_string());
    assert_eq!(u(&json, "size_bytes"), 64 << 20);
    assert_eq!(u(&json, "region_size"), 8 << 20);
    assert_eq!(u(&json, "regions"), 8);
    assert_eq!(f(&json, "grace_s"), 30.0);

    assert_eq!(json["drained"], true, "{json:#}");
    let drain_s = f(&json, "drain_s");
    assert!(drain_s > 0.0 && drain_s <= 30.0, "drain_s {drain_s}");
    assert!(f(&json, "drain_gib_per_s") > 0.0);
    assert!(f(&json, "copy_gib_per_s") > 0.0);
    assert!(f(&json, "max_write_pause_ms") >= 0.0);
    assert_eq!(u(&json, "lost_regions"), 0, "{json:#}");
    assert_eq!(u(&json, "regions_moved"), 8, "{json:#}");
    let moves = json["migrations"].as_array().expect("migrations");
    assert_eq!(moves.len(), 8);
    assert!(moves.iter().all(|m| m["mode"] == "dirty_tracking"));
    assert!(u(&json, "bytes_sent") >= 64 << 20);

    assert_eq!(u(&json, "verified_bytes"), 64 << 20);
    assert_eq!(u(&json, "mismatched_bytes"), 0, "{json:#}");
    assert_eq!(u(&json, "lost_writes"), 0);
    assert_eq!(json["load"], true);
    assert!(
        u(&json, "load_reads") > 0 && u(&json, "load_writes") > 0,
        "{json:#}"
    );
    assert_eq!(u(&json, "load_errors"), 0, "{json:#}");
    assert_eq!(u(&json, "load_wrong_reads"), 0, "{json:#}");
    assert_eq!(json["target_met"], true, "{json:#}");
}

#[test]
fn bench_drain_rejects_bad_arguments() {
    for args in [
        &["bench", "drain", "--size", "0"][..],
        &["bench", "drain", "--size", "64MiB", "--region-size", "3MiB"],
        &["bench", "drain", "--size", "64MiB", "--region-size", "1000"],
        &[
            "bench",
            "drain",
            "--size",
            "64MiB",
            "--region-size",
            "128MiB",
        ],
        &["bench", "drain", "--grace", "0"],
        &["bench", "drain", "--grace", "-1"],
        &["bench", "drain", "--load", "maybe"],
        &["bench", "drain", "-s", "0"],
        &["bench", "drain", "--grace", "0.5"],
        &[
            "bench",
            "drain",
            "--size",
            "4096GiB",
            "--region-size",
            "4GiB",
        ], // memory
        &["bench", "drain", "--size", "1TiB", "--region-size", "1MiB"], // regions
    ] {
        common::assert_refused(args);
    }
}
