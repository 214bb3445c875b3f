//! The lab rows' chart: each procedure's speedup over the same work at the client
//! against the client–server round trip the lab measured at each delay (the delay
//! asked for when none was measured), one line per row, and the 1x line where the
//! client would win.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::error::Result;
use crate::report::BenchReport;
use crate::report::canvas::{self, BLUE, GREEN, GREY, ORANGE, RED, err};

/// One line per row family: `(name without the delay, [(round trip µs, speedup)])`.
pub fn rtt_series(report: &BenchReport) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut by_name: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in &report.rows {
        let (Some(d), Some(x)) = (r.one_way_delay_us, r.ratio_vs_client_side) else {
            continue;
        };
        if !x.is_finite() || x <= 0.0 {
            continue;
        }
        let name = r.name.replace(&format!(" @ {d:.0}us one-way"), "");
        let at = r.lab_rtt_us.unwrap_or(2.0 * d);
        by_name.entry(name).or_default().push((at, x));
    }
    by_name
        .into_iter()
        .filter(|(_, p)| p.len() >= 2)
        .map(|(n, mut p)| {
            p.sort_by(|a, b| a.0.total_cmp(&b.0));
            (n, p)
        })
        .collect()
}

/// Draws [`rtt_series`] to `<dir>/sproc-rtt-<timestamp>.png` (and `sproc-rtt-latest.png`);
/// `None` when the report has no lab rows at two delays or more.
pub fn write_rtt_chart(report: &BenchReport, dir: impl AsRef<Path>) -> Result<Option<PathBuf>> {
    let series = rtt_series(report);
    if series.is_empty() {
        return Ok(None);
    }
    let path =
        canvas::write_with_latest(dir.as_ref(), "sproc-rtt", report.timestamp_unix, |path| {
            render(&series, path)
        })?;
    Ok(Some(path))
}

fn render(series: &[(String, Vec<(f64, f64)>)], path: &Path) -> Result<()> {
    let text = canvas::prepare(path)?;
    let root = canvas::canvas(path, (1200, 700))?;
    let points = series.iter().flat_map(|s| s.1.iter());
    let (x_hi, y_lo, y_hi) = points.fold((1f64, 1f64, 1f64), |(x, lo, hi), p| {
        (x.max(p.0), lo.min(p.1), hi.max(p.1))
    });
    let mut b = ChartBuilder::on(&root);
    b.margin(20);
    if text {
        b.caption(
            "speedup over the same work at the client vs round trip (lab, 10 Gbit/s links)",
            ("sans-serif", 20),
        )
        .x_label_area_size(45)
        .y_label_area_size(60);
    }
    let mut chart = b
        .build_cartesian_2d(0f64..x_hi * 1.05, (y_lo * 0.7..y_hi * 1.4).log_scale())
        .map_err(err)?;
    if text {
        chart
            .configure_mesh()
            .x_desc("client-server TCP round trip the lab measured (us)")
            .y_desc("client p50 / procedure p50 (log)")
            .y_label_formatter(&|v| format!("{v:.1}x"))
            .draw()
            .map_err(err)?;
    }
    // Below this line the client-side version is faster.
    chart
        .draw_series(DashedLineSeries::new(
            [(0.0, 1.0), (x_hi * 1.05, 1.0)],
            6,
            4,
            GREY.stroke_width(1),
        ))
        .map_err(err)?;
    let palette = [
        BLUE,
        RED,
        GREEN,
        ORANGE,
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(23, 190, 207),
        RGBColor(188, 189, 34),
        GREY,
        BLACK,
        RGBColor(0, 100, 0),
        RGBColor(0, 0, 139),
        RGBColor(139, 0, 0),
    ];
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = palette[i % palette.len()];
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(err)?;
        let line = chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
            .map_err(err)?;
        if text {
            line.label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
        }
    }
    if text {
        canvas::legend(&mut chart, SeriesLabelPosition::UpperLeft, 12, 0.85)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::BenchRow;

    fn row(name: &str, d: Option<f64>, x: Option<f64>) -> BenchRow {
        BenchRow {
            name: name.into(),
            one_way_delay_us: d,
            ratio_vs_client_side: x,
            ..BenchRow::default()
        }
    }

    #[test]
    fn a_line_per_row_across_delays() {
        let mut r = BenchReport::new("sproc");
        r.rows = vec![
            row("chase @ 0us one-way (FFlow)", Some(0.0), Some(4.0)),
            BenchRow {
                lab_rtt_us: Some(80.0),
                ..row("chase @ 25us one-way (FFlow)", Some(25.0), Some(30.0))
            },
            row("chase @ 0us one-way, client reads", Some(0.0), None),
            row("chase (FFlow)", None, Some(5.0)),
            row("lonely @ 10us one-way", Some(10.0), Some(2.0)),
        ];
        assert_eq!(
            rtt_series(&r),
            vec![("chase (FFlow)".to_string(), vec![(0.0, 4.0), (80.0, 30.0)])]
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let png = write_rtt_chart(&r, dir.path()).expect("chart");
        assert!(png.is_some_and(|p| p.exists()));
        assert!(dir.path().join("sproc-rtt-latest.png").exists());
        r.rows.truncate(1);
        assert!(write_rtt_chart(&r, dir.path()).expect("no chart").is_none());
    }
}
