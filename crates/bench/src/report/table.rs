//! The aligned plain-text table every suite prints: a header row, a rule, columns
//! padded to their widest cell (numeric ones right-aligned), the `== … ==` heading
//! above it and the `note:` lines under it.

use std::fmt::Write as _;

use super::MachineInfo;

/// How a column's cells are padded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    /// Left-aligned (text).
    L,
    /// Right-aligned (numbers).
    R,
}

/// Rows of cells under a header, rendered as aligned columns.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    cells: Vec<Vec<String>>,
    right: Vec<bool>,
}

impl Table {
    /// A table with these columns (header text and alignment).
    pub(crate) fn new(columns: &[(&str, Align)]) -> Self {
        Self {
            cells: vec![columns.iter().map(|(h, _)| h.to_string()).collect()],
            right: columns.iter().map(|(_, a)| *a == Align::R).collect(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.cells.push(cells);
    }

    /// The header, a rule of dashes under it, then the rows.
    pub(crate) fn render(&self) -> String {
        align_cells(&self.cells, &self.right)
    }

    /// The rows only (no header, no rule): a two-column list of figures.
    pub(crate) fn render_body(&self) -> String {
        self.render()
            .lines()
            .skip(2)
            .map(|l| format!("{l}\n"))
            .collect()
    }
}

/// `cells` (header first) as aligned columns with a rule under the header; a column
/// whose `right` flag is set is right-aligned.
pub(crate) fn align_cells(cells: &[Vec<String>], right: &[bool]) -> String {
    let cols = cells.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; cols];
    for row in cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for (i, row) in cells.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(col, (c, &w))| {
                if right.get(col).copied().unwrap_or(false) {
                    format!("{c:>w$}")
                } else {
                    format!("{c:<w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
        if i == 0 {
            let total: usize = widths.iter().sum::<usize>() + 2 * cols.saturating_sub(1);
            let _ = writeln!(out, "{}", "-".repeat(total));
        }
    }
    out
}

/// `== <bench> @ <timestamp> (<cores> cores, <host>, <rest>) ==` and a newline.
pub(crate) fn heading(bench: &str, timestamp_unix: u64, m: &MachineInfo, rest: &str) -> String {
    format!(
        "== {bench} @ {timestamp_unix} ({} cores, {}, {rest}) ==\n",
        m.cores, m.hostname
    )
}

/// Appends `note: <n>` lines.
pub(crate) fn push_notes(out: &mut String, notes: &[String]) {
    for n in notes {
        let _ = writeln!(out, "note: {n}");
    }
}
