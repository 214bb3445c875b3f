//! Redis `EVALSHA` driven by the spinning closed-loop driver of `bench io`
//! ([`super::driver`]), with the batch shape of its best GET form: `b` calls
//! written together (pipelined) per batch, `q` batches in flight, one thread per
//! connection. `bench sproc` takes the better of this and redis-benchmark.
//!
//! The driver hands a codec batches of keys and counts keys; a script takes
//! `k = script.keys` keys per call, so a batch of `b` calls is asked for as
//! `b·k` keys, each call taking the next `k`, and the outcome is converted
//! back to calls.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::driver::{self, Codec, Decoded, FirstError, KeyDigits, LoadOpts, LoadOutcome, parse};
use super::eval_script::{EvalScript, KEY_VALUE};
use super::resp::{RespCodec, RespToken, parse_token};
use super::resp_conn::{push_array_head, push_bulk};
use crate::error::{BenchError, Result};
use crate::row::{BenchRow, nan_as_null};

const WHAT: &str = "redis EVALSHA reply";

/// Encodes batches of `EVALSHA` calls of one script and checks every reply is
/// the integer the script must return ([`EvalScript::expect`]). A wrong value or
/// an error reply is a failed call; any other reply shape is a protocol error.
#[derive(Debug)]
pub(crate) struct EvalCodec {
    /// `*N\r\n$7\r\nEVALSHA\r\n$40\r\n<sha>\r\n$<len>\r\n<k>\r\n`.
    head: Vec<u8>,
    /// The script's `ARGV`, each as a bulk string.
    argv: Vec<u8>,
    /// Keys per call (`k` ≥ 1).
    keys_per_call: usize,
    expect: i64,
    /// Replies still due for the current batch (0 = not started).
    replies_left: usize,
    /// Failed calls of the current batch.
    errors: u64,
    first_error: FirstError,
}

impl EvalCodec {
    /// A codec for `script`, loaded in Redis as `sha`; `script.keys` must be ≥ 1.
    pub(crate) fn new(sha: &str, script: &EvalScript) -> Result<Self> {
        if script.keys == 0 {
            return Err(BenchError::InvalidArgument(format!(
                "{}: the spinning EVALSHA driver needs at least one key per call",
                script.label
            )));
        }
        let k = script.keys.to_string();
        let mut head = Vec::new();
        push_array_head(&mut head, 3 + script.keys + script.args.len());
        for a in [&b"EVALSHA"[..], sha.as_bytes(), k.as_bytes()] {
            push_bulk(&mut head, a);
        }
        let mut argv = Vec::new();
        for a in &script.args {
            push_bulk(&mut argv, a.as_bytes());
        }
        Ok(EvalCodec {
            head,
            argv,
            keys_per_call: script.keys,
            expect: script.expect,
            replies_left: 0,
            errors: 0,
            first_error: FirstError::default(),
        })
    }

    /// A codec for the same calls with no batch in progress.
    fn fresh(&self) -> Self {
        EvalCodec {
            head: self.head.clone(),
            argv: self.argv.clone(),
            keys_per_call: self.keys_per_call,
            expect: self.expect,
            replies_left: 0,
            errors: 0,
            first_error: FirstError::default(),
        }
    }

    /// Calls in a batch of `keys` keys.
    fn calls(&self, keys: usize) -> usize {
        keys / self.keys_per_call
    }
}

impl Codec for EvalCodec {
    fn encode(&mut self, keys: &[KeyDigits], out: &mut Vec<u8>) {
        let per_call = self.head.len() + self.keys_per_call * 23 + self.argv.len();
        out.reserve(self.calls(keys.len()) * per_call);
        for call in keys.chunks_exact(self.keys_per_call) {
            out.extend_from_slice(&self.head);
            for k in call {
                RespCodec::push_key(out, k);
            }
            out.extend_from_slice(&self.argv);
        }
    }

    fn decode(&mut self, buf: &[u8], n: usize) -> Result<Decoded> {
        if self.replies_left == 0 {
            self.replies_left = self.calls(n);
            self.errors = 0;
        }
        let mut pos = 0;
        while self.replies_left > 0 {
            let Some((tok, used)) = parse_token(&buf[pos..])? else {
                return Ok(Decoded {
                    consumed: pos,
                    done: None,
                });
            };
            pos += used;
            match tok {
                RespToken::Integer(v) if v == self.expect => {}
                RespToken::Integer(v) => {
                    self.errors += 1;
                    let want = self.expect;
                    self.first_error
                        .note(|| format!("EVALSHA returned {v}, expected {want}"));
                }
                RespToken::Error(msg) => {
                    self.errors += 1;
                    self.first_error
                        .note(|| String::from_utf8_lossy(msg).into_owned());
                }
                other => {
                    return Err(parse(
                        WHAT,
                        format!("EVALSHA answered {other:?}, expected an integer"),
                    ));
                }
            }
            self.replies_left -= 1;
        }
        Ok(Decoded {
            consumed: pos,
            done: Some(self.errors),
        })
    }

