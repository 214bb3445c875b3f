//! Key commands: DEL/UNLINK, EXISTS, EXPIRE/PEXPIRE/EXPIREAT/PEXPIREAT, PERSIST,
//! TTL/PTTL, TYPE.

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

pub fn exists(s: &mut Session, a: &Args, out: &mut Out) {
    // Redis counts a key named twice twice.
    let mut n = 0;
    for k in &a[1..] {
        match s.shared.store.exists(k) {
            Ok(true) => n += 1,
            Ok(false) => {}
            Err(e) => return out.error(&store_error_line(&e)),
        }
    }
    out.int(n);
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Sets `key` to expire `ms` from now (deleting it when `ms ≤ 0`): 1 if the key
/// exists, 0 if not.
fn expire_in(s: &mut Session, key: &[u8], ms: Option<i64>, out: &mut Out, name: &str) {
    let Some(ms) = ms else {
        return out.error(&format!("ERR invalid expire time in '{name}' command"));
    };
    let r = rmw(s, key, |old| {
        let Some(e) = old else {
            return Ok((Change::None, 0));
        };
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

fn expire_arg(a: &Args, out: &mut Out) -> Option<i64> {
    if a.len() > 3 {
        out.error("ERR EXPIRE options (NX XX GT LT) are not supported by the farcache front end");
        return None;
    }
    match int_arg(&a[2]) {
        Ok(n) => Some(n),
        Err(e) => {
            out.error(e);
            None
        }
    }
}

pub fn expire(s: &mut Session, a: &Args, out: &mut Out) {
    if let Some(n) = expire_arg(a, out) {
        expire_in(s, &a[1], n.checked_mul(1000), out, "expire");
    }
}

pub fn pexpire(s: &mut Session, a: &Args, out: &mut Out) {
    if let Some(n) = expire_arg(a, out) {
        expire_in(s, &a[1], Some(n), out, "pexpire");
    }
}

pub fn expireat(s: &mut Session, a: &Args, out: &mut Out) {
    if let Some(n) = expire_arg(a, out) {
        let ms = n.checked_mul(1000).map(|at| at - now_ms());
        expire_in(s, &a[1], ms, out, "expireat");
    }
}

pub fn pexpireat(s: &mut Session, a: &Args, out: &mut Out) {
    if let Some(n) = expire_arg(a, out) {
        expire_in(s, &a[1], n.checked_sub(now_ms()), out, "pexpireat");
    }
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
