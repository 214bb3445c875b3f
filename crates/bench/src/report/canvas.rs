//! What every bench chart shares: the palette, plotters' errors as
//! [`BenchError::Chart`], the font (found, installed as root, registered once), the
//! white canvas and its title line, the legend box's style, the row-name axis of bar
//! charts, and writing `<stem>-<timestamp>.png` with its `<stem>-latest.png` copy.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;

use super::output::file_stem;
use crate::error::{BenchError, Result};
use crate::tools::{Tool, ensure_tools, find_font, is_root};

/// A chart's drawing area (the whole canvas or a panel of it).
pub(crate) type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// farcache, reads, predictions: the first colour of every chart.
pub(crate) const BLUE: RGBColor = RGBColor(31, 119, 180);
/// Redis, writes, measurements, kills.
pub(crate) const RED: RGBColor = RGBColor(214, 39, 40);
pub(crate) const ORANGE: RGBColor = RGBColor(255, 127, 14);
pub(crate) const GREEN: RGBColor = RGBColor(44, 160, 44);
/// Reference lines (raw TCP, goals).
pub(crate) const GREY: RGBColor = RGBColor(120, 120, 120);

pub(crate) fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Chart(e.to_string())
}

/// Whether text can be drawn: the chart font was found (or installed, running as
/// root) and registered.
pub(crate) fn font_ready() -> bool {
    locate_chart_font()
        .as_deref()
        .is_some_and(register_chart_font)
}

/// Creates `path`'s directory; returns [`font_ready`].
pub(crate) fn prepare(path: &Path) -> Result<bool> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    Ok(font_ready())
}

/// A white canvas of `size` pixels drawing to `path`.
pub(crate) fn canvas(path: &Path, size: (u32, u32)) -> Result<Area<'_>> {
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    Ok(root)
}

/// `caption` at the top left of `area`, in black `size`-point type.
pub(crate) fn title(area: &Area<'_>, caption: String, size: u32) -> Result<()> {
    area.draw(&Text::new(
        caption,
        (10, 10),
        ("sans-serif", size).into_font().color(&BLACK),
    ))
    .map_err(err)
}

/// The series legend: a black-bordered white box (`bg` opaque) at `pos`, labels in
/// `font`-point type.
// The legend box needs the backend to outlive the chart.
pub(crate) fn legend<'a, 'b: 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, BitMapBackend<'b>, CT>,
    pos: SeriesLabelPosition,
    font: u32,
    bg: f64,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(pos)
        .background_style(WHITE.mix(bg))
        .border_style(BLACK)
        .label_font(("sans-serif", font))
        .draw()
        .map_err(err)
}

/// A y-label formatter for horizontal bars: the name of the bar at each whole y
/// (row 0 at the top), nothing between rows.
pub(crate) fn row_names(names: Vec<String>) -> impl Fn(&f64) -> String {
    let n = names.len();
    move |y: &f64| {
        let r = y.round();
        if (y - r).abs() > 1e-6 || r < 0.0 || r as usize >= n {
            return String::new();
        }
        names.get(n - 1 - r as usize).cloned().unwrap_or_default()
    }
}

/// Renders to `<dir>/<bench>-<timestamp>.png` (creating `dir`) and copies it to
/// `<bench>-latest.png`; returns the timestamped path.
pub(crate) fn write_with_latest(
    dir: &Path,
    bench: &str,
    timestamp_unix: u64,
    render: impl FnOnce(&Path) -> Result<()>,
) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let stem = file_stem(bench);
    let path = dir.join(format!("{stem}-{timestamp_unix}.png"));
    render(&path)?;
    std::fs::copy(&path, dir.join(format!("{stem}-latest.png")))?;
    Ok(path)
}

static FONT_REGISTERED: OnceLock<bool> = OnceLock::new();

/// Registers the TTF at `path` as plotters' "sans-serif" font (once per
/// process; later calls return the first outcome).
pub fn register_chart_font(path: &Path) -> bool {
    *FONT_REGISTERED.get_or_init(|| match std::fs::read(path) {
        Ok(bytes) => {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            match plotters::style::register_font(
                "sans-serif",
                plotters::style::FontStyle::Normal,
                bytes,
            ) {
                Ok(()) => true,
                Err(_) => {
                    eprintln!(
                        "[farcache-bench] {} is not a usable font; chart without text",
                        path.display()
                    );
                    false
                }
            }
        }
        Err(e) => {
            eprintln!(
                "[farcache-bench] cannot read font {}: {e}; chart without text",
                path.display()
            );
            false
        }
    })
}

/// The chart font, installed first when missing and running as root.
pub(crate) fn locate_chart_font() -> Option<PathBuf> {
    let font = find_font();
    if font.is_some() || !is_root() {
        return font;
    }
    if let Err(e) = ensure_tools(&[Tool::DejaVuFont]) {
        eprintln!("[farcache-bench] could not install a font ({e}); chart without text");
    }
    find_font()
}
