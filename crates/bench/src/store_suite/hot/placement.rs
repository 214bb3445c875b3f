//! Where a `bench store-hot` store lives: the region (= shard) plan, the servers
//! holding its shards, a key's two homes, and each server's kv lookup count.

use farcache_client::Cache;
use farcache_kvformat::hash::locate;
use farcache_kvformat::wire;
use farcache_store::Store;
use farcache_testkit::ProcessCluster;

use crate::baseline::driver::KEY_LEN;
use crate::error::Result;
use crate::store_suite::cluster_err;

/// Shards every server holds at least: a key's second home is another shard, so with
/// one shard per server a copy could never share its home's server, but the load of
/// non-hot keys would be lumpier.
const SHARDS_PER_SERVER: u64 = 4;
/// Largest region (and shard) the bench plans (the store's default shard size).
const MAX_REGION: u64 = 16 << 20;

/// Where the store lives: the region (= shard) size and how many each server holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Plan {
    pub(super) region: u64,
    pub(super) per_server: u64,
}

/// Regions of at most 16 MiB, at least [`SHARDS_PER_SERVER`] per server, together
/// twice what the items take (as `bench store` sizes its stores), so no put evicts.
pub(super) fn plan(keys: u64, value_size: usize, servers: usize) -> Plan {
    let item = (24 + KEY_LEN + value_size) as u64;
    let need = keys.saturating_mul((item * 5 / 4 + 24) * 2);
    let per_server_bytes = need.div_ceil(servers as u64);
    let per_server = per_server_bytes.div_ceil(MAX_REGION).max(SHARDS_PER_SERVER);
    let region = per_server_bytes
        .div_ceil(per_server)
        .div_ceil(1 << 20)
        .max(1)
        << 20;
    Plan { region, per_server }
}

/// One server of the store: a name for the report and an address it holds.
#[derive(Debug, Clone)]
pub(super) struct Probe {
    pub(super) id: u32,
    pub(super) name: String,
    pub(super) addr: u64,
    pub(super) shards: u32,
}

/// The store's servers, in the cluster's order, each with the first address it holds.
pub(super) fn probes(cache: &Cache, cluster: &ProcessCluster, store: &Store) -> Vec<Probe> {
    let info = cache.info();
    let d = store.descriptor();
    let mut out: Vec<Probe> = Vec::new();
    for s in 0..d.shards {
        let base = u64::from(s) * d.shard_size;
        let r = (base / info.region_size.max(1)) as usize;
        let Some(&id) = info.regions.get(r) else {
            continue;
        };
        match out.iter_mut().find(|p| p.id == id) {
            Some(p) => p.shards += 1,
            None => out.push(Probe {
                id,
                name: String::new(),
                addr: base,
                shards: 1,
            }),
        }
    }
    // Name servers after their place in the cluster (s0 = the first started).
    for p in &mut out {
        let addr = info.servers.iter().find(|s| s.id == p.id).map(|s| &s.addr);
        let idx = (0..cluster.server_count())
            .find(|&i| Some(cluster.server_addr(i)) == addr.map(String::as_str));
        p.name = match idx {
            Some(i) => format!("s{i}"),
            None => format!("id{}", p.id),
        };
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Each server's kv lookup count (`kv_hot`), in `probes` order.
pub(super) fn lookup_counts(cache: &Cache, probes: &[Probe]) -> Result<Vec<u64>> {
    let mut b = cache.batch();
    for p in probes {
        b.execute(wire::KV_HOT, p.addr, &[]);
    }
    let r = b.run();
    (0..probes.len())
        .map(|i| {
            let raw = r.data(i).map_err(cluster_err)?;
            let (lookups, _) = wire::decode_hot(raw).map_err(cluster_err)?;
            Ok(lookups)
        })
        .collect()
}

/// The servers (their ids) of `key`'s home and of its second home.
pub(super) fn homes(store: &Store, key: &[u8]) -> (Option<u32>, Option<u32>) {
    let d = store.descriptor();
    let info = store.cache().info();
    let server = |shard: u32| {
        let r = (u64::from(shard) * d.shard_size / info.region_size.max(1)) as usize;
        info.regions.get(r).copied()
    };
    let home = locate(key, d.shards, d.buckets).shard;
    (server(home), server(store.hot_copy_shard(key)))
}

/// Hot keys whose second home is a shard on their home's server (the store moves a
/// copy off its home's server when another server holds a shard, so 0 then).
pub(super) fn copies_on_home_server(store: &Store, hot: &[Vec<u8>]) -> usize {
    hot.iter()
        .filter(|k| {
            let (home, copy) = homes(store, k);
            home == copy
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_whole_regions_spread_evenly() {
        for (keys, n) in [(1_000_000, 6), (1_000_000, 3), (100_000, 6), (20_000, 6)] {
            let p = plan(keys, 64, n);
            assert!(p.per_server >= SHARDS_PER_SERVER, "{p:?}");
            assert!(
                p.region <= MAX_REGION && p.region.is_multiple_of(1 << 20),
                "{p:?}"
            );
            // Twice the items' bytes, as `bench store`.
            assert!(p.region * p.per_server * n as u64 >= keys * 2 * (104 * 5 / 4 + 24));
        }
    }
}
