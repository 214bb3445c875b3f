//! `farcache bench store-evict`: the store's CLOCK eviction against exact LRU on one
//! trace.
//!
//! A Zipf trace of GET-then-PUT-on-miss over `keys` distinct keys of fixed-size
//! values runs against a store whose heap holds about `cache_fraction` of those keys'
//! items, in batches (an `mget` of `batch` requests, then one `mput` of the keys it
//! missed). After the warm-up part of the trace the store's hit ratio is counted.
//! The same trace, with the same batch semantics, then runs through an exact LRU
//! simulator whose capacity is the number of items the store actually held at the
//! end (`store.stats().live`): both hold the same number of items, so the difference
//! is the eviction policy (and the store's implementation of CLOCK), not the sizing.
//! Further simulators of the same capacity take the store's CLOCK apart (one cache
//! per shard, textbook CLOCK, FIFO, a model of the store's index and sweep as it was
//! (clearing its whole window) and with the hand stopping at its last victim), so a
//! gap to LRU can be traced to its cause.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use farcache_client::ClientConfig;
use farcache_kvformat::hash::locate;
use farcache_kvformat::layout::HAND;
use farcache_kvformat::{class, item};
use farcache_store::{Store, StoreExt, StoreOptions, StoreStats};
use farcache_testkit::{ClusterOptions, ProcessCluster};
use serde::Serialize;

use super::measure::{Key, key};
use super::{MAX_KEYS, MAX_VALUE, cluster_err};
use crate::baseline::driver::{KEY_LEN, value_bytes};
use crate::error::{BenchError, Result};
use crate::io_suite::progress;
use crate::report::{BenchRow, MachineInfo, align_cells, build_kind, unix_now, write_json_as};
use crate::workload::KeyGen;

/// The goal: the store's hit ratio within this many points of exact LRU's.
pub const TARGET_POINTS: f64 = 2.0;
/// Shards (= regions) are powers of two between these, about [`SHARDS`] of them: the
/// store's size then follows the target in fine steps, and each shard's CLOCK still
/// has thousands of items to choose from.
const MIN_SHARD: u64 = 64 << 10;
const MAX_SHARD: u64 = 1 << 20;
const SHARDS: u64 = 12;
/// Seed of the trace (the store and the simulators replay the same one).
const SEED: u64 = 0xc10c;
/// The store's sweep (crates/store/src/evict.rs): buckets a step claims, and items
/// of the wanted class it evicts at most.
const STORE_WINDOW: u64 = 16;
const STORE_TAKE: usize = 4;

/// What `bench store-evict` runs.
#[derive(Debug, Clone)]
pub struct StoreEvictOptions {
    /// The `farcache` binary used to start the manager and server.
    pub bin: PathBuf,
    /// Distinct keys of the trace.
    pub keys: u64,
    pub value_size: usize,
    /// Zipf exponent of the trace.
    pub theta: f64,
    /// Share of the distinct keys' items the store's heap holds.
    pub cache_fraction: f64,
    /// Requests in the trace, warm-up included.
    pub requests: u64,
    /// Requests before the hit ratio is counted.
    pub warmup: u64,
    /// Requests per `mget` (their misses go in one `mput`).
    pub batch: usize,
    pub quick: bool,
}

impl StoreEvictOptions {
    /// 1 M keys of 64 B (100 k with `quick`), Zipf 0.99, a store of 10 % of them, a
    /// trace of 6 × keys requests whose first 2 × keys warm up (the store turns over
    /// several times before counting starts), 64 requests a batch.
    pub fn new(bin: impl Into<PathBuf>, quick: bool) -> Self {
        let keys = if quick { 100_000 } else { 1_000_000 };
        Self {
            bin: bin.into(),
            keys,
            value_size: 64,
            theta: 0.99,
            cache_fraction: 0.10,
            requests: 6 * keys,
            warmup: 2 * keys,
            batch: 64,
            quick,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(BenchError::InvalidArgument(m));
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
        if !(self.cache_fraction > 0.0 && self.cache_fraction < 1.0) {
            return bad(format!(
                "cache fraction must be between 0 and 1 (exclusive), got {}",
                self.cache_fraction
            ));
        }
        if self.warmup >= self.requests {
            return bad(format!(
                "requests ({}) must exceed the warm-up ({})",
                self.requests, self.warmup
            ));
        }
        if !(1..=4096).contains(&self.batch) {
            return bad("batch must be between 1 and 4096".into());
        }
        Ok(())
    }
}

/// Hits and misses of the counted part of a trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HitCount {
    pub hits: u64,
    pub misses: u64,
}

impl HitCount {
    pub fn ratio(&self) -> f64 {
        let n = self.hits + self.misses;
        if n == 0 {
            f64::NAN
        } else {
            self.hits as f64 / n as f64
        }
    }

