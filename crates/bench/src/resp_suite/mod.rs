//! `farcache bench resp`: the Redis-protocol front end against Redis itself, both
//! driven by the same `redis-benchmark` in the same run: SET/GET unpipelined and
//! pipelined, and MGET of many keys; then MGET again from the bench's spinning RESP
//! driver, which does not saturate its core as redis-benchmark does building 100
//! random keys per command. The front end serves a store on a cluster like the
//! README's (`farcache up`: three servers, one worker thread each) with two
//! event-loop threads; Redis is one process with as many I/O threads. The grid is
//! the issue's: `-t set,get,incr,mset` with `-r` (random keys) and without (one key),
//! unpipelined and pipelined; then `APPEND` and `SETRANGE` with `-r`, unpipelined and
//! pipelined.

pub mod output;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use farcache_testkit::{ClusterOptions, ProcessCluster};

use crate::baseline::driver::LoadOpts;
use crate::baseline::redis::{
    RedisOpts, RedisResult, RedisServer, Workload, ping, run_benchmark_at,
};
use crate::baseline::resp::{self, RespMode};
use crate::baseline::{ChildServer, free_port};
use crate::error::{BenchError, Result};
use crate::report::{BenchRow, MachineInfo, build_kind, unix_now};
use crate::tools::{Tool, ensure_tools};

pub use output::{RespReport, format_resp_table, write_resp_json_to};

#[derive(Debug, Clone)]
pub struct RespBenchOptions {
    /// The `farcache` binary (cluster and front end).
    pub bin: PathBuf,
    pub value_size: usize,
    pub keyspace: u64,
    /// Requests per SET/GET run.
    pub requests: u64,
    /// MGET commands per run.
    pub mget_requests: u64,
    pub clients: usize,
    pub pipeline: usize,
    /// farcache servers (one worker thread each) behind the front end.
    pub servers: usize,
    /// The front end's event-loop threads, and Redis's I/O threads.
    pub threads: usize,
    /// Keys per MGET.
    pub mget_keys: Vec<usize>,
    /// The spinning driver's MGETs in flight per connection, connections, and
    /// measured time.
    pub driver_depth: usize,
    pub driver_connections: usize,
    pub driver_duration: Duration,
}

impl RespBenchOptions {
    pub fn new(bin: impl Into<PathBuf>, quick: bool) -> Self {
        Self {
            bin: bin.into(),
            value_size: 64,
            keyspace: if quick { 10_000 } else { 100_000 },
            requests: if quick { 20_000 } else { 200_000 },
            mget_requests: if quick { 2_000 } else { 20_000 },
            clients: 50,
            pipeline: 16,
            servers: 3,
            threads: 2,
            mget_keys: vec![10, 100],
            driver_depth: 4,
            driver_connections: 2,
            driver_duration: Duration::from_millis(if quick { 300 } else { 2000 }),
        }
    }
}

fn cluster_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Cluster(e.to_string())
}

