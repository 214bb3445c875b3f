//! The `farcache chaos` chart: throughput over time with every reclaim, kill,
//! partition, vanish and heal marked as a vertical line.

use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use crate::error::{BenchError, Result};
use crate::report::canvas::{
    self, BLUE as THROUGHPUT, GREEN as HEAL, ORANGE as RECLAIM, RED as KILL, err,
};

const PARTITION: RGBColor = RGBColor(148, 103, 189);
const VANISH: RGBColor = RGBColor(23, 190, 207);
const OTHER: RGBColor = RGBColor(127, 127, 127);
const SIZE: (u32, u32) = (1400, 560);

/// Colour and legend label of an event kind.
fn style_of(kind: &str) -> (RGBColor, &'static str) {
    match kind {
        "reclaim" => (RECLAIM, "reclaim (SIGTERM, with notice)"),
        "kill" => (KILL, "kill (SIGKILL, no notice)"),
        "partition" => (PARTITION, "partition (link cut, one way or both)"),
        "vanish" => (VANISH, "vanish (host silent, no RST)"),
        "heal" => (HEAL, "heal (links restored)"),
        _ => (OTHER, "other event"),
    }
}

/// Renders the chaos timeline to `path` (a PNG): throughput in ops/s per `bucket`
/// of `timeline` (ops completed per bucket) over seconds since the start, and each
/// event `(seconds, kind)` as a vertical line, coloured by kind ("reclaim",
/// "kill"). Text (title, axes, legend) needs the chart font (see
/// [`crate::write_chart`]); without it only the lines are drawn.
pub fn write_chaos_chart(
    path: &Path,
    title: &str,
    timeline: &[u64],
    bucket: Duration,
    events: &[(f64, &str)],
) -> Result<()> {
    if bucket.is_zero() {
        return Err(BenchError::InvalidArgument(
            "chaos chart bucket must be longer than zero".into(),
        ));
    }
    let text = canvas::prepare(path)?;
    render(path, title, timeline, bucket, events, text)
}

/// (seconds, ops/s) per bucket, at the bucket's middle. The last bucket is cut
/// short by the stop, so dropped (unless it is the only one).
fn series(timeline: &[u64], bucket: Duration) -> Vec<(f64, f64)> {
    let secs = bucket.as_secs_f64();
    let n = if timeline.len() > 1 {
        timeline.len() - 1
    } else {
        timeline.len()
    };
    timeline[..n]
        .iter()
        .enumerate()
        .map(|(i, &c)| ((i as f64 + 0.5) * secs, c as f64 / secs))
        .collect()
}

/// Scale and suffix for the y labels: ops/s in units, thousands or millions.
fn y_unit(y_max: f64) -> (f64, &'static str) {
    if y_max >= 2e6 {
        (1e6, "M")
    } else if y_max >= 2e4 {
        (1e3, "k")
    } else {
        (1.0, "")
    }
}

/// `v` with one decimal, without a trailing ".0".
fn trim(v: f64) -> String {
    let s = format!("{v:.1}");
    match s.strip_suffix(".0") {
        Some("-0") => "0".to_string(),
        Some(t) => t.to_string(),
        None => s,
    }
}

