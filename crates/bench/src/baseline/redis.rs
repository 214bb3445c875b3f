//! Redis baseline: a private `redis-server` driven by `redis-benchmark`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::rdb::write_rdb;
use super::{ChildServer, free_port, run_checked};
use crate::error::{BenchError, Result, parse_err};
use crate::row::{BenchRow, nan_as_null};
use crate::tools::{Tool, ensure_tools};

/// Parameters of one `redis-benchmark -t get,set` run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisOpts {
    /// Value size in bytes (`-d`).
    pub value_size: usize,
    /// Parallel connections (`-c`).
    pub clients: usize,
    /// Pipeline depth (`-P`).
    pub pipeline: usize,
    /// Total requests per test (`-n`).
    pub requests: u64,
    /// Number of distinct random keys (`-r`); 0 leaves `-r` out (every request of
    /// a test then names the same key).
    pub keyspace: u64,
    /// redis-benchmark client threads (`--threads`); 1 runs its classic
    /// single-threaded event loop (no flag).
    #[serde(default = "one")]
    pub threads: usize,
}

fn one() -> usize {
    1
}

impl Default for RedisOpts {
    fn default() -> Self {
        RedisOpts {
            value_size: 64,
            clients: 1,
            pipeline: 1,
            requests: 20_000,
            keyspace: 100_000,
            threads: 1,
        }
    }
}

/// One test line of `redis-benchmark --csv` output, with the run's parameters.
///
/// Latencies are in microseconds; they are NaN when redis-benchmark is too
/// old to report them (2-column CSV). With pipelining, redis-benchmark's
/// latency is per pipelined batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RedisResult {
    /// "GET" or "SET" (as printed by redis-benchmark).
    pub test: String,
    pub value_size: usize,
    pub pipeline: usize,
    pub clients: usize,
    /// redis-benchmark client threads (`--threads`, 1 = flag omitted).
    #[serde(default = "one")]
    pub threads: usize,
    pub ops_per_sec: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p50_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p99_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub avg_us: f64,
}

impl RedisResult {
    /// Throughput in millions of operations per second.
    pub fn mops(&self) -> f64 {
        self.ops_per_sec / 1e6
    }

    /// Short description, e.g. `redis GET P=64 c=4` or, with client
    /// threads, `redis GET P=64 c=4 threads=2`.
    pub fn label(&self) -> String {
        let mut s = format!("redis {} P={} c={}", self.test, self.pipeline, self.clients);
        if self.threads > 1 {
            s.push_str(&format!(" threads={}", self.threads));
        }
        s
    }

    /// This result as a report row (system "redis").
    pub fn to_row(&self, name: impl Into<String>) -> BenchRow {
        BenchRow {
            name: name.into(),
            system: "redis".into(),
            op: self.test.clone(),
            record_size: self.value_size,
            distribution: "uniform".into(),
            c: Some(self.clients),
            q: Some(self.pipeline),
            mops: self.mops(),
            p50_us: self.p50_us,
            p99_us: self.p99_us,
            p999_us: f64::NAN,
            ..BenchRow::default()
        }
    }
}

/// A private `redis-server` on a free 127.0.0.1 port, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    inner: ChildServer,
}

impl RedisServer {
    /// Installs redis if needed (see [`ensure_tools`]), starts
    /// `redis-server --save "" --appendonly no --port P --daemonize no` and
    /// waits until it answers `PING`.
    pub fn start() -> Result<Self> {
        Self::start_with(&[], Duration::from_secs(10))
    }

    /// [`RedisServer::start`] with `n` I/O threads (reads too), so it may use as
    /// many threads as the system it is compared with.
    pub fn start_with_io_threads(n: usize) -> Result<Self> {
        if n <= 1 {
            return Self::start();
        }
        let n = n.to_string();
        Self::start_with(
            &["--io-threads", &n, "--io-threads-do-reads", "yes"],
            Duration::from_secs(10),
        )
    }

