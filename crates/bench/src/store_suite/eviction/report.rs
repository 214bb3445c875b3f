//! What `bench store-evict` reports: the report and one row per simulator, the notes,
//! the table and the JSON file.

use std::path::{Path, PathBuf};

use farcache_store::StoreStats;
use serde::Serialize;

use super::store_model::SLOTS;
use super::trace::HitCount;
use super::{STORE_TAKE, STORE_WINDOW, TARGET_POINTS};
use crate::error::Result;
use crate::report::Align::{L, R};
use crate::report::{BenchRow, ReportHead, Table, push_notes, write_json_to};

/// A whole `bench store-evict` run.
#[derive(Debug, Clone, Serialize)]
pub struct StoreEvictReport {
    #[serde(flatten)]
    pub head: ReportHead,
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

pub(super) fn notes(r: &StoreEvictReport, shards: u64) -> Vec<String> {
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
             bucket of {SLOTS} slots or, once that has no never-used slot, its pair's, a hand per shard claiming {STORE_WINDOW} buckets a \
             step and evicting up to {STORE_TAKE} unreferenced items, either clearing the \
             reference bits of the whole window (the store's sweep before it learnt to stop) \
             or with the hand stopping at its last victim; the store now stops clearing at \
             its last victim but still claims whole windows (crates/store/src/evict.rs); \
             puts finding both buckets full reuse a freed slot or evict the pair's least \
             referenced item (crates/store/src/put/locked.rs)"
        ),
    ];
    if let Some(e) = &r.first_error {
        n.push(format!("{} errors, first: {e}", r.errors));
    }
    n
}

/// The result as an aligned table, the notes under it.
pub fn format_store_evict_table(r: &StoreEvictReport) -> String {
    let mut t = Table::new(&[
        ("policy", L),
        ("capacity (items)", R),
        ("hit ratio", R),
        ("vs LRU (points)", R),
        ("evictions (counted part)", R),
        ("Mreq/s", R),
    ]);
    t.row(vec![
        "store CLOCK (real)".into(),
        r.live_at_end.to_string(),
        format!("{:.4}", r.store_hit_ratio),
        format!("{:+.2}", -r.points_below_lru),
        r.evictions_counted.to_string(),
        r.rows
            .first()
            .map_or("-".into(), |x| format!("{:.3}", x.mops)),
    ]);
    for x in &r.simulations {
        t.row(vec![
            format!("{} (simulated)", x.policy),
            x.capacity.to_string(),
            format!("{:.4}", x.hit_ratio),
            format!("{:+.2}", x.points_vs_lru),
            x.evictions_counted.to_string(),
            "-".into(),
        ]);
    }
    let kernel = format!("kernel {}", r.head.machine.kernel);
    let mut out = r.head.heading(&kernel);
    out.push_str(&t.render());
    let target = r.rows.first().and_then(|x| x.meets_target);
    out.push_str(&format!(
        "target: hit ratio within {TARGET_POINTS} points of LRU: {}\n",
        match target {
            Some(true) => "met",
            _ => "NOT met",
        }
    ));
    push_notes(&mut out, &r.notes);
    out
}

/// Writes `<dir>/store-evict-<timestamp>.json` and `<dir>/store-evict-latest.json`.
pub fn write_store_evict_json(report: &StoreEvictReport, dir: &Path) -> Result<PathBuf> {
    report.head.write_json(report, dir)
}

/// Writes the report to `path` exactly (creating its directory).
pub fn write_store_evict_json_to(report: &StoreEvictReport, path: &Path) -> Result<()> {
    write_json_to(report, path)
}
