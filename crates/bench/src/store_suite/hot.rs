//! `farcache bench store-hot`: how evenly a skewed read load spreads over the servers
//! of one store, without and with the store's hot-key layer (DistCache: hot keys get
//! a second copy in a shard of an independent hash, readers pick the less loaded of
//! the two homes).
//!
//! For every server count: a cluster of that many server processes (one worker thread
//! each), one store spread over all of them (the same number of shards on every
//! server), loaded with `keys` values. Then client threads keep batched GETs
//! (`mget_submit`) of Zipf-drawn keys in flight for a warm-up and a timed window,
//! twice: first without the hot-key layer, then with its controller running. A
//! server's load is how many kv lookups it served in the window (the count `kv_hot`
//! returns, read before and after), so copies read on the second home count there.

use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use farcache_client::{Cache, ClientConfig};
use farcache_kvformat::hash::{locate, second_shard};
use farcache_kvformat::wire;
use farcache_store::{HotOptions, Store, StoreError, StoreExt, StoreOptions};
use farcache_testkit::{ClusterOptions, ProcessCluster};
use indicatif::ProgressBar;
use serde::Serialize;

use super::measure::{Key, key};
use super::{MAX_KEYS, MAX_VALUE, cluster_err};
use crate::baseline::driver::{KEY_LEN, KEY_RING_MAX, value_bytes};
use crate::error::{BenchError, Result};
use crate::histogram::{LatencyHistogram, LatencySummary};
use crate::io_suite::progress;
use crate::report::{BenchRow, MachineInfo, align_cells, build_kind, unix_now, write_json_as};
use crate::workload::KeyGen;

/// The goal for the hot-key layer: max ÷ mean server load.
pub const TARGET_MAX_MEAN: f64 = 1.25;
/// Most servers per cluster (all are processes on this machine).
pub const MAX_SERVERS: usize = 32;
/// Shards every server holds at least: a key's second home is another shard, so with
/// one shard per server a copy could never share its home's server, but the load of
/// non-hot keys would be lumpier.
const SHARDS_PER_SERVER: u64 = 4;
/// Largest region (and shard) the bench plans (the store's default shard size).
const MAX_REGION: u64 = 16 << 20;
/// Seed of the keys drawn (`top_keys` finds the hottest ones by it).
const RING_SEED: u64 = 0x5eed;
/// Warm-up of the run without the layer (connections, reference bytes).
const PLAIN_WARMUP: Duration = Duration::from_millis(500);

/// What `bench store-hot` runs.
#[derive(Debug, Clone)]
pub struct StoreHotOptions {
    /// The `farcache` binary used to start the manager and servers.
    pub bin: PathBuf,
    /// Server counts, one cluster each.
    pub servers: Vec<usize>,
    pub keys: u64,
    pub value_size: usize,
    /// Zipf exponent of the key draws.
    pub theta: f64,
    /// Keys per `mget`.
    pub batch: usize,
    /// `mget`s in flight per client thread.
    pub depth: usize,
    /// Client threads (one store handle, one connection per server).
    pub threads: usize,
    /// Measured window of each run.
    pub duration: Duration,
    /// Time the hot-key controller runs before the window opens.
    pub hot_warmup: Duration,
    /// The controller's options.
    pub hot: HotOptions,
    pub quick: bool,
}

