//! The PNG chart of a report (plotters), and the font its text needs.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::BenchReport;
use super::canvas::{
    self, BLUE as FARCACHE, GREEN as OTHER, GREY as RAW_TCP, RED as REDIS, err, locate_chart_font,
    register_chart_font,
};
use crate::error::BenchError;
use crate::error::Result;
use crate::row::BenchRow;

fn color(system: &str) -> RGBColor {
    match system {
        "farcache" => FARCACHE,
        "redis" => REDIS,
        "sockperf" => RAW_TCP,
        _ => OTHER,
    }
}

/// One horizontal bar: (row index, value, color, optional text).
struct Bar {
    slot: usize,
    offset: f64,
    height: f64,
    value: f64,
    color: RGBColor,
    text: String,
}

struct Panel<'a> {
    title: &'a str,
    unit: &'a str,
    names: Vec<String>,
    bars: Vec<Bar>,
    /// Vertical reference line (value, label).
    reference: Option<(f64, String)>,
    legend: Vec<(&'static str, RGBColor)>,
}

fn throughput_panel(report: &BenchReport) -> Panel<'static> {
    let rows: Vec<&BenchRow> = report
        .rows
        .iter()
        .filter(|r| r.mops.is_finite() && r.mops > 0.0)
        .collect();
    let mut bars = Vec::new();
    let mut legend = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let c = color(&r.system);
        let ratio = [
            r.ratio_vs_best_peer
                .map(|x| format!("{x:.2}x best peer"))
                .or_else(|| r.ratio_vs_redis.map(|x| format!("{x:.2}x redis"))),
            r.ratio_vs_client_side.map(|x| format!("{x:.2}x client")),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ");
        let ratio = if ratio.is_empty() {
            ratio
        } else {
            format!("  ({ratio})")
        };
        // The best peer when one was measured, else the Redis sweep.
        let base = match (r.best_peer_mops, &r.best_peer) {
            (Some(m), Some(p)) => Some((m, p.as_str())),
            _ => r
                .baseline_mops
                .map(|m| (m, r.baseline.as_deref().unwrap_or("redis"))),
        };
        match base.filter(|(b, _)| b.is_finite() && *b > 0.0) {
            Some((base, label)) => {
                bars.push(Bar {
                    slot: i,
                    offset: 0.17,
                    height: 0.32,
                    value: r.mops,
                    color: c,
                    text: format!("{:.3}{ratio}", r.mops),
                });
                bars.push(Bar {
                    slot: i,
                    offset: -0.17,
                    height: 0.32,
                    value: base,
                    color: REDIS,
                    text: format!("{base:.3} {label}"),
                });
                push_legend(&mut legend, "best peer", REDIS);
            }
            None => bars.push(Bar {
                slot: i,
                offset: 0.0,
                height: 0.6,
                value: r.mops,
                color: c,
                text: format!("{:.3}{ratio}", r.mops),
            }),
        }
        push_legend(&mut legend, system_label(&r.system), c);
    }
    Panel {
        title: "Throughput (Mops/s)",
        unit: "Mops/s",
        names: rows.iter().map(|r| r.name.clone()).collect(),
        bars,
        reference: None,
        legend,
    }
}

