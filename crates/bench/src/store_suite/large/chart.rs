//! The `bench store-large` chart: GET latency p50, p99 and max per object size, first-d
//! against waiting for all chunks, with and without a stopped server, Redis below.
//! A log axis: a stalled read is two orders of magnitude above a normal one.

use std::path::Path;

use plotters::prelude::*;

use super::output::{LargeRow, StoreLargeReport};
use crate::error::Result;
use crate::report::canvas::{
    self, Area, BLUE as FIRST_D, GREEN as HOME, ORANGE as WAIT_ALL, RED as REDIS, err,
};
use crate::report::fmt_size;

const TITLE_H: u32 = 40;
const BAR_ROW_H: u32 = 60;

/// Milliseconds from µs, three significant digits or whole ms. Not the table's
/// [`crate::report::fmt_lat`]: no `-` (only finite values get a label) and one
/// decimal only below 100 ms.
fn ms(us: f64) -> String {
    match us / 1e3 {
        v if v < 10.0 => format!("{v:.2}"),
        v if v < 100.0 => format!("{v:.1}"),
        v => format!("{v:.0}"),
    }
}

/// One bar pair: a variant's p50 and p99.
struct Bar<'a> {
    label: String,
    color: RGBColor,
    row: &'a LargeRow,
}

/// The GET rows of `size`, in the order drawn (top first).
fn bars(report: &StoreLargeReport, size: usize) -> Vec<Bar<'_>> {
    // Rows with a stopped server end in which one it was.
    let find = |system: &str, what: &str, stopped: &str| {
        report.rows.iter().find(|r| {
            r.row.system == system
                && r.row.op == "GET"
                && r.row.record_size == size
                && (r.stopped_servers > 0) != stopped.is_empty()
                && r.row.name.contains(what)
                && r.row.name.ends_with(stopped)
        })
    };
    const ONE: &str = ", 1 server stopped";
    const HOME_STOPPED: &str = ", home server stopped";
    let want = [
        ("farcache", "first-d", "", "first-d", FIRST_D),
        ("farcache", "wait-all", "", "wait-all", WAIT_ALL),
        ("farcache", "first-d", ONE, "first-d, 1 stopped", FIRST_D),
        ("farcache", "wait-all", ONE, "wait-all, 1 stopped", WAIT_ALL),
        (
            "farcache",
            "first-d",
            HOME_STOPPED,
            "first-d, home stopped",
            HOME,
        ),
        ("redis", "GET", "", "redis GET", REDIS),
    ];
    want.into_iter()
        .filter_map(|(sys, what, stopped, label, color)| {
            find(sys, what, stopped).map(|row| Bar {
                label: label.into(),
                color,
                row,
            })
        })
        .collect()
}

/// Renders the chart to `path` (PNG). Text needs the chart font (see `write_chart`);
/// without it, bars only.
pub fn write_store_large_chart(report: &StoreLargeReport, path: &Path) -> Result<()> {
    let text = canvas::prepare(path)?;
    let panels: Vec<(usize, Vec<Bar<'_>>)> = report
        .sizes
        .iter()
        .map(|&s| (s as usize, bars(report, s as usize)))
        .filter(|(_, b)| !b.is_empty())
        .collect();
    // One x axis for every panel, so sizes compare at a glance.
    let values = panels
        .iter()
        .flat_map(|(_, b)| b.iter())
        .flat_map(|b| [b.row.row.p50_us, b.row.max_us])
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(|us| us / 1e3);
    let (lo, hi) = values.fold((f64::MAX, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
    let (lo, hi) = if hi > 0.0 {
        (lo / 2.0, hi * if text { 8.0 } else { 2.0 })
    } else {
        (0.1, 10.0)
    };
    let heights: Vec<u32> = panels
        .iter()
        .map(|(_, b)| 90 + BAR_ROW_H * b.len() as u32)
        .collect();
    let total = TITLE_H + heights.iter().sum::<u32>().max(100);
    let root = canvas::canvas(path, (1400, total))?;
    let (title, mut rest) = root.split_vertically(TITLE_H);
    if text {
        let caption = format!(
            "bench store-large: GET latency, RS({}+{}) on {} servers, {} objects per size, \
             client b={} q={}, op timeout {} ms while stopped — {} cores, {}, {} build",
            report.d,
            report.p,
            report.servers,
            report.objects,
            report.client_batch,
            report.client_depth,
            report.op_timeout_ms,
            report.head.machine.cores,
            report.head.machine.hostname,
            report.head.build
        );
        canvas::title(&title, caption, 18)?;
    }
    for ((size, bars), h) in panels.iter().zip(&heights) {
        let (area, below) = rest.split_vertically(*h);
        panel(&area, *size, bars, (lo, hi), text)?;
        rest = below;
    }
    root.present().map_err(err)
}

fn panel(
    area: &Area<'_>,
    size: usize,
    bars: &[Bar<'_>],
    (lo, hi): (f64, f64),
    text: bool,
) -> Result<()> {
    let n = bars.len();
    let mut b = ChartBuilder::on(area);
    b.margin(10);
    if text {
        b.caption(
            format!(
                "{} objects: p50 (solid), p99 and the slowest call (lighter), ms",
                fmt_size(size)
            ),
            ("sans-serif", 16),
        )
        .x_label_area_size(30)
        .y_label_area_size(170);
    }
    let mut chart = b
        .build_cartesian_2d((lo..hi).log_scale(), -0.6f64..(n as f64 - 0.4))
        .map_err(err)?;
    let y_of = |i: usize| (n - 1 - i) as f64;
    if text {
        let fmt = canvas::row_names(bars.iter().map(|b| b.label.clone()).collect());
        chart
            .configure_mesh()
            .y_labels(n)
            .y_label_formatter(&fmt)
            .disable_y_mesh()
            .x_desc("ms (log scale)")
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(err)?;
    }
    for (i, bar) in bars.iter().enumerate() {
        let y = y_of(i);
        let r = &bar.row.row;
        for (v, dy, style) in [
            (r.p50_us, 0.25, bar.color.filled()),
            (r.p99_us, 0.0, bar.color.mix(0.55).filled()),
            (bar.row.max_us, -0.25, bar.color.mix(0.25).filled()),
        ] {
            if !(v.is_finite() && v > 0.0) {
                continue;
            }
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(lo, y + dy - 0.11), (v / 1e3, y + dy + 0.11)],
                    style,
                )))
                .map_err(err)?;
        }
        if text {
            let mut label = format!(
                "p50 {}, p99 {}, max {} ms",
                ms(r.p50_us),
                ms(r.p99_us),
                ms(bar.row.max_us)
            );
            if bar.row.failures > 0 {
                label.push_str(&format!(
                    ", {} of {} calls failed",
                    bar.row.failures, bar.row.attempts
                ));
            }
            let end = bar.row.max_us.max(r.p99_us) / 1e3;
            if end.is_finite() && end > 0.0 {
                chart
                    .draw_series(std::iter::once(
                        EmptyElement::at((end, y))
                            + Text::new(label, (6, -7), ("sans-serif", 13).into_font()),
                    ))
                    .map_err(err)?;
            }
        }
    }
    Ok(())
}
