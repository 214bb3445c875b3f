//! The plain-text table: number formatting and aligned columns.

use std::fmt::Write as _;

use super::BenchReport;
use crate::row::BenchRow;

fn fmt_f(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "-".into()
    }
}

fn fmt_lat(v: f64) -> String {
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
    const HEADER: [&str; 13] = [
        "name",
        "system",
        "op",
        "size",
        "dist",
        "c/s/b/q",
        "Mops/s",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "ratio",
        "target",
        "ok?",
    ];
    // Numeric columns are right-aligned.
    const RIGHT: [bool; 13] = [
        false, false, false, true, false, false, true, true, true, true, false, false, false,
    ];
    let mut cells: Vec<Vec<String>> = vec![HEADER.iter().map(|s| s.to_string()).collect()];
    for r in &report.rows {
        cells.push(vec![
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
            fmt_f(r.mops, 3),
            fmt_lat(r.p50_us),
            fmt_lat(r.p99_us),
            fmt_lat(r.p999_us),
            fmt_ratios(r),
            r.target.clone().unwrap_or_else(|| "-".into()),
            match r.meets_target {
                Some(true) => "yes".into(),
                Some(false) => "NO".into(),
                None => "-".into(),
            },
        ]);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "== {} @ {} ({} cores, {}, kernel {}) ==",
        report.bench,
        report.timestamp_unix,
        report.machine.cores,
        report.machine.hostname,
        report.machine.kernel
    );
    out.push_str(&align_cells(&cells, &RIGHT));
    for n in &report.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// `cells` (header first) as aligned columns with a rule under the header; a column
/// whose `right` flag is set is right-aligned.
pub(crate) fn align_cells(cells: &[Vec<String>], right: &[bool]) -> String {
    let cols = cells.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; cols];
    for row in cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for (i, row) in cells.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(col, (c, &w))| {
                if right.get(col).copied().unwrap_or(false) {
                    format!("{c:>w$}")
                } else {
                    format!("{c:<w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
        if i == 0 {
            let total: usize = widths.iter().sum::<usize>() + 2 * cols.saturating_sub(1);
            let _ = writeln!(out, "{}", "-".repeat(total));
        }
    }
    out
}

/// Prints [`format_table`] to stdout.
pub fn print_table(report: &BenchReport) {
    print!("{}", format_table(report));
}
