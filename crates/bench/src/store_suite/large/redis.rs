//! The Redis side of `bench store-large`: one `redis-server`, the same objects SET one
//! at a time and read back with GET on one blocking connection. The spinning drivers
//! of `bench io` are built for many small values; a value of 100 MiB is one long
//! write and one long read, which a plain blocking socket does as well.

use std::time::{Duration, Instant};

use super::{Objects, Run, Sampler, StoreLargeOptions, timed_gets};
use crate::baseline::redis::RedisServer;
use crate::baseline::resp_conn::RespConn;
use crate::error::{Result, parse_err};
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
        let mut c = RespConn::connect(self.server.port(), READ_TIMEOUT)?;
        flushall(&mut c)?;
        let before = used_memory(&mut c).ok();
        let mut buf = objects.buffer();
        let mut set = Sampler::default();
        for i in 0..objects.count {
            Objects::stamp(i, &mut buf);
            let key = Objects::key(i);
            let t = Instant::now();
            let r = set_value(&mut c, &key, &buf);
            set.record(t.elapsed(), r.map_err(|e| format!("object {i}: {e}")));
        }
        drop(buf);
        let after = used_memory(&mut c).ok();
        let all: Vec<u64> = (0..objects.count).collect();
        let mut value = Vec::new();
        // Untimed, as on the store's side: the first read grows the buffer.
        get_value(&mut c, &Objects::key(0), &mut value)?;
        let mut broken = None;
        let get = timed_gets(opts, &all, objects.size, u64::MAX, |i| {
            let key = Objects::key(i);
            let t = Instant::now();
            let r = get_value(&mut c, &key, &mut value);
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
        flushall(&mut c)?;
        Ok(RedisSize {
            set: set.finish(objects.size),
            get,
            used_memory: before.zip(after).map(|(b, a)| a.saturating_sub(b)),
        })
    }
}

fn set_value(c: &mut RespConn, key: &[u8], value: &[u8]) -> Result<()> {
    c.call_ok(&[b"SET", key, value])
}

/// GET into `out`: false when the key is missing.
fn get_value(c: &mut RespConn, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
    c.send(&[b"GET", key])?;
    c.flush()?;
    c.read_bulk_into(out)
}

fn flushall(c: &mut RespConn) -> Result<()> {
    c.call_ok(&[b"FLUSHALL", b"SYNC"])
}

/// `used_memory` from INFO memory.
fn used_memory(c: &mut RespConn) -> Result<u64> {
    c.info("memory")?
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| parse_err("redis reply", "INFO memory has no used_memory"))
}
