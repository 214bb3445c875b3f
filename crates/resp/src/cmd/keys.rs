//! Key commands: DEL/UNLINK, EXISTS, EXPIRE/PEXPIRE/EXPIREAT/PEXPIREAT (NX XX GT
//! LT), EXPIRETIME/PEXPIRETIME, PERSIST, TTL/PTTL, TYPE, RENAME/RENAMENX, COPY.

use farcache_store::{Condition, PutOptions};

use super::int_arg;
use super::rmw::{Change, Ttl, keep_expiry, now_ms, rmw};
use crate::error::store_error_line;
use crate::parse::Args;
use crate::reply::Out;
use crate::session::Session;

/// All keys in two batched round trips (a 100 k-key `DEL` holds its event loop
/// for one multi-find and one multi-swap, not 100 k round trips), under all their
/// stripes. Redis counts a key named twice once.
pub fn del(s: &mut Session, a: &Args, out: &mut Out) {
    let keys = &a[1..];
    let results = {
        let _held = s.shared.lock_keys(keys);
        s.shared.store.delete_many(keys)
    };
    let mut n = 0;
    for r in results {
        match r {
            Ok(true) => n += 1,
            Ok(false) => {}
            Err(e) => return out.error(&store_error_line(&e)),
        }
    }
    out.int(n);
}

/// All keys in one batch (a 100 k-key EXISTS is one multi-lookup, not 100 k round
/// trips). Redis counts a key named twice twice.
pub fn exists(s: &mut Session, a: &Args, out: &mut Out) {
    match s.shared.store.exists_many(&a[1..]) {
        Ok(found) => {
            let mut n = 0;
            for f in found {
                match f {
                    Ok(true) => n += 1,
                    Ok(false) => {}
                    Err(e) => return out.error(&store_error_line(&e)),
                }
            }
            out.int(n);
        }
        Err(e) => out.error(&store_error_line(&e)),
    }
}

/// `EXPIRE`'s conditions on the key's current expiry.
#[derive(Clone, Copy, Default)]
struct When {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

impl When {
    /// Whether a new expiry at `at_ms` applies to a key now expiring at `cur`
    /// (`None`: never, which counts as infinitely far for GT and LT).
    fn allows(self, cur: Option<u64>, at_ms: i64) -> bool {
        let at = u64::try_from(at_ms).unwrap_or(0);
        !(self.nx && cur.is_some()
            || self.xx && cur.is_none()
            || self.gt && cur.is_none_or(|c| at <= c)
            || self.lt && cur.is_some_and(|c| at >= c))
    }
}

/// Sets `key` to expire at `at_ms` (Unix ms; deleting it when that has passed) if
/// `when` allows: 1 if it did, 0 if not (or the key is absent). The time is exact:
/// `PEXPIREAT t` then `PEXPIRETIME` answers `t`.
fn expire_at(
    s: &mut Session,
    key: &[u8],
    at_ms: Option<i64>,
    when: When,
    out: &mut Out,
    name: &str,
) {
    let Some(at) = at_ms else {
        return out.error(&format!("ERR invalid expire time in '{name}' command"));
    };
    let r = rmw(s, key, |old| {
        let Some(e) = old else {
            return Ok((Change::None, 0));
        };
        if !when.allows(e.expires_ms, at) {
            return Ok((Change::None, 0));
        }
        let change = if at <= now_ms() {
            Change::Delete
        } else {
            Change::Put(e.value.to_vec(), Ttl::At(at as u64))
        };
        Ok((change, 1))
    });
    match r {
        Ok(n) => out.int(n),
        Err(e) => out.error(&e),
    }
}

/// The time argument and the NX / XX / GT / LT options after it.
fn expire_arg(a: &Args, out: &mut Out) -> Option<(i64, When)> {
    let mut w = When::default();
    for opt in &a[3..] {
        match &opt.to_ascii_lowercase()[..] {
            b"nx" => w.nx = true,
            b"xx" => w.xx = true,
            b"gt" => w.gt = true,
            b"lt" => w.lt = true,
            _ => {
                out.error(&format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(opt)
                ));
                return None;
            }
        }
    }
    if w.nx && (w.xx || w.gt || w.lt) {
        out.error("ERR NX and XX, GT or LT options at the same time are not compatible");
        return None;
    }
    if w.gt && w.lt {
        out.error("ERR GT and LT options at the same time are not compatible");
        return None;
    }
    match int_arg(&a[2]) {
        Ok(n) => Some((n, w)),
        Err(e) => {
            out.error(e);
            None
        }
    }
}

pub fn expire(s: &mut Session, a: &Args, out: &mut Out) {
    if let Some((n, w)) = expire_arg(a, out) {
        let at = n.checked_mul(1000).and_then(|ms| ms.checked_add(now_ms()));
        expire_at(s, &a[1], at, w, out, "expire");
    }
}

pub fn pexpire(s: &mut Session, a: &Args, out: &mut Out) {
    if let Some((n, w)) = expire_arg(a, out) {
        expire_at(s, &a[1], n.checked_add(now_ms()), w, out, "pexpire");
    }
}

pub fn expireat(s: &mut Session, a: &Args, out: &mut Out) {
    if let Some((n, w)) = expire_arg(a, out) {
        expire_at(s, &a[1], n.checked_mul(1000), w, out, "expireat");
    }
}

