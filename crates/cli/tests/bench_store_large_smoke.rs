//! `farcache bench store-large` end to end on four 2 MiB objects: Redis and the store
//! measured in the same run, RS(4+2) rows with and without a stopped server, the
//! stopped server's first-d reads all succeed, the memory entry, and the JSON and
//! chart written where `--json` and `--chart` say. Needs redis-server (the bench
//! installs it when run as root; `scripts/test.sh` does).

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
fn bench_store_large_writes_rows_and_chart() {
    let out = tempfile::tempdir().expect("tempdir");
    let json_path = out.path().join("nested").join("large.json");
    let copy = out.path().join("copy.png");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_farcache"));
    cmd.args([
        "bench",
        "store-large",
        "--quick",
        "--sizes",
        "2MiB",
        "--objects",
        "4",
        "--seconds",
        "0.3",
        "--min-gets",
        "2",
        "--json",
    ])
    .arg(&json_path)
    .arg("--chart")
    .arg(&copy);
    let stdout = common::run_ok(&mut cmd, "farcache bench store-large");
    assert!(stdout.contains("farcache GET first-d 2M"), "{stdout}");

    let json: Value =
        serde_json::from_slice(&std::fs::read(&json_path).expect("--json file")).expect("json");
    assert_eq!(json["bench"], "store-large");
    assert_eq!(
        (
            json["d"].as_u64(),
            json["p"].as_u64(),
            json["servers"].as_u64()
        ),
        (Some(4), Some(2), Some(6))
    );
    assert_eq!(json["objects"], 4);
    let rows = json["rows"].as_array().expect("rows");
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no row {name:?} in {rows:#?}"))
    };

    for name in ["redis SET 2M", "redis GET 2M"] {
        let r = row(name);
        assert_eq!(r["system"], "redis");
        assert_eq!(r["failures"], 0, "{r:#}");
        assert!(r["d"].is_null() && r["stopped_servers"] == 0, "{r:#}");
    }
    let farcache = [
        ("farcache PUT 2M", 0),
        ("farcache GET first-d 2M", 0),
        ("farcache GET wait-all 2M", 0),
        ("farcache GET first-d 2M, 1 server stopped", 1),
        ("farcache GET wait-all 2M, 1 server stopped", 1),
        ("farcache GET first-d 2M, home server stopped", 1),
    ];
    for (name, stopped) in farcache {
        let r = row(name);
        assert_eq!(r["system"], "farcache");
        assert_eq!(
            (r["d"].as_u64(), r["p"].as_u64()),
            (Some(4), Some(2)),
            "{r:#}"
        );
        assert_eq!(r["stopped_servers"], stopped, "{r:#}");
        assert!(
            f(r, "p50_us") > 0.0 && f(r, "p99_us") >= f(r, "p50_us"),
            "{r:#}"
        );
        assert!(f(r, "max_us") >= f(r, "p99_us") * 0.999, "{r:#}");
        assert!(f(r, "attempts") >= 2.0, "{r:#}");
        // Rows with a stopped server carry every call.
        let calls = r["calls"].as_array().map_or(0, Vec::len);
        assert_eq!(calls as f64, f(r, "attempts") * f64::from(stopped), "{r:#}");
    }
    // Every object read back whole, also with a server stopped when decoding from
    // the first four chunks.
    for name in [
        "farcache PUT 2M",
        "farcache GET first-d 2M",
        "farcache GET wait-all 2M",
        "farcache GET first-d 2M, 1 server stopped",
        // Through manifest copies, after the GET's hedge.
        "farcache GET first-d 2M, home server stopped",
    ] {
        let r = row(name);
        assert_eq!(r["failures"], 0, "{r:#}");
        assert!(f(r, "objects_per_s") > 0.0, "{r:#}");
        assert!(
            close(f(r, "mib_per_s"), 2.0 * f(r, "objects_per_s")),
            "{r:#}"
        );
    }
    // Ratios to Redis: throughput as mops over Redis's, p50 over Redis's.
    let get = row("farcache GET first-d 2M");
    let redis = row("redis GET 2M");
    assert!(
        close(f(get, "ratio_vs_redis"), f(get, "mops") / f(redis, "mops")),
        "{get:#}"
    );
    assert!(
        close(
            f(get, "p50_ratio_vs_redis"),
            f(get, "p50_us") / f(redis, "p50_us")
        ),
        "{get:#}"
    );

    let stopped = &json["stopped"][0];
    assert!(stopped["server"].is_u64(), "{stopped:#}");
    // Of 4 objects, some server holds a data chunk of at least 2 away from their home.
    assert!(
        stopped["readable_objects"].as_u64().is_some_and(|n| n >= 2),
        "{stopped:#}"
    );
    assert_eq!(stopped["failures_after_resume"], 0, "{stopped:#}");
    assert!(stopped["home_server"].is_u64(), "{stopped:#}");
    assert!(
        stopped["homed_objects"].as_u64().is_some_and(|n| n >= 1),
        "{stopped:#}"
    );
    // The hedge, not the stopped-run client's op timeout, bounds those reads.
    let home = row("farcache GET first-d 2M, home server stopped");
    assert!(
        f(home, "max_us") < f(&json, "op_timeout_ms") * 1e3,
        "{home:#}"
    );

    let mem = &json["memory"][0];
    assert_eq!(mem["coded_objects"], 4, "{mem:#}");
    assert!(close(f(mem, "ec_overhead"), 1.5), "{mem:#}");
    assert!(close(f(mem, "replication_overhead"), 2.0), "{mem:#}");
    // Data, parity and manifests: at least the code's 1.5, well below two replicas
    // plus size classes.
    let need = f(mem, "requested_over_raw");
    assert!((1.5..1.6).contains(&need), "{mem:#}");
    assert!(f(mem, "reserved_over_raw") >= need, "{mem:#}");

    for png in [json_path.with_extension("png"), copy] {
        let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
        assert!(bytes.starts_with(b"\x89PNG"), "{}", png.display());
    }
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
fn bench_store_large_rejects_bad_arguments() {
    let cmd = ["bench", "store-large"];
    let with = |extra: &[&'static str]| [&cmd[..], extra].concat();
    refused_saying(
        &with(&["--sizes", "512KiB"]),
        "sizes must be between 1048576",
    );
    refused_saying(
        &with(&["--sizes", "1MiB,1GiB"]),
        "sizes must be between 1048576",
    );
    refused_saying(&with(&["--sizes", "lots"]), "not a size");
    refused_saying(&with(&["--objects", "0"]), "objects must be between 1");
    refused_saying(
        &with(&["--sizes", "512MiB", "--objects", "17"]),
        "exceed 8 GiB per size",
    );
    refused_saying(&with(&["--seconds", "0"]), "must be positive");
    refused_saying(&with(&["--min-gets", "0"]), "not a positive number");
    refused_saying(
        &with(&["--op-timeout-ms", "0"]),
        "op timeout must be between",
    );
}
