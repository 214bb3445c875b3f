//! The per-section table `farcache calibrate` prints.

use std::fmt::Write;

use crate::model::ModelFile;
use crate::point::Point;

/// One row per section: points measured, the best throughput and where, the lowest
/// p50 and where.
pub fn format_calibration_table(file: &ModelFile) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>7} {:>6} {:>6}  {:>10} {:<22} {:>9} {:<22}",
        "record", "reads", "points", "best Mops", "at", "min p50", "at"
    );
    for s in &file.sections {
        let best = s
            .points
            .iter()
            .max_by(|a, b| a.perf.throughput.total_cmp(&b.perf.throughput));
        let fastest = s
            .points
            .iter()
            .min_by(|a, b| a.perf.p50_us.total_cmp(&b.perf.p50_us));
        let at = |p: Option<&Point>| p.map_or(String::new(), |p| p.transport.to_string());
        let _ = writeln!(
            out,
            "{:>5} B {:>5.0}% {:>6}  {:>10.3} {:<22} {:>6.1} us {:<22}",
            s.record_size,
            s.read_fraction * 100.0,
            s.points.len(),
            best.map_or(0.0, |p| p.perf.throughput / 1e6),
            at(best),
            fastest.map_or(0.0, |p| p.perf.p50_us),
            at(fastest),
        );
    }
    out
}
