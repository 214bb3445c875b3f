//! `farcache bench store-large`: erasure-coded large values (crates/store/src/large.rs)
//! next to Redis holding the same objects, and InfiniCache's tail-latency experiment:
//! GETs with one server stopped (SIGSTOP), decoding from the first `d` chunks that
//! arrive vs waiting for all `d + p`.
//!
//! Per object size, back to back: Redis (SET every object, then GETs); then the store
//! on six server processes: `put_large` of every object (RS(4+2), one chunk per
//! server), GETs first-d and waiting for all chunks, then one server holding a data
//! chunk (not the key's home) is stopped and both GETs run again on the objects it
//! affects. Every value read is compared with what was put, outside the timed call.
//!
//! `measure` holds the farcache loops, `redis` the baseline, `sample` the objects and
//! timed calls both use, `output` rows and files, `chart` the PNG.

mod chart;
mod measure;
mod output;
mod redis;
mod sample;

use std::path::PathBuf;
use std::time::Duration;

use farcache_client::ClientConfig;
use farcache_testkit::{ClusterOptions, ProcessCluster};

use crate::error::{BenchError, Result};
use crate::io_suite::progress;
use crate::tools::{Tool, ensure_tools};

pub use chart::write_store_large_chart;
pub use output::{
    LargeRow, MemoryRow, StoppedInfo, StoreLargeReport, format_store_large_table,
    write_store_large_json, write_store_large_json_to,
};
pub use sample::Call;
pub(crate) use sample::{Objects, Run, Sampler, timed_gets};

/// Server processes: RS(4+2) puts each of an object's six chunks on its own server.
pub const SERVERS: usize = 6;
/// Data and parity chunks (the store's defaults).
pub const EC_DATA: u8 = 4;
pub const EC_PARITY: u8 = 2;
/// Region size; the store cuts it into 16 MiB shards (docs/store.md).
pub const REGION: u64 = 64 << 20;
/// Smallest object: the store's large-value threshold (1 MiB itself is stored whole
/// by `put`; this bench calls `put_large`, so every size is coded).
pub const MIN_SIZE: u64 = 1 << 20;
/// Largest object (the store's and Redis's limit).
pub const MAX_SIZE: u64 = farcache_store::large::MAX_VALUE;
pub const MAX_OBJECTS: u64 = 100_000;
/// Most bytes of objects per size: the store takes about 1.8× that (parity, size
/// classes) and Redis 1×, all on this machine.
pub const MAX_RAW_BYTES: u64 = 8 << 30;
/// Largest piece of a chunk (crates/store/src/large.rs).
const MAX_PIECE: u64 = 512 << 10;

/// What `bench store-large` runs.
#[derive(Debug, Clone)]
pub struct StoreLargeOptions {
    /// The `farcache` binary that runs the manager and servers.
    pub bin: PathBuf,
    /// Object sizes in bytes.
    pub sizes: Vec<u64>,
    /// Objects per size (put once each, on both systems).
    pub objects: u64,
    /// Length of every GET run (at least `min_gets` calls are made).
    pub duration: Duration,
    pub min_gets: u64,
    /// Op timeout of the client reading while a server is stopped: how long a read
    /// waiting for all chunks waits for the stopped server's chunk.
    pub op_timeout: Duration,
    /// Ops per request frame (`b`) and frames in flight per connection (`q`) of every
    /// store client; default the client's own (64 and 4).
    pub client_batch: usize,
    pub client_depth: usize,
    /// Measure Redis in the same run.
    pub baselines: bool,
    pub quick: bool,
}

impl StoreLargeOptions {
    /// 1, 10 and 100 MiB objects (1 and 10 MiB with `quick`), 16 of each (8), 3 s GET
    /// runs (1 s), a 500 ms op timeout while a server is stopped.
    pub fn new(bin: impl Into<PathBuf>, quick: bool) -> Self {
        let mut sizes = vec![1 << 20, 10 << 20];
        if !quick {
            sizes.push(100 << 20);
        }
        Self {
            bin: bin.into(),
            sizes,
            objects: if quick { 8 } else { 16 },
            duration: Duration::from_secs(if quick { 1 } else { 3 }),
            min_gets: if quick { 4 } else { 8 },
            op_timeout: Duration::from_millis(500),
            client_batch: ClientConfig::new("").batch_size,
            client_depth: ClientConfig::new("").queue_depth,
            baselines: true,
            quick,
        }
    }

    /// A store client's transport settings.
    pub(crate) fn client_config(&self) -> ClientConfig {
        ClientConfig::new("")
            .batch_size(self.client_batch)
            .queue_depth(self.client_depth)
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(BenchError::InvalidArgument(m));
        if self.sizes.is_empty() {
            return bad("no object sizes given".into());
        }
        if let Some(s) = self
            .sizes
            .iter()
            .find(|&&s| !(MIN_SIZE..=MAX_SIZE).contains(&s))
        {
            return bad(format!(
                "object size {s}: sizes must be between {MIN_SIZE} (1 MiB) and {MAX_SIZE} bytes"
            ));
        }
        if !(1..=MAX_OBJECTS).contains(&self.objects) {
            return bad(format!(
                "objects must be between 1 and {MAX_OBJECTS}, got {}",
                self.objects
            ));
        }
        if let Some(s) = self
            .sizes
            .iter()
            .find(|&&s| s.saturating_mul(self.objects) > MAX_RAW_BYTES)
        {
            return bad(format!(
                "{} objects of {s} bytes exceed {} GiB per size",
                self.objects,
                MAX_RAW_BYTES >> 30
            ));
        }
        if self.duration.is_zero() || self.min_gets == 0 {
            return bad("GET runs need a positive duration and count".into());
        }
        if !(1..=usize::from(u16::MAX)).contains(&self.client_batch)
            || !(1..=64).contains(&self.client_depth)
        {
            return bad(format!(
                "the client's batch must be between 1 and {} and its queue depth between 1 and 64",
                u16::MAX
            ));
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&self.op_timeout) {
            return bad("the op timeout must be between 10 ms and 60 s".into());
        }
        Ok(())
    }
}