pub fn pexpireat(s: &mut Session, a: &Args, out: &mut Out) {
    if let Some((n, w)) = expire_arg(a, out) {
        expire_at(s, &a[1], Some(n), w, out, "pexpireat");
    }
}

/// -2 absent, -1 no expiry, else when it expires (Unix time in `unit_ms`).
fn expire_time(s: &mut Session, key: &[u8], unit_ms: u64, out: &mut Out) {
    match s.shared.store.entry(key) {
        Ok(None) => out.int(-2),
        Ok(Some(e)) => match e.expires_ms {
            None => out.int(-1),
            Some(at) => out.int((at / unit_ms) as i64),
        },
        Err(e) => out.error(&store_error_line(&e)),
    }
}

pub fn expiretime(s: &mut Session, a: &Args, out: &mut Out) {
    expire_time(s, &a[1], 1000, out);
}

pub fn pexpiretime(s: &mut Session, a: &Args, out: &mut Out) {
    expire_time(s, &a[1], 1, out);
}

pub fn persist(s: &mut Session, a: &Args, out: &mut Out) {
    let r = rmw(s, &a[1], |old| match old {
        Some(e) if e.expires_ms.is_some() => Ok((Change::Put(e.value.to_vec(), Ttl::Clear), 1)),
        _ => Ok((Change::None, 0)),
    });
    match r {
        Ok(n) => out.int(n),
        Err(e) => out.error(&e),
    }
}

/// -2 absent, -1 no expiry, else the time left in `unit_ms` (rounded as Redis does).
fn ttl_in(s: &mut Session, key: &[u8], unit_ms: u64, out: &mut Out) {
    match s.shared.store.entry(key) {
        Ok(None) => out.int(-2),
        Ok(Some(e)) => match e.ttl() {
            None => out.int(-1),
            Some(d) => {
                let ms = d.as_millis() as u64;
                out.int(((ms + unit_ms / 2) / unit_ms) as i64);
            }
        },
        Err(e) => out.error(&store_error_line(&e)),
    }
}

pub fn ttl(s: &mut Session, a: &Args, out: &mut Out) {
    ttl_in(s, &a[1], 1000, out);
}

pub fn pttl(s: &mut Session, a: &Args, out: &mut Out) {
    ttl_in(s, &a[1], 1, out);
}

/// Every value is a string.
pub fn type_of(s: &mut Session, a: &Args, out: &mut Out) {
    match s.shared.store.exists(&a[1]) {
        Ok(true) => out.simple("string"),
        Ok(false) => out.simple("none"),
        Err(e) => out.error(&store_error_line(&e)),
    }
}

/// `RENAME`/`RENAMENX`/`COPY`: moves or copies `src`'s value and expiry to `dst`
/// under both keys' stripes. Returns whether `dst` was written, or the error line.
/// Not atomic against a server failing between the write and the delete (the value
/// is then under both names; nothing is lost).
fn move_value(
    s: &Session,
    src: &[u8],
    dst: &[u8],
    replace: bool,
    keep_src: bool,
) -> Result<bool, String> {
    let sh = &s.shared;
    let _held = sh.lock_keys([&src, &dst]);
    let Some(entry) = sh.store.entry(src).map_err(|e| store_error_line(&e))? else {
        return Err("ERR no such key".into());
    };
    if src == dst {
        return Ok(!keep_src || replace);
    }
    let opts = PutOptions {
        expires_at_ms: keep_expiry(&entry),
        condition: if replace {
            Condition::Always
        } else {
            Condition::IfAbsent
        },
        ..PutOptions::default()
    };
    let written = sh
        .store
        .put_with(dst, &entry.value, opts)
        .map_err(|e| store_error_line(&e))?;
    if written && !keep_src {
        sh.store.delete(src).map_err(|e| store_error_line(&e))?;
    }
    Ok(written)
}

pub fn rename(s: &mut Session, a: &Args, out: &mut Out) {
    match move_value(s, &a[1], &a[2], true, false) {
        Ok(_) => out.ok(),
        Err(e) => out.error(&e),
    }
}

pub fn renamenx(s: &mut Session, a: &Args, out: &mut Out) {
    if a[1] == a[2] {
        // Redis: the destination exists (it is the source).
        return match s.shared.store.exists(&a[1]) {
            Ok(true) => out.int(0),
            Ok(false) => out.error("ERR no such key"),
            Err(e) => out.error(&store_error_line(&e)),
        };
    }
    match move_value(s, &a[1], &a[2], false, false) {
        Ok(w) => out.int(i64::from(w)),
        Err(e) => out.error(&e),
    }
}

/// `COPY src dst [DB 0] [REPLACE]`.
pub fn copy(s: &mut Session, a: &Args, out: &mut Out) {
    let mut replace = false;
    let mut i = 3;
    while i < a.len() {
        if a[i].eq_ignore_ascii_case(b"replace") {
            replace = true;
        } else if a[i].eq_ignore_ascii_case(b"db") && i + 1 < a.len() {
            i += 1;
            if &a[i][..] != b"0" {
                return out.error("ERR DB index is out of range (a farcache store is one keyspace: use another store for another database)");
            }
        } else {
            return out.error("ERR syntax error");
        }
        i += 1;
    }
    if a[1] == a[2] {
        return out.error("ERR source and destination objects are the same");
    }
    match move_value(s, &a[1], &a[2], replace, true) {
        Ok(w) => out.int(i64::from(w)),
        Err(e) if e == "ERR no such key" => out.int(0),
        Err(e) => out.error(&e),
    }
}
