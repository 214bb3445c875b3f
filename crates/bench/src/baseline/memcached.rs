//! memcached peer: a private `memcached -t 2` and a spinning driver on its
//! text protocol (see [`super::driver`] for why it spins).
//!
//! Reads are multi-gets (`get k1 .. kb`, answered by one `VALUE` block per
//! hit, duplicates included, then `END`); writes are `b` pipelined
//! `set .. noreply` followed by the meta no-op `mn`, whose `MN` says the
//! batch before it is done (memcached answers in order), so writes cost no
//! per-key reply, like Redis's `MSET`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::driver::{
    self, Codec, Decoded, FirstError, KeyDigits, LoadOpts, LoadOutcome, find_crlf, parse,
    parse_int, validate_keyspace, value_bytes,
};
use super::{ChildServer, free_port};
use crate::error::{BenchError, Result};
use crate::histogram::LatencySummary;
use crate::tools::{Tool, ensure_tools, is_root};

const WHAT: &str = "memcached reply";

/// Longest reply line accepted (`VALUE <250-byte key> <flags> <bytes> <cas>`
/// fits easily).
const MAX_LINE: usize = 4096;

/// Largest value accepted in a `VALUE` block (memcached's item size limit is
/// at most 1 GiB).
const MAX_VALUE: i64 = 1 << 30;

/// Worker threads of the private memcached (`-t`).
pub const MEMCACHED_THREADS: usize = 2;

/// Keys per pipelined `set` batch while populating.
pub const POPULATE_BATCH: usize = 1000;

/// Batches in flight per connection while populating.
pub const POPULATE_DEPTH: usize = 8;

/// Connections used to populate (one per memcached worker thread).
pub const POPULATE_CONNECTIONS: usize = MEMCACHED_THREADS;

/// Cache memory (`-m`, MiB) for `keys` values of `value_size` bytes:
/// `keys × (value_size + 100) × 1.5`, at least 1024 MiB. The 100 bytes
/// cover the item header, key and suffix; the 1.5 covers slab-class
/// rounding (classes grow by 1.25×), so nothing is evicted.
pub fn memory_mib(keys: u64, value_size: usize) -> u64 {
    let bytes = keys as f64 * (value_size as f64 + 100.0) * 1.5;
    ((bytes / (1u64 << 20) as f64).ceil() as u64).max(1024)
}

/// Hash table size (`-o hashpower=N`, 2^N buckets) for `keys` items: at
/// least one bucket per key, so memcached never grows the table. Growing
/// it is a background thread re-hashing every item under the item locks,
/// which made populating 16 M keys 3-4× slower and would also run during
/// measurements. Clamped to memcached's 16..=32.
pub fn hashpower(keys: u64) -> u32 {
    let bits = u64::BITS - keys.saturating_sub(1).leading_zeros();
    bits.clamp(16, 32)
}

/// A private `memcached` on a free 127.0.0.1 port, killed on drop.
#[derive(Debug)]
pub struct MemcachedServer {
    inner: ChildServer,
    mem_mib: u64,
}

impl MemcachedServer {
    /// Installs memcached if needed (see [`ensure_tools`]), starts
    /// `memcached -t 2 -m <mem_mib> -p P -l 127.0.0.1 -U 0 -c 1024
    /// -o hashpower=<hashpower>` (plus `-u root` when root, which memcached
    /// otherwise refuses) and waits until it answers `version`.
    pub fn start(mem_mib: u64, hashpower: u32) -> Result<Self> {
        ensure_tools(&[Tool::Memcached])?;
        let mut last_err = None;
        // The port is free when picked but may be taken before memcached
        // binds it; retry a few times.
        for _ in 0..3 {
            let port = free_port()?;
            let mut cmd = Command::new("memcached");
            cmd.arg("-t")
                .arg(MEMCACHED_THREADS.to_string())
                .arg("-m")
                .arg(mem_mib.max(64).to_string())
                .arg("-p")
                .arg(port.to_string())
                .args(["-l", "127.0.0.1", "-U", "0", "-c", "1024", "-o"])
                .arg(format!("hashpower={}", hashpower.clamp(16, 32)));
            if is_root() {
                cmd.args(["-u", "root"]);
            }
            match ChildServer::spawn("memcached", cmd, port, Duration::from_secs(10), version) {
                Ok(inner) => return Ok(MemcachedServer { inner, mem_mib }),
                Err(e) => {
                    eprintln!("[farcache-bench] memcached failed to start: {e}");
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| BenchError::InvalidArgument("unreachable".into())))
    }

    /// Starts a server sized by [`memory_mib`] and [`hashpower`] for `keys`
    /// values.
    pub fn start_for(keys: u64, value_size: usize) -> Result<Self> {
        Self::start(memory_mib(keys, value_size), hashpower(keys))
    }

    /// TCP port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.inner.port()
    }

