//! Spinning closed-loop load driver shared by the Redis ([`super::resp`]) and
//! memcached ([`super::memcached`]) peers.
//!
//! Why our own driver: `farcache bench io` measures farcache's client keeping
//! `q` batches of `b` ops in flight on non-blocking sockets that the calling
//! thread busy-polls. A peer measured with a blocking or event-loop load
//! generator (redis-benchmark) is partly measuring that generator, so the
//! peers are driven the same way: one thread per connection, requests encoded
//! straight into a send buffer, replies parsed in place, and, while waiting,
//! the socket polled with the core yielded between polls for a spin window
//! (50 µs by default, farcache's client default) before blocking in
//! `poll(2)`. That is what farcache's client does, and it keeps servers on
//! the same small host runnable: with 2 cores, client threads spinning
//! without end (`sched_yield` hands over little under CFS) take the cores
//! the server needs for the replies they wait for — filling memcached ran
//! at half speed that way.
//!
//! Each connection precomputes a ring of random keys before the clock (as
//! `crate::io` precomputes addresses), already spelled as the 12 ASCII digits
//! of `key:%012d`, so the measured loop only copies bytes.

use std::collections::VecDeque;
use std::io;
use std::ops::Range;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::error::{BenchError, Result};
use crate::histogram::{LatencyHistogram, LatencySummary};

mod conn;
pub(crate) use conn::SpinConn;

/// Digits in a key's number: keys are `key:%012d`, the spelling redis-benchmark
/// gives `key:__rand_int__` with `-r`, so both drivers hit the same keys.
pub const KEY_DIGITS: usize = 12;

/// Length of every key (`key:` + 12 digits).
pub const KEY_LEN: usize = 4 + KEY_DIGITS;

/// Keys must be below this to have exactly [`KEY_DIGITS`] digits.
pub const MAX_KEYS: u64 = 1_000_000_000_000;

/// The 12 ASCII digits of one key.
pub type KeyDigits = [u8; KEY_DIGITS];

/// Longest ring of precomputed random keys per connection (replayed
/// cyclically, like `crate::io`'s address ring).
pub const KEY_RING_MAX: usize = 1 << 20;

/// Warm-up before the measured window: connections, page faults, the
/// server's hash-table and allocator caches.
pub const DEFAULT_WARMUP: Duration = Duration::from_millis(100);

/// How long an idle connection busy-polls before blocking in `poll(2)`:
/// farcache's client default (`ClientConfig::spin`).
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// A run fails when a connection makes no progress at all for this long.
const STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The zero-padded digits of key `idx` (`idx` < [`MAX_KEYS`]).
pub fn key_digits(idx: u64) -> KeyDigits {
    let mut d = [b'0'; KEY_DIGITS];
    let mut v = idx % MAX_KEYS;
    let mut i = KEY_DIGITS;
    while v > 0 && i > 0 {
        i -= 1;
        d[i] = b'0' + (v % 10) as u8;
        v /= 10;
    }
    d
}

/// Key `idx` as text, e.g. `key:000000012345`.
pub fn key_name(idx: u64) -> String {
    format!("key:{idx:012}")
}

