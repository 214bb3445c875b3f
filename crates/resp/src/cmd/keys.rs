//! Key commands: DEL/UNLINK, EXISTS, EXPIRE/PEXPIRE/EXPIREAT/PEXPIREAT (NX XX GT
//! LT), EXPIRETIME/PEXPIRETIME, PERSIST, TTL/PTTL, TYPE.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::int_arg;
use super::rmw::{Change, Ttl, rmw};
use crate::error::store_error_line;
use crate::parse::Args;
use crate::reply::Out;
use crate::session::Session;

pub fn del(s: &mut Session, a: &Args, out: &mut Out) {
    let mut n = 0;
    for k in &a[1..] {
        let r = {
            let _held = s.shared.lock_keys([k]);
            s.shared.store.delete(k)
        };
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

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
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

/// Sets `key` to expire `ms` from now (deleting it when `ms ≤ 0`) if `when` allows:
/// 1 if it did, 0 if not (or the key is absent).
fn expire_in(s: &mut Session, key: &[u8], ms: Option<i64>, when: When, out: &mut Out, name: &str) {
    let Some(ms) = ms.filter(|m| m.checked_add(now_ms()).is_some()) else {
        return out.error(&format!("ERR invalid expire time in '{name}' command"));
    };
    let r = rmw(s, key, |old| {
        let Some(e) = old else {
            return Ok((Change::None, 0));
        };
        if !when.allows(e.expires_ms, now_ms() + ms) {
            return Ok((Change::None, 0));
        }
        let change = if ms <= 0 {
            Change::Delete
        } else {
            Change::Put(e.value.to_vec(), Ttl::Set(Duration::from_millis(ms as u64)))
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
        expire_in(s, &a[1], n.checked_mul(1000), w, out, "expire");
    }
}

pub fn pexpire(s: &mut Session, a: &Args, out: &mut Out) {
    if let Some((n, w)) = expire_arg(a, out) {
        expire_in(s, &a[1], Some(n), w, out, "pexpire");
    }
}

pub fn expireat(s: &mut Session, a: &Args, out: &mut Out) {
    if let Some((n, w)) = expire_arg(a, out) {
        let ms = n.checked_mul(1000).and_then(|at| at.checked_sub(now_ms()));
        expire_in(s, &a[1], ms, w, out, "expireat");
    }
}

pub fn pexpireat(s: &mut Session, a: &Args, out: &mut Out) {
    if let Some((n, w)) = expire_arg(a, out) {
        expire_in(s, &a[1], n.checked_sub(now_ms()), w, out, "pexpireat");
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