    fn count(&mut self, hit: bool) {
        if hit {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
    }
}

/// A whole `bench store-evict` run.
#[derive(Debug, Clone, Serialize)]
pub struct StoreEvictReport {
    /// `"store-evict"`.
    pub bench: String,
    pub timestamp_unix: u64,
    pub machine: MachineInfo,
    pub build: String,
    pub keys: u64,
    pub value_size: usize,
    pub zipf_theta: f64,
    pub requests: u64,
    pub warmup: u64,
    pub batch: usize,
    pub cache_fraction: f64,
    /// Bytes an item of the trace occupies (its size class).
    pub item_bytes: u64,
    /// Bytes of the store's cache (whole shards) and of one shard.
    pub store_bytes: u64,
    pub shard_bytes: u64,
    /// Heap bytes over all shards, and the items of `item_bytes` they hold.
    pub heap_bytes: u64,
    pub heap_items: u64,
    /// Items the store held after the warm-up and at the end.
    pub live_after_warmup: u64,
    pub live_at_end: u64,
    /// Capacity (items) of the simulators: `live_at_end`.
    pub sim_capacity: u64,
    /// Hit ratios of the counted part of the trace: the store's, exact LRU's (one
    /// LRU over all keys), textbook CLOCK's.
    pub store_hit_ratio: f64,
    pub lru_hit_ratio: f64,
    pub clock_sim_hit_ratio: f64,
    /// `(lru_hit_ratio - store_hit_ratio) × 100`.
    pub points_below_lru: f64,
    pub store: HitCount,
    /// Every simulator run on the trace (exact LRU first).
    pub simulations: Vec<SimResult>,
    /// The store's evictions over the whole trace and over the counted part.
    pub evictions: u64,
    pub evictions_counted: u64,
    /// Steps the shards' CLOCK hands took while counting; a step evicts at most 4,
    /// so evictions beyond 4 per step came from elsewhere (a put into a bucket with
    /// no free slot evicts the bucket's least referenced item, past the hand).
    pub sweep_steps_counted: u64,
    pub evictions_outside_sweep_min: u64,
    /// Failed GETs and PUTs (a failed GET counts as a miss).
    pub errors: u64,
    pub first_error: Option<String>,
    pub stats_at_end: StoreStats,
    /// The trace against the store, as a row (`mops` = requests per second).
    pub rows: Vec<BenchRow>,
    pub notes: Vec<String>,
}

/// One simulator's result.
#[derive(Debug, Clone, Serialize)]
pub struct SimResult {
    pub policy: String,
    /// Items it holds at most.
    pub capacity: u64,
    pub hit_ratio: f64,
    /// `(hit_ratio - exact LRU's) × 100`.
    pub points_vs_lru: f64,
    pub count: HitCount,
    /// Items it evicted in the counted part.
    pub evictions_counted: u64,
}

/// Replays the trace's `requests` requests: `batch` gets each batch's key ids and
/// the index of its first request in the trace.
fn replay(o: &StoreEvictOptions, mut batch: impl FnMut(u64, &[u64]) -> Result<()>) -> Result<()> {
    let mut g = KeyGen::zipf(o.keys, o.value_size, o.theta, SEED)?;
    let mut ids = vec![0u64; o.batch];
    let mut at = 0u64;
    while at < o.requests {
        let n = (o.requests - at).min(o.batch as u64) as usize;
        g.fill(&mut ids[..n]);
        batch(at, &ids[..n])?;
        at += n as u64;
    }
    Ok(())
}

/// The batch's missed keys, each once, in order of first miss.
fn distinct_misses(ids: &[u64], hit: &[bool]) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    for (&id, &h) in ids.iter().zip(hit) {
        if !h && !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

/// A simulated cache of `u64` keys.
pub trait Policy {
    /// A lookup: true on a hit.
    fn get(&mut self, key: u64) -> bool;
    /// Inserts a key that missed, evicting as the policy says when full.
    fn insert(&mut self, key: u64);
    /// Items evicted so far.
    fn evictions(&self) -> u64;
}

/// Exact LRU over `u64` keys: a hash map into a slab of doubly linked nodes.
pub struct Lru {
    cap: usize,
    map: HashMap<u64, u32>,
    nodes: Vec<LruNode>,
    head: u32,
    tail: u32,
    pub evictions: u64,
}

const NIL: u32 = u32::MAX;

struct LruNode {
    key: u64,
    prev: u32,
    next: u32,
}

impl Lru {
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            map: HashMap::with_capacity(cap.max(1)),
            nodes: Vec::with_capacity(cap.max(1)),
            head: NIL,
            tail: NIL,
            evictions: 0,
        }
    }

    fn unlink(&mut self, i: u32) {
        let (p, n) = (self.nodes[i as usize].prev, self.nodes[i as usize].next);
        match p {
            NIL => self.head = n,
            p => self.nodes[p as usize].next = n,
        }
        match n {
            NIL => self.tail = p,
            n => self.nodes[n as usize].prev = p,
        }
    }

