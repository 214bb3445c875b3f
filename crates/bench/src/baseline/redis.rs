//! Redis baseline: a private `redis-server` driven by `redis-benchmark`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ChildServer, free_port, run_checked};
use crate::error::{BenchError, Result, parse_err};
use crate::report::{BenchRow, nan_as_null};
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
    /// Number of distinct random keys (`-r`).
    pub keyspace: u64,
}

impl Default for RedisOpts {
    fn default() -> Self {
        RedisOpts {
            value_size: 64,
            clients: 1,
            pipeline: 1,
            requests: 20_000,
            keyspace: 100_000,
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

    /// Short description, e.g. `redis GET P=64 c=4`.
    pub fn label(&self) -> String {
        format!("redis {} P={} c={}", self.test, self.pipeline, self.clients)
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
        ensure_tools(&[Tool::RedisServer, Tool::RedisBenchmark])?;
        let mut last_err = None;
        // The port is free when picked but may be grabbed before redis binds
        // it; retry a few times.
        for _ in 0..3 {
            let port = free_port()?;
            let mut cmd = Command::new("redis-server");
            cmd.args(["--save", "", "--appendonly", "no", "--port"])
                .arg(port.to_string())
                .args(["--daemonize", "no", "--bind", "127.0.0.1"]);
            match ChildServer::spawn("redis-server", cmd, port, Duration::from_secs(10), ping) {
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
    pub fn benchmark(&self, opts: &RedisOpts) -> Result<Vec<RedisResult>> {
        run_benchmark(self.port(), opts, "get,set")
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
        };
        run_benchmark(self.port(), &opts, "set").map(|_| ())
    }
}

/// Sends a raw RESP `PING` and checks for `+PONG`.
fn ping(port: u16) -> bool {
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
    if opts.clients == 0 || opts.pipeline == 0 || opts.requests == 0 || opts.keyspace == 0 {
        return Err(BenchError::InvalidArgument(format!(
            "redis-benchmark options must be non-zero: {opts:?}"
        )));
    }
    let mut cmd = Command::new("redis-benchmark");
    cmd.args(["-h", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(["-t", tests, "-n"])
        .arg(opts.requests.to_string())
        .arg("-d")
        .arg(opts.value_size.to_string())
        .arg("-c")
        .arg(opts.clients.to_string())
        .arg("-P")
        .arg(opts.pipeline.to_string())
        .arg("-r")
        .arg(opts.keyspace.to_string())
        .arg("--csv");
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
}

impl RedisBaselineOpts {
    /// Default sweep: P in [1, 16, 64, 128], c in [1, 4], 200k pipelined /
    /// 20k unpipelined requests, 100k keys. `quick` halves request counts
    /// and the keyspace.
    pub fn new(value_size: usize, quick: bool) -> Self {
        let o = RedisBaselineOpts {
            value_size,
            pipelines: vec![1, 16, 64, 128],
            clients: vec![1, 4],
            pipelined_requests: 200_000,
            unpipelined_requests: 20_000,
            keyspace: 100_000,
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
        }
    }
}

/// Redis reference numbers for one value size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RedisBaseline {
    pub value_size: usize,
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
/// (pipeline, clients) combination; reports the best pipelined GET/SET and the
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
    let mut combos: Vec<(usize, usize)> = Vec::new();
    for &p in &opts.pipelines {
        for &c in &opts.clients {
            combos.push((p, c));
        }
    }
    if !combos.contains(&(1, 1)) {
        combos.push((1, 1));
    }
    for (p, c) in combos {
        runs.extend(server.benchmark(&opts.run_opts(p, c))?);
    }
    let pick = |test: &str, filter: &dyn Fn(&RedisResult) -> bool| -> Result<RedisResult> {
        runs.iter()
            .filter(|r| r.test.eq_ignore_ascii_case(test) && filter(r))
            .max_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec))
            .cloned()
            .ok_or_else(|| parse_err("redis-benchmark", format!("no {test} result in sweep")))
    };
    let unpiped = |r: &RedisResult| r.pipeline == 1 && r.clients == 1;
    Ok(RedisBaseline {
        value_size: opts.value_size,
        best_get: pick("GET", &|_| true)?,
        best_set: pick("SET", &|_| true)?,
        unpipelined_get: pick("GET", &unpiped)?,
        unpipelined_set: pick("SET", &unpiped)?,
        runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from redis-benchmark 7.0.15 on the dev machine
    /// (`-t get,set -n 100000 -d 64 -c 1 -P 64 -r 1000 --csv`).
    const REDIS7_CSV: &str = r#""test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET","602602.44","0.093","0.056","0.095","0.135","0.151","0.271"
"GET","826710.75","0.063","0.048","0.063","0.087","0.111","1.695"
"#;

    /// Format of redis-benchmark before Redis 6.2 (no header, 2 columns).
    const OLD_CSV: &str = "\"SET\",\"26881.72\"\r\n\"GET\",\"28612.30\"\r\n";

    fn opts() -> RedisOpts {
        RedisOpts {
            value_size: 64,
            clients: 1,
            pipeline: 64,
            requests: 100_000,
            keyspace: 1000,
        }
    }

    #[test]
    fn parses_redis7_csv() {
        let r = parse_redis_csv(REDIS7_CSV, &opts()).expect("parse");
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].test, "SET");
        assert_eq!(r[1].test, "GET");
        assert!((r[1].ops_per_sec - 826_710.75).abs() < 1e-6);
        assert!((r[1].p50_us - 63.0).abs() < 1e-9);
        assert!((r[1].p99_us - 111.0).abs() < 1e-9);
        assert!((r[1].avg_us - 63.0).abs() < 1e-9);
        assert!((r[0].p50_us - 95.0).abs() < 1e-9);
        assert_eq!(r[0].pipeline, 64);
        assert_eq!(r[0].value_size, 64);
        assert!((r[1].mops() - 0.82671075).abs() < 1e-9);
    }

    #[test]
    fn parses_old_two_column_csv() {
        let r = parse_redis_csv(OLD_CSV, &opts()).expect("parse");
        assert_eq!(r.len(), 2);
        assert!((r[0].ops_per_sec - 26_881.72).abs() < 1e-6);
        assert!(r[0].p50_us.is_nan() && r[0].p99_us.is_nan() && r[0].avg_us.is_nan());
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_redis_csv("ERROR: connection refused\n", &opts()).is_err());
        assert!(parse_redis_csv("\"GET\",\"fast\"\n", &opts()).is_err());
    }

    #[test]
    fn baseline_opts_scaling() {
        let o = RedisBaselineOpts::new(64, true);
        assert_eq!(o.pipelined_requests, 100_000);
        assert_eq!(o.unpipelined_requests, 10_000);
        assert_eq!(o.run_opts(1, 4).requests, 40_000);
        assert_eq!(o.run_opts(64, 4).requests, 100_000);
    }

    #[test]
    #[ignore = "runs redis-server and redis-benchmark (several seconds)"]
    fn live_redis_baseline() {
        let mut o = RedisBaselineOpts::new(64, true).scaled(0.2);
        o.pipelines = vec![1, 64];
        o.clients = vec![1];
        let b = redis_baseline(&o).expect("redis baseline");
        assert!(b.best_get_mops() > 0.01, "{b:?}");
        assert!(b.best_get.ops_per_sec >= b.unpipelined_get.ops_per_sec);
        assert!(b.unpipelined_get_p50_us() > 0.0);
        let single = redis_get_set(&RedisOpts {
            requests: 2000,
            keyspace: 1000,
            ..RedisOpts::default()
        })
        .expect("redis_get_set");
        assert_eq!(single.len(), 2);
    }
}