    fn take_first_error(&mut self) -> Option<String> {
        self.first_error.take()
    }
}

/// Shape of the spinning `EVALSHA` runs: that of `bench io`'s peers
/// (`PeerOpts::new`: b = 1024, q = 4, c ∈ {1, 2}, 2 s or 0.5 s with `quick`,
/// 100 ms warm-up, 50 µs spin).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalSpinOpts {
    /// Calls per batch (`b`), written together.
    pub batch: usize,
    /// Batches in flight per connection (`q`).
    pub depth: usize,
    /// Connection counts (`c`, one thread each); empty skips the spinning runs.
    pub connections: Vec<usize>,
    /// Measured window of each run.
    pub duration: Duration,
}

impl EvalSpinOpts {
    pub fn new(quick: bool) -> Self {
        let p = super::peers::PeerOpts::new(KEY_VALUE.len(), 1, quick);
        EvalSpinOpts {
            batch: p.batch,
            depth: p.depth,
            connections: p.connections,
            duration: p.duration,
        }
    }

    /// The driver's options for `script` on `c` connections: a batch of `b`
    /// calls is `b·k` keys.
    fn load_opts(&self, script: &EvalScript, keyspace: u64, c: usize) -> LoadOpts {
        LoadOpts::new(
            KEY_VALUE.len(),
            keyspace,
            self.batch * script.keys.max(1),
            self.depth,
            c,
            self.duration,
        )
    }
}

/// One timed spinning run of one script, counted in calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalSpinRun {
    /// e.g. `redis spinning EVALSHA P=1024 q=4 c=2`.
    pub label: String,
    pub connections: usize,
    /// Calls per batch (`b`).
    pub batch: usize,
    /// Batches in flight per connection (`q`).
    pub depth: usize,
    /// Calls completed in the measured window.
    pub calls: u64,
    /// Million calls per second (the sum of the connections' rates).
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub mops: f64,
    /// Batch latency percentiles, µs.
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p50_us: f64,
    #[serde(deserialize_with = "nan_as_null::deserialize")]
    pub p99_us: f64,
    /// Failed calls (wrong answers, error replies), warm-up included; should be 0.
    pub errors: u64,
    pub first_error: Option<String>,
}

impl EvalSpinRun {
    /// The driver's outcome (counted in keys, `keys_per_call` a call) in calls.
    fn from_outcome(o: &LoadOutcome, opts: &LoadOpts, keys_per_call: usize) -> Self {
        let k = keys_per_call.max(1);
        let batch = opts.batch / k;
        EvalSpinRun {
            label: format!(
                "redis spinning EVALSHA P={batch} q={} c={}",
                opts.depth, opts.connections
            ),
            connections: opts.connections,
            batch,
            depth: opts.depth,
            calls: o.ops / k as u64,
            mops: o.mops / k as f64,
            p50_us: o.batch_latency.p50_us,
            p99_us: o.batch_latency.p99_us,
            errors: o.errors,
            first_error: o.first_error.clone(),
        }
    }

    /// Whether the run counts: no failed call and a finite rate.
    pub fn ok(&self) -> bool {
        self.errors == 0 && self.mops.is_finite() && self.mops > 0.0
    }

    /// This run as a report row (latencies are per batch).
    pub fn to_row(&self, name: impl Into<String>) -> BenchRow {
        BenchRow {
            name: name.into(),
            system: "redis".into(),
            op: "EVALSHA".into(),
            record_size: KEY_VALUE.len(),
            distribution: "uniform".into(),
            c: Some(self.connections),
            b: Some(self.batch),
            q: Some(self.depth),
            mops: self.mops,
            p50_us: self.p50_us,
            p99_us: self.p99_us,
            p999_us: f64::NAN,
            ..BenchRow::default()
        }
    }
}

