//! graph-tool's binary format (`.gt`, often gzipped): the format of the real graphs
//! Debian's `python3-graph-tool` ships in `graph_tool/collection/` (email-Enron,
//! cond-mat-2005, as-22july06, pgp-strong-2009, power, …).
//!
//! Layout: the magic `e2 9b be 20 67 74` ("⛾ gt"), a version byte, an endianness
//! byte (0 little, 1 big), a comment (u64 length, bytes), a directed flag byte, the
//! vertex count N (u64), then per vertex its out-degree (u64) and that many
//! neighbour ids, each 1, 2, 4 or 8 bytes wide (the smallest that holds N). An
//! undirected graph lists each edge once. Property maps follow; they are not read.

use std::io::{BufRead, Read};

use crate::EdgeList;
use crate::error::{GraphError, Result};

pub const GT_MAGIC: [u8; 6] = [0xe2, 0x9b, 0xbe, 0x20, 0x67, 0x74];
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// Longest comment read (a corrupt length must not allocate gigabytes).
const MAX_COMMENT: u64 = 1 << 20;

/// A graph read from a file: its edges and whether they are directed (from the file
/// for `.gt`; text edge lists do not say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadGraph {
    pub list: EdgeList,
    pub directed: Option<bool>,
}

/// Reads a graph in either format, gzipped or not: graph-tool's `.gt` when it
/// starts with its magic, else a text edge list.
pub fn read_graph(mut input: impl BufRead, progress: impl FnMut(u64)) -> Result<ReadGraph> {
    if input.fill_buf()?.starts_with(&GZIP_MAGIC) {
        let gz = std::io::BufReader::new(flate2::bufread::GzDecoder::new(input));
        return read_plain(gz, progress);
    }
    read_plain(input, progress)
}

fn read_plain(mut input: impl BufRead, progress: impl FnMut(u64)) -> Result<ReadGraph> {
    if input.fill_buf()?.starts_with(&GT_MAGIC[..2]) {
        let (list, directed) = read_gt(input, progress)?;
        return Ok(ReadGraph {
            list,
            directed: Some(directed),
        });
    }
    Ok(ReadGraph {
        list: crate::read_edge_list(input, progress)?,
        directed: None,
    })
}

struct Cursor<R> {
    r: R,
    big: bool,
    read: u64,
}

impl<R: Read> Cursor<R> {
    fn bytes<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.r
            .read_exact(&mut b)
            .map_err(|e| bad(format!("{what}: {e}")))?;
        self.read += N as u64;
        Ok(b)
    }

    fn uint(&mut self, width: usize, what: &str) -> Result<u64> {
        let mut b = [0u8; 8];
        let s = &mut b[..width];
        self.r
            .read_exact(s)
            .map_err(|e| bad(format!("{what}: {e}")))?;
        self.read += width as u64;
        if self.big {
            s.reverse();
        }
        Ok(u64::from_le_bytes(b))
    }
}

fn bad(message: String) -> GraphError {
    GraphError::Format(message)
}

