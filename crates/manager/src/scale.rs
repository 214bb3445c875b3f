//! The catalogue at sizes no test cluster reaches (`farcache bench control
//! --catalogue`): tens of thousands of caches and a million regions, built in memory
//! as the manager holds them and, with etcd, written there record by record and read
//! back as a new leader does. Servers are records only: no process holds the regions.

use std::time::Instant;

use farcache_proto::control::PriceClass;
use farcache_proto::{CacheId, ServerId};

use crate::catalogue::{CacheRecord, Catalogue, ServerRecord};
use crate::error::ManagerError;
use crate::store::etcd::{EtcdSettings, EtcdStore};
use crate::store::{Backend, Write};

/// What to build.
#[derive(Debug, Clone)]
pub struct ScaleOptions {
    pub caches: u32,
    pub regions_per_cache: u32,
    pub servers: u32,
    /// Where to write the catalogue and read it back (none: memory only).
    pub etcd: Option<EtcdSettings>,
}

/// What it cost.
#[derive(Debug, Clone, Default)]
pub struct ScaleReport {
    pub caches: u32,
    pub regions: u64,
    pub servers: u32,
    /// Building the in-memory catalogue.
    pub build_ms: f64,
    /// Growth of this process's resident memory while the catalogue was built.
    pub rss_mib: f64,
    /// One upkeep pass with nothing to do (every server agrees with the catalogue, no
    /// region short of copies): heartbeats compared, caches short of copies and the
    /// candidates for placement looked up.
    pub idle_tick_us: f64,
    /// The same pass on a catalogue of the same servers and one cache.
    pub idle_tick_us_one_cache: f64,
    /// Commit latencies of the cache records, written one by one to etcd (in µs,
    /// sorted): the etcd part of creating a cache as the catalogue grows.
    pub commit_us: Vec<f64>,
    /// Reading the whole catalogue back from etcd, as a new leader does.
    pub load_ms: Option<f64>,
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn build(servers: u32, caches: u32, regions: u32) -> (Catalogue, Vec<ServerRecord>) {
    let mut cat = Catalogue::default();
    let now = Instant::now();
    let records: Vec<ServerRecord> = (1..=servers)
        .map(|id| ServerRecord {
            id,
            addr: format!("10.0.{}.{}:7401", id / 250, id % 250),
            memory: 1 << 40,
            cores: 16,
            threads: 8,
            price_class: PriceClass::Spot,
            price_per_gib_hour: 0.01,
            tls_addr: None,
            reclaim: None,
        })
        .collect();
    for r in &records {
        cat.upsert_server(r.clone(), now);
    }
    let mut next: u64 = 0;
    for id in 1..=caches {
        let placed: Vec<ServerId> = (0..regions)
            .map(|_| {
                next += 1;
                (next % u64::from(servers)) as ServerId + 1
            })
            .collect();
        cat.insert_cache(record(id, placed));
        cat.take_cache_id();
    }
    // Every server reports exactly what the catalogue places on it.
    for id in 1..=servers {
        let placed = cat.placed_digest(id);
        cat.heartbeat(id, now, placed);
    }
    (cat, records)
}

fn record(id: CacheId, regions: Vec<ServerId>) -> CacheRecord {
    CacheRecord::plain(id, format!("cache-{id:06}"), 64 << 20, regions)
}

/// The upkeep's per-tick look at the catalogue when nothing changed, in µs (the
/// median of `rounds`).
fn idle_tick_us(cat: &Catalogue, rounds: usize) -> f64 {
    let mut t: Vec<f64> = (0..rounds)
        .map(|_| {
            let t0 = Instant::now();
            let disagree = cat.disagreeing();
            let short = cat.short_caches().next().is_some();
            let cands = cat.candidates();
            std::hint::black_box((disagree, short, cands));
            t0.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// Builds the catalogue, measures it, and with etcd writes it and reads it back
/// under `prefix` (which must not hold a live cluster's catalogue: it is replaced).
pub fn measure(o: &ScaleOptions) -> Result<ScaleReport, ManagerError> {
    if o.servers == 0 || o.caches == 0 || o.regions_per_cache == 0 {
        return Err(ManagerError::Config(
            "a catalogue needs at least one server, cache and region".into(),
        ));
    }
    let before = rss_bytes();
    let t0 = Instant::now();
    let (cat, servers) = build(o.servers, o.caches, o.regions_per_cache);
    let build_ms = t0.elapsed().as_secs_f64() * 1e3;
    let rss_mib = rss_bytes().saturating_sub(before) as f64 / f64::from(1u32 << 20);
    let (small, _) = build(o.servers, 1, o.regions_per_cache);
    let mut report = ScaleReport {
        caches: o.caches,
        regions: u64::from(o.caches) * u64::from(o.regions_per_cache),
        servers: o.servers,
        build_ms,
        rss_mib,
        idle_tick_us: idle_tick_us(&cat, 21),
        idle_tick_us_one_cache: idle_tick_us(&small, 21),
        ..ScaleReport::default()
    };
    drop(small);
    if let Some(settings) = &o.etcd {
        let (store, _, _) = EtcdStore::campaign(settings, "farcache bench control", &|_| {})?;
        let result = write_and_load(&store, &cat, &servers, &mut report);
        store.resign();
        result?;
    }
    Ok(report)
}

fn write_and_load(
    store: &EtcdStore,
    cat: &Catalogue,
    servers: &[ServerRecord],
    report: &mut ScaleReport,
) -> Result<(), ManagerError> {
    for chunk in servers.chunks(64) {
        let writes: Vec<Write<'_>> = chunk.iter().map(Write::Server).collect();
        store.commit(&writes)?;
    }
    let mut commit_us = Vec::with_capacity(report.caches as usize);
    for id in 1..=report.caches {
        let Some(rec) = cat.cache(id) else { continue };
        let t = Instant::now();
        store.commit(&[Write::Cache(rec), Write::NextCacheId(id + 1)])?;
        commit_us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    commit_us.sort_by(f64::total_cmp);
    report.commit_us = commit_us;
    let t = Instant::now();
    let loaded = store.load()?;
    report.load_ms = Some(t.elapsed().as_secs_f64() * 1e3);
    if loaded.caches.len() != report.caches as usize {
        return Err(ManagerError::Corrupt(format!(
            "wrote {} caches, read {} back",
            report.caches,
            loaded.caches.len()
        )));
    }
    // What the new leader builds from it.
    let t = Instant::now();
    let rebuilt = Catalogue::from_parts(
        loaded.servers,
        loaded.caches,
        loaded.next_server_id,
        loaded.next_cache_id,
    );
    std::hint::black_box(&rebuilt);
    report.load_ms = report
        .load_ms
        .map(|ms| ms + t.elapsed().as_secs_f64() * 1e3);
    Ok(())
}