    /// Like [`RedisServer::start`], but the server loads a snapshot of
    /// `key:%012d` → [`value_bytes`](super::driver::value_bytes)`(value_size)`
    /// for every key in `0..keys` at startup (see [`super::rdb`] for why
    /// that beats filling it with commands). The snapshot is written to a
    /// temp dir, removed once loaded, and the key count checked with `DBSIZE`.
    pub fn start_preloaded(keys: u64, value_size: usize) -> Result<Self> {
        ensure_tools(&[Tool::RedisServer, Tool::RedisBenchmark])?;
        let t0 = std::time::Instant::now();
        let dir = TempDir::new("rdb")?;
        let file = dir.0.join("dump.rdb");
        let bytes = write_rdb(&file, keys, value_size)?;
        let dir_arg = dir.0.to_string_lossy().into_owned();
        // Loading runs ~1-2 M keys/s on a small VM; be generous.
        let timeout = Duration::from_secs(30 + keys / 200_000);
        let server = Self::start_with(&["--dir", &dir_arg, "--dbfilename", "dump.rdb"], timeout)?;
        drop(dir);
        let loaded = super::resp::dbsize(server.port())?;
        if loaded != keys {
            return Err(parse_err(
                "redis-server",
                format!("loaded {loaded} keys from the snapshot, expected {keys}"),
            ));
        }
        eprintln!(
            "[farcache-bench] redis: preloaded {keys} keys of {value_size} B ({} MiB snapshot) in {:.2} s",
            bytes >> 20,
            t0.elapsed().as_secs_f64()
        );
        Ok(server)
    }

    fn start_with(extra: &[&str], timeout: Duration) -> Result<Self> {
        ensure_tools(&[Tool::RedisServer, Tool::RedisBenchmark])?;
        let mut last_err = None;
        // The port is free when picked but may be grabbed before redis binds
        // it; retry a few times.
        for _ in 0..3 {
            let port = free_port()?;
            let mut cmd = Command::new("redis-server");
            cmd.args(["--save", "", "--appendonly", "no", "--port"])
                .arg(port.to_string())
                .args(["--daemonize", "no", "--bind", "127.0.0.1"])
                .args(extra);
            match ChildServer::spawn("redis-server", cmd, port, timeout, ping) {
                Ok(inner) => return Ok(RedisServer { inner }),
                Err(e) => {
                    eprintln!("[farcache-bench] redis-server failed to start: {e}");
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| BenchError::InvalidArgument("unreachable".into())))
    }

    /// TCP port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.inner.port()
    }

    /// Whether the server answers `PING`.
    pub fn is_alive(&mut self) -> bool {
        self.inner.is_alive() && ping(self.port())
    }

    /// Runs `redis-benchmark -t get,set` against this server.
    ///
    /// A run that fails is run once more if the server still answers: on a
    /// loaded machine redis-benchmark now and then aborts with "All clients
    /// disconnected" although the server is fine, and one flaky run of the
    /// peer should not void the whole comparison. The retry is printed.
    pub fn benchmark(&self, opts: &RedisOpts) -> Result<Vec<RedisResult>> {
        match run_benchmark(self.port(), opts, "get,set") {
            Ok(r) => Ok(r),
            Err(e) if ping(self.port()) => {
                eprintln!(
                    "[farcache-bench] redis-benchmark run failed ({e}); redis-server still answers \
                     (its log: {}), running it once more",
                    self.inner.log_tail()
                );
                std::thread::sleep(Duration::from_millis(200));
                run_benchmark(self.port(), opts, "get,set")
            }
            Err(e) => Err(e),
        }
    }

    /// Fills the keyspace: `3 * keyspace` random pipelined SETs of
    /// `value_size` bytes (covers ~95% of the keys), so later GETs mostly hit.
    pub fn populate(&self, keyspace: u64, value_size: usize) -> Result<()> {
        let opts = RedisOpts {
            value_size,
            clients: 1,
            pipeline: 64,
            requests: keyspace.saturating_mul(3).max(64),
            keyspace,
            threads: 1,
        };
        run_benchmark(self.port(), &opts, "set").map(|_| ())
    }
}

