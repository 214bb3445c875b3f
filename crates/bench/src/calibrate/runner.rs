//! Measuring one configuration, on a local cluster of one server (the server runs
//! with `s` worker threads, restarted when `s` changes) or on a running cluster
//! (whose server has the threads it has): a client with `c` lanes, `b` ops per frame
//! and `q` frames in flight drives `c` closed-loop threads.

use std::path::Path;
use std::time::Duration;

use farcache_client::{Client, ClientConfig};
use farcache_proto::slo::Transport;
use farcache_slo::Perf;
use farcache_testkit::{ClusterOptions, ProcessCluster};

use crate::error::{BenchError, Result};
use crate::io::{IoOp, IoSpec, run_throughput_threads};
use crate::io_suite::prefill;
use crate::workload::KeyDistribution;

/// The calibration cache's name on a local cluster.
const CACHE: &str = "calibrate";

fn cluster_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Cluster(e.to_string())
}

/// The running cluster and the `s` it was started with.
struct Live {
    s: u32,
    cluster: ProcessCluster,
    /// Keeps the manager connection that created the cache.
    _admin: Client,
}

/// A running cluster to calibrate: a cache of its own on one server, deleted when
/// the runner is dropped.
pub struct Remote {
    config: ClientConfig,
    admin: Client,
    cache: String,
    /// Worker threads of the server holding the cache.
    pub threads: u32,
}

impl Remote {
    /// Creates the calibration cache (one region) and prefills it.
    pub fn connect(config: ClientConfig, capacity: u64) -> Result<Self> {
        let admin = Client::with_config(config.clone()).map_err(cluster_err)?;
        let cache = format!("calibrate-{}", std::process::id());
        let c = admin
            .create_with_region_size(&cache, capacity, Some(capacity))
            .map_err(cluster_err)?;
        // Built before the checks below so the cache is deleted if they fail.
        let mut remote = Self {
            config,
            admin,
            cache,
            threads: 0,
        };
        let info = c.info();
        let holder = info
            .servers
            .iter()
            .find(|s| Some(&s.id) == info.regions.first());
        let threads = holder.map_or(0, |s| if s.threads == 0 { s.cores } else { s.threads });
        if threads == 0 {
            return Err(BenchError::Cluster(
                "the server holding the calibration cache reports no threads".into(),
            ));
        }
        prefill(&c, capacity)?;
        remote.threads = threads;
        Ok(remote)
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        if let Err(e) = self.admin.delete(&self.cache) {
            tracing::warn!(cache = %self.cache, error = %e, "calibration cache not deleted");
        }
    }
}

pub struct Runner<'a> {
    bin: &'a Path,
    remote: Option<Remote>,
    /// Cache capacity, also the region size (one region, one server).
    capacity: u64,
    duration: Duration,
    live: Option<Live>,
}

impl<'a> Runner<'a> {
    pub fn new(bin: &'a Path, capacity: u64, duration: Duration) -> Self {
        Self {
            bin,
            capacity,
            duration,
            live: None,
            remote: None,
        }
    }

    /// Measures on a running cluster instead of starting one.
    pub fn on(mut self, remote: Remote) -> Self {
        self.remote = Some(remote);
        self
    }

    /// The `s` of the running cluster, if any.
    pub fn current_s(&self) -> Option<u32> {
        match &self.remote {
            Some(r) => Some(r.threads),
            None => self.live.as_ref().map(|l| l.s),
        }
    }

    /// A cluster whose server has `s` worker threads, holding the prefilled cache.
    fn at(&mut self, s: u32) -> Result<&Live> {
        if self.current_s() != Some(s) {
            // Stop the old server first: the two would share the cores.
            self.live = None;
            let cluster = ProcessCluster::start(
                self.bin,
                &ClusterOptions::default()
                    .servers(1)
                    .server_threads(s as usize)
                    .server_memory(self.capacity * 2)
                    .region_size(self.capacity),
            )
            .map_err(cluster_err)?;
            let admin = cluster.client().map_err(cluster_err)?;
            let cache = admin.create(CACHE, self.capacity).map_err(cluster_err)?;
            prefill(&cache, self.capacity)?;
            self.live = Some(Live {
                s,
                cluster,
                _admin: admin,
            });
        }
        self.live
            .as_ref()
            .ok_or_else(|| BenchError::Cluster("no cluster".into()))
    }

    /// Throughput and per-op latency of `t` on `record_size`-byte records, uniform
    /// over the cache, a `read_fraction` share of them reads.
    pub fn measure(&mut self, record_size: u32, read_fraction: f64, t: Transport) -> Result<Perf> {
        let (capacity, duration) = (self.capacity, self.duration);
        let knobs = |c: ClientConfig| {
            c.connections(t.c as usize)
                .batch_size(t.b as usize)
                .queue_depth(t.q as usize)
        };
        let cache = match &self.remote {
            Some(r) => Client::with_config(knobs(r.config.clone()))
                .and_then(|c| c.open(&r.cache))
                .map_err(cluster_err)?,
            None => {
                let live = self.at(t.s)?;
                let client = live
                    .cluster
                    .client_with(knobs(ClientConfig::new("")))
                    .map_err(cluster_err)?;
                client.open(CACHE).map_err(cluster_err)?
            }
        };
        let spec = IoSpec {
            op: IoOp::Read,
            record_size: record_size as usize,
            dist: KeyDistribution::Uniform,
            records: (capacity / u64::from(record_size)).max(1),
            batch: t.b as usize,
            depth: t.q as usize,
            duration,
            read_fraction: Some(read_fraction),
        };
        let out = run_throughput_threads(&cache, &spec, t.c as usize)?;
        if out.errors > 0 {
            return Err(BenchError::Cluster(format!(
                "{t} on {record_size} B records: {} ops failed",
                out.errors
            )));
        }
        if out.ops == 0 {
            return Err(BenchError::Cluster(format!(
                "{t} on {record_size} B records: no op completed in {duration:?}"
            )));
        }
        Ok(Perf {
            p50_us: out.latency.p50_us,
            p99_us: out.latency.p99_us,
            throughput: out.ops as f64 / out.secs,
        })
    }
}
