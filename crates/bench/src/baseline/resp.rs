//! A spinning RESP2 driver for Redis: batched `MGET`/`MSET` and pipelined
//! `GET`/`SET` from busy-polling non-blocking connections (see
//! [`super::driver`] for why), plus the unpipelined GET latency.
//!
//! Keys are `key:%012d`, the keys redis-benchmark's `-r` hits, so the same
//! populated server serves both drivers.

use std::io::Write;

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::driver::{
    self, Codec, Decoded, FirstError, KEY_LEN, KeyDigits, LoadOpts, LoadOutcome, find_crlf, parse,
    parse_int, validate_keyspace, value_bytes,
};
use super::resp_conn::{Reply, RespConn, push_bulk};
use crate::error::Result;
use crate::histogram::LatencySummary;

const WHAT: &str = "redis reply";

/// Longest status/error/header line accepted before calling the stream broken.
const MAX_LINE: usize = 64 * 1024;

/// Largest bulk string accepted (Redis's own `proto-max-bulk-len` default).
const MAX_BULK: i64 = 512 * 1024 * 1024;

/// Keys per `MSET` while populating.
pub const POPULATE_BATCH: usize = 1000;

/// `MSET`s in flight while populating.
pub const POPULATE_DEPTH: usize = 8;

/// One RESP2 token. Arrays are returned as their header only; their
/// elements follow as separate tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RespToken<'a> {
    /// `+OK`
    Simple(&'a [u8]),
    /// `-ERR ...`
    Error(&'a [u8]),
    /// `:123`
    Integer(i64),
    /// `$3\r\nabc` (`None` for the nil `$-1`).
    Bulk(Option<&'a [u8]>),
    /// `*2` (`None` for the nil `*-1`).
    Array(Option<usize>),
}

/// Parses the RESP2 token at the front of `buf`: `Ok(None)` if it is not
/// complete yet, else the token and the bytes it spans. Malformed input
/// (unknown type byte, bad length, missing CRLF) is a [`BenchError::Parse`].
pub fn parse_token(buf: &[u8]) -> Result<Option<(RespToken<'_>, usize)>> {
    let Some(&ty) = buf.first() else {
        return Ok(None);
    };
    if !matches!(ty, b'+' | b'-' | b':' | b'$' | b'*') {
        return Err(parse(
            WHAT,
            format!("unexpected type byte {:?}", char::from(ty)),
        ));
    }
    let Some(cr) = find_crlf(WHAT, buf, MAX_LINE)? else {
        return Ok(None);
    };
    let line = &buf[1..cr];
    let next = cr + 2;
    let token = match ty {
        b'+' => RespToken::Simple(line),
        b'-' => RespToken::Error(line),
        b':' => RespToken::Integer(parse_int(WHAT, line)?),
        b'$' => match parse_int(WHAT, line)? {
            -1 => RespToken::Bulk(None),
            len @ 0..=MAX_BULK => {
                let end = next + len as usize;
                if buf.len() < end + 2 {
                    return Ok(None);
                }
                if &buf[end..end + 2] != b"\r\n" {
                    return Err(parse(
                        WHAT,
                        format!("bulk string of {len} bytes not followed by CRLF"),
                    ));
                }
                return Ok(Some((RespToken::Bulk(Some(&buf[next..end])), end + 2)));
            }
            len => return Err(parse(WHAT, format!("bad bulk length {len}"))),
        },
        _ => match parse_int(WHAT, line)? {
            -1 => RespToken::Array(None),
            len if len >= 0 => RespToken::Array(Some(len as usize)),
            len => return Err(parse(WHAT, format!("bad array length {len}"))),
        },
    };
    Ok(Some((token, next)))
}

/// How a batch of keys is sent to Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RespMode {
    /// One `MGET k1 .. kb` per batch.
    Mget,
    /// `b` `GET`s written together (pipelined).
    PipelinedGet,
    /// One `MSET k1 v .. kb v` per batch.
    Mset,
    /// `b` `SET`s written together (pipelined).
    PipelinedSet,
}

impl RespMode {
    /// Whether the mode reads (GET, MGET) rather than writes.
    pub fn is_read(self) -> bool {
        matches!(self, RespMode::Mget | RespMode::PipelinedGet)
    }

    /// One command per batch (MGET/MSET) rather than one per key.
    pub fn is_multi_key(self) -> bool {
        matches!(self, RespMode::Mget | RespMode::Mset)
    }

    /// Short description, e.g. `MGET b=1024 q=4` / `pipelined GET P=1024 q=4`.
    pub fn label(self, batch: usize, depth: usize) -> String {
        match self {
            RespMode::Mget => format!("MGET b={batch} q={depth}"),
            RespMode::Mset => format!("MSET b={batch} q={depth}"),
            RespMode::PipelinedGet => format!("pipelined GET P={batch} q={depth}"),
            RespMode::PipelinedSet => format!("pipelined SET P={batch} q={depth}"),
        }
    }
}

/// Encodes batches in one [`RespMode`] and checks their replies: the reply
/// count, that reads return bulk strings of `value_size` bytes, that writes
/// return `+OK`. Error replies, nils and wrong sizes count as failed keys;
/// anything else (wrong shape, wrong count) is a protocol error.
#[derive(Debug)]
pub(crate) struct RespCodec {
    mode: RespMode,
    value_size: usize,
    /// `$len\r\n<value>\r\n`, copied into every write.
    value_arg: Vec<u8>,
    /// Top-level replies still due for the current batch (0 = not started).
    replies_left: usize,
    /// Elements still due in the current `MGET` array.
    elems_left: usize,
    errors: u64,
    first_error: FirstError,
}

/// `$16\r\nkey:000000000000\r\n` with the digits at [`KEY_ARG_DIGITS`].
const KEY_ARG: [u8; 23] = *b"$16\r\nkey:000000000000\r\n";
const KEY_ARG_DIGITS: usize = 9;
const _: () = assert!(KEY_LEN == 16);

impl RespCodec {
    pub(crate) fn new(mode: RespMode, value_size: usize) -> Self {
        let mut value_arg = Vec::new();
        push_bulk(&mut value_arg, &value_bytes(value_size));
        RespCodec {
            mode,
            value_size,
            value_arg,
            replies_left: 0,
            elems_left: 0,
            errors: 0,
            first_error: FirstError::default(),
        }
    }

    /// Appends `k` as the bulk string `$16\r\nkey:%012d\r\n`.
    pub(crate) fn push_key(out: &mut Vec<u8>, k: &KeyDigits) {
        let mut arg = KEY_ARG;
        arg[KEY_ARG_DIGITS..KEY_ARG_DIGITS + k.len()].copy_from_slice(k);
        out.extend_from_slice(&arg);
    }

    /// Checks one value of a read.
    fn value(&mut self, v: Option<&[u8]>) {
        match v {
            Some(v) if v.len() == self.value_size => {}
            Some(v) => {
                self.errors += 1;
                let (got, want) = (v.len(), self.value_size);
                self.first_error
                    .note(|| format!("value of {got} bytes, expected {want}"));
            }
            None => {
                self.errors += 1;
                self.first_error.note(|| "nil reply (key missing)".into());
            }
        }
    }

    fn error_reply(&mut self, msg: &[u8], keys: usize) {
        self.errors += keys as u64;
        self.first_error
            .note(|| String::from_utf8_lossy(msg).into_owned());
    }
}

impl Codec for RespCodec {
    fn encode(&mut self, keys: &[KeyDigits], out: &mut Vec<u8>) {
        let per_key = KEY_ARG.len()
            + if self.mode.is_read() {
                0
            } else {
                self.value_arg.len()
            };
        out.reserve(keys.len() * (per_key + 24) + 32);
        match self.mode {
            RespMode::Mget | RespMode::Mset => {
                let (args_per_key, name): (usize, &[u8]) = match self.mode {
                    RespMode::Mget => (1, b"$4\r\nMGET\r\n"),
                    _ => (2, b"$4\r\nMSET\r\n"),
                };
                // Writing to a Vec cannot fail.
                let _ = write!(out, "*{}\r\n", 1 + args_per_key * keys.len());
                out.extend_from_slice(name);
                for k in keys {
                    Self::push_key(out, k);
                    if args_per_key == 2 {
                        out.extend_from_slice(&self.value_arg);
                    }
                }
            }
            RespMode::PipelinedGet => {
                for k in keys {
                    out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
                    Self::push_key(out, k);
                }
            }
            RespMode::PipelinedSet => {
                for k in keys {
                    out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
                    Self::push_key(out, k);
                    out.extend_from_slice(&self.value_arg);
                }
            }
        }
    }

    fn decode(&mut self, buf: &[u8], n: usize) -> Result<Decoded> {
        if self.replies_left == 0 {
            self.replies_left = if self.mode.is_multi_key() { 1 } else { n };
            self.elems_left = 0;
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
            if self.elems_left > 0 {
                match tok {
                    RespToken::Bulk(v) => self.value(v),
                    other => {
                        return Err(parse(
                            WHAT,
                            format!("MGET array element is {other:?}, expected a bulk string"),
                        ));
                    }
                }
                self.elems_left -= 1;
                if self.elems_left == 0 {
                    self.replies_left -= 1;
                }
                continue;
            }
            match (self.mode, tok) {
                (RespMode::Mget, RespToken::Array(Some(m))) if m == n => {
                    self.elems_left = m;
                    if m == 0 {
                        self.replies_left -= 1;
                    }
                }
                (RespMode::Mget, RespToken::Array(m)) => {
                    return Err(parse(
                        WHAT,
                        format!("MGET of {n} keys answered with an array of {m:?}"),
                    ));
                }
                (RespMode::PipelinedGet, RespToken::Bulk(v)) => {
                    self.value(v);
                    self.replies_left -= 1;
                }
                (RespMode::Mset | RespMode::PipelinedSet, RespToken::Simple(b"OK")) => {
                    self.replies_left -= 1;
                }
                (mode, RespToken::Error(msg)) => {
                    self.error_reply(msg, if mode.is_multi_key() { n } else { 1 });
                    self.replies_left -= 1;
                }
                (mode, other) => {
                    return Err(parse(
                        WHAT,
                        format!("unexpected reply to {mode:?}: {other:?}"),
                    ));
                }
            }
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

/// Stores `key:%012d` for every key in `0..keys` with `value_size`-byte
/// values ([`value_bytes`]): pipelined `MSET`s of [`POPULATE_BATCH`] keys,
/// [`POPULATE_DEPTH`] in flight, on one connection (Redis executes commands
/// on one thread, so more connections would not fill faster). 16 M keys of
/// 8 B take a few seconds.
pub fn populate(port: u16, keys: u64, value_size: usize) -> Result<()> {
    validate_keyspace(keys)?;
    let t0 = Instant::now();
    driver::fill(
        "redis",
        port,
        0..keys,
        1,
        POPULATE_BATCH,
        POPULATE_DEPTH,
        || RespCodec::new(RespMode::Mset, value_size),
    )?;
    eprintln!(
        "[farcache-bench] redis: populated {keys} keys of {value_size} B in {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A timed closed-loop run in `mode`: `opts.connections` connections, each
/// keeping `opts.depth` batches of `opts.batch` random keys in flight.
pub fn run(port: u16, mode: RespMode, opts: &LoadOpts) -> Result<LoadOutcome> {
    driver::run_timed("redis", port, opts, || {
        RespCodec::new(mode, opts.value_size)
    })
}

/// Latency of single `GET`s on one busy-polled connection, one at a time,
/// over `samples` requests (after an unrecorded tenth). Failed keys
/// (misses, wrong sizes, error replies) are an error.
pub fn unpipelined_get_latency(
    port: u16,
    keys: u64,
    value_size: usize,
    samples: u64,
) -> Result<LatencySummary> {
    let codec = RespCodec::new(RespMode::PipelinedGet, value_size);
    let (lat, errors, first) = driver::run_unpipelined("redis", port, keys, samples, codec)?;
    if errors > 0 {
        return Err(parse(
            WHAT,
            format!("{errors} failed GETs; first: {}", first.unwrap_or_default()),
        ));
    }
    Ok(lat)
}

/// `GET key:%012d` on a fresh blocking connection: the value, or `None` for nil.
pub fn get(port: u16, key: u64) -> Result<Option<Vec<u8>>> {
    let key = driver::key_name(key);
    match one_call(port, &[b"GET", key.as_bytes()])? {
        Reply::Bulk(v) => Ok(v),
        other => Err(parse(WHAT, format!("GET answered {other:?}"))),
    }
}

/// Number of keys in the server's database (`DBSIZE`).
pub fn dbsize(port: u16) -> Result<u64> {
    match one_call(port, &[b"DBSIZE"])? {
        Reply::Int(n) if n >= 0 => Ok(n as u64),
        other => Err(parse(WHAT, format!("DBSIZE answered {other:?}"))),
    }
}

/// One command on a fresh blocking connection.
fn one_call(port: u16, args: &[&[u8]]) -> Result<Reply> {
    RespConn::connect(port, Duration::from_secs(5))?.call(args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::driver::key_digits;
    use crate::baseline::redis::RedisServer;
    use crate::tools::{Tool, ensure_tools};

    fn tok(buf: &[u8]) -> (RespToken<'_>, usize) {
        parse_token(buf).expect("valid").expect("complete")
    }

    #[test]
    fn parses_tokens() {
        assert_eq!(tok(b"+OK\r\n"), (RespToken::Simple(b"OK"), 5));
        assert_eq!(
            tok(b"-ERR wrong\r\nxx"),
            (RespToken::Error(b"ERR wrong"), 12)
        );
        assert_eq!(tok(b":-42\r\n"), (RespToken::Integer(-42), 6));
        assert_eq!(tok(b"$3\r\nabc\r\n+"), (RespToken::Bulk(Some(b"abc")), 9));
        assert_eq!(tok(b"$0\r\n\r\n"), (RespToken::Bulk(Some(b"")), 6));
        assert_eq!(tok(b"$-1\r\n"), (RespToken::Bulk(None), 5));
        assert_eq!(tok(b"*2\r\n$1\r\na"), (RespToken::Array(Some(2)), 4));
        assert_eq!(tok(b"*-1\r\n"), (RespToken::Array(None), 5));
        // Binary-safe: CRLF inside a bulk string is data.
        assert_eq!(
            tok(b"$4\r\n\r\n\r\n\r\n"),
            (RespToken::Bulk(Some(b"\r\n\r\n")), 10)
        );
    }

    #[test]
    fn incomplete_tokens_wait() {
        for partial in [
            &b""[..],
            b"+O",
            b"+OK\r",
            b"$3\r\nab",
            b"$3\r\nabc\r",
            b"*10",
        ] {
            assert_eq!(
                parse_token(partial).expect("valid prefix"),
                None,
                "{partial:?}"
            );
        }
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            &b"?x\r\n"[..],
            b"$abc\r\n",
            b"$-2\r\n",
            b"$3\r\nabcd\r\n",
            b"*-5\r\n",
            b"+OK\n",
            b":\r\n",
        ] {
            assert!(parse_token(bad).is_err(), "{bad:?}");
        }
    }

    fn feed(mode: RespMode, vs: usize, n: usize, reply: &[u8], step: usize) -> Result<u64> {
        super::super::driver::feed_split(RespCodec::new(mode, vs), n, reply, step)
    }

    #[test]
    fn decodes_batches_split_anywhere() {
        let mget = b"*3\r\n$2\r\nab\r\n$2\r\ncd\r\n$2\r\nef\r\n";
        let gets = b"$2\r\nab\r\n$-1\r\n$3\r\nabc\r\n";
        for step in [1, 2, 3, 7, 1000] {
            assert_eq!(feed(RespMode::Mget, 2, 3, mget, step).ok(), Some(0));
            // One nil and one wrong size: two failed keys.
            assert_eq!(feed(RespMode::PipelinedGet, 2, 3, gets, step).ok(), Some(2));
            assert_eq!(feed(RespMode::Mset, 2, 3, b"+OK\r\n", step).ok(), Some(0));
            assert_eq!(
                feed(
                    RespMode::PipelinedSet,
                    2,
                    2,
                    b"+OK\r\n-OOM no memory\r\n",
                    step
                )
                .ok(),
                Some(1)
            );
            // An error instead of the MGET array fails every key.
            assert_eq!(
                feed(RespMode::Mget, 2, 3, b"-ERR x\r\n", step).ok(),
                Some(3)
            );
        }
    }

    #[test]
    fn keeps_first_error_and_rejects_wrong_shapes() {
        let mut c = RespCodec::new(RespMode::PipelinedSet, 1);
        let d = c
            .decode(b"-OOM command not allowed\r\n", 1)
            .expect("decode");
        assert_eq!(d.done, Some(1));
        assert_eq!(
            c.take_first_error().as_deref(),
            Some("OOM command not allowed")
        );
        // Wrong element count, wrong reply types.
        assert!(feed(RespMode::Mget, 2, 3, b"*2\r\n$2\r\nab\r\n$2\r\ncd\r\n", 100).is_err());
        assert!(feed(RespMode::Mget, 2, 1, b"*1\r\n:1\r\n", 100).is_err());
        assert!(feed(RespMode::Mset, 2, 1, b"$2\r\nOK\r\n", 100).is_err());
        assert!(feed(RespMode::PipelinedGet, 2, 1, b"+OK\r\n", 100).is_err());
    }

    #[test]
    fn encodes_commands() {
        let keys = [key_digits(1), key_digits(23)];
        let enc = |mode| {
            let mut out = Vec::new();
            RespCodec::new(mode, 3).encode(&keys, &mut out);
            String::from_utf8(out).expect("ascii")
        };
        let k1 = "$16\r\nkey:000000000001\r\n";
        let k2 = "$16\r\nkey:000000000023\r\n";
        let v = "$3\r\nabc\r\n";
        assert_eq!(enc(RespMode::Mget), format!("*3\r\n$4\r\nMGET\r\n{k1}{k2}"));
        assert_eq!(
            enc(RespMode::Mset),
            format!("*5\r\n$4\r\nMSET\r\n{k1}{v}{k2}{v}")
        );
        assert_eq!(
            enc(RespMode::PipelinedGet),
            format!("*2\r\n$3\r\nGET\r\n{k1}*2\r\n$3\r\nGET\r\n{k2}")
        );
        assert_eq!(
            enc(RespMode::PipelinedSet),
            format!("*3\r\n$3\r\nSET\r\n{k1}{v}*3\r\n$3\r\nSET\r\n{k2}{v}")
        );
    }

    /// Real redis-server: populate a tiny keyspace, check a value, run every
    /// mode briefly on 1 and 2 connections, and the unpipelined latency.
    #[test]
    fn live_redis_driver() {
        ensure_tools(&[Tool::RedisServer, Tool::RedisBenchmark])
            .expect("redis-server is needed for this test (CI installs it via ensure_tools)");
        let server = RedisServer::start().expect("start redis-server");
        let (keys, vs) = (1000, 8);
        populate(server.port(), keys, vs).expect("populate");
        assert_eq!(
            get(server.port(), 999).expect("get").as_deref(),
            Some(&value_bytes(vs)[..])
        );
        assert_eq!(get(server.port(), keys).expect("get"), None);
        for mode in [
            RespMode::Mget,
            RespMode::PipelinedGet,
            RespMode::Mset,
            RespMode::PipelinedSet,
        ] {
            for c in [1, 2] {
                let opts = LoadOpts::new(vs, keys, 64, 4, c, Duration::from_millis(200));
                let o = run(server.port(), mode, &opts).expect("run");
                assert!(o.mops > 0.0 && o.ops > 0, "{mode:?} c={c}: {o:?}");
                assert_eq!(o.errors, 0, "{mode:?} c={c}: {o:?}");
                assert!(o.batch_latency.p50_us > 0.0, "{o:?}");
                assert_eq!(o.ops, o.batches * 64);
            }
        }
        let lat = unpipelined_get_latency(server.port(), keys, vs, 500).expect("latency");
        assert_eq!(lat.count, 500);
        assert!(lat.p50_us > 0.0 && lat.p99_us >= lat.p50_us, "{lat:?}");
        assert_eq!(dbsize(server.port()).expect("dbsize"), keys);
    }

    /// A server preloaded from a snapshot holds exactly the keys and values
    /// `populate` would have written.
    #[test]
    fn live_redis_preloaded() {
        ensure_tools(&[Tool::RedisServer, Tool::RedisBenchmark])
            .expect("redis-server is needed for this test (CI installs it via ensure_tools)");
        for (keys, vs) in [(1000, 8), (300, 4096), (20_000, 100)] {
            let server = RedisServer::start_preloaded(keys, vs).expect("preloaded redis");
            assert_eq!(dbsize(server.port()).expect("dbsize"), keys);
            for k in [0, keys / 2, keys - 1] {
                assert_eq!(
                    get(server.port(), k).expect("get").as_deref(),
                    Some(&value_bytes(vs)[..]),
                    "key {k} of {keys}, {vs} B"
                );
            }
            let opts = LoadOpts::new(vs, keys, 16, 2, 1, Duration::from_millis(100));
            let o = run(server.port(), RespMode::Mget, &opts).expect("run");
            assert!(o.ops > 0 && o.errors == 0, "{o:?}");
        }
    }
}
