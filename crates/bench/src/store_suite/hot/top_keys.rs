//! The most drawn keys of a `bench store-hot` run: Zipf's share of reads for each
//! rank, the servers of the key's two homes, and whether the readers knew it was hot.

use farcache_store::Store;
use serde::Serialize;

use super::placement::{Probe, homes};
use super::{RING_SEED, StoreHotOptions};
use crate::error::Result;
use crate::store_suite::measure::key;
use crate::workload::KeyGen;

/// Ranks reported in `top_keys`.
const TOP_RANKS: u64 = 8;

/// One of the most drawn keys: where its two homes are, and whether the readers knew
/// it was hot.
#[derive(Debug, Clone, Serialize)]
pub struct TopKey {
    /// 0 = the most drawn.
    pub rank: u64,
    pub key: String,
    /// Share of all reads Zipf gives this rank.
    pub read_share: f64,
    pub home_server: String,
    pub copy_server: String,
    pub hot: bool,
}

/// Σ k^-θ for k in 1..=n: summed up to 10 M terms, the rest by the integral.
fn zipf_norm(n: u64, theta: f64) -> f64 {
    const EXACT: u64 = 10_000_000;
    let m = n.min(EXACT);
    let head: f64 = (1..=m).map(|k| (k as f64).powf(-theta)).sum();
    if n <= m {
        return head;
    }
    let (a, b) = (m as f64 + 0.5, n as f64 + 0.5);
    let tail = if (theta - 1.0).abs() < 1e-9 {
        (b / a).ln()
    } else {
        (b.powf(1.0 - theta) - a.powf(1.0 - theta)) / (1.0 - theta)
    };
    head + tail
}

pub(super) fn top_keys(
    o: &StoreHotOptions,
    store: &Store,
    probes: &[Probe],
    hot: &[Vec<u8>],
) -> Result<Vec<TopKey>> {
    let g = KeyGen::zipf(o.keys, o.value_size, o.theta, RING_SEED)?;
    let norm = zipf_norm(o.keys, o.theta);
    let name = |id: Option<u32>| {
        probes
            .iter()
            .find(|p| Some(p.id) == id)
            .map_or_else(|| "?".to_string(), |p| p.name.clone())
    };
    Ok((0..TOP_RANKS.min(o.keys))
        .map(|rank| {
            let k = key(g.index_of_rank(rank));
            let (home, copy) = homes(store, &k);
            TopKey {
                rank,
                key: String::from_utf8_lossy(&k).into_owned(),
                read_share: ((rank + 1) as f64).powf(-o.theta) / norm,
                home_server: name(home),
                copy_server: name(copy),
                hot: hot.iter().any(|h| h[..] == k[..]),
            }
        })
        .collect())
}
