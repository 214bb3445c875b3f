//! Peers at their best for `bench io`: Redis and memcached driven by our
//! spinning closed-loop drivers ([`super::resp`], [`super::memcached`]) with
//! the batch shape farcache's client uses (`b` keys per batch, `q` batches in
//! flight, `c` connections), plus the spinning raw-TCP floor
//! ([`super::rawtcp`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::driver::{LoadOpts, validate_keyspace};
use super::memcached::{self, McMode, MemcachedServer};
use super::redis::RedisServer;
use super::redis_tool_batch;
use super::resp::{self, RespMode};
use crate::error::{BenchError, Result};
use crate::histogram::LatencySummary;
use crate::row::BenchRow;

pub use super::peer_run::{PeerOp, PeerRun};
pub use super::rawtcp::{RawTcpFloor, RawTcpOpts, raw_tcp_floor};

/// Parameters of [`peer_baseline`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerOpts {
    pub value_size: usize,
    /// Keys populated (`key:000000000000 ..`) and drawn from uniformly.
    pub keys: u64,
    /// Keys per batch (`b`).
    pub batch: usize,
    /// Batches in flight per connection (`q`).
    pub depth: usize,
    /// Connection counts (`c`, one thread each) to run every mode with.
    pub connections: Vec<usize>,
    /// Measured window of each run (after a 100 ms warm-up).
    pub duration: Duration,
    /// Unpipelined single-GET latency samples per system (0 skips them).
    pub latency_samples: u64,
}

impl PeerOpts {
    /// b = 1024, q = 4, c in [1, 2]; 2 s runs and 20k latency samples, or
    /// 0.5 s and 5k when `quick`.
    pub fn new(value_size: usize, keys: u64, quick: bool) -> Self {
        PeerOpts {
            value_size,
            keys,
            batch: 1024,
            depth: 4,
            connections: vec![1, 2],
            duration: Duration::from_millis(if quick { 500 } else { 2000 }),
            latency_samples: if quick { 5_000 } else { 20_000 },
        }
    }

    fn load_opts(&self, connections: usize) -> LoadOpts {
        LoadOpts::new(
            self.value_size,
            self.keys,
            self.batch,
            self.depth,
            connections,
            self.duration,
        )
    }

    fn validate(&self) -> Result<()> {
        validate_keyspace(self.keys)?;
        if self.batch == 0
            || self.depth == 0
            || self.connections.is_empty()
            || self.connections.contains(&0)
            || self.duration.is_zero()
        {
            return Err(BenchError::InvalidArgument(format!(
                "peer baseline needs non-zero batch, depth, duration and connection counts: {self:?}"
            )));
        }
        Ok(())
    }
}

/// Every peer run for one value size and keyspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerBaseline {
    pub value_size: usize,
    pub keys: u64,
    pub runs: Vec<PeerRun>,
    /// Redis single `GET`s, one at a time on one spinning connection.
    pub redis_unpipelined_spin: Option<LatencySummary>,
    /// memcached single-key `get`s, one at a time on one spinning connection.
    pub memcached_unpipelined_spin: Option<LatencySummary>,
}

impl PeerBaseline {
    /// The highest-throughput error-free run of `op` over all peers.
    pub fn best(&self, op: PeerOp) -> Option<&PeerRun> {
        self.best_where(|r| r.op == op)
    }

    /// The highest-throughput error-free run of `op` by `system`.
    pub fn best_of(&self, system: &str, op: PeerOp) -> Option<&PeerRun> {
        self.best_where(|r| r.op == op && r.system == system)
    }

    fn best_where(&self, keep: impl Fn(&PeerRun) -> bool) -> Option<&PeerRun> {
        self.runs
            .iter()
            .filter(|r| r.errors == 0 && r.mops.is_finite() && keep(r))
            .max_by(|a, b| a.mops.total_cmp(&b.mops))
    }

    /// Report rows: every run, then the unpipelined latencies.
    pub fn rows(&self) -> Vec<BenchRow> {
        let mut rows: Vec<BenchRow> = self.runs.iter().map(PeerRun::to_row).collect();
        let spins = [
            ("redis", &self.redis_unpipelined_spin),
            ("memcached", &self.memcached_unpipelined_spin),
        ];
        for (system, lat) in spins {
            if let Some(l) = lat {
                rows.push(BenchRow {
                    name: format!("{system} unpipelined spin GET {}B", self.value_size),
                    system: system.into(),
                    op: "GET".into(),
                    record_size: self.value_size,
                    distribution: "uniform".into(),
                    c: Some(1),
                    b: Some(1),
                    q: Some(1),
                    mops: if l.mean_us > 0.0 {
                        1.0 / l.mean_us
                    } else {
                        f64::NAN
                    },
                    p50_us: l.p50_us,
                    p99_us: l.p99_us,
                    p999_us: l.p999_us,
                    ..BenchRow::default()
                });
            }
        }
        rows
    }
}