/// A fresh directory under the system temp dir, removed (with its
/// contents) on drop.
#[derive(Debug)]
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(what: &str) -> Result<Self> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "farcache-bench-{what}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Sends a raw RESP `PING` and checks for `+PONG`.
pub(crate) fn ping(port: u16) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let mut s = TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_millis(200),
        )?;
        s.set_read_timeout(Some(Duration::from_millis(500)))?;
        s.write_all(b"*1\r\n$4\r\nPING\r\n")?;
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf)?;
        Ok(buf[..n].starts_with(b"+PONG"))
    };
    attempt().unwrap_or(false)
}

fn run_benchmark(port: u16, opts: &RedisOpts, tests: &str) -> Result<Vec<RedisResult>> {
    run_benchmark_at(port, opts, &Workload::Tests(tests), None)
}

/// What one `redis-benchmark` run sends.
#[derive(Debug, Clone, Copy)]
pub enum Workload<'a> {
    /// Its built-in tests (`-t get,set`).
    Tests(&'a str),
    /// One command of ours, e.g. `MGET key:__rand_int__ ...` (each
    /// `__rand_int__` is a fresh key of the `-r` keyspace).
    Custom(&'a [String]),
}

/// Runs `redis-benchmark` against any RESP server on 127.0.0.1 `port`
/// (Redis, or farcache's front end with `password` its token).
pub fn run_benchmark_at(
    port: u16,
    opts: &RedisOpts,
    work: &Workload<'_>,
    password: Option<&str>,
) -> Result<Vec<RedisResult>> {
    if opts.clients == 0 || opts.pipeline == 0 || opts.requests == 0 || opts.threads == 0 {
        return Err(BenchError::InvalidArgument(format!(
            "redis-benchmark options must be non-zero: {opts:?}"
        )));
    }
    let mut cmd = Command::new("redis-benchmark");
    cmd.args(["-h", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .arg("-n")
        .arg(opts.requests.to_string())
        .arg("-d")
        .arg(opts.value_size.to_string())
        .arg("-c")
        .arg(opts.clients.to_string())
        .arg("-P")
        .arg(opts.pipeline.to_string())
        .arg("--csv");
    if opts.keyspace > 0 {
        cmd.arg("-r").arg(opts.keyspace.to_string());
    }
    if let Some(p) = password {
        cmd.arg("-a").arg(p);
    }
    if opts.threads > 1 {
        cmd.arg("--threads").arg(opts.threads.to_string());
    }
    match work {
        Workload::Tests(t) => {
            cmd.arg("-t").arg(t);
        }
        Workload::Custom(args) => {
            cmd.args(args.iter());
        }
    }
    let out = run_checked(cmd)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    parse_redis_csv(&stdout, opts)
}

/// Starts a private redis-server, populates `opts.keyspace` keys and runs
/// `redis-benchmark -t get,set` once with `opts`.
pub fn redis_get_set(opts: &RedisOpts) -> Result<Vec<RedisResult>> {
    let server = RedisServer::start()?;
    server.populate(opts.keyspace, opts.value_size)?;
    server.benchmark(opts)
}

/// Parses `redis-benchmark --csv` output.
///
/// Accepts the Redis 7 format (header
/// `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"`)
/// and the older headerless 2-column `"test","rps"` format (latencies NaN).
/// Columns are located by header name when a header is present.
pub fn parse_redis_csv(out: &str, opts: &RedisOpts) -> Result<Vec<RedisResult>> {
    let mut header: Option<Vec<String>> = None;
    let mut results = Vec::new();
    for line in out.split(['\n', '\r']) {
        let line = line.trim();
        if !line.starts_with('"') {
            continue;
        }
        let fields: Vec<String> = line
            .split(',')
            .map(|f| f.trim().trim_matches('"').to_string())
            .collect();
        if fields
            .first()
            .is_some_and(|f| f.eq_ignore_ascii_case("test"))
        {
            header = Some(fields);
            continue;
        }
        if fields.len() < 2 {
            return Err(parse_err(
                "redis-benchmark",
                format!("short CSV line: {line}"),
            ));
        }
        let col = |name: &str, default_idx: Option<usize>| -> Option<usize> {
            match &header {
                Some(h) => h.iter().position(|c| c == name),
                None => default_idx,
            }
        };
        let get = |name: &str, default_idx: Option<usize>| -> Result<f64> {
            match col(name, default_idx).and_then(|i| fields.get(i)) {
                Some(v) => v.parse::<f64>().map_err(|_| {
                    parse_err(
                        "redis-benchmark",
                        format!("bad {name} value {v:?} in: {line}"),
                    )
                }),
                None => Ok(f64::NAN),
            }
        };
        let ops_per_sec = get("rps", Some(1))?;
        if !ops_per_sec.is_finite() {
            return Err(parse_err("redis-benchmark", format!("no rps in: {line}")));
        }
        results.push(RedisResult {
            test: fields[0].clone(),
            value_size: opts.value_size,
            pipeline: opts.pipeline,
            clients: opts.clients,
            threads: opts.threads,
            ops_per_sec,
            p50_us: get("p50_latency_ms", None)? * 1000.0,
            p99_us: get("p99_latency_ms", None)? * 1000.0,
            avg_us: get("avg_latency_ms", None)? * 1000.0,
        });
    }
    if results.is_empty() {
        return Err(parse_err(
            "redis-benchmark",
            format!("no result lines in output: {:?}", out.trim()),
        ));
    }
    Ok(results)
}

/// Parameters of the Redis baseline sweep ([`redis_baseline`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisBaselineOpts {
    pub value_size: usize,
    /// Pipeline depths tried for the best-throughput search.
    pub pipelines: Vec<usize>,
    /// Connection counts tried for the best-throughput search.
    pub clients: Vec<usize>,
    /// Requests per pipelined (P > 1) run.
    pub pipelined_requests: u64,
    /// Requests per unpipelined run and connection.
    pub unpipelined_requests: u64,
    pub keyspace: u64,
    /// redis-benchmark client thread counts (`--threads`) tried. Counts
    /// above 1 are extra configurations, run only where a single-threaded
    /// redis-benchmark can be the bottleneck: pipelined (P > 1) with at
    /// least as many connections as threads.
    #[serde(default = "default_bench_threads")]
    pub bench_threads: Vec<usize>,
}

fn default_bench_threads() -> Vec<usize> {
    vec![1, 2]
}

impl RedisBaselineOpts {
    /// Default sweep: P in [1, 16, 64, 128], c in [1, 4], single-threaded
    /// redis-benchmark plus `--threads 2` for the pipelined c=4 runs, 200k
    /// pipelined / 20k unpipelined requests, 100k keys. `quick` halves
    /// request counts and the keyspace.
    pub fn new(value_size: usize, quick: bool) -> Self {
        let o = RedisBaselineOpts {
            value_size,
            pipelines: vec![1, 16, 64, 128],
            clients: vec![1, 4],
            pipelined_requests: 200_000,
            unpipelined_requests: 20_000,
            keyspace: 100_000,
            bench_threads: default_bench_threads(),
        };
        if quick { o.scaled(0.5) } else { o }
    }

    /// Multiplies request counts and keyspace by `factor` (minimum 1000 each).
    pub fn scaled(mut self, factor: f64) -> Self {
        let s = |n: u64| ((n as f64 * factor).round() as u64).max(1000);
        self.pipelined_requests = s(self.pipelined_requests);
        self.unpipelined_requests = s(self.unpipelined_requests);
        self.keyspace = s(self.keyspace);
        self
    }

    fn run_opts(&self, pipeline: usize, clients: usize) -> RedisOpts {
        let requests = if pipeline <= 1 {
            self.unpipelined_requests * clients as u64
        } else {
            self.pipelined_requests
        };
        RedisOpts {
            value_size: self.value_size,
            clients,
            pipeline,
            requests: requests.max((pipeline * clients) as u64),
            keyspace: self.keyspace,
            threads: 1,
        }
    }

    /// Every run of the sweep: each (pipeline, clients) pair single-threaded
    /// (plus P=1 c=1 if missing), then the multi-threaded extras (see
    /// [`Self::bench_threads`]).
    fn sweep(&self) -> Vec<RedisOpts> {
        let mut combos: Vec<(usize, usize)> = Vec::new();
        for &p in &self.pipelines {
            for &c in &self.clients {
                combos.push((p, c));
            }
        }
        if !combos.contains(&(1, 1)) {
            combos.push((1, 1));
        }
        let mut threads: Vec<usize> = self
            .bench_threads
            .iter()
            .copied()
            .filter(|&t| t > 1)
            .collect();
        threads.sort_unstable();
        threads.dedup();
        let mut runs: Vec<RedisOpts> = combos.iter().map(|&(p, c)| self.run_opts(p, c)).collect();
        for t in threads {
            for &(p, c) in &combos {
                if p > 1 && c >= t {
                    runs.push(RedisOpts {
                        threads: t,
                        ..self.run_opts(p, c)
                    });
                }
            }
        }
        runs
    }
}

/// Redis reference numbers for one value size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RedisBaseline {
    pub value_size: usize,
    /// Keys the sweep addressed (`-r`).
    #[serde(default)]
    pub keyspace: u64,
    /// Highest-throughput GET over all (pipeline, clients) combinations.
    pub best_get: RedisResult,
    /// Highest-throughput SET over all (pipeline, clients) combinations.
    pub best_set: RedisResult,
    /// GET with one connection and no pipelining (latency reference).
    pub unpipelined_get: RedisResult,
    /// SET with one connection and no pipelining.
    pub unpipelined_set: RedisResult,
    /// Every run of the sweep.
    pub runs: Vec<RedisResult>,
}

impl RedisBaseline {
    pub fn best_get_mops(&self) -> f64 {
        self.best_get.mops()
    }
    pub fn best_set_mops(&self) -> f64 {
        self.best_set.mops()
    }
    /// Median latency of unpipelined single-connection GETs, in µs.
    pub fn unpipelined_get_p50_us(&self) -> f64 {
        self.unpipelined_get.p50_us
    }

    /// Report rows: best GET, best SET, unpipelined GET.
    pub fn rows(&self) -> Vec<BenchRow> {
        let size = self.value_size;
        vec![
            self.best_get.to_row(format!("redis best GET {size}B")),
            self.best_set.to_row(format!("redis best SET {size}B")),
            self.unpipelined_get
                .to_row(format!("redis unpipelined GET {size}B")),
        ]
    }
}

/// Runs the Redis baseline sweep on one private server: populate, then every
/// (pipeline, clients) combination, and the `--threads` extras; reports the
/// best GET/SET over all of them (threaded runs included) and the
/// unpipelined single-connection GET/SET.
pub fn redis_baseline(opts: &RedisBaselineOpts) -> Result<RedisBaseline> {
    if opts.pipelines.is_empty() || opts.clients.is_empty() {
        return Err(BenchError::InvalidArgument(
            "redis baseline needs at least one pipeline depth and client count".into(),
        ));
    }
    let server = RedisServer::start()?;
    eprintln!(
        "[farcache-bench] redis baseline: value size {} B, populating {} keys",
        opts.value_size, opts.keyspace
    );
    server.populate(opts.keyspace, opts.value_size)?;
    let mut runs = Vec::new();
    for run in opts.sweep() {
        runs.extend(server.benchmark(&run)?);
    }
    let pick = |test: &str, filter: &dyn Fn(&RedisResult) -> bool| -> Result<RedisResult> {
        runs.iter()
            .filter(|r| r.test.eq_ignore_ascii_case(test) && filter(r))
            .max_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec))
            .cloned()
            .ok_or_else(|| parse_err("redis-benchmark", format!("no {test} result in sweep")))
    };
    let unpiped = |r: &RedisResult| r.pipeline == 1 && r.clients == 1 && r.threads == 1;
    Ok(RedisBaseline {
        value_size: opts.value_size,
        keyspace: opts.keyspace,
        best_get: pick("GET", &|_| true)?,
        best_set: pick("SET", &|_| true)?,
        unpipelined_get: pick("GET", &unpiped)?,
        unpipelined_set: pick("SET", &unpiped)?,
        runs,
    })
}

#[cfg(test)]
mod tests;
