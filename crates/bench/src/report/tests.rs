//! Unit tests of the report: rows, ratios, table, JSON and chart.

use super::*;

pub(crate) fn sample_report() -> BenchReport {
    let mut report = BenchReport::new("unit test");
    report.rows.push(
        BenchRow {
            name: "farcache GET 64B zipf".into(),
            system: "farcache".into(),
            op: "GET".into(),
            record_size: 64,
            distribution: "zipf0.99".into(),
            c: Some(2),
            s: Some(1),
            b: Some(16),
            q: Some(64),
            mops: 9.5,
            p50_us: 30.0,
            p99_us: 80.0,
            p999_us: 120.0,
            ..BenchRow::default()
        }
        .with_redis_baseline("redis GET P=64 c=4", 0.95)
        .with_latency_baseline(20.0)
        .with_target(">= 10x", false),
    );
    report.rows.push(BenchRow {
        name: "redis best GET 64B".into(),
        system: "redis".into(),
        op: "GET".into(),
        record_size: 64,
        distribution: "uniform".into(),
        c: Some(4),
        q: Some(64),
        mops: 0.95,
        p50_us: 250.0,
        p99_us: 400.0,
        ..BenchRow::default()
    });
    report
}

#[test]
fn row_helpers() {
    let r = &sample_report().rows[0];
    assert!((r.ratio_vs_redis.expect("ratio") - 10.0).abs() < 1e-9);
    assert!((r.latency_ratio_vs_raw_tcp.expect("lat") - 1.5).abs() < 1e-9);
    assert_eq!(r.params(), "2/1/16/64");
    assert_eq!(sample_report().all_targets_met(), Some(false));
    let r = BenchRow::default().with_bandwidth(10.0, 20.0);
    assert_eq!(r.bandwidth_ratio_vs_sockperf, Some(0.5));
    assert_eq!(
        BenchRow::default()
            .with_redis_baseline("x", 0.0)
            .ratio_vs_redis,
        None
    );
}

#[test]
fn json_roundtrip() {
    let report = sample_report();
    let v = serde_json::to_value(&report).expect("serialize");
    assert_eq!(v["bench"], "unit test");
    assert!(v["machine"]["cores"].as_u64().expect("cores") >= 1);
    let row = &v["rows"][0];
    assert_eq!(row["system"], "farcache");
    assert_eq!(row["record_size"], 64);
    assert_eq!(row["q"], 64);
    assert_eq!(row["baseline"], "redis GET P=64 c=4");
    assert_eq!(row["target"], ">= 10x");
    assert_eq!(row["meets_target"], false);
    assert!((row["ratio_vs_redis"].as_f64().expect("ratio") - 10.0).abs() < 1e-9);
    // NaN p99.9 of the redis row serializes as null and comes back as NaN.
    assert!(v["rows"][1]["p999_us"].is_null());
    assert!(v["rows"][1]["s"].is_null());
    let back: BenchReport = serde_json::from_value(v).expect("deserialize");
    assert_eq!(back.rows[0], report.rows[0]);
    assert!(back.rows[1].p999_us.is_nan());
    assert_eq!(back.machine, report.machine);
}

#[test]
fn table_is_aligned() {
    let t = format_table(&sample_report());
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines[0].starts_with("== unit test @"));
    assert!(lines[1].starts_with("name"));
    assert!(lines[1].contains("p99.9 µs") && lines[1].contains("ok?"));
    assert!(lines[3].contains("10.00x redis") && lines[3].contains("NO"));
    assert!(lines[3].contains("1.50x tcp-lat"));
    // "Mops/s" column is right-aligned at the same character position.
    let pos = |l: &str, s: &str| l.find(s).map(|b| l[..b].chars().count());
    let hdr_end = pos(lines[1], "Mops/s").expect("hdr") + "Mops/s".len();
    assert_eq!(pos(lines[3], "9.500").expect("v") + 5, hdr_end);
    assert_eq!(pos(lines[4], "0.950").expect("v") + 5, hdr_end);
}

#[test]
fn writes_json_and_chart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = sample_report();
    let p = write_json(&report, dir.path()).expect("json");
    assert!(p.ends_with(format!("unit_test-{}.json", report.timestamp_unix)));
    let latest = dir.path().join("unit_test-latest.json");
    let back: BenchReport =
        serde_json::from_str(&std::fs::read_to_string(latest).expect("read")).expect("parse");
    assert_eq!(back.bench, "unit test");
    let png = write_chart(&report, dir.path()).expect("chart");
    let bytes = std::fs::read(&png).expect("png");
    assert_eq!(&bytes[1..4], b"PNG");
    assert!(dir.path().join("unit_test-latest.png").exists());
}