fn render(
    path: &Path,
    title: &str,
    timeline: &[u64],
    bucket: Duration,
    events: &[(f64, &str)],
    text: bool,
) -> Result<()> {
    let points = series(timeline, bucket);
    let x_end = timeline.len() as f64 * bucket.as_secs_f64();
    let x_max = events
        .iter()
        .map(|e| e.0)
        .filter(|x| x.is_finite())
        .fold(x_end, f64::max)
        .max(0.1);
    let peak = points.iter().map(|p| p.1).fold(0.0, f64::max);
    // Headroom above the line for the legend.
    let y_max = (peak * if text { 1.3 } else { 1.1 }).max(1.0);

    let root = canvas::canvas(path, SIZE)?;
    let mut b = ChartBuilder::on(&root);
    b.margin(15);
    if text {
        b.caption(title, ("sans-serif", 22))
            .x_label_area_size(45)
            .y_label_area_size(75);
    }
    let mut chart = b
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(err)?;
    if text {
        let (scale, suffix) = y_unit(y_max);
        let fmt_y = move |y: &f64| match trim(*y / scale) {
            s if s == "0" => s,
            s => format!("{s}{suffix}"),
        };
        let fmt_x = |x: &f64| trim(*x);
        chart
            .configure_mesh()
            .x_desc("seconds since the start")
            .y_desc(format!("ops/s (per {} ms bucket)", bucket.as_millis()))
            .x_label_formatter(&fmt_x)
            .y_label_formatter(&fmt_y)
            .light_line_style(RGBColor(235, 235, 235))
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 16))
            .draw()
            .map_err(err)?;
    }

    // Events first, so the throughput line stays on top.
    let mut kinds: Vec<&str> = Vec::new();
    for &(at, kind) in events {
        if !at.is_finite() {
            continue;
        }
        let (color, label) = style_of(kind);
        let series = chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(at, 0.0), (at, y_max)],
                color.stroke_width(2),
            )))
            .map_err(err)?;
        // One legend entry per kind.
        if !kinds.contains(&label) {
            kinds.push(label);
            series.label(label).legend(move |(x, y)| {
                PathElement::new(vec![(x + 8, y - 7), (x + 8, y + 7)], color.stroke_width(2))
            });
        }
    }
    chart
        .draw_series(LineSeries::new(
            points.iter().copied(),
            THROUGHPUT.stroke_width(2),
        ))
        .map_err(err)?
        .label("throughput")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], THROUGHPUT.stroke_width(2)));
    if text {
        canvas::legend(&mut chart, SeriesLabelPosition::UpperRight, 14, 0.85)?;
    }
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Vec<u64>, Vec<(f64, &'static str)>) {
        let timeline = (0..50u64)
            .map(|i| match i {
                20..=23 => 300,
                35..=36 => 0,
                _ => 1000 + (i * 37) % 200,
            })
            .collect();
        (timeline, vec![(2.0, "reclaim"), (3.5, "kill")])
    }

    #[test]
    fn writes_a_png() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("chaos.png");
        let (timeline, events) = sample();
        write_chaos_chart(
            &path,
            "farcache chaos: 4 servers, 1 replica(s)",
            &timeline,
            Duration::from_millis(100),
            &events,
        )
        .expect("chart");
        let bytes = std::fs::read(&path).expect("png");
        assert!(!bytes.is_empty());
        assert_eq!(&bytes[1..4], b"PNG");
    }

    #[test]
    fn without_text_and_degenerate_input() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (timeline, events) = sample();
        let path = dir.path().join("nofont.png");
        render(
            &path,
            "t",
            &timeline,
            Duration::from_millis(100),
            &events,
            false,
        )
        .expect("chart");
        assert!(std::fs::metadata(&path).expect("png").len() > 0);
        // No ops, no events: still a (flat) chart.
        let path = dir.path().join("empty.png");
        write_chaos_chart(&path, "t", &[], Duration::from_millis(100), &[]).expect("empty");
        assert!(std::fs::metadata(&path).expect("png").len() > 0);
        assert!(write_chaos_chart(&path, "t", &[1], Duration::ZERO, &[]).is_err());
    }

    #[test]
    fn series_is_ops_per_second() {
        let s = series(&[10, 20, 5], Duration::from_millis(100));
        assert_eq!(s.len(), 2);
        assert!((s[0].0 - 0.05).abs() < 1e-9 && (s[0].1 - 100.0).abs() < 1e-9);
        assert!((s[1].0 - 0.15).abs() < 1e-9 && (s[1].1 - 200.0).abs() < 1e-9);
        assert_eq!(y_unit(5e4), (1e3, "k"));
        assert_eq!(
            (trim(2.0), trim(2.5), trim(0.0)),
            ("2".into(), "2.5".into(), "0".into())
        );
    }
}
