//! The Redis side of `bench store-large`: one `redis-server`, the same objects SET one
//! at a time and read back with GET on one blocking connection. The spinning drivers
//! of `bench io` are built for many small values; a value of 100 MiB is one long
//! write and one long read, which a plain blocking socket does as well.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use super::{Objects, Run, Sampler, StoreLargeOptions, timed_gets};
use crate::baseline::redis::RedisServer;
use crate::error::{Result, parse_err};

const WHAT: &str = "redis reply";
/// No reply within this long means Redis is gone: fail rather than hang.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Redis on one size's objects.
#[derive(Debug, Clone)]
pub(crate) struct RedisSize {
    pub set: Run,
    pub get: Run,
    /// `used_memory` grown by the SETs (INFO memory).
    pub used_memory: Option<u64>,
}

pub(crate) struct Redis {
    server: RedisServer,
}

impl Redis {
    pub fn start() -> Result<Self> {
        Ok(Self {
            server: RedisServer::start()?,
        })
    }

    /// SETs every object, then GETs them round robin as the store's GET runs do;
    /// empties the database afterwards.
    pub fn measure(&self, opts: &StoreLargeOptions, objects: &Objects) -> Result<RedisSize> {
        let mut c = Conn::open(self.server.port())?;
        c.flushall()?;
        let before = c.used_memory().ok();
        let mut buf = objects.buffer();
        let mut set = Sampler::default();
        for i in 0..objects.count {
            Objects::stamp(i, &mut buf);
            let key = Objects::key(i);
            let t = Instant::now();
            let r = c.set(&key, &buf);
            set.record(t.elapsed(), r.map_err(|e| format!("object {i}: {e}")));
        }
        drop(buf);
        let after = c.used_memory().ok();
        let all: Vec<u64> = (0..objects.count).collect();
        let mut value = Vec::new();
        // Untimed, as on the store's side: the first read grows the buffer.
        c.get(&Objects::key(0), &mut value)?;
        let mut broken = None;
        let get = timed_gets(opts, &all, objects.size, u64::MAX, |i| {
            let key = Objects::key(i);
            let t = Instant::now();
            let r = c.get(&key, &mut value);
            let took = t.elapsed();
            let outcome = match r {
                Ok(true) => objects.check(i, &value),
                Ok(false) => Err(format!("object {i}: missing")),
                Err(e) => {
                    let m = format!("object {i}: {e}");
                    broken.get_or_insert(e);
                    Err(m)
                }
            };
            (took, outcome)
        });
        // A broken connection fails every later call: say why once.
        if let Some(e) = broken {
            return Err(e);
        }
        c.flushall()?;
        Ok(RedisSize {
            set: set.finish(objects.size),
            get,
            used_memory: before.zip(after).map(|(b, a)| a.saturating_sub(b)),
        })
    }
}

/// A blocking RESP2 connection.
struct Conn {
    w: TcpStream,
    r: BufReader<TcpStream>,
    line: Vec<u8>,
}

impl Conn {
    fn open(port: u16) -> Result<Self> {
        let w = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
        w.set_nodelay(true)?;
        w.set_read_timeout(Some(READ_TIMEOUT))?;
        w.set_write_timeout(Some(READ_TIMEOUT))?;
        let r = BufReader::with_capacity(1 << 16, w.try_clone()?);
        Ok(Self {
            w,
            r,
            line: Vec::new(),
        })
    }

    /// Sends a command of `args`; the last one is written straight from its slice.
    fn send(&mut self, args: &[&[u8]]) -> Result<()> {
        let mut head = format!("*{}\r\n", args.len()).into_bytes();
        let (last, rest) = args
            .split_last()
            .ok_or_else(|| parse_err(WHAT, "empty command"))?;
        for a in rest {
            head.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            head.extend_from_slice(a);
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(format!("${}\r\n", last.len()).as_bytes());
        self.w.write_all(&head)?;
        self.w.write_all(last)?;
        self.w.write_all(b"\r\n")?;
        Ok(())
    }

    /// The next reply line, without its CRLF.
    fn read_line(&mut self) -> Result<&[u8]> {
        self.line.clear();
        self.r.read_until(b'\n', &mut self.line)?;
        match self.line.strip_suffix(b"\r\n") {
            Some(l) => Ok(l),
            None => Err(parse_err(WHAT, "connection closed mid-reply")),
        }
    }

    fn expect_ok(&mut self) -> Result<()> {
        match self.read_line()? {
            b"+OK" => Ok(()),
            other => Err(parse_err(WHAT, String::from_utf8_lossy(other))),
        }
    }

    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.send(&[b"SET", key, value])?;
        self.expect_ok()
    }

    /// A bulk reply's length; `None` for nil.
    fn bulk_len(&mut self) -> Result<Option<usize>> {
        let line = self.read_line()?;
        let Some(n) = line.strip_prefix(b"$") else {
            return Err(parse_err(WHAT, String::from_utf8_lossy(line)));
        };
        let n = std::str::from_utf8(n)
            .ok()
            .and_then(|n| n.parse::<i64>().ok())
            .ok_or_else(|| {
                parse_err(WHAT, format!("bad length {:?}", String::from_utf8_lossy(n)))
            })?;
        // Redis's own proto-max-bulk-len is 512 MiB.
        match n {
            -1 => Ok(None),
            n if (0..=512 << 20).contains(&n) => Ok(Some(n as usize)),
            n => Err(parse_err(WHAT, format!("bulk of {n} bytes"))),
        }
    }

    /// GET into `out`: false when the key is missing.
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.send(&[b"GET", key])?;
        let Some(n) = self.bulk_len()? else {
            return Ok(false);
        };
        out.resize(n + 2, 0);
        self.r.read_exact(out)?;
        if !out.ends_with(b"\r\n") {
            return Err(parse_err(WHAT, "bulk string without its CRLF"));
        }
        out.truncate(n);
        Ok(true)
    }

    fn flushall(&mut self) -> Result<()> {
        self.send(&[b"FLUSHALL", b"SYNC"])?;
        self.expect_ok()
    }

    /// `used_memory` from INFO memory.
    fn used_memory(&mut self) -> Result<u64> {
        self.send(&[b"INFO", b"memory"])?;
        let Some(n) = self.bulk_len()? else {
            return Err(parse_err(WHAT, "INFO answered nil"));
        };
        let mut body = vec![0u8; n + 2];
        self.r.read_exact(&mut body)?;
        String::from_utf8_lossy(&body)
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| parse_err(WHAT, "INFO memory has no used_memory"))
    }
}