    fn push_front(&mut self, i: u32) {
        self.nodes[i as usize].prev = NIL;
        self.nodes[i as usize].next = self.head;
        if self.head != NIL {
            self.nodes[self.head as usize].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl Policy for Lru {
    /// The key becomes the most recent.
    fn get(&mut self, key: u64) -> bool {
        match self.map.get(&key).copied() {
            Some(i) => {
                self.unlink(i);
                self.push_front(i);
                true
            }
            None => false,
        }
    }

    /// The key goes in as the most recent; the least recent goes out when full.
    fn insert(&mut self, key: u64) {
        if self.get(key) {
            return;
        }
        let i = if self.nodes.len() < self.cap {
            self.nodes.push(LruNode {
                key,
                prev: NIL,
                next: NIL,
            });
            (self.nodes.len() - 1) as u32
        } else {
            let t = self.tail;
            self.unlink(t);
            self.map.remove(&self.nodes[t as usize].key);
            self.nodes[t as usize].key = key;
            self.evictions += 1;
            t
        };
        self.map.insert(key, i);
        self.push_front(i);
    }

    fn evictions(&self) -> u64 {
        self.evictions
    }
}

/// Textbook CLOCK (one hand, one reference bit, set by hits and clear on insert, as
/// the store's GET hits set its reference bytes).
pub struct Clock {
    cap: usize,
    map: HashMap<u64, usize>,
    keys: Vec<u64>,
    referenced: Vec<bool>,
    hand: usize,
    pub evictions: u64,
}

impl Clock {
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            map: HashMap::with_capacity(cap.max(1)),
            keys: Vec::with_capacity(cap.max(1)),
            referenced: Vec::with_capacity(cap.max(1)),
            hand: 0,
            evictions: 0,
        }
    }
}

impl Policy for Clock {
    fn get(&mut self, key: u64) -> bool {
        match self.map.get(&key) {
            Some(&i) => {
                self.referenced[i] = true;
                true
            }
            None => false,
        }
    }

    fn evictions(&self) -> u64 {
        self.evictions
    }

    fn insert(&mut self, key: u64) {
        if self.map.contains_key(&key) {
            return;
        }
        if self.keys.len() < self.cap {
            self.map.insert(key, self.keys.len());
            self.keys.push(key);
            self.referenced.push(false);
            return;
        }
        while self.referenced[self.hand] {
            self.referenced[self.hand] = false;
            self.hand = (self.hand + 1) % self.cap;
        }
        let i = self.hand;
        self.map.remove(&self.keys[i]);
        self.keys[i] = key;
        self.map.insert(key, i);
        self.evictions += 1;
        self.hand = (self.hand + 1) % self.cap;
    }
}

/// Slots per bucket of the store's index.
const SLOTS: usize = 7;
const NO_KEY: u64 = u64::MAX;

/// A model of one shard of the store as it is laid out: every key has a fixed bucket
/// of [`SLOTS`] slots, at most `cap` items fit the heap, and memory comes from the
/// store's sweep (the hand claims the next [`STORE_WINDOW`] buckets, up to the end of
/// the index, clears the reference bit of every referenced item in them and evicts
/// the first [`STORE_TAKE`] unreferenced ones; the extras' memory serves the next
/// puts). A put into a bucket with no free slot evicts the bucket's least referenced
/// item instead (the first with its bit clear, else the first), as the store does.
/// With `stop_at_victim` (not what the store does) the hand stops after the bucket of
/// its last victim instead of skipping the rest of the window.
pub struct BucketClock {
    cap: usize,
    buckets: u64,
    /// `keys[b * SLOTS + s]`, [`NO_KEY`] when free.
    keys: Vec<u64>,
    referenced: Vec<bool>,
    map: HashMap<u64, usize>,
    bucket_of: std::sync::Arc<Vec<u32>>,
    hand: u64,
    stop_at_victim: bool,
    pub evictions: u64,
    /// Of those, evictions from full buckets (not by the hand).
    pub bucket_evictions: u64,
    pub steps: u64,
}

impl BucketClock {
    /// `bucket_of[key]` is each key's bucket (below `buckets`).
    pub fn new(
        cap: usize,
        buckets: u32,
        bucket_of: std::sync::Arc<Vec<u32>>,
        stop_at_victim: bool,
    ) -> Self {
        let n = buckets.max(1) as usize * SLOTS;
        Self {
            cap: cap.max(1),
            buckets: u64::from(buckets.max(1)),
            keys: vec![NO_KEY; n],
            referenced: vec![false; n],
            map: HashMap::with_capacity(cap.max(1)),
            bucket_of,
            hand: 0,
            stop_at_victim,
            evictions: 0,
            bucket_evictions: 0,
            steps: 0,
        }
    }

    fn evict_at(&mut self, i: usize) {
        let k = std::mem::replace(&mut self.keys[i], NO_KEY);
        self.map.remove(&k);
        self.evictions += 1;
    }

