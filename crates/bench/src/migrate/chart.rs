//! The `bench migrate` chart: reads and writes per second over time, one panel per
//! mode, with the migration steps shaded.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::output::{MigrateReport, MigrateRow};
use crate::error::Result;
use crate::report::canvas::{self, Area, BLUE as READS, RED as WRITES, err};

const STEP: RGBColor = RGBColor(255, 221, 170);
const PANEL_H: u32 = 300;
const TITLE_H: u32 = 40;

/// Renders `<dir>/migrate-<timestamp>.png` (and a copy `migrate-latest.png`); text
/// needs the chart font (see `write_chart`), without it only lines and shading.
pub fn write_migrate_chart(report: &MigrateReport, dir: impl AsRef<Path>) -> Result<PathBuf> {
    let dir = dir.as_ref();
    let text = canvas::font_ready();
    canvas::write_with_latest(dir, "migrate", report.head.timestamp_unix, |path| {
        render(report, path, text)
    })
}

/// Buckets averaged per point: a 10 ms bucket holds only a few batches, so single
/// buckets jump by a whole batch.
const SMOOTH: usize = 5;

/// (seconds, Mops/s) points of one line.
type Line = Vec<(f64, f64)>;

/// (seconds, Mops/s) per bucket, centred means over [`SMOOTH`] buckets; the last bucket
/// is cut short by the stop, so dropped.
fn series(counts: &[u64], bucket_ms: f64) -> Line {
    let c = &counts[..counts.len().saturating_sub(1)];
    (0..c.len())
        .map(|i| {
            let w = &c[i.saturating_sub(SMOOTH / 2)..(i + SMOOTH / 2 + 1).min(c.len())];
            let mean = w.iter().sum::<u64>() as f64 / w.len() as f64;
            ((i as f64 + 0.5) * bucket_ms / 1e3, mean / bucket_ms / 1e3)
        })
        .collect()
}

fn render(report: &MigrateReport, path: &Path, text: bool) -> Result<()> {
    let panels = report.rows.len().max(1) as u32;
    let root = canvas::canvas(path, (1400, TITLE_H + panels * PANEL_H))?;
    let (title, rest) = root.split_vertically(TITLE_H);
    if text {
        let caption = format!(
            "bench migrate: {} regions of {} MiB, {:?} moved at the shaded steps — {} cores, {}, {} build",
            report.config.regions,
            report.config.region_size >> 20,
            report.config.steps,
            report.head.machine.cores,
            report.head.machine.hostname,
            report.head.build
        );
        canvas::title(&title, caption, 20)?;
    }
    // Same axes in every panel, so the modes compare at a glance.
    let bucket = report.config.bucket_ms;
    let all: Vec<(Line, Line)> = report
        .rows
        .iter()
        .map(|r| {
            (
                series(&r.timeline.reads, bucket),
                series(&r.timeline.writes, bucket),
            )
        })
        .collect();
    let pts = all.iter().flat_map(|(r, w)| r.iter().chain(w));
    let (x_max, y_max) = pts.fold((0.0f64, 0.0f64), |(x, y), p| (x.max(p.0), y.max(p.1)));
    // Headroom above the lines for the step labels and the legend.
    let axes = (x_max.max(0.1), (y_max * 1.4).max(1e-3));
    for (i, ((area, row), (reads, writes))) in rest
        .split_evenly((report.rows.len().max(1), 1))
        .iter()
        .zip(&report.rows)
        .zip(&all)
        .enumerate()
    {
        // One legend is enough.
        panel(area, row, bucket, (reads, writes), axes, (text, i == 0))?;
    }
    root.present().map_err(err)
}

fn panel(
    area: &Area<'_>,
    row: &MigrateRow,
    bucket_ms: f64,
    (reads, writes): (&Line, &Line),
    (x_max, y_max): (f64, f64),
    (text, legend): (bool, bool),
) -> Result<()> {
    let mut b = ChartBuilder::on(area);
    b.margin(10);
    if text {
        let caption = format!(
            "{}: migration {:.0} MiB/s, reads x{:.2}, writes x{:.2} while moving, longest write pause {:.1} ms",
            row.mode,
            row.migration_gib_per_s * 1024.0,
            row.read_ratio_during,
            row.write_ratio_during,
            row.max_write_pause_ms
        );
        b.caption(caption, ("sans-serif", 17))
            .x_label_area_size(35)
            .y_label_area_size(60);
    }
    let mut chart = b
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(err)?;
    if text {
        chart
            .configure_mesh()
            .x_desc("seconds since the load started")
            .y_desc(format!(
                "Mops/s ({:.0} ms means)",
                bucket_ms * SMOOTH as f64
            ))
            .light_line_style(TRANSPARENT)
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(err)?;
    }
    chart
        .draw_series(row.steps.iter().map(|s| {
            Rectangle::new(
                [(s.start_ms / 1e3, 0.0), (s.end_ms / 1e3, y_max)],
                STEP.filled(),
            )
        }))
        .map_err(err)?
        .label("regions moving")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], STEP.filled()));
    for (data, color, name) in [(reads, READS, "reads"), (writes, WRITES, "writes")] {
        chart
            .draw_series(LineSeries::new(data.iter().copied(), color.stroke_width(1)))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    if !text {
        return Ok(());
    }
    let style = ("sans-serif", 13).into_font();
    chart
        .draw_series(row.steps.iter().map(|s| {
            let label = format!(
                "{} region{}",
                s.regions,
                if s.regions == 1 { "" } else { "s" }
            );
            EmptyElement::at((s.start_ms / 1e3, y_max)) + Text::new(label, (3, 3), style.clone())
        }))
        .map_err(err)?;
    if !legend {
        return Ok(());
    }
    canvas::legend(&mut chart, SeriesLabelPosition::UpperRight, 13, 0.85)
}
