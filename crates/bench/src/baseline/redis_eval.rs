//! Redis baseline for `bench sproc`: the stored procedures' logic as Lua scripts.
//!
//! Each script is loaded once with `SCRIPT LOAD` and then driven two ways, and the
//! faster counts (named in [`RedisEvalBaseline::best_peer`]):
//! - by `redis-benchmark [opts] EVALSHA <sha> <numkeys> key:__rand_int__ … <args>`
//!   (redis-benchmark runs any command given after its options and replaces every
//!   `__rand_int__` with its own random 12-digit number below `-r`), swept over
//!   pipeline depths and client counts;
//! - by `bench io`'s spinning closed-loop driver with the batch shape of its best GET
//!   form ([`super::redis_eval_spin`]: `b` calls pipelined per batch, `q` batches in
//!   flight, `c` connections).
//!
//! `EVALSHA` rather than `EVAL` keeps the script text (which contains commas) out of
//! redis-benchmark's CSV output and spares Redis hashing the script on every call: it
//! is the faster of the two, so the baseline is Redis's best case.

use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use super::eval_script::{EvalScript, KEY_VALUE, key_name};
use super::redis::{RedisBaselineOpts, RedisOpts, RedisResult, RedisServer, parse_redis_csv};
use super::redis_eval_spin::{EvalSpinOpts, EvalSpinRun, run_spin};
use super::resp_conn::{Reply, RespConn};
use super::run_checked;
use crate::error::{BenchError, Result, parse_err};
use crate::row::BenchRow;

/// Sweep parameters (the same grid and request counts as the GET/SET baseline).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisEvalOpts {
    pub pipelines: Vec<usize>,
    pub clients: Vec<usize>,
    /// Requests per pipelined (P > 1) run.
    pub pipelined_requests: u64,
    /// Requests per unpipelined run and connection.
    pub unpipelined_requests: u64,
    /// Keys `key:000000000000 ..` populated, all holding [`KEY_VALUE`].
    pub keyspace: u64,
    /// The spinning driver's runs (the shape of `bench io`'s peers).
    pub spin: EvalSpinOpts,
}

impl RedisEvalOpts {
    /// P in [1, 16, 64, 128] × c in [1, 4]; request counts and keyspace of
    /// [`RedisBaselineOpts::new`] (halved with `quick`); spinning runs of
    /// [`EvalSpinOpts::new`].
    pub fn new(quick: bool) -> Self {
        let b = RedisBaselineOpts::new(8, quick);
        Self {
            pipelines: b.pipelines,
            clients: b.clients,
            pipelined_requests: b.pipelined_requests,
            unpipelined_requests: b.unpipelined_requests,
            keyspace: b.keyspace,
            spin: EvalSpinOpts::new(quick),
        }
    }

    fn run_opts(&self, pipeline: usize, clients: usize) -> RedisOpts {
        let requests = if pipeline <= 1 {
            self.unpipelined_requests * clients as u64
        } else {
            self.pipelined_requests
        };
        RedisOpts {
            value_size: KEY_VALUE.len(),
            clients,
            pipeline,
            requests: requests.max((pipeline * clients) as u64),
            keyspace: self.keyspace,
            threads: 1,
        }
    }
}

/// Which load generator produced a figure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EvalDriver {
    /// `redis-benchmark` (one client thread, pipelined).
    #[default]
    RedisBenchmark,
    /// `bench io`'s spinning closed-loop driver.
    Spinning,
}