/// Starts a fresh redis-server preloaded (from a snapshot) with `opts.keys`
/// keys of `opts.value_size` bytes, measures unpipelined spinning GET latency, then
/// MGET and pipelined GET, then MSET and pipelined SET, for every connection
/// count; stops it and does the same with a fresh memcached populated with
/// pipelined sets (multi-get, then multi-set). One server at a time, so a
/// 1 GiB keyspace is held once.
pub fn peer_baseline(opts: &PeerOpts) -> Result<PeerBaseline> {
    opts.validate()?;
    let mut runs = Vec::new();
    let redis_unpipelined_spin = redis_runs(opts, &mut runs)?;
    let memcached_unpipelined_spin = memcached_runs(opts, &mut runs)?;
    Ok(PeerBaseline {
        value_size: opts.value_size,
        keys: opts.keys,
        runs,
        redis_unpipelined_spin,
        memcached_unpipelined_spin,
    })
}

fn redis_runs(opts: &PeerOpts, runs: &mut Vec<PeerRun>) -> Result<Option<LatencySummary>> {
    let server = RedisServer::start_preloaded(opts.keys, opts.value_size)?;
    let port = server.port();
    let lat = match opts.latency_samples {
        0 => None,
        n => Some(resp::unpipelined_get_latency(
            port,
            opts.keys,
            opts.value_size,
            n,
        )?),
    };
    // Reads before writes (writes store the same value size, so either
    // order is valid; this one keeps the reads on the populated data).
    let modes = [
        (RespMode::Mget, PeerOp::Get),
        (RespMode::PipelinedGet, PeerOp::Get),
        (RespMode::Mset, PeerOp::Set),
        (RespMode::PipelinedSet, PeerOp::Set),
    ];
    for (mode, op) in modes {
        for &c in &opts.connections {
            let lo = opts.load_opts(c);
            let o = resp::run(port, mode, &lo)?;
            runs.push(PeerRun::new(
                "redis",
                mode.label(lo.batch, lo.depth),
                op,
                &lo,
                &o,
            ));
        }
    }
    // Redis's own tool at its best batch: the better of it and our driver counts.
    for op in [PeerOp::Get, PeerOp::Set] {
        runs.push(redis_tool_batch::run(
            port,
            op,
            opts.keys,
            opts.value_size,
            opts.duration,
        )?);
    }
    Ok(lat)
}