/// The value every peer stores: `value_size` bytes of a repeating `a..z`
/// pattern (not all-equal, so a misframed reply is unlikely to look right).
pub fn value_bytes(value_size: usize) -> Vec<u8> {
    (0..value_size).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Parameters of one timed closed-loop run against a peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadOpts {
    /// Value size in bytes (reads check it, writes store it).
    pub value_size: usize,
    /// Keys `0..keys` exist; each batch draws uniformly from them.
    pub keys: u64,
    /// Keys per batch (`b`).
    pub batch: usize,
    /// Batches kept in flight per connection (`q`).
    pub depth: usize,
    /// Connections, one thread each (`c`).
    pub connections: usize,
    /// Not counted: runs before the measured window.
    pub warmup: Duration,
    /// Measured window.
    pub duration: Duration,
    /// Busy-poll window of an idle connection before it blocks in `poll(2)`
    /// ([`DEFAULT_SPIN`]; `Duration::MAX` never blocks).
    pub spin: Duration,
    /// Seed of connection 0's key ring (connection `i` uses `seed + i`).
    pub seed: u64,
}

impl LoadOpts {
    /// `c` connections, `q` batches of `b` keys, 100 ms warm-up, 50 µs
    /// spin, seed 42.
    pub fn new(
        value_size: usize,
        keys: u64,
        batch: usize,
        depth: usize,
        connections: usize,
        duration: Duration,
    ) -> Self {
        LoadOpts {
            value_size,
            keys,
            batch,
            depth,
            connections,
            warmup: DEFAULT_WARMUP,
            duration,
            spin: DEFAULT_SPIN,
            seed: 42,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        validate_keyspace(self.keys)?;
        if self.batch == 0 || self.depth == 0 || self.connections == 0 {
            return Err(BenchError::InvalidArgument(format!(
                "batch, depth and connections must be non-zero: {self:?}"
            )));
        }
        if self.duration.is_zero() {
            return Err(BenchError::InvalidArgument(
                "a timed run needs a non-zero duration".into(),
            ));
        }
        Ok(())
    }
}

/// Checks `0 < keys < MAX_KEYS`.
pub(crate) fn validate_keyspace(keys: u64) -> Result<()> {
    if keys == 0 || keys >= MAX_KEYS {
        return Err(BenchError::InvalidArgument(format!(
            "keyspace must be in 1..{MAX_KEYS} (12-digit keys), got {keys}"
        )));
    }
    Ok(())
}

/// What a timed run measured, summed over its connections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadOutcome {
    /// Keys read or written by batches that completed in the measured window.
    pub ops: u64,
    /// Batches completed in the measured window.
    pub batches: u64,
    /// Keys that failed (error replies, misses, wrong value sizes), warm-up
    /// and drain included: any non-zero count means the run is suspect.
    pub errors: u64,
    /// The first error reply or mismatch seen, for diagnostics.
    pub first_error: Option<String>,
    /// Longest connection window, seconds.
    pub secs: f64,
    /// Million keys per second: the sum of the connections' rates.
    pub mops: f64,
    /// Batch latency: request encoded to last reply byte parsed.
    pub batch_latency: LatencySummary,
}

/// A request/reply protocol for batches of keys.
pub(crate) trait Codec {
    /// Appends the request for one batch of `keys` to `out`.
    fn encode(&mut self, keys: &[KeyDigits], out: &mut Vec<u8>);

    /// Consumes reply bytes of the oldest in-flight batch (of `n` keys) from
    /// the front of `buf`. Partial replies may be consumed token by token;
    /// the codec keeps its place until the batch is done.
    fn decode(&mut self, buf: &[u8], n: usize) -> Result<Decoded>;

    /// The first error the codec counted, if any (taken once at the end).
    fn take_first_error(&mut self) -> Option<String>;
}

/// Progress of [`Codec::decode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decoded {
    /// Bytes of `buf` used.
    pub consumed: usize,
    /// `Some(errors)` once the batch's reply is complete.
    pub done: Option<u64>,
}

/// Keeps the first error message of a run.
#[derive(Debug, Default)]
pub(crate) struct FirstError(Option<String>);

impl FirstError {
    pub(crate) fn note(&mut self, msg: impl FnOnce() -> String) {
        if self.0.is_none() {
            self.0 = Some(msg());
        }
    }

    pub(crate) fn take(&mut self) -> Option<String> {
        self.0.take()
    }
}

/// Where a connection's batches take their keys from.
#[derive(Debug)]
pub(crate) enum KeySource {
    /// Uniformly random keys, precomputed; the ring's length is a multiple
    /// of the batch so a batch is one contiguous slice.
    Ring {
        ring: Vec<KeyDigits>,
        batch: usize,
        pos: usize,
    },
    /// `range` in order, `batch` at a time (populating).
    Seq {
        range: Range<u64>,
        batch: usize,
        scratch: Vec<KeyDigits>,
    },
}

impl KeySource {
    /// A ring of `clamp(keys, 1024, 1 Mi)` (rounded up to whole batches)
    /// uniformly random keys below `keys`.
    pub(crate) fn random(keys: u64, batch: usize, seed: u64) -> Self {
        let batch = batch.max(1);
        let want = (keys as usize).clamp(1024, KEY_RING_MAX);
        let len = want.div_ceil(batch) * batch;
        let mut rng = StdRng::seed_from_u64(seed);
        let ring = (0..len)
            .map(|_| key_digits(rng.gen_range(0..keys.max(1))))
            .collect();
        KeySource::Ring {
            ring,
            batch,
            pos: 0,
        }
    }