/// Results of one script's runs with both drivers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RedisEvalBaseline {
    pub script: EvalScript,
    /// SHA1 returned by `SCRIPT LOAD`.
    pub sha: String,
    /// Highest throughput over the redis-benchmark sweep (`best` in reports
    /// written before the spinning driver ran too).
    #[serde(alias = "best")]
    pub tool_best: RedisResult,
    /// redis-benchmark, one connection, no pipelining.
    pub unpipelined: RedisResult,
    /// The redis-benchmark sweep.
    pub runs: Vec<RedisResult>,
    /// The spinning driver's runs, in calls.
    #[serde(default)]
    pub spin_runs: Vec<EvalSpinRun>,
    /// The driver of the fastest error-free run of either kind.
    #[serde(default)]
    pub best_driver: EvalDriver,
    /// That run, e.g. `redis spinning EVALSHA P=1024 q=4 c=1` or
    /// `redis-benchmark redis EVALSHA P=128 c=1`.
    #[serde(default)]
    pub best_peer: String,
    /// Its million calls per second: what procedures are compared with.
    #[serde(default)]
    pub best_mops: f64,
}

impl RedisEvalBaseline {
    fn new(
        script: EvalScript,
        sha: String,
        runs: Vec<RedisResult>,
        spin_runs: Vec<EvalSpinRun>,
    ) -> Result<Self> {
        let tool_best = runs
            .iter()
            .max_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec))
            .cloned()
            .ok_or_else(|| parse_err("redis-benchmark", "empty EVALSHA sweep"))?;
        let unpipelined = runs
            .iter()
            .find(|r| r.pipeline == 1 && r.clients == 1)
            .cloned()
            .ok_or_else(|| parse_err("redis-benchmark", "no unpipelined EVALSHA run"))?;
        let mut b = RedisEvalBaseline {
            script,
            sha,
            tool_best,
            unpipelined,
            runs,
            spin_runs,
            best_driver: EvalDriver::RedisBenchmark,
            best_peer: String::new(),
            best_mops: f64::NAN,
        };
        (b.best_driver, b.best_peer, b.best_mops) = b.pick_best();
        Ok(b)
    }

    /// The faster of redis-benchmark's best and the spinning driver's best
    /// error-free run (driver, label, M calls/s).
    fn pick_best(&self) -> (EvalDriver, String, f64) {
        let tool = (
            EvalDriver::RedisBenchmark,
            format!("redis-benchmark {}", self.tool_best.label()),
            self.tool_best.mops(),
        );
        self.spin_best()
            .map(|r| (EvalDriver::Spinning, r.label.clone(), r.mops))
            .into_iter()
            .chain(std::iter::once(tool))
            .max_by(|a, b| a.2.total_cmp(&b.2))
            .unwrap_or_default()
    }

    /// The spinning driver's fastest error-free run.
    pub fn spin_best(&self) -> Option<&EvalSpinRun> {
        self.spin_runs
            .iter()
            .filter(|r| r.ok())
            .max_by(|a, b| a.mops.total_cmp(&b.mops))
    }

    /// M calls/s of the best run of either driver.
    pub fn best_mops(&self) -> f64 {
        self.best_mops
    }

    /// Report rows: the best of both drivers (naming its run in `best_peer`), each
    /// driver's best, and redis-benchmark unpipelined.
    pub fn rows(&self) -> Vec<BenchRow> {
        let l = &self.script.label;
        let name = format!("redis best EVALSHA {l}");
        let best = match (self.best_driver, self.spin_best()) {
            (EvalDriver::Spinning, Some(s)) => s.to_row(name),
            _ => self.tool_best.to_row(name),
        };
        let mut rows = vec![best.with_best_peer(self.best_peer.clone(), self.best_mops)];
        if let Some(s) = self.spin_best() {
            rows.push(s.to_row(format!("redis spinning EVALSHA {l}")));
        } else if let Some(s) = self
            .spin_runs
            .iter()
            .max_by(|a, b| a.mops.total_cmp(&b.mops))
        {
            rows.push(s.to_row(format!("redis spinning EVALSHA {l} ({} errors)", s.errors)));
        }
        rows.push(
            self.tool_best
                .to_row(format!("redis-benchmark EVALSHA {l}")),
        );
        rows.push(
            self.unpipelined
                .to_row(format!("redis unpipelined EVALSHA {l}")),
        );
        rows
    }
}