fn memcached_runs(opts: &PeerOpts, runs: &mut Vec<PeerRun>) -> Result<Option<LatencySummary>> {
    let server = MemcachedServer::start_for(opts.keys, opts.value_size)?;
    let port = server.port();
    memcached::populate(port, opts.keys, opts.value_size)?;
    let lat = match opts.latency_samples {
        0 => None,
        n => Some(memcached::unpipelined_get_latency(
            port,
            opts.keys,
            opts.value_size,
            n,
        )?),
    };
    for (mode, op) in [
        (McMode::MultiGet, PeerOp::Get),
        (McMode::MultiSet, PeerOp::Set),
    ] {
        for &c in &opts.connections {
            let lo = opts.load_opts(c);
            let o = memcached::run(port, mode, &lo)?;
            runs.push(PeerRun::new(
                "memcached",
                mode.label(lo.batch, lo.depth),
                op,
                &lo,
                &o,
            ));
        }
    }
    Ok(lat)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{Tool, ensure_tools};

    #[test]
    fn rejects_bad_opts() {
        let mut o = PeerOpts::new(8, 1000, true);
        o.connections = vec![];
        assert!(peer_baseline(&o).is_err());
        let o = PeerOpts {
            keys: 0,
            ..PeerOpts::new(8, 1000, true)
        };
        assert!(peer_baseline(&o).is_err());
    }

    #[test]
    fn best_skips_runs_with_errors() {
        let run = |system: &str, op, mops, errors| PeerRun {
            peer: format!("{system} x"),
            system: system.into(),
            op,
            value_size: 8,
            keys: 10,
            connections: 1,
            batch: 1,
            depth: 1,
            mops,
            p50_us: 1.0,
            p99_us: 2.0,
            errors,
        };
        let b = PeerBaseline {
            value_size: 8,
            keys: 10,
            runs: vec![
                run("redis", PeerOp::Get, 1.0, 0),
                run("memcached", PeerOp::Get, 3.0, 5),
                run("memcached", PeerOp::Get, 2.0, 0),
                run("redis", PeerOp::Set, 0.5, 0),
            ],
            redis_unpipelined_spin: None,
            memcached_unpipelined_spin: None,
        };
        assert_eq!(b.best(PeerOp::Get).map(|r| r.mops), Some(2.0));
        assert_eq!(b.best_of("redis", PeerOp::Get).map(|r| r.mops), Some(1.0));
        assert_eq!(b.best(PeerOp::Set).map(|r| r.mops), Some(0.5));
        assert!(b.best_of("memcached", PeerOp::Set).is_none());
        let json = serde_json::to_string(&b).expect("json");
        let back: PeerBaseline = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, b);
    }

    /// The whole peer baseline on a tiny keyspace with both real servers.
    #[test]
    fn live_peer_baseline() {
        ensure_tools(&[Tool::RedisServer, Tool::RedisBenchmark, Tool::Memcached]).expect(
            "redis-server and memcached are needed for this test (CI installs them via ensure_tools)",
        );
        let opts = PeerOpts {
            batch: 32,
            duration: Duration::from_millis(200),
            latency_samples: 300,
            ..PeerOpts::new(64, 1000, true)
        };
        let b = peer_baseline(&opts).expect("peer baseline");
        // 4 Redis modes + 2 memcached modes, each for c = 1 and 2, and
        // redis-benchmark's own MGET and MSET of 1,000 keys.
        assert_eq!(b.runs.len(), 14, "{b:#?}");
        for r in &b.runs {
            assert!(r.mops > 0.0 && r.errors == 0, "{r:?}");
        }
        assert!(b.runs.iter().any(|r| r.peer == "redis MGET b=32 q=4 c=2"));
        for cmd in ["MGET", "MSET"] {
            let name = format!("redis redis-benchmark {cmd} b=1000 P=4 c=4");
            assert!(b.runs.iter().any(|r| r.peer == name), "{name}");
        }
        assert!(
            b.runs
                .iter()
                .any(|r| r.peer == "memcached multi-get b=32 q=4 c=1")
        );
        for op in [PeerOp::Get, PeerOp::Set] {
            assert!(b.best_of("redis", op).is_some());
            assert!(b.best_of("memcached", op).is_some());
        }
        let lat = b.redis_unpipelined_spin.expect("redis latency");
        assert!(lat.p50_us > 0.0);
        assert!(b.memcached_unpipelined_spin.is_some());
        assert_eq!(b.rows().len(), 16);
    }

    /// Manual numbers for the report: `cargo test -p farcache-bench --release
    /// -- --ignored --nocapture peer_numbers`.
    #[test]
    #[ignore = "prints peer numbers (8 B values, 100k keys, b=1024, q=4); ~15 s"]
    fn peer_numbers() {
        let opts = PeerOpts {
            duration: Duration::from_secs(1),
            ..PeerOpts::new(8, 100_000, true)
        };
        let b = peer_baseline(&opts).expect("peer baseline");
        for r in &b.runs {
            eprintln!(
                "{:<45} {:>7.3} Mkeys/s  p50 {:>8.1} µs  p99 {:>8.1} µs  errors {}",
                r.peer, r.mops, r.p50_us, r.p99_us, r.errors
            );
        }
        eprintln!("redis unpipelined spin GET: {:?}", b.redis_unpipelined_spin);
        eprintln!(
            "memcached unpipelined spin get: {:?}",
            b.memcached_unpipelined_spin
        );
        let f = raw_tcp_floor(&RawTcpOpts::new(true)).expect("raw tcp");
        eprintln!(
            "raw TCP spin RTT p50 {:.1} µs p99 {:.1} µs mean {:.1} µs; stream {:.2} Gbit/s ({:.0} msgs/s of {} B, {} per write)",
            f.spin_rtt.p50_us,
            f.spin_rtt.p99_us,
            f.spin_rtt.mean_us,
            f.gbps,
            f.msgs_per_sec,
            f.msg_size,
            f.msgs_per_write
        );
    }
}
