//! Separate test binary (own process): charts render without any font
//! registered, i.e. bars only and no text.

use farcache_bench::{BenchReport, BenchRow, write_chart_with_font};

#[test]
fn chart_renders_without_font() {
    let mut report = BenchReport::new("nofont");
    report.rows.push(
        BenchRow {
            name: "farcache GET".into(),
            system: "farcache".into(),
            mops: 5.0,
            p50_us: 25.0,
            ..BenchRow::default()
        }
        .with_redis_baseline("redis GET P=64 c=1", 1.0)
        .with_latency_baseline(20.0),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let png = write_chart_with_font(&report, dir.path(), None).expect("chart without font");
    let bytes = std::fs::read(png).expect("read png");
    assert_eq!(&bytes[1..4], b"PNG");
}