/// Starts a private redis-server, stores [`KEY_VALUE`] under every key of the
/// keyspace, loads each script, sweeps it with redis-benchmark and runs it with the
/// spinning driver.
pub fn redis_eval_baselines(
    opts: &RedisEvalOpts,
    scripts: &[EvalScript],
) -> Result<Vec<RedisEvalBaseline>> {
    if opts.pipelines.is_empty() || opts.clients.is_empty() || opts.keyspace == 0 {
        return Err(BenchError::InvalidArgument(
            "redis EVAL baseline needs pipeline depths, client counts and keys".into(),
        ));
    }
    let server = RedisServer::start()?;
    let mut conn = RespConn::connect(server.port(), Duration::from_secs(30))?;
    eprintln!(
        "[farcache-bench] redis EVAL baseline: populating {} keys",
        opts.keyspace
    );
    populate(&mut conn, opts.keyspace)?;
    let mut combos: Vec<(usize, usize)> = Vec::new();
    for &p in &opts.pipelines {
        for &c in &opts.clients {
            combos.push((p, c));
        }
    }
    if !combos.contains(&(1, 1)) {
        combos.push((1, 1));
    }
    let mut out = Vec::new();
    for s in scripts {
        let sha = match conn.call(&[b"SCRIPT", b"LOAD", s.body.as_bytes()])? {
            Reply::Bulk(Some(b)) => String::from_utf8_lossy(&b).into_owned(),
            other => {
                return Err(parse_err(
                    "redis SCRIPT LOAD",
                    format!("unexpected reply {other:?}"),
                ));
            }
        };
        // One call by hand: the script works and returns what the procedure would.
        let mut args: Vec<Vec<u8>> = vec![
            b"EVALSHA".to_vec(),
            sha.clone().into_bytes(),
            s.keys.to_string().into_bytes(),
        ];
        args.extend((0..s.keys as u64).map(|i| key_name(i * 7 % opts.keyspace).into_bytes()));
        args.extend(s.args.iter().map(|a| a.clone().into_bytes()));
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        match conn.call(&refs)? {
            Reply::Int(v) if v == s.expect => {}
            other => {
                return Err(parse_err(
                    "redis EVALSHA",
                    format!("{}: expected {}, got {other:?}", s.label, s.expect),
                ));
            }
        }
        let mut runs = Vec::new();
        for &(p, c) in &combos {
            runs.push(run_evalsha(server.port(), &opts.run_opts(p, c), &sha, s)?);
        }
        let spin_runs = run_spin(server.port(), &sha, s, opts.keyspace, &opts.spin)?;
        let b = RedisEvalBaseline::new(s.clone(), sha, runs, spin_runs)?;
        eprintln!(
            "[farcache-bench] redis EVALSHA {}: best {:.3} M calls/s ({}); redis-benchmark best {:.3} ({})",
            s.label,
            b.best_mops,
            b.best_peer,
            b.tool_best.mops(),
            b.tool_best.label()
        );
        out.push(b);
    }
    // Every call of both drivers must have run the script without an error.
    let stats = command_stats(&mut conn, "evalsha")?;
    if stats.failed > 0 {
        return Err(parse_err(
            "redis INFO commandstats",
            format!("{} of {} EVALSHA calls failed", stats.failed, stats.calls),
        ));
    }
    drop(conn);
    drop(server);
    Ok(out)
}