    /// Every key of `range`, in order.
    pub(crate) fn sequential(range: Range<u64>, batch: usize) -> Self {
        KeySource::Seq {
            range,
            batch: batch.max(1),
            scratch: Vec::new(),
        }
    }

    /// The next batch; `None` once a sequential source is used up.
    fn next_batch(&mut self) -> Option<&[KeyDigits]> {
        match self {
            KeySource::Ring { ring, batch, pos } => {
                let start = *pos;
                *pos = if start + *batch >= ring.len() {
                    0
                } else {
                    start + *batch
                };
                ring.get(start..start + *batch)
            }
            KeySource::Seq {
                range,
                batch,
                scratch,
            } => {
                if range.is_empty() {
                    return None;
                }
                let n = (range.end - range.start).min(*batch as u64);
                scratch.clear();
                scratch.extend((range.start..range.start + n).map(key_digits));
                range.start += n;
                Some(scratch)
            }
        }
    }
}

/// `e`, saying which peer and which step.
pub(crate) fn ctx(peer: &str, what: &str, e: io::Error) -> BenchError {
    BenchError::Io(io::Error::new(e.kind(), format!("{peer} {what}: {e}")))
}

/// When a closed loop stops.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Until {
    /// Count batches completing in `[warmup end, +duration]` (the first
    /// completion past the end closes the window); then drain.
    Timed {
        warmup: Duration,
        duration: Duration,
    },
    /// Count the `samples` batches after the first `warmup` ones.
    Samples { warmup: u64, samples: u64 },
    /// Run until the key source is used up, counting everything.
    Exhausted,
}

/// Counters of one connection's closed loop.
#[derive(Debug)]
pub(crate) struct LoopStats {
    pub ops: u64,
    pub batches: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub secs: f64,
    pub hist: LatencyHistogram,
}

/// Keeps `depth` batches in flight on `conn` until `until`, busy-polling:
/// encode batches while fewer than `depth` are outstanding, write what the
/// socket takes, read what arrived, parse complete replies; when nothing
/// moved, yield the core, and once idle for the connection's spin window,
/// block in `poll(2)` until the socket can move bytes. Always returns with no batch in
/// flight, so the connection (and the server) is idle afterwards.
pub(crate) fn closed_loop<C: Codec>(
    conn: &mut SpinConn,
    codec: &mut C,
    keys: &mut KeySource,
    depth: usize,
    until: Until,
) -> Result<LoopStats> {
    let mut inflight: VecDeque<(Instant, usize)> = VecDeque::with_capacity(depth + 1);
    let mut hist = LatencyHistogram::new();
    let (mut ops, mut batches, mut errors, mut completed) = (0u64, 0u64, 0u64, 0u64);
    let begin = Instant::now();
    let (mut measuring, mut window_start, mut window_end) = match until {
        Until::Timed { warmup, duration } if warmup.is_zero() => (true, begin, begin + duration),
        Until::Samples { warmup: 0, .. } | Until::Exhausted => (true, begin, begin),
        _ => (false, begin, begin),
    };
    let mut secs: Option<f64> = None;
    let mut submitting = true;
    let mut idle_since: Option<Instant> = None;
    loop {
        while submitting && inflight.len() < depth.max(1) {
            match keys.next_batch() {
                Some(batch) => {
                    codec.encode(batch, &mut conn.out);
                    inflight.push_back((Instant::now(), batch.len()));
                }
                None => submitting = false,
            }
        }
        if inflight.is_empty() {
            break;
        }
        let mut moved = conn.flush()?;
        moved |= conn.fill()?;
        while let Some(&(t0, n)) = inflight.front() {
            let d = codec.decode(conn.pending(), n)?;
            conn.consume(d.consumed);
            let Some(batch_errors) = d.done else { break };
            inflight.pop_front();
            errors += batch_errors;
            completed += 1;
            let now = Instant::now();
            if measuring {
                ops += n as u64;
                batches += 1;
                hist.record_duration(now - t0);
            }
            match until {
                Until::Timed { warmup, duration } => {
                    if !measuring && secs.is_none() && now >= begin + warmup {
                        measuring = true;
                        window_start = now;
                        window_end = now + duration;
                    } else if measuring && now >= window_end {
                        measuring = false;
                        secs = Some((now - window_start).as_secs_f64());
                        submitting = false;
                    }
                }
                Until::Samples { warmup, samples } => {
                    if !measuring && secs.is_none() && completed >= warmup {
                        measuring = true;
                        window_start = now;
                    } else if measuring && batches >= samples {
                        measuring = false;
                        secs = Some((now - window_start).as_secs_f64());
                        submitting = false;
                    }
                }
                Until::Exhausted => {}
            }
        }
        if moved {
            idle_since = None;
        } else {
            let now = Instant::now();
            let since = *idle_since.get_or_insert(now);
            let idle = now - since;
            if idle > STALL_TIMEOUT {
                return Err(ctx(
                    conn.peer,
                    "wait",
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "no progress for {STALL_TIMEOUT:?} with {} batches in flight",
                            inflight.len()
                        ),
                    ),
                ));
            }
            if idle >= conn.spin {
                conn.wait()?;
            } else {
                std::thread::yield_now();
            }
        }
    }
    let secs = secs.unwrap_or_else(|| window_start.elapsed().as_secs_f64());
    Ok(LoopStats {
        ops,
        batches,
        errors,
        first_error: codec.take_first_error(),
        secs,
        hist,
    })
}

