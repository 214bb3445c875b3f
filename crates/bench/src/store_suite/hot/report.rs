//! What `bench store-hot` reports: a row per run (the load balance beside
//! `BenchRow`'s fields), the notes, the table and the JSON file.

use std::path::{Path, PathBuf};

use farcache_store::Store;
use serde::Serialize;

use super::placement::{Probe, copies_on_home_server};
use super::reads::Window;
use super::top_keys::{TopKey, top_keys};
use super::{PLAIN_WARMUP, StoreHotOptions, TARGET_MAX_MEAN};
use crate::baseline::driver::KEY_RING_MAX;
use crate::error::Result;
use crate::report::Align::{L, R};
use crate::report::{
    BenchRow, ReportHead, Table, all_met, num, push_notes, verdict, write_json_to,
};

/// A whole `bench store-hot` run.
#[derive(Debug, Clone, Serialize)]
pub struct StoreHotReport {
    #[serde(flatten)]
    pub head: ReportHead,
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

pub(super) fn row(
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
    pub(super) fn finish_notes(&mut self, o: &StoreHotOptions) {
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
        all_met(self.rows.iter().map(|r| &r.row))
    }
}

/// The runs as an aligned table (per-server loads in thousands of lookups), the notes
/// under it.
pub fn format_store_hot_table(r: &StoreHotReport) -> String {
    let mut t = Table::new(&[
        ("servers", R),
        ("hot-key layer", L),
        ("Mkeys/s", R),
        ("p50 µs", R),
        ("p99 µs", R),
        ("max/mean load", R),
        ("copy reads", R),
        ("hot keys", R),
        ("per-server lookups (k)", L),
        ("target", L),
        ("ok?", L),
    ]);
    for x in &r.rows {
        let loads: Vec<String> = x
            .server_names
            .iter()
            .zip(&x.server_loads)
            .map(|(n, l)| format!("{n}:{}", l / 1000))
            .collect();
        t.row(vec![
            x.servers.to_string(),
            if x.hot_key_layer { "on" } else { "off" }.into(),
            num(x.row.mops, 3),
            num(x.row.p50_us, 1),
            num(x.row.p99_us, 1),
            num(x.max_mean_load, 3),
            format!("{:.1} %", x.copy_read_share * 100.0),
            x.hot_keys.to_string(),
            loads.join(" "),
            x.row.target.clone().unwrap_or_else(|| "-".into()),
            verdict(x.row.meets_target),
        ]);
    }
    let kernel = format!("kernel {}", r.head.machine.kernel);
    let mut out = r.head.heading(&kernel);
    out.push_str(&t.render());
    push_notes(&mut out, &r.notes);
    out
}

/// Writes `<dir>/store-hot-<timestamp>.json` and `<dir>/store-hot-latest.json`.
pub fn write_store_hot_json(report: &StoreHotReport, dir: &Path) -> Result<PathBuf> {
    report.head.write_json(report, dir)
}

/// Writes the report to `path` exactly (creating its directory).
pub fn write_store_hot_json_to(report: &StoreHotReport, path: &Path) -> Result<()> {
    write_json_to(report, path)
}