    /// Sweep steps until one evicts (within two turns of the hand: the first clears
    /// every bit).
    fn sweep(&mut self) {
        for _ in 0..2 * self.buckets.div_ceil(STORE_WINDOW) + 1 {
            let start = self.hand % self.buckets;
            let n = STORE_WINDOW.min(self.buckets - start);
            self.hand += STORE_WINDOW;
            self.steps += 1;
            let mut won = 0;
            for i in start as usize * SLOTS..(start + n) as usize * SLOTS {
                if self.keys[i] == NO_KEY {
                    continue;
                }
                if self.referenced[i] {
                    self.referenced[i] = false;
                } else if won < STORE_TAKE {
                    self.evict_at(i);
                    won += 1;
                    if won == STORE_TAKE && self.stop_at_victim {
                        // The next step starts at the bucket after this one.
                        let bucket = (i / SLOTS) as u64;
                        self.hand = self.hand - STORE_WINDOW + (bucket + 1 - start);
                        break;
                    }
                }
            }
            if won > 0 {
                return;
            }
        }
    }
}

impl Policy for BucketClock {
    fn get(&mut self, key: u64) -> bool {
        match self.map.get(&key) {
            Some(&i) => {
                self.referenced[i] = true;
                true
            }
            None => false,
        }
    }

    fn insert(&mut self, key: u64) {
        if self.map.contains_key(&key) {
            return;
        }
        let Some(&b) = self.bucket_of.get(key as usize) else {
            return;
        };
        let slots = b as usize * SLOTS..(b as usize + 1) * SLOTS;
        if slots.end > self.keys.len() {
            return;
        }
        let at = match slots.clone().find(|&i| self.keys[i] == NO_KEY) {
            Some(i) => {
                if self.map.len() >= self.cap {
                    self.sweep();
                }
                i
            }
            None => {
                // The bucket's least referenced item makes room (its memory too).
                let i = slots
                    .clone()
                    .find(|&i| !self.referenced[i])
                    .unwrap_or(slots.start);
                self.evict_at(i);
                self.bucket_evictions += 1;
                i
            }
        };
        if self.keys[at] != NO_KEY || self.map.len() >= self.cap {
            // Nothing was freed: the put fails, as the store's would.
            return;
        }
        self.keys[at] = key;
        self.referenced[at] = false;
        self.map.insert(key, at);
    }

    fn evictions(&self) -> u64 {
        self.evictions
    }
}

/// FIFO: CLOCK whose hits set no reference bit (what the store's CLOCK would be if
/// its reference bytes were never set).
pub struct Fifo(Clock);

impl Fifo {
    pub fn new(cap: usize) -> Self {
        Self(Clock::new(cap))
    }
}

impl Policy for Fifo {
    fn get(&mut self, key: u64) -> bool {
        self.0.map.contains_key(&key)
    }

    fn insert(&mut self, key: u64) {
        self.0.insert(key);
    }

    fn evictions(&self) -> u64 {
        self.0.evictions
    }
}

/// One policy per shard, keys going to their shard in the store (as the store's
/// CLOCK runs per shard, over the items of its own heap).
pub struct Sharded<P> {
    shard_of: Vec<u32>,
    parts: Vec<P>,
}

impl<P: Policy> Sharded<P> {
    /// `shard_of[key]` names each key's part.
    pub fn new(shard_of: Vec<u32>, parts: Vec<P>) -> Self {
        Self { shard_of, parts }
    }

    fn part(&mut self, key: u64) -> Option<&mut P> {
        let s = *self.shard_of.get(key as usize)? as usize;
        self.parts.get_mut(s)
    }
}

impl<P: Policy> Policy for Sharded<P> {
    fn get(&mut self, key: u64) -> bool {
        self.part(key).is_some_and(|p| p.get(key))
    }

    fn insert(&mut self, key: u64) {
        if let Some(p) = self.part(key) {
            p.insert(key);
        }
    }