/// Runs `script` (loaded as `sha`) on Redis at `port` over keys `0..keyspace`,
/// once per connection count of `opts`.
pub fn run_spin(
    port: u16,
    sha: &str,
    script: &EvalScript,
    keyspace: u64,
    opts: &EvalSpinOpts,
) -> Result<Vec<EvalSpinRun>> {
    let proto = EvalCodec::new(sha, script)?;
    let mut runs = Vec::new();
    for &c in &opts.connections {
        let lo = opts.load_opts(script, keyspace, c);
        let o = driver::run_timed("redis", port, &lo, || proto.fresh())?;
        let run = EvalSpinRun::from_outcome(&o, &lo, script.keys);
        if run.errors > 0 {
            eprintln!(
                "[farcache-bench] warning: {} {}: {} failed calls (first: {})",
                run.label,
                script.label,
                run.errors,
                run.first_error.as_deref().unwrap_or("?")
            );
        }
        runs.push(run);
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::driver::{feed_split, key_digits};
    use crate::histogram::LatencyHistogram;

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    fn codec(s: &EvalScript) -> EvalCodec {
        EvalCodec::new(SHA, s).expect("codec")
    }

    fn enc(s: &EvalScript, keys: &[u64]) -> String {
        let keys: Vec<KeyDigits> = keys.iter().map(|&k| key_digits(k)).collect();
        let mut out = Vec::new();
        codec(s).encode(&keys, &mut out);
        String::from_utf8(out).expect("ascii")
    }

    fn key(i: u64) -> String {
        format!("$16\r\nkey:{i:012}\r\n")
    }

    #[test]
    fn encodes_one_call_per_k_keys() {
        let verify = |i| {
            format!(
                "*5\r\n$7\r\nEVALSHA\r\n$40\r\n{SHA}\r\n$1\r\n1\r\n{}$8\r\n12345678\r\n",
                key(i)
            )
        };
        assert_eq!(
            enc(&EvalScript::verify(), &[1, 23]),
            format!("{}{}", verify(1), verify(23))
        );
        let sum3 = |a, b, c| {
            format!(
                "*6\r\n$7\r\nEVALSHA\r\n$40\r\n{SHA}\r\n$1\r\n3\r\n{}{}{}",
                key(a),
                key(b),
                key(c)
            )
        };
        assert_eq!(
            enc(&EvalScript::sum(3), &[1, 2, 3, 4, 5, 6]),
            format!("{}{}", sum3(1, 2, 3), sum3(4, 5, 6))
        );
        // Twelve keys per call: the key count is two digits.
        let s = enc(&EvalScript::sum(12), &(0..12).collect::<Vec<_>>());
        assert!(s.starts_with(&format!(
            "*15\r\n$7\r\nEVALSHA\r\n$40\r\n{SHA}\r\n$2\r\n12\r\n"
        )));
        assert!(EvalCodec::new(SHA, &EvalScript::sum(0)).is_err());
    }

    #[test]
    fn decodes_calls_split_anywhere() {
        let v = 2 * 12_345_678;
        let sums = format!(":{v}\r\n:{v}\r\n");
        for step in [1, 2, 3, 5, 1000] {
            let feed = |s: &EvalScript, n, reply: &[u8]| feed_split(codec(s), n, reply, step);
            // verify: 3 keys = 3 calls.
            assert_eq!(
                feed(&EvalScript::verify(), 3, b":1\r\n:1\r\n:1\r\n").ok(),
                Some(0)
            );
            // A wrong answer and an error reply: two failed calls.
            assert_eq!(
                feed(&EvalScript::verify(), 3, b":1\r\n:0\r\n-ERR busy\r\n").ok(),
                Some(2)
            );
            // sum 2: 4 keys = 2 calls.
            assert_eq!(feed(&EvalScript::sum(2), 4, sums.as_bytes()).ok(), Some(0));
            assert_eq!(
                feed(&EvalScript::sum(2), 4, b":24691356\r\n:12345678\r\n").ok(),
                Some(1)
            );
        }
    }

    #[test]
    fn keeps_first_error_and_rejects_wrong_shapes() {
        let mut c = codec(&EvalScript::verify());
        let d = c.decode(b":0\r\n-NOSCRIPT x\r\n", 2).expect("decode");
        assert_eq!((d.consumed, d.done), (17, Some(2)));
        assert_eq!(
            c.take_first_error().as_deref(),
            Some("EVALSHA returned 0, expected 1")
        );
        // The next batch starts afresh.
        let d = c.decode(b":1\r\n", 1).expect("decode");
        assert_eq!(d.done, Some(0));
        for bad in [&b"$1\r\n1\r\n"[..], b"*1\r\n:1\r\n", b"+OK\r\n", b"$-1\r\n"] {
            assert!(
                feed_split(codec(&EvalScript::verify()), 1, bad, 100).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn counts_calls_not_keys() {
        let opts = LoadOpts::new(8, 1000, 1024 * 3, 4, 2, Duration::from_millis(500));
        let o = LoadOutcome {
            ops: 3 * 1024 * 10,
            batches: 10,
            errors: 0,
            first_error: None,
            secs: 0.5,
            mops: 0.06144,
            batch_latency: LatencyHistogram::new().summary(),
        };
        let r = EvalSpinRun::from_outcome(&o, &opts, 3);
        assert_eq!((r.batch, r.depth, r.connections), (1024, 4, 2));
        assert_eq!(r.calls, 10 * 1024);
        assert!((r.mops - 0.02048).abs() < 1e-12, "{r:?}");
        assert_eq!(r.label, "redis spinning EVALSHA P=1024 q=4 c=2");
        assert!(r.ok());
        let row = r.to_row("x");
        assert_eq!((row.b, row.q, row.c), (Some(1024), Some(4), Some(2)));
        assert!(!EvalSpinRun { errors: 1, ..r }.ok());
    }

    #[test]
    fn spin_opts_are_the_peers() {
        let o = EvalSpinOpts::new(true);
        assert_eq!((o.batch, o.depth), (1024, 4));
        assert_eq!(o.connections, vec![1, 2]);
        assert_eq!(o.duration, Duration::from_millis(500));
        let lo = o.load_opts(&EvalScript::sum(3), 5000, 2);
        assert_eq!((lo.batch, lo.depth, lo.connections), (3072, 4, 2));
        assert_eq!(lo.keys, 5000);
    }
}
