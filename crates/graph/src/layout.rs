//! Where a graph's bytes sit in its cache. Vertices are split into ranges
//! (partitions), one per region, so a vertex's entry and its edge list are always on
//! the same server:
//!
//! ```text
//! region 0: header | entries of partition 0 | edges of partition 0
//! region i: entries of partition i | edges of partition i
//! ```
//!
//! The header (at address 0): `FCGRAPH1`, vertices u32, partitions u32, stored edges
//! u64, flags u32 (bit 0: undirected), pad u32, then per partition (first vertex u32,
//! vertices u32, entries' address u64). An entry is (edge list address u64, degree
//! u32, pad u32); an edge list is u32 vertex ids.

use farcache_sproc::builtin::{GRAPH_ENTRY, Part};

use crate::Csr;
use crate::error::{GraphError, Result};

pub const MAGIC: &[u8; 8] = b"FCGRAPH1";
const FIXED: u64 = 32;

/// A graph's partitions and header, as planned for a cache or read back from one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub vertices: u32,
    pub edges: u64,
    pub undirected: bool,
    pub region_size: u64,
    pub parts: Vec<Part>,
}

impl Layout {
    /// Splits `g` into vertex ranges of about equal bytes, each fitting one region of
    /// `region_size` bytes, aiming at a multiple of `min_parts` of them (so that
    /// regions spread round the servers hold equal shares).
    pub fn plan(g: &Csr, undirected: bool, region_size: u64, min_parts: usize) -> Result<Self> {
        let n = g.vertices();
        let data = u64::from(n) * GRAPH_ENTRY + 4 * g.edges();
        let step = min_parts.max(1) as u64;
        let guess = data.div_ceil(region_size * 9 / 10).next_multiple_of(step);
        let header = header_len(guess as usize * 2 + 2);
        if header >= region_size / 2 {
            return Err(GraphError::InvalidArgument(format!(
                "regions of {region_size} B are too small for a graph of {data} B"
            )));
        }
        let target = data.div_ceil(guess);
        let (mut parts, mut lo, mut size) = (Vec::new(), 0u32, 0u64);
        for v in 0..n {
            let room = region_size - if parts.is_empty() { header } else { 0 };
            let need = GRAPH_ENTRY + 4 * g.degree(v);
            if need > room {
                return Err(GraphError::InvalidArgument(format!(
                    "vertex {v} needs {need} B, more than a region of {region_size} B holds"
                )));
            }
            if size > 0 && (size + need > room || size >= target) {
                parts.push((lo, v - lo));
                (lo, size) = (v, 0);
            }
            size += need;
        }
        if n > lo || parts.is_empty() {
            parts.push((lo, n - lo));
        }
        let header = header_len(parts.len());
        let parts = parts
            .into_iter()
            .enumerate()
            .map(|(i, (lo, count))| Part {
                lo,
                count,
                base: i as u64 * region_size + if i == 0 { header } else { 0 },
            })
            .collect();
        Ok(Self {
            vertices: n,
            edges: g.edges(),
            undirected,
            region_size,
            parts,
        })
    }

    /// Bytes the cache needs: one region per partition.
    pub fn capacity(&self) -> u64 {
        self.parts.len() as u64 * self.region_size
    }

    pub fn header(&self) -> Vec<u8> {
        let mut h = Vec::with_capacity(header_len(self.parts.len()) as usize);
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&self.vertices.to_le_bytes());
        h.extend_from_slice(&(self.parts.len() as u32).to_le_bytes());
        h.extend_from_slice(&self.edges.to_le_bytes());
        h.extend_from_slice(&u32::from(self.undirected).to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        for p in &self.parts {
            h.extend_from_slice(&p.lo.to_le_bytes());
            h.extend_from_slice(&p.count.to_le_bytes());
            h.extend_from_slice(&p.base.to_le_bytes());
        }
        h.resize(header_len(self.parts.len()) as usize, 0);
        h
    }

    /// The fixed part of a header: vertices, partitions, edges, undirected.
    pub fn read_fixed(h: &[u8]) -> std::result::Result<(u32, u32, u64, bool), String> {
        if h.len() < FIXED as usize || &h[..8] != MAGIC {
            return Err("no FCGRAPH1 header at address 0".into());
        }
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let mut e = [0u8; 8];
        e.copy_from_slice(&h[16..24]);
        Ok((
            u32_at(8),
            u32_at(12),
            u64::from_le_bytes(e),
            u32_at(24) & 1 == 1,
        ))
    }