    fn evictions(&self) -> u64 {
        self.parts.iter().map(Policy::evictions).sum()
    }
}

/// The trace through `p`: hits of the counted part, and evictions in it.
fn simulate(o: &StoreEvictOptions, p: &mut impl Policy) -> Result<(HitCount, u64)> {
    let mut count = HitCount::default();
    let mut hit = vec![false; o.batch];
    let mut evicted_before = 0;
    replay(o, |at, ids| {
        if at < o.warmup && at + ids.len() as u64 >= o.warmup {
            evicted_before = p.evictions();
        }
        for (j, &id) in ids.iter().enumerate() {
            hit[j] = p.get(id);
            if at + j as u64 >= o.warmup {
                count.count(hit[j]);
            }
        }
        for id in distinct_misses(ids, &hit[..ids.len()]) {
            p.insert(id);
        }
        Ok(())
    })?;
    Ok((count, p.evictions() - evicted_before))
}

/// `cap` items cut into `parts` nearly equal capacities.
fn split(cap: u64, parts: u64) -> impl Iterator<Item = usize> {
    let parts = parts.max(1);
    (0..parts).map(move |i| (cap / parts + u64::from(i < cap % parts)) as usize)
}

/// The largest power of two between [`MIN_SHARD`] and [`MAX_SHARD`] that cuts
/// `bytes` into at least [`SHARDS`] shards.
fn shard_size(bytes: u64) -> u64 {
    let mut s = MAX_SHARD;
    while s > MIN_SHARD && bytes / s < SHARDS {
        s /= 2;
    }
    s
}

/// What the store did with the trace.
struct StoreRun {
    count: HitCount,
    secs: f64,
    errors: u64,
    first_error: Option<String>,
    after_warmup: StoreStats,
    end: StoreStats,
    /// Steps of the shards' CLOCK hands while counting.
    steps_counted: u64,
}

/// Steps every shard's CLOCK hand has taken (each claims [`STORE_WINDOW`] buckets).
fn hand_steps(store: &Store) -> Result<u64> {
    let d = store.descriptor();
    let mut b = store.cache().batch();
    for s in 0..d.shards {
        b.read(u64::from(s) * d.shard_size + HAND, 8);
    }
    let r = b.run();
    let mut steps = 0;
    for s in 0..d.shards as usize {
        let raw = r.data(s).map_err(cluster_err)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(
            raw.get(..8)
                .ok_or_else(|| cluster_err("short read of a hand"))?,
        );
        steps += u64::from_le_bytes(w) / STORE_WINDOW;
    }
    Ok(steps)
}

fn run_store(store: &Store, o: &StoreEvictOptions) -> Result<StoreRun> {
    let value = value_bytes(o.value_size);
    let pb = progress(o.requests);
    pb.set_prefix("evict");
    pb.set_message(format!("store: {} requests", o.requests));
    let mut count = HitCount::default();
    let (mut errors, mut first_error) = (0u64, None::<String>);
    let mut fail = |e: String| {
        errors += 1;
        if first_error.is_none() {
            first_error = Some(e);
        }
    };
    let mut after_warmup = None;
    let mut hand_at_warmup = 0;
    let mut started = None;
    let mut hit = vec![false; o.batch];
    let stats = |s: &Store| s.stats().map_err(cluster_err);
    replay(o, |at, ids| {
        if at < o.warmup && at + ids.len() as u64 >= o.warmup {
            after_warmup = Some(stats(store)?);
            hand_at_warmup = hand_steps(store)?;
            started = Some(Instant::now());
        }
        let keys: Vec<Key> = ids.iter().map(|&i| key(i)).collect();
        match store.mget(&keys) {
            Ok(rs) => {
                for (j, r) in rs.into_iter().enumerate() {
                    hit[j] = match r {
                        Ok(Some(v)) if v[..] == value[..] => true,
                        Ok(Some(v)) => {
                            fail(format!("wrong value ({} bytes) returned", v.len()));
                            false
                        }
                        Ok(None) => false,
                        Err(e) => {
                            fail(e.to_string());
                            false
                        }
                    };
                }
            }
            Err(e) => {
                fail(e.to_string());
                hit[..ids.len()].fill(false);
            }
        }
        for (j, &h) in hit[..ids.len()].iter().enumerate() {
            if at + j as u64 >= o.warmup {
                count.count(h);
            }
        }
        let missed: Vec<Key> = distinct_misses(ids, &hit[..ids.len()])
            .into_iter()
            .map(key)
            .collect();
        let pairs: Vec<(&Key, &[u8])> = missed.iter().map(|k| (k, &value[..])).collect();
        for r in store.mput(&pairs) {
            if let Err(e) = r {
                fail(e.to_string());
            }
        }
        pb.inc(ids.len() as u64);
        Ok(())
    })?;
    let secs = started.map_or(0.0, |s| s.elapsed().as_secs_f64());
    pb.finish_and_clear();
    let end = stats(store)?;
    let steps_counted = hand_steps(store)?.saturating_sub(hand_at_warmup);
    Ok(StoreRun {
        steps_counted,
        count,
        secs,
        errors,
        first_error,
        after_warmup: after_warmup.unwrap_or_default(),
        end,
    })
}

/// Runs the whole benchmark and returns the report (not yet printed or saved).
pub fn run_store_evict_bench(o: &StoreEvictOptions) -> Result<StoreEvictReport> {
    o.validate()?;
    let item_bytes = item::len(KEY_LEN, o.value_size);
    let item_bytes = class::for_len(item_bytes)
        .and_then(class::size)
        .map(u64::from)
        .ok_or_else(|| BenchError::InvalidArgument("no size class holds the item".into()))?;
    let want_items = (o.keys as f64 * o.cache_fraction).ceil() as u64;
    let shard = shard_size(want_items * item_bytes);
    // Generous: the server holds the store, and the probe store before it.
    let memory = (want_items * item_bytes * 3).div_ceil(shard) * shard + (64 << 20);
    let cluster = ProcessCluster::start(
        &o.bin,
        &ClusterOptions::default()
            .servers(1)
            .server_threads(1)
            .server_memory(memory)
            .region_size(shard),
    )
    .map_err(cluster_err)?;
    let client = cluster
        .client_with(ClientConfig::new("").connections(1))
        .map_err(cluster_err)?;
    let sopts = StoreOptions {
        avg_value_size: o.value_size as u64,
        shard_size: Some(shard),
        region_size: Some(shard),
        ..StoreOptions::default()
    };
    // A one-shard store tells how many items a shard's heap holds (the rest of the
    // shard is its index and reference bytes).
    let heap_per_shard = {
        let probe = client
            .create_store("bench-evict-probe", shard, &sopts)
            .map_err(cluster_err)?;
        let heap = probe.stats().map_err(cluster_err)?.heap;
        drop(probe);
        client.delete("bench-evict-probe").map_err(cluster_err)?;
        heap
    };
    let items_per_shard = (heap_per_shard / item_bytes).max(1);
    let shards = want_items.div_ceil(items_per_shard).max(1);
    let name = "bench-store-evict";
    let store = client
        .create_store(name, shards * shard, &sopts)
        .map_err(cluster_err)?;
    let heap_bytes = store.stats().map_err(cluster_err)?.heap;
    let d = store.descriptor();
    // Each key's shard and bucket, for the simulators laid out as the store is.
    let (shard_of, bucket_of): (Vec<u32>, Vec<u32>) = (0..o.keys)
        .map(|i| {
            let h = locate(&key(i), d.shards, d.buckets);
            (h.shard, h.bucket)
        })
        .unzip();
    let bucket_of = std::sync::Arc::new(bucket_of);
    let run = run_store(&store, o)?;
    drop(store);
    client.delete(name).map_err(cluster_err)?;
    drop(cluster);

    let cap = run.end.live;
    let n = u64::from(d.shards);
    let model = |stop: bool| {
        Sharded::new(
            shard_of.clone(),
            split(cap, n)
                .map(|c| BucketClock::new(c, d.buckets, bucket_of.clone(), stop))
                .collect(),
        )
    };
    let sims: Vec<(String, Result<(HitCount, u64)>)> = vec![
        ("exact LRU".into(), simulate(o, &mut Lru::new(cap as usize))),
        (
            format!("exact LRU per shard ({n})"),
            simulate(
                o,
                &mut Sharded::new(shard_of.clone(), split(cap, n).map(Lru::new).collect()),
            ),
        ),
        (
            "textbook CLOCK".into(),
            simulate(o, &mut Clock::new(cap as usize)),
        ),
        (
            "FIFO (no reference bits)".into(),
            simulate(o, &mut Fifo::new(cap as usize)),
        ),
        (
            format!("store model, old sweep clearing its whole window ({n} hands)"),
            simulate(o, &mut model(false)),
        ),
        (
            "store model, the hand stopping at its 4th victim".into(),
            simulate(o, &mut model(true)),
        ),
    ];
    let mut simulations = Vec::new();
    for (policy, r) in sims {
        let (count, evictions_counted) = r?;
        simulations.push(SimResult {
            policy,
            capacity: cap,
            hit_ratio: count.ratio(),
            points_vs_lru: 0.0,
            count,
            evictions_counted,
        });
    }
    let lru_ratio = simulations.first().map_or(f64::NAN, |x| x.hit_ratio);
    for x in &mut simulations {
        x.points_vs_lru = (x.hit_ratio - lru_ratio) * 100.0;
    }
    let clock_ratio = simulations.get(2).map_or(f64::NAN, |x| x.hit_ratio);
    let store_ratio = run.count.ratio();
    let evictions_counted = run.end.evictions - run.after_warmup.evictions.min(run.end.evictions);
    let points = (lru_ratio - store_ratio) * 100.0;
    let counted = o.requests - o.warmup;
    let mut row = BenchRow {
        name: format!("store GET, PUT on miss, zipf{} {}B", o.theta, o.value_size),
        system: "farcache".into(),
        op: "GET+PUT".into(),
        record_size: o.value_size,
        distribution: format!("zipf{}", o.theta),
        c: Some(1),
        s: Some(1),
        b: Some(o.batch),
        q: Some(1),
        mops: counted as f64 / run.secs.max(1e-9) / 1e6,
        ..BenchRow::default()
    };
    row = row.with_target(
        format!("hit ratio within {TARGET_POINTS} points of LRU"),
        run.errors == 0 && points <= TARGET_POINTS,
    );
    let mut r = StoreEvictReport {
        bench: "store-evict".into(),
        timestamp_unix: unix_now(),
        machine: MachineInfo::detect(),
        build: build_kind(),
        keys: o.keys,
        value_size: o.value_size,
        zipf_theta: o.theta,
        requests: o.requests,
        warmup: o.warmup,
        batch: o.batch,
        cache_fraction: o.cache_fraction,
        item_bytes,
        store_bytes: shards * shard,
        shard_bytes: shard,
        heap_bytes,
        heap_items: heap_bytes / item_bytes,
        live_after_warmup: run.after_warmup.live,
        live_at_end: run.end.live,
        sim_capacity: cap,
        store_hit_ratio: store_ratio,
        lru_hit_ratio: lru_ratio,
        clock_sim_hit_ratio: clock_ratio,
        points_below_lru: points,
        store: run.count,
        simulations,
        evictions: run.end.evictions,
        evictions_counted,
        sweep_steps_counted: run.steps_counted,
        evictions_outside_sweep_min: evictions_counted
            .saturating_sub(STORE_TAKE as u64 * run.steps_counted),
        errors: run.errors,
        first_error: run.first_error,
        stats_at_end: run.end,
        rows: vec![row],
        notes: Vec::new(),
    };
    r.notes = notes(&r, shards);
    Ok(r)
}

fn notes(r: &StoreEvictReport, shards: u64) -> Vec<String> {
    let mut n = vec![
        format!(
            "trace: {} requests (the first {} warm up) of {} keys drawn Zipf({}), {} a batch: \
             an mget, then one mput of the keys it missed; values of {} B ({} B items)",
            r.requests, r.warmup, r.keys, r.zipf_theta, r.batch, r.value_size, r.item_bytes
        ),
        format!(
            "store: {} shards of {} KiB on one server, heap {} KiB = {} items ({:.1} % of the \
             keys); it held {} items after the warm-up and {} at the end",
            shards,
            r.shard_bytes >> 10,
            r.heap_bytes >> 10,
            r.heap_items,
            r.heap_items as f64 * 100.0 / r.keys as f64,
            r.live_after_warmup,
            r.live_at_end
        ),
        format!(
            "hit ratio: store (CLOCK) {:.4}, exact LRU {:.4} ({} items); store {:+.2} points \
             vs LRU; the store evicted {} items in all, {} while counting",
            r.store_hit_ratio,
            r.lru_hit_ratio,
            r.sim_capacity,
            -r.points_below_lru,
            r.evictions,
            r.evictions_counted
        ),
        format!(
            "the shards' CLOCK hands took {} steps while counting (at most {} evictions); at \
             least {} of the {} evictions came from puts into full buckets instead",
            r.sweep_steps_counted,
            STORE_TAKE as u64 * r.sweep_steps_counted,
            r.evictions_outside_sweep_min,
            r.evictions_counted
        ),
        format!(
            "simulators hold the store's final item count; per shard = that capacity split \
             over the store's shards, each key in its own; store model = each key in its \
             bucket of {SLOTS} slots, a hand per shard claiming {STORE_WINDOW} buckets a \
             step and evicting up to {STORE_TAKE} unreferenced items, either clearing the \
             reference bits of the whole window (the store's sweep before it learnt to stop) \
             or with the hand stopping at its last victim; the store now stops clearing at \
             its last victim but still claims whole windows (crates/store/src/evict.rs); \
             puts into full buckets evict the bucket's least referenced item (put.rs)"
        ),
    ];
    if let Some(e) = &r.first_error {
        n.push(format!("{} errors, first: {e}", r.errors));
    }
    n
}

/// The result as an aligned table, the notes under it.
pub fn format_store_evict_table(r: &StoreEvictReport) -> String {
    let mut cells = vec![
        [
            "policy",
            "capacity (items)",
            "hit ratio",
            "vs LRU (points)",
            "evictions (counted part)",
            "Mreq/s",
        ]
        .map(String::from)
        .to_vec(),
        vec![
            "store CLOCK (real)".into(),
            r.live_at_end.to_string(),
            format!("{:.4}", r.store_hit_ratio),
            format!("{:+.2}", -r.points_below_lru),
            r.evictions_counted.to_string(),
            r.rows
                .first()
                .map_or("-".into(), |x| format!("{:.3}", x.mops)),
        ],
    ];
    for x in &r.simulations {
        cells.push(vec![
            format!("{} (simulated)", x.policy),
            x.capacity.to_string(),
            format!("{:.4}", x.hit_ratio),
            format!("{:+.2}", x.points_vs_lru),
            x.evictions_counted.to_string(),
            "-".into(),
        ]);
    }
    let mut out = format!(
        "== {} @ {} ({} cores, {}, kernel {}) ==\n",
        r.bench, r.timestamp_unix, r.machine.cores, r.machine.hostname, r.machine.kernel
    );
    out.push_str(&align_cells(&cells, &[false, true, true, true, true, true]));
    let target = r.rows.first().and_then(|x| x.meets_target);
    out.push_str(&format!(
        "target: hit ratio within {TARGET_POINTS} points of LRU: {}\n",
        match target {
            Some(true) => "met",
            _ => "NOT met",
        }
    ));
    for n in &r.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

/// Writes `<dir>/store-evict-<timestamp>.json` and `<dir>/store-evict-latest.json`.
pub fn write_store_evict_json(report: &StoreEvictReport, dir: &Path) -> Result<PathBuf> {
    write_json_as(report, &report.bench, report.timestamp_unix, dir)
}

/// Writes the report to `path` exactly (creating its directory).
pub fn write_store_evict_json_to(report: &StoreEvictReport, path: &Path) -> Result<()> {
    super::hot::write_json_to(report, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_the_least_recent() {
        let mut l = Lru::new(3);
        for k in [1, 2, 3] {
            l.insert(k);
        }
        assert!(l.get(1));
        l.insert(4); // evicts 2
        assert!(!l.get(2));
        assert!(l.get(3) && l.get(1) && l.get(4));
        l.insert(5); // evicts 3 (order now 5 4 1 3 → 3 least recent)
        assert!(!l.get(3));
        assert_eq!((l.len(), l.evictions), (3, 2));
    }

    #[test]
    fn clock_gives_referenced_keys_a_second_chance() {
        let mut c = Clock::new(3);
        for k in [1, 2, 3] {
            c.insert(k);
        }
        assert!(c.get(1));
        c.insert(4); // 1 is referenced: 2 goes
        assert!(c.get(1) && !c.get(2) && c.get(3) && c.get(4));
        assert_eq!(c.evictions, 1);
    }

    #[test]
    fn one_shard_is_the_whole_cache() {
        let o = StoreEvictOptions {
            keys: 5000,
            requests: 50_000,
            warmup: 10_000,
            ..StoreEvictOptions::new("farcache", true)
        };
        let clock = simulate(&o, &mut Clock::new(300)).expect("trace");
        let one = Sharded::new(vec![0; 5000], vec![Clock::new(300)]);
        assert_eq!(simulate(&o, &mut { one }).expect("trace"), clock);
        // FIFO never does better than CLOCK on a skewed trace.
        let fifo = simulate(&o, &mut Fifo::new(300)).expect("trace");
        assert!(fifo.0.ratio() < clock.0.ratio(), "{fifo:?} {clock:?}");
    }

    #[test]
    fn lru_beats_nothing_on_a_skewed_trace() {
        let o = StoreEvictOptions {
            keys: 10_000,
            requests: 200_000,
            warmup: 50_000,
            ..StoreEvictOptions::new("farcache", true)
        };
        let mut lru = Lru::new(1000);
        let (n, evicted) = simulate(&o, &mut lru).expect("trace");
        assert_eq!(n.hits + n.misses, 150_000);
        assert!(evicted > 0 && evicted <= lru.evictions);
        // 10 % of the keys catch most of a Zipf(0.99) trace.
        assert!(n.ratio() > 0.5 && n.ratio() < 0.95, "{n:?}");
    }

    #[test]
    fn the_store_model_keeps_its_books() {
        let o = StoreEvictOptions {
            keys: 5000,
            requests: 50_000,
            warmup: 10_000,
            ..StoreEvictOptions::new("farcache", true)
        };
        let buckets = 60u32;
        let bucket_of = std::sync::Arc::new((0..5000u32).map(|k| k * 7919 % buckets).collect());
        for stop in [false, true] {
            let mut m = BucketClock::new(150, buckets, std::sync::Arc::clone(&bucket_of), stop);
            let (n, evicted) = simulate(&o, &mut m).expect("trace");
            assert!(n.ratio() > 0.2 && n.ratio() < 0.95, "{n:?}");
            assert!(evicted > 0 && m.steps > 0);
            assert!(m.map.len() <= 150 && m.bucket_evictions <= m.evictions);
            for (&k, &i) in &m.map {
                assert_eq!(m.keys[i], k);
                assert_eq!(i / SLOTS, bucket_of[k as usize] as usize);
            }
        }
    }

    #[test]
    fn capacity_splits_evenly() {
        assert_eq!(split(10, 3).collect::<Vec<_>>(), vec![4, 3, 3]);
        assert_eq!(split(10, 3).sum::<usize>(), 10);
    }

    #[test]
    fn shards_follow_the_store_size() {
        assert_eq!(shard_size(1 << 30), MAX_SHARD);
        assert_eq!(shard_size(12_800_000), MAX_SHARD);
        assert_eq!(shard_size(1_280_000), 64 << 10);
        assert_eq!(shard_size(2_000_000), 128 << 10);
        assert_eq!(shard_size(1000), MIN_SHARD);
    }

    #[test]
    fn options_are_checked() {
        let ok = StoreEvictOptions::new("farcache", true);
        assert!(ok.validate().is_ok());
        for bad in [
            StoreEvictOptions {
                keys: 0,
                ..ok.clone()
            },
            StoreEvictOptions {
                cache_fraction: 1.0,
                ..ok.clone()
            },
            StoreEvictOptions {
                warmup: ok.requests,
                ..ok.clone()
            },
            StoreEvictOptions {
                value_size: 0,
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