/// Runs `opts.connections` timed closed loops against 127.0.0.1:`port`, one
/// thread and one connection each, started together after every connection
/// has built its key ring and connected; sums their rates.
pub(crate) fn run_timed<C, F>(
    peer: &'static str,
    port: u16,
    opts: &LoadOpts,
    make_codec: F,
) -> Result<LoadOutcome>
where
    C: Codec,
    F: Fn() -> C + Sync,
{
    opts.validate()?;
    let barrier = Barrier::new(opts.connections);
    let until = Until::Timed {
        warmup: opts.warmup,
        duration: opts.duration,
    };
    let results: Vec<Result<LoopStats>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..opts.connections)
            .map(|i| {
                let (barrier, make_codec) = (&barrier, &make_codec);
                sc.spawn(move || {
                    let setup = SpinConn::connect(peer, port).map(|conn| {
                        let conn = conn.with_spin(opts.spin);
                        let keys = KeySource::random(opts.keys, opts.batch, opts.seed + i as u64);
                        (conn, keys)
                    });
                    // Every thread reaches the barrier, even after a failed
                    // setup, so none waits forever.
                    barrier.wait();
                    let (mut conn, mut keys) = setup?;
                    closed_loop(&mut conn, &mut make_codec(), &mut keys, opts.depth, until)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(BenchError::InvalidArgument(format!(
                        "{peer} load thread panicked"
                    )))
                })
            })
            .collect()
    });
    let mut hist = LatencyHistogram::new();
    let mut out = LoadOutcome {
        ops: 0,
        batches: 0,
        errors: 0,
        first_error: None,
        secs: 0.0,
        mops: 0.0,
        batch_latency: hist.summary(),
    };
    for r in results {
        let s = r?;
        out.ops += s.ops;
        out.batches += s.batches;
        out.errors += s.errors;
        out.first_error = out.first_error.or(s.first_error);
        out.secs = out.secs.max(s.secs);
        if s.secs > 0.0 {
            out.mops += s.ops as f64 / s.secs / 1e6;
        }
        hist.merge(&s.hist);
    }
    out.batch_latency = hist.summary();
    Ok(out)
}

