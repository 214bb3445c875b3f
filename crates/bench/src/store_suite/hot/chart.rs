//! The `bench store-hot` chart: each server's load (lookups ÷ the mean over servers)
//! without and with the hot-key layer, one panel per server count.

use std::path::Path;

use plotters::prelude::*;

use super::TARGET_MAX_MEAN;
use super::report::{StoreHotReport, StoreHotRow};
use crate::error::Result;
use crate::report::canvas::{self, Area, BLUE as ON, GREY as GOAL, RED as OFF, err};

const PANEL_H: u32 = 380;
const TITLE_H: u32 = 40;

/// Renders the chart to `path` (text needs the chart font, as `write_chart`).
pub fn write_store_hot_chart(report: &StoreHotReport, path: &Path) -> Result<()> {
    let text = canvas::prepare(path)?;
    // Rows come in (off, on) pairs, one pair per server count.
    let pairs: Vec<(&StoreHotRow, &StoreHotRow)> = report
        .rows
        .chunks(2)
        .filter_map(|p| match p {
            [a, b] if !a.hot_key_layer && b.hot_key_layer => Some((a, b)),
            _ => None,
        })
        .collect();
    let panels = pairs.len().max(1) as u32;
    let root = canvas::canvas(path, (1100, TITLE_H + panels * PANEL_H))?;
    let (title, rest) = root.split_vertically(TITLE_H);
    if text {
        let caption = format!(
            "bench store-hot: {} keys of {} B, Zipf {} reads — {} cores, {}, {} build",
            report.keys,
            report.value_size,
            report.zipf_theta,
            report.head.machine.cores,
            report.head.machine.hostname,
            report.head.build
        );
        canvas::title(&title, caption, 20)?;
    }
    let y_max = pairs
        .iter()
        .flat_map(|(a, b)| shares(a).into_iter().chain(shares(b)))
        .fold(TARGET_MAX_MEAN, f64::max)
        * 1.25;
    for (area, pair) in rest
        .split_evenly((pairs.len().max(1), 1))
        .iter()
        .zip(&pairs)
    {
        panel(area, *pair, y_max, text)?;
    }
    root.present().map_err(err)
}

/// Each server's lookups ÷ the mean over servers.
fn shares(r: &StoreHotRow) -> Vec<f64> {
    let n = r.server_loads.len().max(1) as f64;
    let mean = r.server_loads.iter().sum::<u64>() as f64 / n;
    r.server_loads
        .iter()
        .map(|&l| if mean > 0.0 { l as f64 / mean } else { 0.0 })
        .collect()
}

fn panel(
    area: &Area<'_>,
    (off, on): (&StoreHotRow, &StoreHotRow),
    y_max: f64,
    text: bool,
) -> Result<()> {
    let n = off.server_loads.len().max(1);
    let mut b = ChartBuilder::on(area);
    b.margin(10);
    if text {
        let caption = format!(
            "{} servers: max/mean load {:.2} without the hot-key layer, {:.2} with it \
             ({:.2} -> {:.2} Mkeys/s)",
            off.servers, off.max_mean_load, on.max_mean_load, off.row.mops, on.row.mops
        );
        b.caption(caption, ("sans-serif", 17))
            .x_label_area_size(30)
            .y_label_area_size(60);
    }
    let mut chart = b
        .build_cartesian_2d(0f64..n as f64, 0f64..y_max)
        .map_err(err)?;
    if text {
        let names = off.server_names.clone();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&move |x| {
                // Labels at the bars' centres only.
                let i = x.floor() as usize;
                if (x - x.floor() - 0.5).abs() < 1e-6 {
                    names.get(i).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc("lookups ÷ mean over servers")
            .light_line_style(TRANSPARENT)
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(err)?;
    }
    for (row, color, lo, label) in [
        (off, OFF, 0.1, "hot-key layer off"),
        (on, ON, 0.5, "hot-key layer on"),
    ] {
        chart
            .draw_series(shares(row).into_iter().enumerate().map(|(i, s)| {
                let x = i as f64 + lo;
                Rectangle::new([(x, 0.0), (x + 0.4, s)], color.filled())
            }))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.filled()));
    }
    for (y, label) in [(1.0, "mean"), (TARGET_MAX_MEAN, "goal: max/mean 1.25")] {
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, y), (n as f64, y)],
                6,
                4,
                GOAL.stroke_width(1),
            ))
            .map_err(err)?;
        if text {
            chart
                .draw_series([EmptyElement::at((0.02, y))
                    + Text::new(label, (3, -16), ("sans-serif", 13).into_font())])
                .map_err(err)?;
        }
    }
    if !text {
        return Ok(());
    }
    canvas::legend(&mut chart, SeriesLabelPosition::UpperRight, 13, 0.85)
}