impl StoreHotOptions {
    /// 6 servers, 1 M keys of 64 B (100 k with `quick`), Zipf 0.99, 2 threads each
    /// keeping 4 mgets of 64 keys in flight, 3 s windows (1 s with `quick`), and a
    /// controller polling every 40 ms for at most 64 hot keys.
    pub fn new(bin: impl Into<PathBuf>, quick: bool) -> Self {
        Self {
            bin: bin.into(),
            servers: vec![6],
            keys: if quick { 100_000 } else { 1_000_000 },
            value_size: 64,
            theta: 0.99,
            batch: 64,
            depth: 4,
            threads: 2,
            duration: Duration::from_millis(if quick { 1000 } else { 3000 }),
            hot_warmup: Duration::from_millis(if quick { 1000 } else { 1500 }),
            // 40 ms (the default) leaves a round 60 ms before the 100 ms copy lease
            // runs out; 64 keys: under Zipf 0.99 rank 64 draws 0.1 % of the reads, far
            // below a server's share, and 64 refreshes a round stay well inside 40 ms.
            hot: HotOptions {
                every: Duration::from_millis(40),
                max_keys: 64,
                min_count: 16,
            },
            quick,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(BenchError::InvalidArgument(m));
        if self.servers.is_empty() {
            return bad("no server counts given".into());
        }
        if let Some(n) = self
            .servers
            .iter()
            .find(|&&n| !(2..=MAX_SERVERS).contains(&n))
        {
            return bad(format!(
                "servers must be between 2 and {MAX_SERVERS} (a hot key needs two homes), got {n}"
            ));
        }
        if !(1000..=MAX_KEYS).contains(&self.keys) {
            return bad(format!(
                "keys must be between 1000 and {MAX_KEYS}, got {}",
                self.keys
            ));
        }
        if self.value_size == 0 || self.value_size > MAX_VALUE {
            return bad(format!(
                "value size must be between 1 and {MAX_VALUE} bytes, got {}",
                self.value_size
            ));
        }
        if !(self.theta.is_finite() && self.theta > 0.0 && self.theta <= 10.0) {
            return bad(format!(
                "zipf exponent must be above 0 and at most 10, got {}",
                self.theta
            ));
        }
        if !(1..=4096).contains(&self.batch) {
            return bad("batch must be between 1 and 4096".into());
        }
        if !(1..=64).contains(&self.depth) || !(1..=64).contains(&self.threads) {
            return bad("queue depth and threads must be between 1 and 64".into());
        }
        if self.duration.is_zero() {
            return bad("seconds must be positive".into());
        }
        if !(1..=4096).contains(&self.hot.max_keys) {
            return bad(format!(
                "hot keys must be between 1 and 4096, got {}",
                self.hot.max_keys
            ));
        }
        Ok(())
    }
}

/// A whole `bench store-hot` run.
#[derive(Debug, Clone, Serialize)]
pub struct StoreHotReport {
    /// `"store-hot"`.
    pub bench: String,
    pub timestamp_unix: u64,
    pub machine: MachineInfo,
    pub build: String,
    pub keys: u64,
    pub value_size: usize,
    pub zipf_theta: f64,
    pub batch: usize,
    pub depth: usize,
    pub threads: usize,
    /// Measured seconds of every run.
    pub seconds: f64,
    /// Seconds the controller ran before the window of a run with the layer.
    pub hot_warmup_seconds: f64,
    pub hot_options: HotOptionsView,
    pub rows: Vec<StoreHotRow>,
    /// Lines printed under the table.
    pub notes: Vec<String>,
}

/// [`HotOptions`] as written to the JSON.
#[derive(Debug, Clone, Serialize)]
pub struct HotOptionsView {
    pub every_ms: u64,
    pub max_keys: usize,
    pub min_count: u32,
}

/// One run: `BenchRow`'s fields, then the load balance.
#[derive(Debug, Clone, Serialize)]
pub struct StoreHotRow {
    #[serde(flatten)]
    pub row: BenchRow,
    pub servers: usize,
    pub hot_key_layer: bool,
    /// Most lookups any server served in the window ÷ the mean over servers.
    pub max_mean_load: f64,
    /// Lookups each server served in the window (in the order of `server_names`).
    pub server_loads: Vec<u64>,
    pub server_names: Vec<String>,
    /// Shards of the store on each server.
    pub server_shards: Vec<u32>,
    /// Lookups per second over all servers (copies and the controller's included).
    pub lookups_per_sec: f64,
    /// Reads the readers' handle served from second copies in the window.
    pub copy_reads: u64,
    /// `copy_reads` ÷ keys read in the window.
    pub copy_read_share: f64,
    /// Keys the readers' handle knew to be hot at the end of the window.
    pub hot_keys: usize,
    /// Of those, keys whose second copy is on the same server as their home (their
    /// reads cannot move).
    pub hot_keys_copy_on_home_server: usize,
    /// The most drawn keys: their homes' servers and whether they were hot.
    pub top_keys: Vec<TopKey>,
    /// Items the store held after the load, and items its puts evicted (a put into a
    /// bucket with no free slot evicts one, however roomy the store).
    pub live_after_load: u64,
    pub evicted_by_load: u64,
    /// With the layer: reads the controller's own handle served from second copies
    /// (its refreshes read a hot key's value through the same routing as readers).
    pub controller_copy_reads: Option<u64>,
    /// Keys that failed (errors, wrong values), warm-up included.
    pub errors: u64,
    /// Keys not found (all were loaded).
    pub misses: u64,
    pub first_error: Option<String>,
}

/// Failed and missing keys of a run, and the first failure.
#[derive(Debug, Clone, Default)]
struct Tally {
    errors: u64,
    misses: u64,
    first_error: Option<String>,
}

impl Tally {
    fn error(&mut self, n: u64, what: impl FnOnce() -> String) {
        self.errors += n;
        if self.first_error.is_none() {
            self.first_error = Some(what());
        }
    }