/// One connection, one key at a time (`b = q = 1`): `samples` request
/// latencies after `samples / 10` (at least 100) unrecorded ones.
pub(crate) fn run_unpipelined<C: Codec>(
    peer: &'static str,
    port: u16,
    keys: u64,
    samples: u64,
    mut codec: C,
) -> Result<(LatencySummary, u64, Option<String>)> {
    validate_keyspace(keys)?;
    if samples == 0 {
        return Err(BenchError::InvalidArgument(
            "latency run needs at least one sample".into(),
        ));
    }
    let mut conn = SpinConn::connect(peer, port)?;
    let mut source = KeySource::random(keys, 1, 7);
    let until = Until::Samples {
        warmup: (samples / 10).max(100),
        samples,
    };
    let s = closed_loop(&mut conn, &mut codec, &mut source, 1, until)?;
    Ok((s.hist.summary(), s.errors, s.first_error))
}

/// Writes every key of `range` on `connections` connections (the range split
/// evenly), `batch` keys per request and `depth` requests in flight each.
/// Any error reply fails the fill.
pub(crate) fn fill<C, F>(
    peer: &'static str,
    port: u16,
    range: Range<u64>,
    connections: usize,
    batch: usize,
    depth: usize,
    make_codec: F,
) -> Result<()>
where
    C: Codec,
    F: Fn() -> C + Sync,
{
    let connections = connections.max(1) as u64;
    let per = (range.end - range.start).div_ceil(connections);
    let results: Vec<Result<LoopStats>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..connections)
            .map(|i| {
                let start = (range.start + i * per).min(range.end);
                let end = (start + per).min(range.end);
                let make_codec = &make_codec;
                sc.spawn(move || {
                    let mut conn = SpinConn::connect(peer, port)?;
                    let mut keys = KeySource::sequential(start..end, batch);
                    closed_loop(
                        &mut conn,
                        &mut make_codec(),
                        &mut keys,
                        depth,
                        Until::Exhausted,
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(BenchError::InvalidArgument(format!(
                        "{peer} populate thread panicked"
                    )))
                })
            })
            .collect()
    });
    for r in results {
        let s = r?;
        if s.errors > 0 {
            return Err(BenchError::Parse {
                what: peer,
                detail: format!(
                    "{} keys failed to store while populating; first: {}",
                    s.errors,
                    s.first_error.unwrap_or_default()
                ),
            });
        }
    }
    Ok(())
}

/// Position of the `\r` of the first `\r\n` in `buf`, or `None` if no line
/// end yet (an error once `max_line` bytes have no line end, or on a bare
/// `\n`).
pub(crate) fn find_crlf(what: &'static str, buf: &[u8], max_line: usize) -> Result<Option<usize>> {
    match buf.iter().position(|&c| c == b'\n') {
        Some(0) => Err(parse(what, "line starts with a bare LF")),
        Some(i) if buf[i - 1] == b'\r' => Ok(Some(i - 1)),
        Some(_) => Err(parse(what, "line ends with a bare LF")),
        None if buf.len() > max_line => {
            Err(parse(what, format!("no line end within {max_line} bytes")))
        }
        None => Ok(None),
    }
}

/// Parses a decimal integer with an optional leading `-`.
pub(crate) fn parse_int(what: &'static str, s: &[u8]) -> Result<i64> {
    let (neg, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 18 {
        return Err(parse(
            what,
            format!("bad integer {:?}", String::from_utf8_lossy(s)),
        ));
    }
    let mut v: i64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return Err(parse(
                what,
                format!("bad integer {:?}", String::from_utf8_lossy(s)),
            ));
        }
        v = v * 10 + i64::from(c - b'0');
    }
    Ok(if neg { -v } else { v })
}

pub(crate) fn parse(what: &'static str, detail: impl Into<String>) -> BenchError {
    crate::error::parse_err(what, detail)
}

/// Feeds `reply` to `codec` in pieces of `step` bytes, the way replies arrive split
/// across reads; returns the batch's failed-key count (codec tests of both peers).
#[cfg(test)]
pub(crate) fn feed_split(
    mut codec: impl Codec,
    n: usize,
    reply: &[u8],
    step: usize,
) -> Result<u64> {
    let mut pending: Vec<u8> = Vec::new();
    for piece in reply.chunks(step) {
        pending.extend_from_slice(piece);
        let d = codec.decode(&pending, n)?;
        pending.drain(..d.consumed);
        if let Some(e) = d.done {
            assert!(pending.is_empty(), "left over: {pending:?}");
            return Ok(e);
        }
    }
    panic!("batch never completed (step {step})");
}

#[cfg(test)]
mod tests;