fn latency_panel(report: &BenchReport) -> Panel<'static> {
    let rows: Vec<&BenchRow> = report
        .rows
        .iter()
        .filter(|r| r.p50_us.is_finite() && r.p50_us > 0.0)
        .collect();
    let mut bars = Vec::new();
    let mut legend = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let c = color(&r.system);
        let ratio = r
            .latency_ratio_vs_raw_tcp
            .map(|x| format!("  ({x:.2}x raw TCP)"))
            .unwrap_or_default();
        match r.baseline_latency_us.filter(|b| b.is_finite() && *b > 0.0) {
            Some(base) => {
                bars.push(Bar {
                    slot: i,
                    offset: 0.17,
                    height: 0.32,
                    value: r.p50_us,
                    color: c,
                    text: format!("{:.1}{ratio}", r.p50_us),
                });
                bars.push(Bar {
                    slot: i,
                    offset: -0.17,
                    height: 0.32,
                    value: base,
                    color: RAW_TCP,
                    text: format!("{base:.1} raw TCP RTT (spin)"),
                });
                push_legend(&mut legend, "raw TCP RTT", RAW_TCP);
            }
            None => bars.push(Bar {
                slot: i,
                offset: 0.0,
                height: 0.6,
                value: r.p50_us,
                color: c,
                text: format!("{:.1}{ratio}", r.p50_us),
            }),
        }
        push_legend(&mut legend, system_label(&r.system), c);
    }
    let reference = report
        .baselines
        .raw_rtt_p50_us()
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(|v| (v, format!("raw TCP RTT p50 {v:.1} µs")));
    Panel {
        title: "p50 latency (µs) vs raw TCP round trip",
        unit: "µs",
        names: rows.iter().map(|r| r.name.clone()).collect(),
        bars,
        reference,
        legend,
    }
}

fn system_label(system: &str) -> &'static str {
    match system {
        "farcache" => "farcache",
        "redis" => "redis",
        "sockperf" => "raw TCP (sockperf)",
        _ => "other",
    }
}

fn push_legend(legend: &mut Vec<(&'static str, RGBColor)>, name: &'static str, c: RGBColor) {
    if !legend.iter().any(|(n, _)| *n == name) {
        legend.push((name, c));
    }
}

pub(super) fn render(
    report: &BenchReport,
    path: &std::path::Path,
    text: bool,
) -> Result<(), BenchError> {
    let tp = throughput_panel(report);
    let lat = latency_panel(report);
    let panel_h = |p: &Panel| 110 + 34 * p.names.len().max(2) as u32;
    let (h1, h2) = (panel_h(&tp), panel_h(&lat));
    let width = 1500u32;
    let root = canvas::canvas(path, (width, h1 + h2 + 40))?;
    let (title, rest) = root.split_vertically(40);
    if text {
        let caption = format!(
            "{} — {} cores, {} (unix time {})",
            report.bench, report.machine.cores, report.machine.hostname, report.timestamp_unix
        );
        canvas::title(&title, caption, 20)?;
    }
    let (top, bottom) = rest.split_vertically(h1);
    draw_panel(&top, &tp, text)?;
    draw_panel(&bottom, &lat, text)?;
    root.present().map_err(err)?;
    Ok(())
}

type Chart<'a, 'b> =
    ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    panel: &Panel<'_>,
    text: bool,
) -> Result<(), BenchError> {
    let n = panel.names.len().max(1);
    let max_bar = panel.bars.iter().map(|b| b.value).fold(0.0f64, f64::max);
    let max_ref = panel.reference.as_ref().map_or(0.0, |r| r.0);
    let x_max = (max_bar.max(max_ref) * if text { 1.45 } else { 1.1 }).max(1e-6);
    let y_range = -0.6f64..(n as f64 - 0.4);
    let mut builder = ChartBuilder::on(area);
    builder.margin(12);
    if text {
        builder
            .caption(panel.title, ("sans-serif", 18))
            .x_label_area_size(40)
            .y_label_area_size(280);
    }
    let mut chart = builder
        .build_cartesian_2d(0f64..x_max, y_range)
        .map_err(err)?;
    if text {
        draw_mesh(&mut chart, panel, n)?;
    } else {
        draw_gridlines(&mut chart, x_max, n)?;
    }
    chart
        .draw_series(panel.bars.iter().map(|b| {
            let y = y_of(n, b);
            Rectangle::new(
                [(0.0, y - b.height / 2.0), (b.value, y + b.height / 2.0)],
                b.color.filled(),
            )
        }))
        .map_err(err)?;
    if let Some(reference) = &panel.reference {
        draw_reference(&mut chart, reference, n, text)?;
    }
    if text {
        draw_bar_texts(&mut chart, panel, n)?;
        draw_legend(&mut chart, panel)?;
    }
    Ok(())
}