/// Regions each server needs for `objects` objects of `size` bytes: one chunk of
/// every object (pieces of at most 512 KiB, each rounded up to a size class ≤ 25 %
/// larger), twice over, so that no shard fills up (a full shard evicts).
pub fn regions_per_server(objects: u64, size: u64) -> u64 {
    let chunk = size.div_ceil(u64::from(EC_DATA)).div_ceil(64) * 64;
    let piece = chunk.min(MAX_PIECE);
    let per_chunk = chunk.div_ceil(piece) * (piece + 1024) * 5 / 4;
    (objects.saturating_mul(per_chunk) * 2)
        .div_ceil(REGION)
        .max(1)
}

/// The store's capacity: whole regions, as many on every server.
pub fn store_capacity(objects: u64, size: u64) -> u64 {
    regions_per_server(objects, size) * SERVERS as u64 * REGION
}

pub(crate) fn cluster_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Cluster(e.to_string())
}

/// Runs the whole benchmark and returns the report (not yet printed or saved).
pub fn run_store_large_bench(opts: &StoreLargeOptions) -> Result<StoreLargeReport> {
    opts.validate()?;
    if opts.baselines {
        ensure_tools(&[Tool::RedisServer])?;
    }
    let mut report = StoreLargeReport::new(opts);
    let per_server = opts
        .sizes
        .iter()
        .map(|&s| regions_per_server(opts.objects, s))
        .max()
        .unwrap_or(1);
    let mut cluster_opts = ClusterOptions::default()
        .servers(SERVERS)
        .server_threads(1)
        .server_memory((per_server + 1) * REGION)
        .region_size(REGION);
    // A stopped server must stay a slow one, not be declared dead and replaced
    // (InfiniCache's straggler): heartbeats may stop for the whole stopped phase.
    cluster_opts.heartbeat_timeout = Duration::from_secs(600);
    let cluster = ProcessCluster::start(&opts.bin, &cluster_opts).map_err(cluster_err)?;
    let client = cluster
        .client_with(opts.client_config())
        .map_err(cluster_err)?;
    let redis = if opts.baselines {
        Some(redis::Redis::start()?)
    } else {
        None
    };
    let pb = progress((opts.sizes.len() * (measure::PHASES + usize::from(opts.baselines))) as u64);
    pb.set_prefix("store-large");
    for &size in &opts.sizes {
        let objects = Objects::new(size, opts.objects);
        // Redis and the store of one size back to back, so that a shared machine's
        // drift shifts both sides of a ratio alike.
        let baseline = match &redis {
            Some(r) => {
                pb.set_message(format!("{} MiB: redis", size >> 20));
                let b = r.measure(opts, &objects)?;
                pb.inc(1);
                Some(b)
            }
            None => None,
        };
        let out = measure::run_size(&cluster, &client, opts, &objects, &pb)?;
        report.push_size(opts, &objects, &out, baseline.as_ref());
    }
    pb.finish_and_clear();
    report.finish_notes(opts);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        let ok = StoreLargeOptions::new("farcache", true);
        assert!(ok.validate().is_ok());
        assert_eq!(ok.sizes, vec![1 << 20, 10 << 20]);
        assert_eq!(StoreLargeOptions::new("farcache", false).sizes.len(), 3);
        for bad in [
            StoreLargeOptions {
                sizes: vec![],
                ..ok.clone()
            },
            StoreLargeOptions {
                sizes: vec![MIN_SIZE - 1],
                ..ok.clone()
            },
            StoreLargeOptions {
                sizes: vec![MAX_SIZE + 1],
                ..ok.clone()
            },
            StoreLargeOptions {
                objects: 0,
                ..ok.clone()
            },
            StoreLargeOptions {
                sizes: vec![MAX_SIZE],
                objects: 100,
                ..ok.clone()
            },
            StoreLargeOptions {
                op_timeout: Duration::ZERO,
                ..ok.clone()
            },
            StoreLargeOptions {
                client_batch: 0,
                ..ok.clone()
            },
            StoreLargeOptions {
                client_depth: 65,
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn capacity_holds_every_chunk_twice() {
        // 16 objects of 100 MiB: a 25 MiB chunk each per server, ~31 MiB in classes.
        let r = regions_per_server(16, 100 << 20);
        assert!(r * REGION >= 2 * 16 * (25 << 20), "{r}");
        assert_eq!(regions_per_server(1, 1 << 20), 1);
        assert!(store_capacity(4, 2 << 20).is_multiple_of(SERVERS as u64 * REGION));
    }
}