    /// Cache memory it was started with, MiB.
    pub fn mem_mib(&self) -> u64 {
        self.mem_mib
    }

    /// Whether the server answers `version`.
    pub fn is_alive(&mut self) -> bool {
        self.inner.is_alive() && version(self.port())
    }
}

/// Sends `version` and checks for `VERSION`.
fn version(port: u16) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let mut s = TcpStream::connect_timeout(
            &SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            Duration::from_millis(200),
        )?;
        s.set_read_timeout(Some(Duration::from_millis(500)))?;
        s.write_all(b"version\r\n")?;
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf)?;
        Ok(buf[..n].starts_with(b"VERSION "))
    };
    attempt().unwrap_or(false)
}

/// One reply element of the text protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McToken<'a> {
    /// `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n`
    Value {
        key: &'a [u8],
        flags: u32,
        data: &'a [u8],
    },
    /// `END` (end of a get).
    End,
    /// `MN` (answer to the meta no-op `mn`).
    Mn,
    /// `STORED`
    Stored,
    /// `ERROR`, `CLIENT_ERROR ..` or `SERVER_ERROR ..` (the whole line).
    Error(&'a [u8]),
    /// Any other line.
    Other(&'a [u8]),
}

/// Parses the reply element at the front of `buf`: `Ok(None)` if it is not
/// complete yet, else the element and the bytes it spans. A malformed
/// `VALUE` block or line ending is a [`BenchError::Parse`].
pub fn parse_reply(buf: &[u8]) -> Result<Option<(McToken<'_>, usize)>> {
    let Some(cr) = find_crlf(WHAT, buf, MAX_LINE)? else {
        return Ok(None);
    };
    let line = &buf[..cr];
    let next = cr + 2;
    let token = match line {
        b"END" => McToken::End,
        b"MN" => McToken::Mn,
        b"STORED" => McToken::Stored,
        _ if line.starts_with(b"VALUE ") => return parse_value(buf, line, next),
        _ if line == b"ERROR"
            || line.starts_with(b"CLIENT_ERROR")
            || line.starts_with(b"SERVER_ERROR") =>
        {
            McToken::Error(line)
        }
        _ => McToken::Other(line),
    };
    Ok(Some((token, next)))
}

fn parse_value<'a>(
    buf: &'a [u8],
    line: &'a [u8],
    next: usize,
) -> Result<Option<(McToken<'a>, usize)>> {
    let bad = || {
        parse(
            WHAT,
            format!("bad VALUE line {:?}", String::from_utf8_lossy(line)),
        )
    };
    let mut parts = line.split(|&c| c == b' ');
    let (Some(_), Some(key), Some(flags), Some(len)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    if key.is_empty() || parts.count() > 1 {
        return Err(bad());
    }
    let flags = u32::try_from(parse_int(WHAT, flags)?).map_err(|_| bad())?;
    let len = match parse_int(WHAT, len)? {
        l @ 0..=MAX_VALUE => l as usize,
        _ => return Err(bad()),
    };
    let end = next + len;
    if buf.len() < end + 2 {
        return Ok(None);
    }
    if &buf[end..end + 2] != b"\r\n" {
        return Err(parse(
            WHAT,
            format!("VALUE data of {len} bytes not followed by CRLF"),
        ));
    }
    let data = &buf[next..end];
    Ok(Some((McToken::Value { key, flags, data }, end + 2)))
}

/// How a batch of keys is sent to memcached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum McMode {
    /// One `get k1 .. kb` per batch.
    MultiGet,
    /// `b` pipelined `set .. noreply`, then `mn`.
    MultiSet,
}

impl McMode {
    /// Short description, e.g. `multi-get b=1024 q=4`.
    pub fn label(self, batch: usize, depth: usize) -> String {
        match self {
            McMode::MultiGet => format!("multi-get b={batch} q={depth}"),
            McMode::MultiSet => format!("multi-set b={batch} q={depth}"),
        }
    }
}