#[test]
fn client_side_ratio_and_round_trips_in_table() {
    let mut report = BenchReport::new("t");
    report.rows.push(
        BenchRow {
            name: "chase".into(),
            ..BenchRow::default()
        }
        .with_client_side_ratio(12.5)
        .with_round_trips(3.0, Some(64.0)),
    );
    report.rows.push(
        BenchRow {
            name: "khop".into(),
            ..BenchRow::default()
        }
        .with_client_side_ratio(f64::NAN)
        .with_round_trips(14.25, None),
    );
    report.notes.push("hello".into());
    let t = format_table(&report);
    assert!(t.contains("12.50x client, 3 vs 64 RT"), "{t}");
    assert!(t.contains("14.25 RT") && !t.contains("NaN"), "{t}");
    assert!(t.ends_with("note: hello\n"), "{t}");
    // Reports written before these fields existed still load.
    let mut v = serde_json::to_value(&report).expect("json");
    for r in v["rows"].as_array_mut().expect("rows") {
        let o = r.as_object_mut().expect("row");
        o.remove("ratio_vs_client_side");
        o.remove("round_trips");
        o.remove("client_side_round_trips");
    }
    v.as_object_mut().expect("report").remove("notes");
    let back: BenchReport = serde_json::from_value(v).expect("old format");
    assert!(back.rows[0].ratio_vs_client_side.is_none() && back.notes.is_empty());
}

#[test]
fn sizes() {
    assert_eq!(fmt_size(64), "64B");
    assert_eq!(fmt_size(4096), "4K");
    assert_eq!(fmt_size(1 << 20), "1M");
    assert_eq!(fmt_size(1500), "1500B");
}

mod chart_preview {
    #[test]
    #[ignore = "writes preview PNGs to /tmp/farcache-chart-preview"]
    fn preview() {
        let mut r = super::sample_report();
        r.baselines = crate::report::Baselines::default();
        crate::report::write_chart(&r, "/tmp/farcache-chart-preview").expect("chart");
        crate::report::write_chart_with_font(&r, "/tmp/farcache-chart-preview/nofont", None)
            .expect("c");
    }
}

#[test]
fn shared_number_formats() {
    use super::format::{fmt_lat, mib, num, pct, verdict};
    assert_eq!(
        (num(1.23456, 3), num(f64::NAN, 1)),
        ("1.235".into(), "-".into())
    );
    assert_eq!(
        (
            fmt_lat(3.0),
            fmt_lat(80.0),
            fmt_lat(1200.0),
            fmt_lat(f64::INFINITY)
        ),
        ("3.00".into(), "80.0".into(), "1200".into(), "-".into())
    );
    // Replication's `45 %` and slo's `12.5 %` are one function; a non-finite share
    // is `-` (slo only ever passes finite medians).
    assert_eq!(
        (pct(0.45, 0), pct(0.125, 1)),
        ("45 %".into(), "12.5 %".into())
    );
    assert_eq!(pct(f64::NAN, 1), "-");
    assert_eq!((mib(3 << 20), mib(1500)), ("3 MiB".into(), "1500 B".into()));
    // Sizes: the table's column and the working set in `bench io`'s row names.
    use super::format::fmt_bytes;
    assert_eq!(
        (fmt_size(1 << 20), fmt_bytes(1 << 20)),
        ("1M".into(), "1MiB".into())
    );
    assert_eq!(
        (fmt_size(1500), fmt_bytes(1500)),
        ("1500B".into(), "1KiB".into())
    );
    assert_eq!(
        [Some(true), Some(false), None].map(verdict),
        ["yes", "NO", "-"].map(String::from)
    );
}

#[test]
fn table_aligns_and_heads() {
    use super::table::{Align::L, Align::R, Table, heading, push_notes};
    let mut t = Table::new(&[("name", L), ("Mops/s", R)]);
    t.row(vec!["a".into(), "1.5".into()]);
    t.row(vec!["longer".into(), "12.25".into()]);
    assert_eq!(
        t.render(),
        "name    Mops/s\n--------------\na          1.5\nlonger   12.25\n"
    );
    assert_eq!(t.render_body(), "a          1.5\nlonger   12.25\n");
    let m = MachineInfo {
        cores: 2,
        hostname: "h".into(),
        kernel: "k".into(),
        cpu_model: None,
    };
    let mut out = heading("store", 7, &m, "kernel k");
    push_notes(&mut out, &["x".into()]);
    assert_eq!(out, "== store @ 7 (2 cores, h, kernel k) ==\nnote: x\n");
}