/// Reads a `.gt` stream (not gzipped): the edges and whether they are directed.
pub fn read_gt(input: impl Read, mut progress: impl FnMut(u64)) -> Result<(EdgeList, bool)> {
    let mut c = Cursor {
        r: input,
        big: false,
        read: 0,
    };
    if c.bytes::<6>("magic")? != GT_MAGIC {
        return Err(bad("no graph-tool magic".into()));
    }
    let [version, endian] = c.bytes::<2>("version")?;
    if version != 1 || endian > 1 {
        return Err(bad(format!(
            "version {version}, endianness {endian} (only version 1 is known)"
        )));
    }
    c.big = endian == 1;
    let comment = c.uint(8, "comment length")?;
    if comment > MAX_COMMENT {
        return Err(bad(format!("a comment of {comment} bytes")));
    }
    std::io::copy(&mut (&mut c.r).take(comment), &mut std::io::sink())?;
    c.read += comment;
    let [directed] = c.bytes::<1>("directed flag")?;
    let n = c.uint(8, "vertex count")?;
    if n >= u64::from(u32::MAX) {
        return Err(bad(format!(
            "{n} vertices (at most 2^32 - 2 fit a vertex id)"
        )));
    }
    let width = match n {
        n if n < 1 << 8 => 1,
        n if n < 1 << 16 => 2,
        _ => 4,
    };
    let mut edges = Vec::new();
    for v in 0..n as u32 {
        let k = c.uint(8, "out-degree")?;
        if k > n.saturating_mul(n) {
            return Err(bad(format!("vertex {v} has {k} edges among {n} vertices")));
        }
        for _ in 0..k {
            let u = c.uint(width, "neighbour")?;
            if u >= n {
                return Err(bad(format!("vertex {v} names neighbour {u} of {n}")));
            }
            edges.push((v, u as u32));
        }
        if v % (1 << 14) == 0 {
            progress(c.read);
        }
    }
    progress(c.read);
    Ok((
        EdgeList {
            vertices: n as u32,
            edges,
        },
        directed != 0,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A `.gt` file of `adj` (one list per vertex), in either byte order.
    fn gt(adj: &[Vec<u64>], directed: bool, big: bool) -> Vec<u8> {
        let n = adj.len() as u64;
        let width = if n < 256 {
            1
        } else if n < 65_536 {
            2
        } else {
            4
        };
        let put = |out: &mut Vec<u8>, v: u64, w: usize| {
            let b = v.to_le_bytes();
            let mut s = b[..w].to_vec();
            if big {
                s.reverse();
            }
            out.extend_from_slice(&s);
        };
        let mut out = GT_MAGIC.to_vec();
        out.extend_from_slice(&[1, u8::from(big)]);
        put(&mut out, 5, 8);
        out.extend_from_slice(b"hello");
        out.push(u8::from(directed));
        put(&mut out, n, 8);
        for list in adj {
            put(&mut out, list.len() as u64, 8);
            for &u in list {
                put(&mut out, u, width);
            }
        }
        out.extend_from_slice(b"property maps follow");
        out
    }

    #[test]
    fn both_byte_orders_and_gzip_read_the_same_edges() {
        let adj = vec![vec![1, 2], vec![2], vec![], vec![0]];
        for big in [false, true] {
            let (list, directed) = read_gt(&gt(&adj, false, big)[..], |_| {}).expect("gt");
            assert!(!directed);
            assert_eq!(list.vertices, 4);
            assert_eq!(list.edges, vec![(0, 1), (0, 2), (1, 2), (3, 0)]);
        }
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(&gt(&adj, true, false)).expect("gzip");
        let z = z.finish().expect("gzip");
        let g = read_graph(&z[..], |_| {}).expect("gzipped gt");
        assert_eq!(g.directed, Some(true));
        assert_eq!(g.list.edges.len(), 4);
        let text = read_graph("0 1\n1 2\n".as_bytes(), |_| {}).expect("text");
        assert_eq!((text.directed, text.list.vertices), (None, 3));
    }

    #[test]
    fn wide_ids_and_bad_files() {
        let mut adj = vec![Vec::new(); 300];
        adj[0] = vec![299, 1];
        let (list, _) = read_gt(&gt(&adj, false, false)[..], |_| {}).expect("2-byte ids");
        assert_eq!(list.edges, vec![(0, 299), (0, 1)]);
        let good = gt(&[vec![1], vec![]], false, false);
        assert!(
            read_gt(&good[..good.len() - 25], |_| {}).is_err(),
            "truncated"
        );
        let mut wrong = good.clone();
        wrong[6] = 9;
        assert!(read_gt(&wrong[..], |_| {}).is_err(), "unknown version");
        let mut past = gt(&[vec![1], vec![]], false, false);
        let at = past.len() - 20 - 8 - 1;
        past[at] = 7;
        assert!(
            read_gt(&past[..], |_| {}).is_err(),
            "neighbour past the vertices"
        );
    }
}
