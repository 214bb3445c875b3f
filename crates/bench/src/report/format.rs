//! Number formatting shared by every suite's table (latency, Mops, sizes, ratios,
//! percentages) and `bench io`'s own table.

use super::BenchReport;
use super::table::{Align::L, Align::R, Table, heading, push_notes};
use crate::row::BenchRow;

/// `v` with `decimals` decimals; `-` when not finite.
pub(crate) fn num(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "-".into()
    }
}

/// `v × 100` as `45 %` (`decimals` decimals); `-` when not finite.
pub(crate) fn pct(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{:.decimals$} %", v * 100.0)
    } else {
        "-".into()
    }
}

/// `1024 MiB` when whole MiB, else `1500 B`.
pub(crate) fn mib(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} B")
    }
}

/// `yes`, `NO` or `-` for a row's `meets_target`.
pub(crate) fn verdict(met: Option<bool>) -> String {
    match met {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "-",
    }
    .into()
}

/// A latency (µs, or ms from µs ÷ 1000) at about three significant digits:
/// `3.00`, `80.0`, `1200`; `-` when not finite.
pub(crate) fn fmt_lat(v: f64) -> String {
    match v {
        v if !v.is_finite() => "-".into(),
        v if v < 10.0 => format!("{v:.2}"),
        v if v < 1000.0 => format!("{v:.1}"),
        v => format!("{v:.0}"),
    }
}

/// `64B`, `4K`, `1M`, `1500B`.
pub fn fmt_size(bytes: usize) -> String {
    const K: usize = 1024;
    match bytes {
        0 => "-".into(),
        b if b >= K * K && b % (K * K) == 0 => format!("{}M", b / (K * K)),
        b if b >= K && b % K == 0 => format!("{}K", b / K),
        b => format!("{b}B"),
    }
}

/// `1MiB`, `128MiB`, `1GiB`, `4096B`: a working set in a row's name. Unlike
/// [`fmt_size`] (the table's size column), binary units are spelt out and a size
/// that is no whole number of them is rounded down.
pub(crate) fn fmt_bytes(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{}GiB", b >> 30)
    } else if b >= 1 << 20 {
        format!("{}MiB", b >> 20)
    } else if b >= 1 << 10 {
        format!("{}KiB", b >> 10)
    } else {
        format!("{b}B")
    }
}

/// Round trips per op: whole numbers without decimals.
fn fmt_rt(v: f64) -> String {
    if (v - v.round()).abs() < 0.005 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn fmt_ratios(r: &BenchRow) -> String {
    let mut parts = Vec::new();
    if let (Some(x), Some(p)) = (r.ratio_vs_best_peer, &r.best_peer) {
        parts.push(format!("{x:.2}x best ({p})"));
    }
    if let Some(x) = r.fraction_of_ceiling {
        parts.push(format!("{:.0}% of ceiling", x * 100.0));
    }
    // The Redis ratio is shown unless the best peer is that same Redis run.
    if let Some(x) = r.ratio_vs_redis.filter(|_| r.best_peer != r.baseline) {
        parts.push(format!("{x:.2}x redis"));
    }
    if let Some(x) = r.latency_ratio_vs_raw_tcp {
        parts.push(format!("{x:.2}x tcp-lat"));
    }
    if let Some(x) = r.bandwidth_ratio_vs_stream {
        parts.push(format!("{x:.2}x tcp-stream"));
    } else if let Some(x) = r.bandwidth_ratio_vs_sockperf {
        parts.push(format!("{x:.2}x tcp-bw"));
    }
    if let Some(x) = r.ratio_vs_client_side {
        parts.push(format!("{x:.2}x client"));
    }
    match (r.round_trips, r.client_side_round_trips) {
        (Some(p), Some(c)) => parts.push(format!("{} vs {} RT", fmt_rt(p), fmt_rt(c))),
        (Some(p), None) => parts.push(format!("{} RT", fmt_rt(p))),
        _ => {}
    }
    if let (Some(b), Some(c)) = (r.bytes_per_query, r.client_bytes_per_query)
        && b > 0.0
    {
        parts.push(format!("{:.1}x fewer bytes", c / b));
    }
    if let (Some(m), Some(f)) = (r.peer_msgs, r.peer_frames) {
        parts.push(format!("{} srv msgs in {} frames", fmt_rt(m), fmt_rt(f)));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// The report as an aligned plain-text table (with a header line).
pub fn format_table(report: &BenchReport) -> String {
    let mut t = Table::new(&[
        ("name", L),
        ("system", L),
        ("op", L),
        ("size", R),
        ("dist", L),
        ("c/s/b/q", L),
        ("Mops/s", R),
        ("p50 µs", R),
        ("p99 µs", R),
        ("p99.9 µs", R),
        ("ratio", L),
        ("target", L),
        ("ok?", L),
    ]);
    for r in &report.rows {
        t.row(vec![
            r.name.clone(),
            r.system.clone(),
            r.op.clone(),
            fmt_size(r.record_size),
            if r.distribution.is_empty() {
                "-".into()
            } else {
                r.distribution.clone()
            },
            r.params(),
            num(r.mops, 3),
            fmt_lat(r.p50_us),
            fmt_lat(r.p99_us),
            fmt_lat(r.p999_us),
            fmt_ratios(r),
            r.target.clone().unwrap_or_else(|| "-".into()),
            verdict(r.meets_target),
        ]);
    }
    let m = &report.machine;
    let kernel = format!("kernel {}", m.kernel);
    let mut out = heading(&report.bench, report.timestamp_unix, m, &kernel);
    out.push_str(&t.render());
    push_notes(&mut out, &report.notes);
    out
}

/// Prints [`format_table`] to stdout.
pub fn print_table(report: &BenchReport) {
    print!("{}", format_table(report));
}