/// Encodes batches in one [`McMode`] and checks their replies. Misses
/// (fewer `VALUE`s than keys), wrong value sizes and error lines between
/// the sets count as failed keys; an error answer to a get, more values
/// than keys or an unexpected element is a protocol error.
#[derive(Debug)]
pub(crate) struct McCodec {
    mode: McMode,
    value_size: usize,
    /// ` 0 0 <len> noreply\r\n<value>\r\n`, copied after every set's key.
    set_tail: Vec<u8>,
    in_batch: bool,
    hits: usize,
    errors: u64,
    first_error: FirstError,
}

impl McCodec {
    pub(crate) fn new(mode: McMode, value_size: usize) -> Self {
        let mut set_tail = format!(" 0 0 {value_size} noreply\r\n").into_bytes();
        set_tail.extend_from_slice(&value_bytes(value_size));
        set_tail.extend_from_slice(b"\r\n");
        McCodec {
            mode,
            value_size,
            set_tail,
            in_batch: false,
            hits: 0,
            errors: 0,
            first_error: FirstError::default(),
        }
    }

    fn push_key(out: &mut Vec<u8>, k: &KeyDigits) {
        out.extend_from_slice(b"key:");
        out.extend_from_slice(k);
    }
}

impl Codec for McCodec {
    fn encode(&mut self, keys: &[KeyDigits], out: &mut Vec<u8>) {
        match self.mode {
            McMode::MultiGet => {
                out.reserve(keys.len() * 17 + 8);
                out.extend_from_slice(b"get");
                for k in keys {
                    out.push(b' ');
                    Self::push_key(out, k);
                }
                out.extend_from_slice(b"\r\n");
            }
            McMode::MultiSet => {
                out.reserve(keys.len() * (20 + self.set_tail.len()) + 4);
                for k in keys {
                    out.extend_from_slice(b"set ");
                    Self::push_key(out, k);
                    out.extend_from_slice(&self.set_tail);
                }
                out.extend_from_slice(b"mn\r\n");
            }
        }
    }