fn run_evalsha(port: u16, o: &RedisOpts, sha: &str, s: &EvalScript) -> Result<RedisResult> {
    let mut cmd = Command::new("redis-benchmark");
    cmd.args(["-h", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .arg("-n")
        .arg(o.requests.to_string())
        .arg("-c")
        .arg(o.clients.to_string())
        .arg("-P")
        .arg(o.pipeline.to_string())
        .arg("-r")
        .arg(o.keyspace.to_string())
        .arg("--csv")
        .args(["EVALSHA", sha])
        .arg(s.keys.to_string());
    for _ in 0..s.keys {
        cmd.arg("key:__rand_int__");
    }
    cmd.args(&s.args);
    let out = run_checked(cmd)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stdout.contains("Error from server") || stderr.contains("Error from server") {
        return Err(parse_err(
            "redis-benchmark",
            format!("EVALSHA failed: {}", stderr.trim()),
        ));
    }
    let mut r = parse_redis_csv(&stdout, o)?;
    if r.len() != 1 {
        return Err(parse_err(
            "redis-benchmark",
            format!("expected one EVALSHA result line, got {}", r.len()),
        ));
    }
    let mut r = r.remove(0);
    r.test = "EVALSHA".into();
    Ok(r)
}

struct CommandStats {
    calls: u64,
    failed: u64,
}

/// `SET key:i KEY_VALUE` for every `i < keyspace`, pipelined.
fn populate(conn: &mut RespConn, keyspace: u64) -> Result<()> {
    const CHUNK: u64 = 1000;
    let mut i = 0;
    while i < keyspace {
        let n = CHUNK.min(keyspace - i);
        for j in i..i + n {
            conn.send(&[b"SET", key_name(j).as_bytes(), KEY_VALUE.as_bytes()])?;
        }
        conn.flush()?;
        for _ in 0..n {
            match conn.read()? {
                Reply::Simple(s) if s == "OK" => {}
                other => {
                    return Err(parse_err("redis SET", format!("unexpected {other:?}")));
                }
            }
        }
        i += n;
    }
    Ok(())
}

/// `cmdstat_<cmd>` of `INFO commandstats`.
fn command_stats(conn: &mut RespConn, cmd: &str) -> Result<CommandStats> {
    let text = conn.info("commandstats")?;
    let prefix = format!("cmdstat_{cmd}:");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or("");
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok(CommandStats {
        calls: field("calls"),
        failed: field("failed_calls") + field("rejected_calls"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_redis_benchmark() {
        assert_eq!(key_name(42), "key:000000000042");
        assert_eq!(EvalScript::sum(3).expect, 3 * 12_345_678);
        assert_eq!(EvalScript::verify().args, vec![KEY_VALUE.to_string()]);
        let o = RedisEvalOpts::new(false);
        assert_eq!(o.run_opts(1, 4).requests, 4 * o.unpipelined_requests);
        assert_eq!(o.run_opts(64, 1).requests, o.pipelined_requests);
    }

    fn tool_run(pipeline: usize, clients: usize, ops_per_sec: f64) -> RedisResult {
        RedisResult {
            test: "EVALSHA".into(),
            value_size: 8,
            pipeline,
            clients,
            threads: 1,
            ops_per_sec,
            p50_us: 10.0,
            p99_us: 20.0,
            avg_us: 12.0,
        }
    }

    fn spin_run(c: usize, mops: f64, errors: u64) -> EvalSpinRun {
        EvalSpinRun {
            label: format!("redis spinning EVALSHA P=1024 q=4 c={c}"),
            connections: c,
            batch: 1024,
            depth: 4,
            calls: 1000,
            mops,
            p50_us: 100.0,
            p99_us: 200.0,
            errors,
            first_error: None,
        }
    }

    #[test]
    fn best_of_both_drivers_is_named() {
        let tool = vec![tool_run(1, 1, 50_000.0), tool_run(128, 1, 400_000.0)];
        // The spinning driver wins; its run with errors does not count.
        let b = RedisEvalBaseline::new(
            EvalScript::verify(),
            "ab".into(),
            tool.clone(),
            vec![spin_run(1, 0.5, 0), spin_run(2, 0.9, 3)],
        )
        .expect("baseline");
        assert_eq!(b.best_driver, EvalDriver::Spinning);
        assert_eq!(b.best_peer, "redis spinning EVALSHA P=1024 q=4 c=1");
        assert_eq!(b.best_mops(), 0.5);
        assert_eq!(b.tool_best.pipeline, 128);
        assert_eq!(b.unpipelined.pipeline, 1);
        let rows = b.rows();
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "redis best EVALSHA verify 1 key",
                "redis spinning EVALSHA verify 1 key",
                "redis-benchmark EVALSHA verify 1 key",
                "redis unpipelined EVALSHA verify 1 key",
            ]
        );
        assert_eq!((rows[0].mops, rows[0].b), (0.5, Some(1024)));
        assert_eq!(rows[0].best_peer.as_deref(), Some(b.best_peer.as_str()));
        assert_eq!(rows[2].mops, 0.4);
        // redis-benchmark wins.
        let b = RedisEvalBaseline::new(
            EvalScript::sum(2),
            "ab".into(),
            tool.clone(),
            vec![spin_run(1, 0.3, 0)],
        )
        .expect("baseline");
        assert_eq!(b.best_driver, EvalDriver::RedisBenchmark);
        assert_eq!(b.best_peer, "redis-benchmark redis EVALSHA P=128 c=1");
        assert_eq!(b.best_mops(), 0.4);
        assert_eq!(b.rows()[0].q, Some(128));
        // No error-free spinning run: redis-benchmark, and the row says so.
        let b = RedisEvalBaseline::new(
            EvalScript::sum(2),
            "ab".into(),
            tool,
            vec![spin_run(1, 0.9, 1)],
        )
        .expect("baseline");
        assert_eq!(b.best_driver, EvalDriver::RedisBenchmark);
        assert_eq!(
            b.rows()[1].name,
            "redis spinning EVALSHA sum 2 keys (1 errors)"
        );
        // JSON: the driver spelled out; reports from before both drivers still load.
        let mut v = serde_json::to_value(&b).expect("json");
        assert_eq!(v["best_driver"], "redis-benchmark");
        let o = v.as_object_mut().expect("object");
        let tool_best = o.remove("tool_best").expect("tool_best");
        for k in ["spin_runs", "best_driver", "best_peer", "best_mops"] {
            o.remove(k);
        }
        o.insert("best".into(), tool_best);
        let old: RedisEvalBaseline = serde_json::from_value(v).expect("old format");
        assert_eq!(old.tool_best, b.tool_best);
        assert!(old.spin_runs.is_empty());
    }

    #[test]
    #[ignore = "runs redis-server and redis-benchmark (several seconds)"]
    fn live_eval_baseline() {
        let o = RedisEvalOpts {
            pipelines: vec![1, 16],
            clients: vec![1],
            pipelined_requests: 5000,
            unpipelined_requests: 2000,
            keyspace: 1000,
            spin: EvalSpinOpts {
                batch: 64,
                depth: 4,
                connections: vec![1, 2],
                duration: Duration::from_millis(200),
            },
        };
        let b = redis_eval_baselines(&o, &[EvalScript::verify(), EvalScript::sum(2)])
            .expect("eval baseline");
        assert_eq!(b.len(), 2);
        assert!(b[0].tool_best.ops_per_sec >= b[0].unpipelined.ops_per_sec);
        assert_eq!(b[1].tool_best.test, "EVALSHA");
        for e in &b {
            assert_eq!(e.spin_runs.len(), 2, "{e:?}");
            for r in &e.spin_runs {
                assert!(r.ok() && r.calls > 0, "{r:?}");
                assert_eq!(r.calls % 64, 0, "whole batches of calls: {r:?}");
            }
            let spin = e.spin_best().map_or(0.0, |r| r.mops);
            assert_eq!(e.best_mops, spin.max(e.tool_best.mops()), "{e:?}");
            eprintln!(
                "{}: spinning {spin:.3} M calls/s, redis-benchmark {:.3}; best {}",
                e.script.label,
                e.tool_best.mops(),
                e.best_peer
            );
        }
    }
}