    /// Bytes of the partition table that follows the fixed header.
    pub fn table_len(parts: u32) -> u64 {
        16 * u64::from(parts)
    }

    /// Rebuilds the layout from a header's fixed part and its partition table, checking
    /// that the partitions cover the vertices in order and fit their regions.
    pub fn from_header(
        fixed: (u32, u32, u64, bool),
        table: &[u8],
        region_size: u64,
        capacity: u64,
    ) -> std::result::Result<Self, String> {
        let (vertices, n, edges, undirected) = fixed;
        let mut parts = Vec::with_capacity(n as usize);
        let mut next = 0u32;
        for c in table.chunks_exact(16).take(n as usize) {
            let mut b = [0u8; 8];
            b.copy_from_slice(&c[8..16]);
            let p = Part {
                lo: u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                count: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
                base: u64::from_le_bytes(b),
            };
            let end = p.base.saturating_add(u64::from(p.count) * GRAPH_ENTRY);
            if p.lo != next || end > capacity {
                return Err(format!("partition {} is out of place", parts.len()));
            }
            next = p.lo.saturating_add(p.count);
            parts.push(p);
        }
        if parts.len() != n as usize || next != vertices {
            return Err("the partition table does not cover the vertices".into());
        }
        Ok(Self {
            vertices,
            edges,
            undirected,
            region_size,
            parts,
        })
    }

    /// The partition holding vertex `v`.
    pub fn part_of(&self, v: u32) -> usize {
        self.parts.partition_point(|p| p.lo <= v).saturating_sub(1)
    }

    /// Partition `i`'s bytes as stored from `parts[i].base`: entries, then edge lists.
    pub fn part_bytes(&self, g: &Csr, i: usize) -> Vec<u8> {
        let p = self.parts[i];
        let (first, last) = (p.lo as usize, (p.lo + p.count) as usize);
        let edges_at = p.base + u64::from(p.count) * GRAPH_ENTRY;
        let e0 = g.offsets[first];
        let mut out = Vec::with_capacity(
            (u64::from(p.count) * GRAPH_ENTRY + 4 * (g.offsets[last] - e0)) as usize,
        );
        for v in first..last {
            out.extend_from_slice(&(edges_at + 4 * (g.offsets[v] - e0)).to_le_bytes());
            out.extend_from_slice(&(g.degree(v as u32) as u32).to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
        }
        for t in &g.targets[e0 as usize..g.offsets[last] as usize] {
            out.extend_from_slice(&t.to_le_bytes());
        }
        out
    }
}

/// Header bytes for `parts` partitions, rounded to a whole entry.
fn header_len(parts: usize) -> u64 {
    (FIXED + 16 * parts as u64).next_multiple_of(GRAPH_ENTRY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kronecker_edges;

    #[test]
    fn partitions_fit_their_regions_and_cover_every_vertex() {
        let e = kronecker_edges(10, 8, 5).expect("edges");
        let g = Csr::from_edges(1 << 10, &e, true).expect("csr");
        let l = Layout::plan(&g, true, 16 << 10, 3).expect("plan");
        assert!(l.parts.len() >= 3);
        let mut next = 0;
        for (i, p) in l.parts.iter().enumerate() {
            assert_eq!(p.lo, next);
            next += p.count;
            let bytes = l.part_bytes(&g, i);
            assert_eq!(
                p.base / l.region_size,
                i as u64,
                "partition {i} in region {i}"
            );
            assert!(p.base % l.region_size + bytes.len() as u64 <= l.region_size);
        }
        assert_eq!(next, g.vertices());
        let h = l.header();
        let fixed = Layout::read_fixed(&h).expect("fixed");
        let back = Layout::from_header(fixed, &h[32..], l.region_size, l.capacity()).expect("back");
        assert_eq!(back, l);
        assert_eq!(l.part_of(l.parts[1].lo), 1);
        assert_eq!(l.part_of(l.parts[1].lo - 1), 0);
    }

    #[test]
    fn a_vertex_larger_than_a_region_is_refused() {
        let edges: Vec<(u32, u32)> = (1..1000).map(|v| (0, v)).collect();
        let g = Csr::from_edges(1000, &edges, false).expect("csr");
        let err = Layout::plan(&g, false, 2048, 1).expect_err("too big");
        assert!(err.to_string().contains("vertex 0"), "{err}");
    }
}