/// Where a bar sits on the y axis: row 0 at the top.
fn y_of(n: usize, b: &Bar) -> f64 {
    (n - 1 - b.slot) as f64 + b.offset
}

/// Axes with the row names on y and the unit on x.
fn draw_mesh(chart: &mut Chart<'_, '_>, panel: &Panel<'_>, n: usize) -> Result<(), BenchError> {
    let fmt = canvas::row_names(panel.names.clone());
    chart
        .configure_mesh()
        .y_labels(n)
        .y_label_formatter(&fmt)
        .disable_y_mesh()
        .x_desc(panel.unit)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)
}

/// Plain gridlines without any text.
fn draw_gridlines(chart: &mut Chart<'_, '_>, x_max: f64, n: usize) -> Result<(), BenchError> {
    let grid = RGBColor(225, 225, 225);
    for k in 1..=5 {
        let x = x_max * f64::from(k) / 5.0;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x, -0.6), (x, n as f64 - 0.4)],
                grid,
            )))
            .map_err(err)?;
    }
    Ok(())
}

/// The dashed vertical reference line, labelled when `text`.
fn draw_reference(
    chart: &mut Chart<'_, '_>,
    (v, label): &(f64, String),
    n: usize,
    text: bool,
) -> Result<(), BenchError> {
    chart
        .draw_series(DashedLineSeries::new(
            vec![(*v, -0.6), (*v, n as f64 - 0.4)],
            6,
            4,
            RAW_TCP.stroke_width(2),
        ))
        .map_err(err)?;
    if text {
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((*v, n as f64 - 0.4))
                    + Text::new(
                        label.clone(),
                        (6, 2),
                        ("sans-serif", 13).into_font().color(&RAW_TCP),
                    ),
            ))
            .map_err(err)?;
    }
    Ok(())
}

/// Each bar's value text at its end.
fn draw_bar_texts(
    chart: &mut Chart<'_, '_>,
    panel: &Panel<'_>,
    n: usize,
) -> Result<(), BenchError> {
    let style = ("sans-serif", 13).into_font().color(&BLACK);
    chart
        .draw_series(panel.bars.iter().map(|b| {
            EmptyElement::at((b.value, y_of(n, b)))
                + Text::new(b.text.clone(), (5, -7), style.clone())
        }))
        .map_err(err)?;
    Ok(())
}

// The legend box needs the backend to outlive the chart.
fn draw_legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>, panel: &Panel<'_>) -> Result<(), BenchError> {
    for (name, c) in &panel.legend {
        let c = *c;
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
    }
    if !panel.legend.is_empty() {
        canvas::legend(chart, SeriesLabelPosition::LowerRight, 14, 0.85)?;
    }
    Ok(())
}

/// Renders the report chart to `<dir>/<bench>-<timestamp>.png` (and copies it
/// to `<bench>-latest.png`): throughput bars (farcache vs Redis baseline) and
/// p50 latency bars vs the raw TCP RTT.
///
/// Text needs DejaVu Sans (installed with apt when missing and running as
/// root); without a font the bars are drawn without labels.
pub fn write_chart(report: &BenchReport, dir: impl AsRef<Path>) -> Result<PathBuf> {
    write_chart_with_font(report, dir, locate_chart_font().as_deref())
}

/// Like [`write_chart`] with an explicit font file (`None`: no text at all).
pub fn write_chart_with_font(
    report: &BenchReport,
    dir: impl AsRef<Path>,
    font: Option<&Path>,
) -> Result<PathBuf> {
    let text = font.is_some_and(register_chart_font);
    canvas::write_with_latest(dir.as_ref(), &report.bench, report.timestamp_unix, |path| {
        render(report, path, text)
    })
}