    fn get(
        &mut self,
        r: std::result::Result<Option<farcache_client::Bytes>, StoreError>,
        v: &[u8],
    ) {
        match r {
            Ok(Some(got)) if got[..] == *v => {}
            Ok(Some(got)) => {
                let len = got.len();
                self.error(1, || format!("wrong value ({len} bytes) returned"));
            }
            Ok(None) => self.misses += 1,
            Err(e) => self.error(1, || e.to_string()),
        }
    }

    fn add(&mut self, o: Tally) {
        self.errors += o.errors;
        self.misses += o.misses;
        self.first_error = self.first_error.take().or(o.first_error);
    }
}

/// Where the store lives: the region (= shard) size and how many each server holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    region: u64,
    per_server: u64,
}

/// Regions of at most 16 MiB, at least [`SHARDS_PER_SERVER`] per server, together
/// twice what the items take (as `bench store` sizes its stores), so no put evicts.
fn plan(keys: u64, value_size: usize, servers: usize) -> Plan {
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
struct Probe {
    id: u32,
    name: String,
    addr: u64,
    shards: u32,
}

/// The store's servers, in the cluster's order, each with the first address it holds.
fn probes(cache: &Cache, cluster: &ProcessCluster, store: &Store) -> Vec<Probe> {
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
fn lookup_counts(cache: &Cache, probes: &[Probe]) -> Result<Vec<u64>> {
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

/// Zipf-drawn keys, drawn before the clock starts.
fn zipf_ring(o: &StoreHotOptions, seed: u64) -> Result<Vec<Key>> {
    let mut g = KeyGen::zipf(o.keys, o.value_size, o.theta, seed)?;
    let len = KEY_RING_MAX.div_ceil(o.batch) * o.batch;
    Ok((0..len).map(|_| key(g.next_index())).collect())
}

/// What one timed window measured.
struct Window {
    keys: u64,
    secs: f64,
    loads: Vec<u64>,
    copy_reads: u64,
    latency: LatencySummary,
    tally: Tally,
    hot_keys: Vec<Vec<u8>>,
}

/// `threads` threads keep `depth` mgets of the ring's keys in flight from
/// `warmup` before the window until its end; loads are read at both edges.
fn timed_reads(
    store: &Store,
    o: &StoreHotOptions,
    ring: &[Key],
    probes: &[Probe],
    warmup: Duration,
) -> Result<Window> {
    let value = value_bytes(o.value_size);
    let done = AtomicU64::new(0);
    let (recording, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    let barrier = Barrier::new(o.threads + 1);
    let b = o.batch;
    std::thread::scope(|sc| {
        let workers: Vec<_> = (0..o.threads)
            .map(|t| {
                let (done, recording, stop, barrier, value) =
                    (&done, &recording, &stop, &barrier, &value);
                sc.spawn(move || {
                    let (mut hist, mut tally) = (LatencyHistogram::new(), Tally::default());
                    // Threads start apart in the ring so they do not read in step.
                    let mut pos = (t * ring.len() / o.threads) / b * b;
                    let mut inflight = std::collections::VecDeque::with_capacity(o.depth);
                    barrier.wait();
                    while !stop.load(Ordering::Relaxed) {
                        while inflight.len() < o.depth {
                            let keys = &ring[pos..pos + b];
                            pos = (pos + b) % ring.len();
                            inflight.push_back((Instant::now(), store.mget_submit(keys)));
                        }
                        let Some((t0, p)) = inflight.pop_front() else {
                            break;
                        };
                        match p.wait() {
                            Ok(rs) => rs.into_iter().for_each(|r| tally.get(r, value)),
                            Err(e) => tally.error(b as u64, || e.to_string()),
                        }
                        done.fetch_add(b as u64, Ordering::Relaxed);
                        if recording.load(Ordering::Relaxed) {
                            hist.record_duration(t0.elapsed());
                        }
                    }
                    for (_, p) in inflight.drain(..) {
                        let _ = p.wait();
                    }
                    (hist, tally)
                })
            })
            .collect();
        barrier.wait();
        let measured = (|| {
            std::thread::sleep(warmup);
            let (l0, c0, k0) = (
                lookup_counts(store.cache(), probes)?,
                store.copy_reads(),
                done.load(Ordering::Relaxed),
            );
            let t0 = Instant::now();
            recording.store(true, Ordering::Relaxed);
            std::thread::sleep(o.duration);
            let (k1, c1) = (done.load(Ordering::Relaxed), store.copy_reads());
            let secs = t0.elapsed().as_secs_f64();
            recording.store(false, Ordering::Relaxed);
            let l1 = lookup_counts(store.cache(), probes)?;
            let loads = l1
                .iter()
                .zip(&l0)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect();
            Ok::<_, BenchError>((k1 - k0, secs, loads, c1 - c0))
        })();
        stop.store(true, Ordering::Relaxed);
        let (mut hist, mut tally) = (LatencyHistogram::new(), Tally::default());
        for w in workers {
            let (h, t) = w
                .join()
                .map_err(|_| BenchError::Cluster("store-hot reader thread panicked".into()))?;
            hist.merge(&h);
            tally.add(t);
        }
        let (keys, secs, loads, copy_reads) = measured?;
        Ok(Window {
            keys,
            secs,
            loads,
            copy_reads,
            latency: hist.summary(),
            tally,
            hot_keys: store.hot_keys(),
        })
    })
}

/// Puts every key once, `batch` keys a call, from `threads` threads.
fn load(store: &Store, o: &StoreHotOptions) -> Result<Tally> {
    let value = value_bytes(o.value_size);
    let per = o.keys.div_ceil(o.threads as u64);
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..o.threads as u64)
            .map(|t| {
                let value = &value;
                sc.spawn(move || {
                    let mut tally = Tally::default();
                    let (lo, hi) = ((t * per).min(o.keys), ((t + 1) * per).min(o.keys));
                    let keys: Vec<Key> = (lo..hi).map(key).collect();
                    for chunk in keys.chunks(o.batch) {
                        let pairs: Vec<(&Key, &[u8])> =
                            chunk.iter().map(|k| (k, &value[..])).collect();
                        for r in store.mput(&pairs) {
                            if let Err(e) = r {
                                tally.error(1, || e.to_string());
                            }
                        }
                    }
                    tally
                })
            })
            .collect();
        let mut all = Tally::default();
        for h in hs {
            all.add(
                h.join()
                    .map_err(|_| BenchError::Cluster("store-hot load thread panicked".into()))?,
            );
        }
        Ok(all)
    })
}

/// The servers (their ids) of `key`'s home and of its second home.
fn homes(store: &Store, key: &[u8]) -> (Option<u32>, Option<u32>) {
    let d = store.descriptor();
    let info = store.cache().info();
    let server = |shard: u32| {
        let r = (u64::from(shard) * d.shard_size / info.region_size.max(1)) as usize;
        info.regions.get(r).copied()
    };
    let home = locate(key, d.shards, d.buckets).shard;
    (server(home), server(second_shard(key, d.shards, home)))
}

/// Hot keys whose second home is a shard on their home's server.
fn copies_on_home_server(store: &Store, hot: &[Vec<u8>]) -> usize {
    hot.iter()
        .filter(|k| {
            let (home, copy) = homes(store, k);
            home == copy
        })
        .count()
}

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

fn top_keys(
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

/// Runs the whole benchmark and returns the report (not yet printed or saved).
pub fn run_store_hot_bench(o: &StoreHotOptions) -> Result<StoreHotReport> {
    o.validate()?;
    let mut report = StoreHotReport {
        bench: "store-hot".into(),
        timestamp_unix: unix_now(),
        machine: MachineInfo::detect(),
        build: build_kind(),
        keys: o.keys,
        value_size: o.value_size,
        zipf_theta: o.theta,
        batch: o.batch,
        depth: o.depth,
        threads: o.threads,
        seconds: o.duration.as_secs_f64(),
        hot_warmup_seconds: o.hot_warmup.as_secs_f64(),
        hot_options: HotOptionsView {
            every_ms: o.hot.every.as_millis() as u64,
            max_keys: o.hot.max_keys,
            min_count: o.hot.min_count,
        },
        rows: Vec::new(),
        notes: Vec::new(),
    };
    let ring = zipf_ring(o, RING_SEED)?;
    let pb = progress(o.servers.len() as u64 * 3);
    pb.set_prefix("store-hot");
    for &n in &o.servers {
        let rows = run_servers(o, n, &ring, &pb)?;
        report.rows.extend(rows);
    }
    pb.finish_and_clear();
    report.finish_notes(o);
    Ok(report)
}

/// One cluster of `n` servers: load, a run without the layer, a run with it.
fn run_servers(
    o: &StoreHotOptions,
    n: usize,
    ring: &[Key],
    pb: &ProgressBar,
) -> Result<Vec<StoreHotRow>> {
    let p = plan(o.keys, o.value_size, n);
    let cluster = ProcessCluster::start(
        &o.bin,
        &ClusterOptions::default()
            .servers(n)
            .server_threads(1)
            .server_memory(p.per_server * p.region + (64 << 20))
            .region_size(p.region),
    )
    .map_err(cluster_err)?;
    let client = cluster
        .client_with(
            ClientConfig::new("")
                .connections(1)
                .batch_size(o.batch)
                .queue_depth(o.depth),
        )
        .map_err(cluster_err)?;
    let name = "bench-store-hot";
    let store = client
        .create_store(
            name,
            p.per_server * n as u64 * p.region,
            &StoreOptions {
                avg_value_size: o.value_size as u64,
                region_size: Some(p.region),
                ..StoreOptions::default()
            },
        )
        .map_err(cluster_err)?;
    let probes = probes(store.cache(), &cluster, &store);
    pb.set_message(format!("{n} servers: load {} keys", o.keys));
    let loaded = load(&store, o)?;
    // A put into a bucket with no free slot evicts even in a roomy store: the census
    // tells how many keys the reads can miss.
    let census = store.stats().map_err(cluster_err)?;
    pb.inc(1);

    pb.set_message(format!("{n} servers: zipf reads, hot-key layer off"));
    let plain = timed_reads(&store, o, ring, &probes, PLAIN_WARMUP)?;
    pb.inc(1);
    pb.set_message(format!("{n} servers: zipf reads, hot-key layer on"));
    // The controller runs on its own handle, as it would in its own process: the
    // readers' handle learns hot keys only from their homes' replies.
    let ctl_store = client.open_store(name).map_err(cluster_err)?;
    let ctl = ctl_store.spawn_hot_keys(o.hot.clone());
    let with = timed_reads(&store, o, ring, &probes, o.hot_warmup);
    drop(ctl);
    let with = with?;
    let ctl_copy_reads = ctl_store.copy_reads();
    pb.inc(1);
    let mut rows = vec![
        row(o, n, false, &probes, plain, &store)?,
        row(o, n, true, &probes, with, &store)?,
    ];
    for r in &mut rows {
        (r.live_after_load, r.evicted_by_load) = (census.live, census.evictions);
        r.controller_copy_reads = r.hot_key_layer.then_some(ctl_copy_reads);
    }
    drop((store, ctl_store));
    client.delete(name).map_err(cluster_err)?;
    drop(cluster);
    if loaded.errors > 0 {
        return Err(BenchError::Cluster(format!(
            "{} of {} puts of the load failed, first: {}",
            loaded.errors,
            o.keys,
            loaded.first_error.unwrap_or_default()
        )));
    }
    Ok(rows)
}

fn row(
    o: &StoreHotOptions,
    n: usize,
    layer: bool,
    probes: &[Probe],
    w: Window,
    store: &Store,
) -> Result<StoreHotRow> {
    let total: u64 = w.loads.iter().sum();
    let mean = total as f64 / w.loads.len().max(1) as f64;
    let max = w.loads.iter().copied().max().unwrap_or(0) as f64;
    let max_mean = if mean > 0.0 { max / mean } else { f64::NAN };
    let secs = w.secs.max(1e-9);
    let mut row = BenchRow {
        name: format!(
            "store GET (mget) zipf{} {n} servers, hot-key layer {}",
            o.theta,
            if layer { "on" } else { "off" }
        ),
        system: "farcache".into(),
        op: "GET".into(),
        record_size: o.value_size,
        distribution: format!("zipf{}", o.theta),
        c: Some(o.threads),
        s: Some(1),
        b: Some(o.batch),
        q: Some(o.depth),
        mops: w.keys as f64 / secs / 1e6,
        p50_us: w.latency.p50_us,
        p99_us: w.latency.p99_us,
        p999_us: w.latency.p999_us,
        ..BenchRow::default()
    };
    if layer {
        // Misses are keys the load's full buckets evicted (`evicted_by_load`); they
        // are looked up all the same, so they count as load.
        let clean = w.tally.errors == 0;
        row = row.with_target(
            format!("max/mean load <= {TARGET_MAX_MEAN}"),
            clean && max_mean <= TARGET_MAX_MEAN,
        );
    }
    let hot_keys_copy_on_home_server = copies_on_home_server(store, &w.hot_keys);
    let top_keys = top_keys(o, store, probes, &w.hot_keys)?;
    Ok(StoreHotRow {
        row,
        servers: n,
        hot_key_layer: layer,
        max_mean_load: max_mean,
        server_names: probes.iter().map(|p| p.name.clone()).collect(),
        server_shards: probes.iter().map(|p| p.shards).collect(),
        lookups_per_sec: total as f64 / secs,
        copy_reads: w.copy_reads,
        copy_read_share: w.copy_reads as f64 / w.keys.max(1) as f64,
        hot_keys: w.hot_keys.len(),
        hot_keys_copy_on_home_server,
        top_keys,
        controller_copy_reads: None,
        live_after_load: 0,
        evicted_by_load: 0,
        server_loads: w.loads,
        errors: w.tally.errors,
        misses: w.tally.misses,
        first_error: w.tally.first_error,
    })
}

impl StoreHotReport {
    fn finish_notes(&mut self, o: &StoreHotOptions) {
        self.notes.push(format!(
            "{} keys of {} B, reads of keys drawn Zipf({}) (a ring of {} draws made before \
             the clock): {} threads on one store handle, each keeping {} mgets of {} keys in \
             flight; {:.1} s windows after a {:.1} s warm-up (layer off) or {:.1} s of the \
             controller (layer on: every {} ms, at most {} keys, min count {})",
            o.keys,
            o.value_size,
            o.theta,
            KEY_RING_MAX.div_ceil(o.batch) * o.batch,
            o.threads,
            o.depth,
            o.batch,
            o.duration.as_secs_f64(),
            PLAIN_WARMUP.as_secs_f64(),
            o.hot_warmup.as_secs_f64(),
            o.hot.every.as_millis(),
            o.hot.max_keys,
            o.hot.min_count
        ));
        self.notes.push(
            "load = kv lookups a server served in the window (kv_hot's count, read before \
             and after): copy reads count on the copy's server, the controller's lookups \
             count too"
                .into(),
        );
        for pair in self.rows.chunks(2) {
            if let [off, on] = pair {
                self.notes.push(format!(
                    "{} servers: max/mean load {:.3} -> {:.3}, {:.3} -> {:.3} Mkeys/s ({:+.1} %), \
                     {:.1} % of reads from copies, {} hot keys ({} with the copy on the home's \
                     server); the controller read {} values from copies to refresh copies; the \
                     load left {} of {} keys ({} evicted from full buckets), reads missed {} and {}",
                    on.servers,
                    off.max_mean_load,
                    on.max_mean_load,
                    off.row.mops,
                    on.row.mops,
                    (on.row.mops / off.row.mops - 1.0) * 100.0,
                    on.copy_read_share * 100.0,
                    on.hot_keys,
                    on.hot_keys_copy_on_home_server,
                    on.controller_copy_reads.unwrap_or(0),
                    on.live_after_load,
                    self.keys,
                    on.evicted_by_load,
                    off.misses,
                    on.misses
                ));
            }
        }
        for r in self.rows.iter().filter(|r| r.hot_key_layer) {
            let keys: Vec<String> = r
                .top_keys
                .iter()
                .map(|t| {
                    format!(
                        "#{} {:.1} % {}->{}{}",
                        t.rank,
                        t.read_share * 100.0,
                        t.home_server,
                        t.copy_server,
                        if t.hot { "" } else { " (not hot)" }
                    )
                })
                .collect();
            self.notes.push(format!(
                "{} servers, hottest keys (share of reads, home->copy server): {}",
                r.servers,
                keys.join(", ")
            ));
        }
        for r in &self.rows {
            if let Some(e) = &r.first_error {
                self.notes
                    .push(format!("{}: {} errors, first: {e}", r.row.name, r.errors));
            }
        }
    }

    /// Whether every run with the layer met the max/mean goal.
    pub fn all_targets_met(&self) -> Option<bool> {
        let with: Vec<bool> = self
            .rows
            .iter()
            .filter_map(|r| r.row.meets_target)
            .collect();
        (!with.is_empty()).then(|| with.iter().all(|&m| m))
    }
}

fn fmt_num(v: f64, d: usize) -> String {
    if v.is_finite() {
        format!("{v:.d$}")
    } else {
        "-".into()
    }
}

/// The runs as an aligned table (per-server loads in thousands of lookups), the notes
/// under it.
pub fn format_store_hot_table(r: &StoreHotReport) -> String {
    let mut cells = vec![
        [
            "servers",
            "hot-key layer",
            "Mkeys/s",
            "p50 µs",
            "p99 µs",
            "max/mean load",
            "copy reads",
            "hot keys",
            "per-server lookups (k)",
            "target",
            "ok?",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for x in &r.rows {
        let loads: Vec<String> = x
            .server_names
            .iter()
            .zip(&x.server_loads)
            .map(|(n, l)| format!("{n}:{}", l / 1000))
            .collect();
        cells.push(vec![
            x.servers.to_string(),
            if x.hot_key_layer { "on" } else { "off" }.into(),
            fmt_num(x.row.mops, 3),
            fmt_num(x.row.p50_us, 1),
            fmt_num(x.row.p99_us, 1),
            fmt_num(x.max_mean_load, 3),
            format!("{:.1} %", x.copy_read_share * 100.0),
            x.hot_keys.to_string(),
            loads.join(" "),
            x.row.target.clone().unwrap_or_else(|| "-".into()),
            match x.row.meets_target {
                Some(true) => "yes".into(),
                Some(false) => "NO".into(),
                None => "-".into(),
            },
        ]);
    }
    let right = [
        true, false, true, true, true, true, true, true, false, false, false,
    ];
    let mut out = format!(
        "== {} @ {} ({} cores, {}, kernel {}) ==\n",
        r.bench, r.timestamp_unix, r.machine.cores, r.machine.hostname, r.machine.kernel
    );
    out.push_str(&align_cells(&cells, &right));
    for n in &r.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

/// Writes `<dir>/store-hot-<timestamp>.json` and `<dir>/store-hot-latest.json`.
pub fn write_store_hot_json(report: &StoreHotReport, dir: &Path) -> Result<PathBuf> {
    write_json_as(report, &report.bench, report.timestamp_unix, dir)
}

/// Writes the report to `path` exactly (creating its directory).
pub fn write_store_hot_json_to(report: &StoreHotReport, path: &Path) -> Result<()> {
    write_json_to(report, path)
}

/// Writes `value` as pretty JSON to `path` (creating its directory).
pub(super) fn write_json_to<T: Serialize>(value: &T, path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(value)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        let ok = StoreHotOptions::new("farcache", true);
        assert!(ok.validate().is_ok());
        for bad in [
            StoreHotOptions {
                servers: vec![],
                ..ok.clone()
            },
            StoreHotOptions {
                servers: vec![1],
                ..ok.clone()
            },
            StoreHotOptions {
                keys: 10,
                ..ok.clone()
            },
            StoreHotOptions {
                theta: 0.0,
                ..ok.clone()
            },
            StoreHotOptions {
                theta: f64::NAN,
                ..ok.clone()
            },
            StoreHotOptions {
                duration: Duration::ZERO,
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

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
