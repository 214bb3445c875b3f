//! `farcache bench slo` end to end on a tiny calibrated model: its report holds
//! what the issue asks for, and its counts agree with its rows.

mod common;

use std::process::Command;

#[test]
fn bench_slo_runs_searches_and_reports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("model.json");
    let json = dir.path().join("slo.json");
    let mut cal = Command::new(common::bin());
    cal.args([
        "calibrate",
        "--record-sizes",
        "8",
        "--read-fractions",
        "1,0",
    ])
    .args(["--max-batch", "8", "--max-depth", "2"])
    .args(["--seconds-per-point", "0.05", "--held-out", "2", "--out"])
    .arg(&model);
    common::run_ok(&mut cal, "farcache calibrate");

    let mut bench = Command::new(common::bin());
    bench
        .args(["bench", "slo", "--slos", "6", "--seconds", "0.1", "--model"])
        .arg(&model)
        .arg("--json")
        .arg(&json);
    let out = common::run_ok(&mut bench, "farcache bench slo");
    assert!(out.contains("target mean search time"), "{out}");

    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("json");
    for k in [
        "slos",
        "met",
        "search_ms_mean",
        "search_ms_max",
        "cost_equal_oracle",
        "model_error_latency_median",
        "model_error_throughput_median",
    ] {
        assert!(v.get(k).is_some(), "report lacks {k}: {v}");
    }
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 6);
    assert_eq!(v["slos"], 6);
    let count = |k: &str| runs.iter().filter(|r| r[k] == true).count() as u64;
    assert_eq!(v["met"].as_u64(), Some(count("met")));
    // The search and the oracle agree on cost (a property of the search, not of the
    // machine), and the manager chose what the search in the bench chose.
    assert_eq!(v["cost_equal_oracle"].as_u64(), Some(6));
    assert_eq!(v["manager_agrees"].as_u64(), Some(6));
    for r in runs {
        let slo = &r["slo"];
        let f = |x: &serde_json::Value| x.as_f64().expect("number");
        // A run counts as met only when its measured figures are within the SLO.
        if r["met"] == true {
            assert!(f(&r["measured_latency_us"]) <= f(&slo["latency_us"]), "{r}");
            assert!(
                f(&r["measured_throughput"]) >= 0.98 * f(&slo["throughput"]),
                "{r}"
            );
        }
        // The choice keeps the headroom the manager applies (10 %).
        assert!(
            f(&r["predicted_latency_us"]) * 1.1 <= f(&slo["latency_us"]) * 1.000001,
            "{r}"
        );
        assert!(
            f(&r["predicted_throughput"]) >= 1.1 * f(&slo["throughput"]) * 0.999999,
            "{r}"
        );
        assert_eq!(r["errors"], 0, "{r}");
    }
    assert!(json.with_extension("png").exists(), "chart written");
}
