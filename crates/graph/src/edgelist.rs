//! Text edge lists as SNAP, KONECT and the DIMACS-derived sets ship them: one edge per
//! line, two vertex ids separated by white space (further columns, such as weights,
//! ignored); lines starting with `#` or `%` are comments.

use std::io::BufRead;

use crate::error::{GraphError, Result};

/// The edges read, and the vertex count (largest id + 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeList {
    pub vertices: u32,
    pub edges: Vec<(u32, u32)>,
}

/// Reads every edge from `input`; `progress` gets the bytes read so far now and then.
pub fn read_edge_list(mut input: impl BufRead, mut progress: impl FnMut(u64)) -> Result<EdgeList> {
    let (mut edges, mut max, mut read, mut line_no) = (Vec::new(), None::<u32>, 0u64, 0u64);
    let mut line = String::new();
    loop {
        line.clear();
        let n = input.read_line(&mut line)?;
        if n == 0 {
            break;
        }
        read += n as u64;
        line_no += 1;
        if line_no % (1 << 16) == 0 {
            progress(read);
        }
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with('%') {
            continue;
        }
        let mut cols = t.split_whitespace();
        let mut id = |what: &str| -> Result<u32> {
            let s = cols.next().ok_or_else(|| GraphError::Parse {
                line: line_no,
                message: format!("no {what} vertex"),
            })?;
            s.parse::<u32>()
                .ok()
                .filter(|&v| v < u32::MAX)
                .ok_or_else(|| GraphError::Parse {
                    line: line_no,
                    message: format!("{what} vertex {s:?} is not an id below 2^32 - 1"),
                })
        };
        let (u, v) = (id("source")?, id("target")?);
        max = max.max(Some(u.max(v)));
        edges.push((u, v));
    }
    progress(read);
    Ok(EdgeList {
        vertices: max.map_or(0, |m| m + 1),
        edges,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_extra_columns_are_skipped() {
        let text = "# a road graph\n% konect header\n0 1\n1\t2 7.5\n\n3 0\n";
        let g = read_edge_list(text.as_bytes(), |_| {}).expect("parse");
        assert_eq!(g.vertices, 4);
        assert_eq!(g.edges, vec![(0, 1), (1, 2), (3, 0)]);
    }

    #[test]
    fn a_bad_line_names_its_number() {
        let err = read_edge_list("0 1\n2 x\n".as_bytes(), |_| {}).expect_err("bad id");
        assert!(err.to_string().contains("line 2"), "{err}");
        let err = read_edge_list("5\n".as_bytes(), |_| {}).expect_err("one column");
        assert!(err.to_string().contains("no target"), "{err}");
    }
}
