//! Graph500's Kronecker generator: `edge_factor · 2^scale` edges, each placed by
//! descending `scale` times into one quadrant of the adjacency matrix with
//! probabilities A = 0.57, B = 0.19, C = 0.19 (D the rest), then vertex labels
//! permuted at random so that degree does not follow the id.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::error::{GraphError, Result};

const A: f64 = 0.57;
const B: f64 = 0.19;
const C: f64 = 0.19;

/// The generated edge list (undirected in Graph500's reading) over `2^scale` vertices.
pub fn kronecker_edges(scale: u32, edge_factor: u32, seed: u64) -> Result<Vec<(u32, u32)>> {
    if !(1..=31).contains(&scale) || edge_factor == 0 {
        return Err(GraphError::InvalidArgument(format!(
            "Kronecker scale must be 1..=31 and edge factor ≥ 1 (got {scale}, {edge_factor})"
        )));
    }
    let n = 1u64 << scale;
    let m = n * u64::from(edge_factor);
    let mut rng = StdRng::seed_from_u64(seed);
    let (ab, c_norm, a_norm) = (A + B, C / (1.0 - (A + B)), A / (A + B));
    let mut edges: Vec<(u32, u32)> = (0..m)
        .map(|_| {
            let (mut u, mut v) = (0u32, 0u32);
            for bit in 0..scale {
                let down = rng.r#gen::<f64>() > ab;
                let right = rng.r#gen::<f64>() > if down { c_norm } else { a_norm };
                u |= u32::from(down) << bit;
                v |= u32::from(right) << bit;
            }
            (u, v)
        })
        .collect();
    let mut perm: Vec<u32> = (0..n as u32).collect();
    perm.shuffle(&mut rng);
    for e in &mut edges {
        *e = (perm[e.0 as usize], perm[e.1 as usize]);
    }
    edges.shuffle(&mut rng);
    Ok(edges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Csr;

    #[test]
    fn kronecker_graphs_are_skewed_and_reproducible() {
        let e = kronecker_edges(12, 16, 1).expect("edges");
        assert_eq!(e.len(), 16 << 12);
        assert_eq!(e, kronecker_edges(12, 16, 1).expect("again"));
        let g = Csr::from_edges(1 << 12, &e, true).expect("csr");
        let max = (0..g.vertices()).map(|v| g.degree(v)).max().unwrap_or(0);
        let mean = g.edges() / u64::from(g.vertices());
        // A power law: the busiest vertex has far more edges than the mean.
        assert!(max > 20 * mean, "max degree {max}, mean {mean}");
        assert!(kronecker_edges(0, 16, 1).is_err());
    }
}
