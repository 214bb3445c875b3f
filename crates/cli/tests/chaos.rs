//! Short `farcache chaos` runs: servers reclaimed and killed under a verifying load.
//! With one copy per region, kills lose data, but only ever as reported `DataLost`:
//! no read may return wrong bytes and no acknowledged write may vanish silently. With
//! two copies nothing is lost at all.

mod common;

use common::bin;

/// Runs `farcache chaos` with `args` (plus a small cache and a short grace) and returns
/// its JSON report, its text, and where the report was written.
fn chaos(dir: &std::path::Path, args: &[&str]) -> (serde_json::Value, String, std::path::PathBuf) {
    let json = dir.join("chaos.json");
    let out = std::process::Command::new(bin())
        .arg("chaos")
        .args(args)
        .args([
            "--servers",
            "4",
            "--cache-size",
            "8MiB",
            "--grace",
            "5s",
            "--json",
        ])
        .arg(&json)
        .output()
        .expect("run chaos");
    assert!(
        out.status.success(),
        "chaos failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&json).expect("report");
    let r = serde_json::from_str(&text).expect("json");
    (r, text, json)
}

fn field(r: &serde_json::Value, text: &str, k: &str) -> u64 {
    r[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {text}"))
}

/// No wrong read, no acknowledged write lost (silently or as `DataLost`), no region lost.
fn assert_nothing_lost(r: &serde_json::Value, text: &str) {
    let n = |k: &str| field(r, text, k);
    assert_eq!(
        (
            n("wrong_reads"),
            n("acked_writes_lost"),
            n("acked_writes_lost_reported"),
            n("lost_regions")
        ),
        (0, 0, 0, 0),
        "{text}"
    );
}

#[test]
fn a_short_chaos_run_loses_nothing_silently() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (r, text, _) = chaos(
        dir.path(),
        &["--duration", "20s", "--reclaims", "4", "--kills", "2"],
    );
    let n = |k: &str| field(&r, &text, k);
    assert_eq!(n("wrong_reads"), 0, "{text}");
    assert_eq!(n("acked_writes_lost"), 0, "{text}");
    assert_eq!(n("replicas"), 1);
    assert_eq!(n("reclaims") + n("kills"), 6, "{text}");
    assert!(n("ops") > 1000, "{text}");
    assert!(
        n("migrations") > 0,
        "reclaimed servers' regions moved: {text}"
    );
    assert!(r["max_unavailable_ms"].is_u64());
}

/// The same with two copies: kills lose nothing at all (no `DataLost` either), the
/// backups take over, and the run draws its chart.
#[test]
fn a_short_chaos_run_with_two_copies_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (r, text, json) = chaos(
        dir.path(),
        &[
            "--duration",
            "15s",
            "--reclaims",
            "2",
            "--kills",
            "3",
            "--replicas",
            "2",
        ],
    );
    let n = |k: &str| field(&r, &text, k);
    assert_eq!(n("replicas"), 2);
    assert_eq!(n("kills"), 3, "{text}");
    assert_nothing_lost(&r, &text);
    assert!(n("promotions") > 0, "backups took over: {text}");
    assert!(n("heartbeat_interval_ms") > 0);
    let c = &r["counters"];
    assert!(c["adds"].as_u64().unwrap_or(0) > 0, "{text}");
    assert_eq!(
        (
            c["double_adds"].as_u64(),
            c["lost_adds"].as_u64(),
            c["unreadable"].as_u64()
        ),
        (Some(0), Some(0), Some(0)),
        "every fetch-add counted once: {text}"
    );
    let chart = json.with_extension("png");
    assert!(
        std::fs::metadata(&chart).is_ok_and(|m| m.len() > 0),
        "the chart {} exists",
        chart.display()
    );
}

/// Three managers on etcd, the leader SIGKILLed twice among the server faults: a
/// standby takes over each time (and the killed one stands by again), and the data
/// path loses nothing across it all.
#[test]
fn a_chaos_run_with_leader_kills_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = "--duration 15s --reclaims 2 --kills 1 --replicas 2 --managers 3 --leader-kills 2";
    let (r, text, _) = chaos(dir.path(), &args.split(' ').collect::<Vec<_>>());
    let n = |k: &str| field(&r, &text, k);
    assert_eq!((n("managers"), n("leader_kills")), (3, 2), "{text}");
    assert_eq!(n("manager_failovers"), 2, "{text}");
    assert_nothing_lost(&r, &text);
    assert!(n("control_probes") > 0, "{text}");
    assert!(n("max_control_unavailable_ms") > 0, "{text}");
    assert_eq!(n("history_wrong_reads") + n("stale_reads"), 0, "{text}");
}

/// `chaos --lab`: the cluster in the network lab, with partitions (one way and both),
/// a vanishing host and heals besides kills and reclaims. The recorded history checks
/// as linearizable registers (no stale read, no read of bytes no write put there, no
/// read back in time) and, with two copies, nothing is lost; with one, losses show
/// only as `DataLost`. Skips, saying why, where the lab cannot run (not as root).
#[test]
fn chaos_in_the_lab_passes_the_history_check_with_one_and_two_copies() {
    if let Err(e) = farcache_testkit::Lab::check() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI runs as root with iproute2 and nftables; the lab must work: {e}"
        );
        eprintln!("SKIPPED: {e}");
        return;
    }
    for replicas in ["1", "2"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (r, text, _) = chaos(
            dir.path(),
            &[
                "--lab",
                "--duration",
                "24s",
                "--reclaims",
                "1",
                "--kills",
                "1",
                "--partitions",
                "3",
                "--vanishes",
                "1",
                "--fault-for",
                "1500ms",
                "--replicas",
                replicas,
            ],
        );
        let n = |k: &str| field(&r, &text, k);
        assert_eq!(n("partitions") + n("vanishes"), 4, "{text}");
        assert!(n("checked_ops") > 1000, "{text}");
        assert_eq!(
            (
                n("stale_reads"),
                n("history_wrong_reads"),
                n("reads_back_in_time"),
                n("wrong_reads"),
                n("acked_writes_lost")
            ),
            (0, 0, 0, 0, 0),
            "r = {replicas}: {text}"
        );
        if replicas == "2" {
            assert_eq!(n("acked_writes_lost_reported"), 0, "{text}");
        }
        assert!(r["lab_rtt_us"].as_f64().is_some_and(|v| v > 0.0), "{text}");
        assert_eq!(r["split_brain_ms"].as_f64(), Some(0.0), "{text}");
        assert!(n("ack_windows") > 0, "{text}");
    }
}
