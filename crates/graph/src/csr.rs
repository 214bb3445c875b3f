//! A graph in compressed sparse rows, built from an edge list; and the reference
//! breadth-first search every traversal answer is checked against.

use crate::error::{GraphError, Result};

/// Out-edges of every vertex: `targets[offsets[v] .. offsets[v + 1]]`, sorted, without
/// duplicates or self-loops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Csr {
    pub offsets: Vec<u64>,
    pub targets: Vec<u32>,
}

impl Csr {
    /// Builds the graph over `vertices` vertices. With `undirected`, every edge is
    /// stored both ways (as Graph500 and most road and social graphs are read).
    pub fn from_edges(vertices: u32, edges: &[(u32, u32)], undirected: bool) -> Result<Self> {
        if let Some(&(u, v)) = edges.iter().find(|&&(u, v)| u >= vertices || v >= vertices) {
            return Err(GraphError::InvalidArgument(format!(
                "edge ({u}, {v}) names a vertex ≥ {vertices}"
            )));
        }
        let n = vertices as usize;
        let mut offsets = vec![0u64; n + 1];
        for &(u, v) in edges.iter().filter(|(u, v)| u != v) {
            offsets[u as usize + 1] += 1;
            if undirected {
                offsets[v as usize + 1] += 1;
            }
        }
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        let mut at = offsets.clone();
        let mut targets = vec![0u32; offsets[n] as usize];
        let mut put = |u: u32, v: u32| {
            targets[at[u as usize] as usize] = v;
            at[u as usize] += 1;
        };
        for &(u, v) in edges.iter().filter(|(u, v)| u != v) {
            put(u, v);
            if undirected {
                put(v, u);
            }
        }
        // Sort and drop duplicates per vertex, compacting in place.
        let mut w = 0usize;
        let mut start = 0usize;
        for i in 0..n {
            let end = offsets[i + 1] as usize;
            let list = &mut targets[start..end];
            list.sort_unstable();
            let mut last = None;
            let first = w;
            for j in start..end {
                let t = targets[j];
                if last != Some(t) {
                    targets[w] = t;
                    w += 1;
                    last = Some(t);
                }
            }
            offsets[i] = first as u64;
            start = end;
        }
        offsets[n] = w as u64;
        targets.truncate(w);
        targets.shrink_to_fit();
        Ok(Self { offsets, targets })
    }

    pub fn vertices(&self) -> u32 {
        (self.offsets.len() - 1) as u32
    }

    /// Stored (directed) edges.
    pub fn edges(&self) -> u64 {
        self.targets.len() as u64
    }

    pub fn degree(&self, v: u32) -> u64 {
        self.offsets[v as usize + 1] - self.offsets[v as usize]
    }

    pub fn out(&self, v: u32) -> &[u32] {
        &self.targets[self.offsets[v as usize] as usize..self.offsets[v as usize + 1] as usize]
    }

    /// Vertices first reached at each level 1..=k from `src` (BFS levels; their sum is
    /// the k-hop count, the source excluded).
    pub fn levels(&self, src: u32, k: u8) -> Vec<u64> {
        let mut seen = vec![false; self.vertices() as usize];
        seen[src as usize] = true;
        let mut frontier = vec![src];
        let mut levels = Vec::new();
        for _ in 0..k {
            let mut next = Vec::new();
            for &v in &frontier {
                for &u in self.out(v) {
                    if !std::mem::replace(&mut seen[u as usize], true) {
                        next.push(u);
                    }
                }
            }
            if next.is_empty() {
                break;
            }
            levels.push(next.len() as u64);
            frontier = next;
        }
        levels
    }

    /// Vertices within `k` hops of `src`, the source excluded.
    pub fn reach(&self, src: u32, k: u8) -> u64 {
        self.levels(src, k).iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undirected_edges_are_stored_both_ways_once() {
        let g = Csr::from_edges(4, &[(0, 1), (1, 0), (1, 2), (2, 2), (0, 1)], true).expect("csr");
        assert_eq!(g.out(0), &[1]);
        assert_eq!(g.out(1), &[0, 2]);
        assert_eq!(g.out(2), &[1]);
        assert!(g.out(3).is_empty());
        assert_eq!(g.edges(), 4);
        assert_eq!(g.levels(0, 5), vec![1, 1]);
        assert_eq!(g.reach(3, 3), 0);
    }

    #[test]
    fn directed_edges_follow_their_direction() {
        let g = Csr::from_edges(3, &[(0, 1), (1, 2)], false).expect("csr");
        assert_eq!(g.reach(0, 1), 1);
        assert_eq!(g.reach(0, 2), 2);
        assert_eq!(g.reach(2, 2), 0);
    }

    #[test]
    fn vertices_out_of_range_are_refused() {
        assert!(Csr::from_edges(2, &[(0, 2)], true).is_err());
    }
}
