//! CDFs of the SLO, predicted and measured figures (Redy's Figures 5.13–5.14):
//! latency on the left, throughput on the right.

use std::path::Path;

use plotters::prelude::*;

use super::output::SloReport;
use crate::error::Result;
use crate::report::canvas::{self, Area, BLUE as PREDICTED, RED as MEASURED, err};

const SLO: RGBColor = RGBColor(127, 127, 127);

/// `(value, cumulative fraction)` steps of `v`.
fn cdf(mut v: Vec<f64>) -> Vec<(f64, f64)> {
    v.retain(|x| x.is_finite() && *x > 0.0);
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    v.into_iter()
        .enumerate()
        .map(|(i, x)| (x, (i + 1) as f64 / n))
        .collect()
}

type Series = (&'static str, RGBColor, Vec<(f64, f64)>);

fn panel(
    area: &Area<'_>,
    title: &str,
    x_label: &str,
    series: &[Series],
    text: bool,
    label: &dyn Fn(&f64) -> String,
) -> Result<()> {
    let (lo, hi) = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.0))
        .fold((f64::INFINITY, 0f64), |(a, b), x| (a.min(x), b.max(x)));
    let (lo, hi) = if hi > 0.0 {
        (lo * 0.8, hi * 1.25)
    } else {
        (0.1, 1.0)
    };
    let mut b = ChartBuilder::on(area);
    b.margin(15);
    if text {
        b.caption(title, ("sans-serif", 20))
            .x_label_area_size(40)
            .y_label_area_size(50);
    }
    let mut chart = b
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..1.0)
        .map_err(err)?;
    if text {
        chart
            .configure_mesh()
            .x_desc(x_label)
            .x_label_formatter(label)
            .y_desc("fraction of SLOs")
            .draw()
            .map_err(err)?;
    }
    for (name, color, pts) in series {
        let line = chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(err)?;
        if text {
            let c = *color;
            line.label(*name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
        }
    }
    if text {
        // plotters' default legend type is 12 pt.
        canvas::legend(&mut chart, SeriesLabelPosition::LowerRight, 12, 0.8)?;
    }
    Ok(())
}

pub fn write_slo_chart(r: &SloReport, path: &Path) -> Result<()> {
    let text = canvas::prepare(path)?;
    let root = canvas::canvas(path, (1400, 560))?;
    let (left, right) = root.split_horizontally(700);
    let pick = |f: fn(&super::output::SloRun) -> f64| cdf(r.runs.iter().map(f).collect());
    panel(
        &left,
        &format!("latency at each SLO's percentile ({} SLOs)", r.slos),
        "microseconds (log)",
        &[
            ("SLO bound", SLO, pick(|x| x.slo.latency_us)),
            ("predicted", PREDICTED, pick(|x| x.predicted_latency_us)),
            ("measured", MEASURED, pick(|x| x.measured_latency_us)),
        ],
        text,
        &|v| format!("{v:.0}"),
    )?;
    panel(
        &right,
        &format!("throughput ({} of {} met)", r.met, r.slos),
        "Mops/s (log)",
        &[
            ("SLO", SLO, pick(|x| x.slo.throughput)),
            ("predicted", PREDICTED, pick(|x| x.predicted_throughput)),
            ("measured", MEASURED, pick(|x| x.measured_throughput)),
        ],
        text,
        &|v| format!("{}", v / 1e6),
    )?;
    root.present().map_err(err)?;
    Ok(())
}