/// The front end as a child process, serving store `bench-resp`.
fn start_frontend(o: &RespBenchOptions, cluster: &ProcessCluster) -> Result<ChildServer> {
    let port = free_port()?;
    let mut cmd = Command::new(&o.bin);
    cmd.args(["resp", "--manager", cluster.manager_addr(), "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--secret-file")
        .arg(cluster.secret_path())
        // Loopback only; the spinning driver does not AUTH (AUTH costs nothing per
        // command once a connection is in).
        .args(["--store", "bench-resp", "--capacity", "512MiB", "--no-auth"])
        .args(["--threads", &o.threads.to_string()]);
    ChildServer::spawn("farcache-resp", cmd, port, Duration::from_secs(30), ping)
}

pub fn run_resp_bench(o: &RespBenchOptions) -> Result<RespReport> {
    ensure_tools(&[Tool::RedisServer, Tool::RedisBenchmark])?;
    let cluster = ProcessCluster::start(
        &o.bin,
        &ClusterOptions::default()
            .servers(o.servers.max(1))
            .server_threads(1)
            .server_memory(1 << 30)
            .region_size(64 << 20),
    )
    .map_err(cluster_err)?;
    let fe = start_frontend(o, &cluster)?;
    // Redis at its best: single-threaded, and with as many I/O threads as the front
    // end has event loops (on few cores the threads can cost more than they give);
    // each front-end row is compared with the better of the two.
    let redis = RedisServer::start()?;
    let redis_io = RedisServer::start_with_io_threads(o.threads)?;
    let io_name = format!("redis-io{}", o.threads);
    let mut targets: Vec<(&str, u16, Option<&str>)> = vec![
        ("farcache-resp", fe.port(), None),
        ("redis", redis.port(), None),
    ];
    if o.threads > 1 {
        targets.push((&io_name, redis_io.port(), None));
    }

    let base = RedisOpts {
        value_size: o.value_size,
        clients: o.clients,
        pipeline: 1,
        requests: o.requests,
        keyspace: o.keyspace,
        threads: 1,
    };
    // Fill both keyspaces the same way (about 95 % of the keys get written).
    for &(name, port, pw) in &targets {
        eprintln!("[farcache-bench] resp: filling {name}");
        let fill = RedisOpts {
            pipeline: 64,
            requests: o.keyspace * 3,
            ..base.clone()
        };
        run_benchmark_at(port, &fill, &Workload::Tests("set"), pw)?;
    }

    let mut rows = Vec::new();
    let mut cases: Vec<(String, RedisOpts, Vec<String>)> = Vec::new();
    for keyspace in [o.keyspace, 0] {
        for p in [1, o.pipeline] {
            cases.push((
                format!("grid P={p} r={keyspace}"),
                RedisOpts {
                    pipeline: p,
                    keyspace,
                    ..base.clone()
                },
                Vec::new(),
            ));
        }
    }
    for &k in &o.mget_keys {
        let mut args = vec!["MGET".to_string()];
        args.extend((0..k).map(|_| "key:__rand_int__".to_string()));
        cases.push((
            format!("MGET {k} keys"),
            RedisOpts {
                requests: o.mget_requests,
                ..base.clone()
            },
            args,
        ));
    }
    // Edits of a value where it lives (not in redis-benchmark's `-t` list), on keys
    // of their own so the values they grow stay out of the GET rows.
    let append = ["APPEND", "app:__rand_int__", "abcdefgh"];
    let setrange = ["SETRANGE", "rng:__rand_int__", "4", "abcdefgh"];
    for cmd in [&append[..], &setrange[..]] {
        for p in [1, o.pipeline] {
            cases.push((
                format!("{} P={p}", cmd[0]),
                RedisOpts {
                    pipeline: p,
                    ..base.clone()
                },
                cmd.iter().map(|a| a.to_string()).collect(),
            ));
        }
    }
    for (label, opts, custom) in &cases {
        let mut by_system: Vec<(&str, Vec<RedisResult>)> = Vec::new();
        for &(name, port, pw) in &targets {
            eprintln!("[farcache-bench] resp: {label} on {name}");
            let work = if custom.is_empty() {
                Workload::Tests("set,get,incr,mset")
            } else {
                Workload::Custom(custom)
            };
            by_system.push((name, run_benchmark_at(port, opts, &work, pw)?));
        }
        // The better Redis per test.
        let best_redis = |test: &str| {
            by_system[1..]
                .iter()
                .filter_map(|(n, rs)| Some((*n, rs.iter().find(|x| x.test == test)?)))
                .max_by(|a, b| a.1.mops().total_cmp(&b.1.mops()))
        };
        for (name, results) in &by_system {
            for r in results {
                let op = match custom.first().map(String::as_str) {
                    None => r.test.clone(),
                    Some("MGET") => format!("MGET x{}", custom.len() - 1),
                    Some(cmd) => cmd.to_string(),
                };
                let keys = if opts.keyspace == 0 {
                    "1 key".to_string()
                } else {
                    format!("r={}", opts.keyspace)
                };
                let mut row = r.to_row(format!(
                    "{name} {op} P={} c={} {keys}",
                    opts.pipeline, opts.clients
                ));
                row.system = (*name).into();
                row.op = op.clone();
                if *name == "farcache-resp"
                    && let Some((peer, p)) = best_redis(&r.test)
                {
                    row = row.with_redis_baseline(format!("{peer} {}", p.label()), p.mops());
                }
                rows.push(row);
            }
        }
    }
    // MGET again from the spinning driver (redis-benchmark saturates its own core
    // building 100 random keys per command, so both systems above may be measured
    // at the load generator's limit).
    for &(_, port, _) in &targets {
        resp::populate(port, o.keyspace, o.value_size)?;
    }
    for &k in &o.mget_keys {
        let opts = LoadOpts::new(
            o.value_size,
            o.keyspace,
            k,
            o.driver_depth,
            o.driver_connections,
            o.driver_duration,
        );
        let mut redis_keys = None;
        let mut runs = Vec::new();
        for (name, port, _) in targets.iter().take(2).rev() {
            eprintln!("[farcache-bench] resp: spinning MGET x{k} on {name}");
            let out = resp::run(*port, RespMode::Mget, &opts)?;
            if out.errors > 0 {
                return Err(BenchError::Cluster(format!(
                    "{name}: {} failed keys in the MGET run: {:?}",
                    out.errors, out.first_error
                )));
            }
            if *name == "redis" {
                redis_keys = Some(out.mops);
            }
            runs.push((*name, out));
        }
        for (name, out) in runs.into_iter().rev() {
            let op = format!("MGET x{k} keys/s (spinning driver)");
            let mut row = BenchRow {
                name: format!(
                    "{name} MGET x{k} driver q={} c={}",
                    opts.depth, opts.connections
                ),
                system: name.into(),
                op,
                record_size: o.value_size,
                distribution: "uniform".into(),
                c: Some(opts.connections),
                b: Some(k),
                q: Some(opts.depth),
                mops: out.mops,
                p50_us: out.batch_latency.p50_us,
                p99_us: out.batch_latency.p99_us,
                p999_us: out.batch_latency.p999_us,
                ..BenchRow::default()
            };
            if name == "farcache-resp"
                && let Some(base) = redis_keys
            {
                row = row.with_redis_baseline(format!("redis MGET x{k} driver"), base);
            }
            rows.push(row);
        }
    }
    drop(redis);
    drop(redis_io);
    drop(fe);
    Ok(RespReport {
        bench: "resp".into(),
        timestamp_unix: unix_now(),
        build: build_kind(),
        machine: MachineInfo::detect(),
        value_size: o.value_size,
        keyspace: o.keyspace,
        clients: o.clients,
        note: format!(
            "one redis-benchmark (then the bench's spinning RESP driver, for MGET) drives both \
             systems in turn; the front end runs {t} event-loop threads in front of {s} farcache \
             server(s) with one worker thread each (plus the manager); Redis runs twice, \
             single-threaded and with {t} I/O threads, and each ratio is against the better of \
             the two for that row; all share the same cores",
            t = o.threads,
            s = o.servers
        ),
        rows,
    })
}