    fn decode(&mut self, buf: &[u8], n: usize) -> Result<Decoded> {
        if !self.in_batch {
            self.in_batch = true;
            self.hits = 0;
            self.errors = 0;
        }
        let mut pos = 0;
        loop {
            let Some((tok, used)) = parse_reply(&buf[pos..])? else {
                return Ok(Decoded {
                    consumed: pos,
                    done: None,
                });
            };
            pos += used;
            match (self.mode, tok) {
                (McMode::MultiGet, McToken::Value { data, .. }) => {
                    self.hits += 1;
                    if self.hits > n {
                        return Err(parse(WHAT, format!("more than {n} values for {n} keys")));
                    }
                    if data.len() != self.value_size {
                        self.errors += 1;
                        let (got, want) = (data.len(), self.value_size);
                        self.first_error
                            .note(|| format!("value of {got} bytes, expected {want}"));
                    }
                }
                (McMode::MultiGet, McToken::End) => {
                    let misses = n - self.hits;
                    if misses > 0 {
                        self.errors += misses as u64;
                        self.first_error
                            .note(|| format!("{misses} of {n} keys missing"));
                    }
                    break;
                }
                (McMode::MultiSet, McToken::Mn) => break,
                (McMode::MultiSet, McToken::Error(line) | McToken::Other(line)) => {
                    // `noreply` silences normal answers; anything before
                    // `MN` is a complaint about one of the sets.
                    self.errors += 1;
                    self.first_error
                        .note(|| String::from_utf8_lossy(line).into_owned());
                }
                (mode, other) => {
                    return Err(parse(
                        WHAT,
                        format!("unexpected reply to {mode:?}: {other:?}"),
                    ));
                }
            }
        }
        self.in_batch = false;
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
/// values ([`value_bytes`]): batches of [`POPULATE_BATCH`] pipelined
/// `set .. noreply` + `mn`, [`POPULATE_DEPTH`] in flight on each of
/// [`POPULATE_CONNECTIONS`] connections (memcached has that many workers).
pub fn populate(port: u16, keys: u64, value_size: usize) -> Result<()> {
    validate_keyspace(keys)?;
    let t0 = Instant::now();
    driver::fill(
        "memcached",
        port,
        0..keys,
        POPULATE_CONNECTIONS,
        POPULATE_BATCH,
        POPULATE_DEPTH,
        || McCodec::new(McMode::MultiSet, value_size),
    )?;
    eprintln!(
        "[farcache-bench] memcached: populated {keys} keys of {value_size} B in {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A timed closed-loop run in `mode`: `opts.connections` connections, each
/// keeping `opts.depth` batches of `opts.batch` random keys in flight.
pub fn run(port: u16, mode: McMode, opts: &LoadOpts) -> Result<LoadOutcome> {
    driver::run_timed("memcached", port, opts, || {
        McCodec::new(mode, opts.value_size)
    })
}

/// Latency of single-key `get`s on one busy-polled connection, one at a
/// time, over `samples` requests (after an unrecorded tenth). Failed keys
/// are an error.
pub fn unpipelined_get_latency(
    port: u16,
    keys: u64,
    value_size: usize,
    samples: u64,
) -> Result<LatencySummary> {
    let codec = McCodec::new(McMode::MultiGet, value_size);
    let (lat, errors, first) = driver::run_unpipelined("memcached", port, keys, samples, codec)?;
    if errors > 0 {
        return Err(parse(
            WHAT,
            format!("{errors} failed gets; first: {}", first.unwrap_or_default()),
        ));
    }
    Ok(lat)
}

/// `get key:%012d` on a fresh blocking connection: the value, or `None` on a miss.
pub fn get(port: u16, key: u64) -> Result<Option<Vec<u8>>> {
    validate_keyspace(key.saturating_add(1))?;
    let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut req = b"get ".to_vec();
    McCodec::push_key(&mut req, &driver::key_digits(key));
    req.extend_from_slice(b"\r\n");
    s.write_all(&req)?;
    let mut buf = Vec::new();
    let mut value = None;
    let mut chunk = [0u8; 64 * 1024];
    loop {
        while let Some((tok, used)) = parse_reply(&buf)? {
            match tok {
                McToken::Value { data, .. } if value.is_none() => value = Some(data.to_vec()),
                McToken::End => return Ok(value),
                other => return Err(parse(WHAT, format!("get answered {other:?}"))),
            }
            buf.drain(..used);
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(BenchError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "memcached closed the connection before answering get",
            )));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::driver::key_digits;

    fn tok(buf: &[u8]) -> (McToken<'_>, usize) {
        parse_reply(buf).expect("valid").expect("complete")
    }

    #[test]
    fn parses_reply_elements() {
        assert_eq!(
            tok(b"VALUE key:000000000001 7 3\r\nabc\r\nEND\r\n"),
            (
                McToken::Value {
                    key: b"key:000000000001",
                    flags: 7,
                    data: b"abc"
                },
                33
            )
        );
        // With a cas unique (gets); binary data containing CRLF.
        assert_eq!(
            tok(b"VALUE k 0 2 99\r\n\r\n\r\n"),
            (
                McToken::Value {
                    key: b"k",
                    flags: 0,
                    data: b"\r\n"
                },
                20
            )
        );
        assert_eq!(tok(b"END\r\n"), (McToken::End, 5));
        assert_eq!(tok(b"MN\r\nEND\r\n"), (McToken::Mn, 4));
        assert_eq!(tok(b"STORED\r\n"), (McToken::Stored, 8));
        assert_eq!(tok(b"ERROR\r\n"), (McToken::Error(b"ERROR"), 7));
        assert_eq!(
            tok(b"SERVER_ERROR out of memory\r\n"),
            (McToken::Error(b"SERVER_ERROR out of memory"), 28)
        );
        assert_eq!(tok(b"NOT_STORED\r\n"), (McToken::Other(b"NOT_STORED"), 12));
    }

    #[test]
    fn incomplete_and_malformed() {
        for partial in [
            &b""[..],
            b"EN",
            b"END\r",
            b"VALUE k 0 3\r\nab",
            b"VALUE k 0 3\r\nabc\r",
        ] {
            assert_eq!(
                parse_reply(partial).expect("valid prefix"),
                None,
                "{partial:?}"
            );
        }
        for bad in [
            &b"VALUE k 0\r\n"[..],
            b"VALUE k x 3\r\nabc\r\n",
            b"VALUE k 0 -3\r\n",
            b"VALUE k 0 3\r\nabcd\r\n",
            b"VALUE k 0 3 1 2\r\nabc\r\n",
            b"END\n",
        ] {
            assert!(parse_reply(bad).is_err(), "{bad:?}");
        }
    }

    fn feed(mode: McMode, vs: usize, n: usize, reply: &[u8], step: usize) -> Result<u64> {
        super::super::driver::feed_split(McCodec::new(mode, vs), n, reply, step)
    }

    #[test]
    fn decodes_batches_split_anywhere() {
        let all = b"VALUE a 0 2\r\nxy\r\nVALUE a 0 2\r\nxy\r\nVALUE b 0 2\r\nzz\r\nEND\r\n";
        let short = b"VALUE a 0 2\r\nxy\r\nVALUE b 0 1\r\nz\r\nEND\r\n";
        for step in [1, 2, 5, 13, 1000] {
            assert_eq!(feed(McMode::MultiGet, 2, 3, all, step).ok(), Some(0));
            // One miss, one wrong size.
            assert_eq!(feed(McMode::MultiGet, 2, 3, short, step).ok(), Some(2));
            assert_eq!(feed(McMode::MultiSet, 2, 3, b"MN\r\n", step).ok(), Some(0));
            assert_eq!(
                feed(
                    McMode::MultiSet,
                    2,
                    3,
                    b"SERVER_ERROR out of memory\r\nMN\r\n",
                    step
                )
                .ok(),
                Some(1)
            );
        }
        assert!(
            feed(McMode::MultiGet, 2, 1, all, 1000).is_err(),
            "3 values for 1 key"
        );
        assert!(feed(McMode::MultiGet, 2, 1, b"ERROR\r\n", 1000).is_err());
        assert!(feed(McMode::MultiSet, 2, 1, b"END\r\n", 1000).is_err());
    }

    #[test]
    fn encodes_commands() {
        let keys = [key_digits(1), key_digits(23)];
        let enc = |mode| {
            let mut out = Vec::new();
            McCodec::new(mode, 3).encode(&keys, &mut out);
            String::from_utf8(out).expect("ascii")
        };
        assert_eq!(
            enc(McMode::MultiGet),
            "get key:000000000001 key:000000000023\r\n"
        );
        assert_eq!(
            enc(McMode::MultiSet),
            "set key:000000000001 0 0 3 noreply\r\nabc\r\n\
             set key:000000000023 0 0 3 noreply\r\nabc\r\nmn\r\n"
        );
    }

    #[test]
    fn memory_sizing() {
        assert_eq!(memory_mib(1000, 8), 1024);
        // 16 M keys of 8 B: 16 Mi × 108 × 1.5 B ≈ 2.5 GiB.
        assert_eq!(memory_mib(16 << 20, 8), 2592);
        // 1 GiB of 4 KiB values.
        assert_eq!(memory_mib(1 << 18, 4096), 1574);
        assert_eq!(hashpower(1000), 16);
        assert_eq!(hashpower(1 << 20), 20);
        assert_eq!(hashpower((1 << 20) + 1), 21);
        assert_eq!(hashpower(16_000_000), 24);
        assert_eq!(hashpower(u64::MAX), 32);
    }

    /// Real memcached: populate a tiny keyspace, check a value, run both
    /// modes briefly on 1 and 2 connections, and the unpipelined latency.
    #[test]
    fn live_memcached_driver() {
        ensure_tools(&[Tool::Memcached])
            .expect("memcached is needed for this test (CI installs it via ensure_tools)");
        let (keys, vs) = (1000, 8);
        let mut server = MemcachedServer::start_for(keys, vs).expect("start memcached");
        assert!(server.is_alive());
        populate(server.port(), keys, vs).expect("populate");
        assert_eq!(
            get(server.port(), 999).expect("get").as_deref(),
            Some(&value_bytes(vs)[..])
        );
        assert_eq!(get(server.port(), keys).expect("get"), None);
        for mode in [McMode::MultiGet, McMode::MultiSet] {
            for c in [1, 2] {
                let opts = LoadOpts::new(vs, keys, 64, 4, c, Duration::from_millis(200));
                let o = run(server.port(), mode, &opts).expect("run");
                assert!(o.mops > 0.0 && o.ops > 0, "{mode:?} c={c}: {o:?}");
                assert_eq!(o.errors, 0, "{mode:?} c={c}: {o:?}");
                assert!(o.batch_latency.p50_us > 0.0, "{o:?}");
            }
        }
        let lat = unpipelined_get_latency(server.port(), keys, vs, 500).expect("latency");
        assert_eq!(lat.count, 500);
        assert!(lat.p50_us > 0.0 && lat.p99_us >= lat.p50_us, "{lat:?}");
    }
}
