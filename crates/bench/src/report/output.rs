//! Where reports go: JSON files under the results directory, named by bench.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::BenchReport;
use crate::error::Result;

pub(super) fn file_stem(bench: &str) -> String {
    let name: String = bench
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "bench".into()
    } else {
        name
    }
}

/// Writes `<dir>/<bench>-<timestamp>.json` and `<dir>/<bench>-latest.json`
/// (creating `dir`); returns the timestamped path.
pub fn write_json(report: &BenchReport, dir: impl AsRef<Path>) -> Result<PathBuf> {
    write_json_as(report, &report.bench, report.timestamp_unix, dir.as_ref())
}

/// [`write_json`] for any report shape: `<dir>/<bench>-<timestamp>.json` and
/// `<dir>/<bench>-latest.json`.
pub(crate) fn write_json_as<T: Serialize>(
    value: &T,
    bench: &str,
    timestamp_unix: u64,
    dir: &Path,
) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let stem = file_stem(bench);
    let json = serde_json::to_string_pretty(value)?;
    let path = dir.join(format!("{stem}-{timestamp_unix}.json"));
    std::fs::write(&path, &json)?;
    std::fs::write(dir.join(format!("{stem}-latest.json")), &json)?;
    Ok(path)
}

/// Writes `value` as pretty JSON to `path` exactly (creating its directory).
pub(crate) fn write_json_to<T: Serialize>(value: &T, path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(value)?)?;
    Ok(())
}
