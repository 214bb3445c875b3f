//! `farcache calibrate` end to end on a tiny grid: the file it writes loads, predicts
//! measured and interpolated settings, its counts add up, and batching pays.

mod common;

use std::process::Command;

use farcache_proto::slo::Transport;
use farcache_slo::Model;

/// Both tests measure throughput on a 2-core machine: run side by side, each one's
/// points would measure the other's load (a b=2 point that does not beat b=1 ends the
/// walk early).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn calibrate_writes_a_model_that_loads_and_predicts() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("model.json");
    let mut cmd = Command::new(common::bin());
    cmd.args(["calibrate", "--record-sizes", "8", "--read-fractions", "1"])
        .args(["--max-server-threads", "1", "--max-client-threads", "1"])
        .args(["--max-batch", "4", "--max-depth", "2"])
        .args(["--seconds-per-point", "0.1", "--held-out", "2", "--out"])
        .arg(&path);
    let stdout = common::run_ok(&mut cmd, "farcache calibrate");
    assert!(stdout.contains("held-out error"), "{stdout}");
    assert!(stdout.contains("--slo-model"), "{stdout}");

    let model = Model::load(&path, false).expect("the model loads on the machine it was made on");
    let t = |b, q| Transport { s: 1, c: 1, b, q };
    let one = model.predict(8, 1.0, t(1, 1)).expect("b=1 q=1 measured");
    let four = model.predict(8, 1.0, t(4, 1)).unwrap_or_else(|| {
        panic!(
            "b=4 measured: b=2 and b=4 must each pay over the batch before; points: {:?}",
            model.file.sections[0].points
        )
    });
    let three = model.predict(8, 1.0, t(3, 1)).expect("b=3 interpolated");
    assert!(
        four.throughput > one.throughput,
        "batching must pay: b=1 {one:?}, b=4 {four:?}"
    );
    assert!(three.throughput > 0.0 && three.p50_us > 0.0, "{three:?}");

    let f = &model.file;
    let c = &f.calibration;
    let points: u64 = f.sections.iter().map(|s| s.points.len() as u64).sum();
    // b ∈ {1, 2, 4} × q ∈ {1, 2}.
    assert_eq!(c.grid, 6, "{c:?}");
    assert!(points <= c.grid, "{c:?}");
    assert_eq!(c.measured, points + c.held_out, "{c:?}");
    assert!(c.held_out <= 2 && c.configurations >= points, "{c:?}");
    if c.held_out > 0 {
        assert!(c.latency_error_median.is_some() && c.throughput_error_max.is_some());
    }
    assert!(c.seconds > 0.0 && (c.seconds_per_point - 0.1).abs() < 1e-9);
    // Every measured knob is a power of two; none of them was measured twice.
    for p in &f.sections[0].points {
        let tr = p.transport;
        assert!([tr.s, tr.c, tr.b, tr.q].iter().all(|v| v.is_power_of_two()));
    }
}

/// `--manager`: a running cluster is calibrated where it runs, at the threads its
/// server has, and its calibration cache is gone afterwards.
#[test]
fn calibrate_measures_a_running_cluster_at_its_threads() {
    let _one = serial();
    use farcache_testkit::{ClusterOptions, ProcessCluster};

    let cl = ProcessCluster::start(
        common::bin(),
        &ClusterOptions::default()
            .servers(1)
            .server_threads(2)
            .server_memory(256 << 20)
            .region_size(64 << 20),
    )
    .expect("cluster");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("model.json");
    let mut cmd = Command::new(common::bin());
    cmd.args(["calibrate", "--record-sizes", "8", "--read-fractions", "1"])
        .args([
            "--max-batch",
            "2",
            "--max-depth",
            "2",
            "--max-client-threads",
            "2",
        ])
        .args(["--seconds-per-point", "0.05", "--held-out", "1"])
        .args(["--manager", cl.manager_addr(), "--secret-file"])
        .arg(cl.secret_path())
        .arg("--out")
        .arg(&path);
    let stdout = common::run_ok(&mut cmd, "farcache calibrate --manager");
    assert!(stdout.contains("2 <= s <= 2"), "{stdout}");

    let model = Model::load(&path, false).expect("model");
    let points = &model.file.sections[0].points;
    assert!(!points.is_empty());
    for p in points {
        // The server runs 2 threads: only s = 2 (and so c >= 2) is measured.
        assert_eq!((p.transport.s, p.transport.c), (2, 2), "{p:?}");
    }
    let status = cl.client().expect("client").status().expect("status");
    assert!(
        status.caches.is_empty(),
        "calibration cache left: {status:?}"
    );
}
