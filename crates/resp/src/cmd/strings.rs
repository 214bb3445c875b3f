//! String commands: GET, SET (EX PX EXAT PXAT KEEPTTL NX XX GET), SETNX, SETEX,
//! PSETEX, GETSET, GETDEL, GETEX, MGET, MSET, MSETNX, INCR/DECR(BY), INCRBYFLOAT,
//! APPEND, GETRANGE, SETRANGE, STRLEN.

use std::time::Duration;

use farcache_store::{Condition, Edit, PutOptions};

use crate::edit::edit_reply;

use super::int_arg;
use super::rmw::{Change, Ttl, now_ms, rmw};
use crate::error::store_error_line;
use crate::parse::{Args, MAX_BULK};
use crate::reply::Out;
use crate::session::Session;

pub fn get(s: &mut Session, a: &Args, out: &mut Out) {
    match s.shared.store.get(&a[1]) {
        Ok(v) => out.opt_bulk(v.as_deref()),
        Err(e) => out.error(&store_error_line(&e)),
    }
}

/// When a `SET` expires.
enum Expiry {
    None,
    /// At this Unix time in milliseconds (computed once, from `EX`/`PX` too).
    At(u64),
    /// An absolute time already past: the key is gone at once.
    Past,
    Keep,
}

struct SetArgs {
    expiry: Expiry,
    cond: Condition,
    get: bool,
}

fn parse_set(a: &Args) -> Result<SetArgs, String> {
    let mut o = SetArgs {
        expiry: Expiry::None,
        cond: Condition::Always,
        get: false,
    };
    let syntax = || "ERR syntax error".to_string();
    let mut i = 3;
    let mut expiry_given = false;
    while i < a.len() {
        let opt = a[i].to_ascii_lowercase();
        match &opt[..] {
            b"nx" | b"xx" if o.cond != Condition::Always => return Err(syntax()),
            b"nx" => o.cond = Condition::IfAbsent,
            b"xx" => o.cond = Condition::IfPresent,
            b"get" => o.get = true,
            b"keepttl" if expiry_given => return Err(syntax()),
            b"keepttl" => {
                o.expiry = Expiry::Keep;
                expiry_given = true;
            }
            b"ex" | b"px" | b"exat" | b"pxat" => {
                if expiry_given {
                    return Err(syntax());
                }
                expiry_given = true;
                let v = a.get(i + 1).ok_or_else(syntax)?;
                let n = int_arg(v).map_err(str::to_string)?;
                if n <= 0 {
                    return Err("ERR invalid expire time in 'set' command".into());
                }
                let at = match &opt[..] {
                    b"ex" => n.checked_mul(1000).and_then(|ms| ms.checked_add(now_ms())),
                    b"px" => n.checked_add(now_ms()),
                    b"exat" => n.checked_mul(1000),
                    _ => Some(n),
                }
                .ok_or("ERR invalid expire time in 'set' command")?;
                o.expiry = if at <= now_ms() {
                    Expiry::Past
                } else {
                    Expiry::At(at as u64)
                };
                i += 1;
            }
            _ => return Err(syntax()),
        }
        i += 1;
    }
    Ok(o)
}

pub fn set(s: &mut Session, a: &Args, out: &mut Out) {
    let o = match parse_set(a) {
        Ok(o) => o,
        Err(e) => return out.error(&e),
    };
    let (key, value) = (&a[1], &a[2]);
    if o.get || matches!(o.expiry, Expiry::Keep | Expiry::Past) {
        // Needs the old entry: a read-modify-write.
        let r = rmw(s, key, |old| {
            let present = old.is_some();
            let applies = match o.cond {
                Condition::Always => true,
                Condition::IfAbsent => !present,
                Condition::IfPresent => present,
            };
            let prior = old.map(|e| e.value.clone());
            let change = match (applies, &o.expiry) {
                (false, _) => Change::None,
                (true, Expiry::Past) => Change::Delete,
                (true, Expiry::Keep) => Change::Put(value.to_vec(), Ttl::Keep),
                (true, Expiry::At(at)) => Change::Put(value.to_vec(), Ttl::At(*at)),
                (true, Expiry::None) => Change::Put(value.to_vec(), Ttl::Clear),
            };
            Ok((change, (applies, prior)))
        });
        match r {
            Err(e) => out.error(&e),
            Ok((_, prior)) if o.get => out.opt_bulk(prior.as_deref()),
            Ok((true, _)) => out.ok(),
            Ok((false, _)) => out.null(),
        }
        return;
    }
    let opts = PutOptions {
        expires_at_ms: match o.expiry {
            Expiry::At(at) => Some(at),
            _ => None,
        },
        condition: o.cond,
        ..PutOptions::default()
    };
    let r = {
        let _held = s.shared.lock_keys([key]);
        s.shared.store.put_with(key, value, opts)
    };
    match r {
        Ok(true) => out.ok(),
        Ok(false) => out.null(),
        Err(e) => out.error(&store_error_line(&e)),
    }
}

pub fn setnx(s: &mut Session, a: &Args, out: &mut Out) {
    let opts = PutOptions {
        condition: Condition::IfAbsent,
        ..PutOptions::default()
    };
    let r = {
        let _held = s.shared.lock_keys([&a[1]]);
        s.shared.store.put_with(&a[1], &a[2], opts)
    };
    match r {
        Ok(set) => out.int(i64::from(set)),
        Err(e) => out.error(&store_error_line(&e)),
    }
}

fn set_with_ttl(s: &mut Session, a: &Args, out: &mut Out, unit_ms: i64, name: &str) {
    let ms = match int_arg(&a[2]) {
        Ok(n) if n > 0 => n.checked_mul(unit_ms),
        Ok(_) => None,
        Err(e) => return out.error(e),
    };
    let Some(ms) = ms else {
        return out.error(&format!("ERR invalid expire time in '{name}' command"));
    };
    let r = {
        let _held = s.shared.lock_keys([&a[1]]);
        s.shared.store.put_with(
            &a[1],
            &a[3],
            PutOptions::ttl(Duration::from_millis(ms as u64)),
        )
    };
    match r {
        Ok(_) => out.ok(),
        Err(e) => out.error(&store_error_line(&e)),
    }
}

pub fn setex(s: &mut Session, a: &Args, out: &mut Out) {
    set_with_ttl(s, a, out, 1000, "setex");
}

pub fn psetex(s: &mut Session, a: &Args, out: &mut Out) {
    set_with_ttl(s, a, out, 1, "psetex");
}

pub fn getset(s: &mut Session, a: &Args, out: &mut Out) {
    let r = rmw(s, &a[1], |old| {
        Ok((
            Change::Put(a[2].to_vec(), Ttl::Clear),
            old.map(|e| e.value.clone()),
        ))
    });
    match r {
        Ok(v) => out.opt_bulk(v.as_deref()),
        Err(e) => out.error(&e),
    }
}

pub fn getdel(s: &mut Session, a: &Args, out: &mut Out) {
    let r = rmw(s, &a[1], |old| match old {
        Some(e) => Ok((Change::Delete, Some(e.value.clone()))),
        None => Ok((Change::None, None)),
    });
    match r {
        Ok(v) => out.opt_bulk(v.as_deref()),
        Err(e) => out.error(&e),
    }
}

pub fn mget(s: &mut Session, a: &Args, out: &mut Out) {
    let keys = &a[1..];
    match s.shared.store.mget(keys) {
        Ok(vals) => {
            // A key that cannot be read fails the command, not just its slot: a nil
            // would claim the key is absent.
            if let Some(e) = vals.iter().find_map(|v| v.as_ref().err()) {
                return out.error(&store_error_line(e));
            }
            out.array(vals.len());
            for v in vals.into_iter().flatten() {
                out.opt_bulk(v.as_deref());
            }
        }
        Err(e) => out.error(&store_error_line(&e)),
    }
}

pub fn mset(s: &mut Session, a: &Args, out: &mut Out) {
    if a.len() % 2 != 1 {
        return out.error("ERR wrong number of arguments for 'mset' command");
    }
    let pairs = last_of_each(a);
    let results = {
        let _held = s.shared.lock_keys(pairs.iter().map(|p| &p.0));
        s.shared.store.mput(&pairs)
    };
    match results.iter().find_map(|r| r.as_ref().err()) {
        Some(e) => out.error(&store_error_line(e)),
        None => out.ok(),
    }
}

/// An MSET's pairs, a key named twice only with its last value (what setting them
/// in order leaves; one multi-put of the same key twice would race itself).
fn last_of_each(a: &Args) -> Vec<(&[u8], &[u8])> {
    let mut at: std::collections::HashMap<&[u8], usize> = Default::default();
    let mut pairs: Vec<(&[u8], &[u8])> = Vec::with_capacity(a.len() / 2);
    for p in a[1..].chunks_exact(2) {
        match at.get(&p[0][..]) {
            Some(&i) => pairs[i].1 = &p[1][..],
            None => {
                at.insert(&p[0][..], pairs.len());
                pairs.push((&p[0][..], &p[1][..]));
            }
        }
    }
    pairs
}

/// One edit of `key`, under its stripe lock.
fn edit_one(s: &mut Session, key: &[u8], edit: Edit<'_>, out: &mut Out) {
    let sh = &s.shared;
    let _held = sh.lock_keys([&key]);
    let done = match sh.store.edit_values(&[key], &[vec![edit]]).pop() {
        Some(Ok(v)) => v
            .first()
            .copied()
            .ok_or_else(|| "ERR the store answered no edit".to_string()),
        Some(Err(e)) => Err(store_error_line(&e)),
        None => Err("ERR the store answered no key".into()),
    };
    edit_reply(done, out);
}

fn incr_by(s: &mut Session, key: &[u8], delta: i64, out: &mut Out) {
    edit_one(s, key, Edit::Step(delta), out);
}

pub fn incr(s: &mut Session, a: &Args, out: &mut Out) {
    incr_by(s, &a[1], 1, out);
}

pub fn decr(s: &mut Session, a: &Args, out: &mut Out) {
    incr_by(s, &a[1], -1, out);
}

pub fn incrby(s: &mut Session, a: &Args, out: &mut Out) {
    match int_arg(&a[2]) {
        Ok(d) => incr_by(s, &a[1], d, out),
        Err(e) => out.error(e),
    }
}

pub fn decrby(s: &mut Session, a: &Args, out: &mut Out) {
    match int_arg(&a[2]).and_then(|d| d.checked_neg().ok_or("ERR decrement would overflow")) {
        Ok(d) => incr_by(s, &a[1], d, out),
        Err(e) => out.error(e),
    }
}

pub fn append(s: &mut Session, a: &Args, out: &mut Out) {
    edit_one(s, &a[1], Edit::Append(&a[2]), out);
}

/// `INCRBYFLOAT key increment`: the sum printed as Redis prints it (no exponent,
/// no trailing zeros).
pub fn incrbyfloat(s: &mut Session, a: &Args, out: &mut Out) {
    let Some(delta) = float_arg(&a[2]) else {
        return out.error("ERR value is not a valid float");
    };
    let r = rmw(s, &a[1], |old| {
        let cur = match old {
            None => 0.0,
            Some(e) => float_arg(&e.value).ok_or("ERR value is not a valid float")?,
        };
        let new = cur + delta;
        if !new.is_finite() {
            return Err("ERR increment would produce NaN or Infinity".into());
        }
        let text = format!("{new}");
        Ok((Change::Put(text.clone().into_bytes(), Ttl::Keep), text))
    });
    match r {
        Ok(v) => out.bulk(v.as_bytes()),
        Err(e) => out.error(&e),
    }
}

/// A finite float as Redis reads one (no spaces, no `inf`/`nan`).
fn float_arg(b: &[u8]) -> Option<f64> {
    let t = std::str::from_utf8(b).ok()?;
    if t.is_empty() || t.trim() != t {
        return None;
    }
    t.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// `MSETNX k v [k v ...]`: sets them all if none exists (1), else none (0).
pub fn msetnx(s: &mut Session, a: &Args, out: &mut Out) {
    if a.len() % 2 != 1 {
        return out.error("ERR wrong number of arguments for 'msetnx' command");
    }
    let pairs = last_of_each(a);
    let _held = s.shared.lock_keys(pairs.iter().map(|p| &p.0));
    let keys: Vec<&[u8]> = pairs.iter().map(|p| p.0).collect();
    match s.shared.store.mget(&keys) {
        Ok(vals) => {
            if let Some(e) = vals.iter().find_map(|v| v.as_ref().err()) {
                return out.error(&store_error_line(e));
            }
            if vals.iter().any(|v| matches!(v, Ok(Some(_)))) {
                return out.int(0);
            }
        }
        Err(e) => return out.error(&store_error_line(&e)),
    }
    let results = s.shared.store.mput(&pairs);
    match results.iter().find_map(|r| r.as_ref().err()) {
        Some(e) => out.error(&store_error_line(e)),
        None => out.int(1),
    }
}

/// `GETEX key [EX s | PX ms | EXAT t | PXAT t | PERSIST]`: the value, and its
/// expiry changed as asked.
pub fn getex(s: &mut Session, a: &Args, out: &mut Out) {
    enum To {
        Keep,
        /// At this Unix time in milliseconds.
        At(i64),
        Persist,
    }
    let bad = |out: &mut Out| out.error("ERR syntax error");
    let to = match a.len() {
        2 => To::Keep,
        3 if a[2].eq_ignore_ascii_case(b"persist") => To::Persist,
        4 => {
            let n = match int_arg(&a[3]) {
                Ok(n) => n,
                Err(e) => return out.error(e),
            };
            let at = match &a[2].to_ascii_lowercase()[..] {
                b"ex" => n.checked_mul(1000).and_then(|ms| ms.checked_add(now_ms())),
                b"px" => n.checked_add(now_ms()),
                b"exat" => n.checked_mul(1000),
                b"pxat" => Some(n),
                _ => return bad(out),
            };
            let relative = a[2].len() == 2;
            match at {
                Some(at) if !(relative && n <= 0) => To::At(at),
                _ => return out.error("ERR invalid expire time in 'getex' command"),
            }
        }
        _ => return bad(out),
    };
    let r = rmw(s, &a[1], |old| {
        let Some(e) = old else {
            return Ok((Change::None, None));
        };
        let change = match to {
            To::Keep => Change::None,
            To::Persist if e.expires_ms.is_none() => Change::None,
            To::Persist => Change::Put(e.value.to_vec(), Ttl::Clear),
            To::At(at) if at <= now_ms() => Change::Delete,
            To::At(at) => Change::Put(e.value.to_vec(), Ttl::At(at as u64)),
        };
        Ok((change, Some(e.value.clone())))
    });
    match r {
        Ok(v) => out.opt_bulk(v.as_deref()),
        Err(e) => out.error(&e),
    }
}

/// Redis's GETRANGE: inclusive, negative indices from the end, clamped.
pub fn range(len: usize, start: i64, end: i64) -> Option<(usize, usize)> {
    let len = len as i64;
    if len == 0 || (start < 0 && end < 0 && start > end) {
        return None;
    }
    let fix = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (s, e) = (fix(start), fix(end).min(len - 1));
    (s <= e).then_some((s as usize, e as usize + 1))
}

pub fn getrange(s: &mut Session, a: &Args, out: &mut Out) {
    let (start, end) = match (int_arg(&a[2]), int_arg(&a[3])) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => return out.error(e),
    };
    match s.shared.store.get(&a[1]) {
        Ok(Some(v)) => match range(v.len(), start, end) {
            Some((x, y)) => out.bulk(&v[x..y]),
            None => out.bulk(b""),
        },
        Ok(None) => out.bulk(b""),
        Err(e) => out.error(&store_error_line(&e)),
    }
}

pub fn setrange(s: &mut Session, a: &Args, out: &mut Out) {
    let off = match int_arg(&a[2]) {
        Ok(o) if o >= 0 => o as usize,
        Ok(_) => return out.error("ERR offset is out of range"),
        Err(e) => return out.error(e),
    };
    let patch = &a[3];
    if off.saturating_add(patch.len()) > MAX_BULK {
        return out.error("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
    }
    edit_one(s, &a[1], Edit::SetRange(off as u64, patch), out);
}

pub fn strlen(s: &mut Session, a: &Args, out: &mut Out) {
    match s.shared.store.get(&a[1]) {
        Ok(v) => out.int(v.map_or(0, |v| v.len() as i64)),
        Err(e) => out.error(&store_error_line(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::range;

    #[test]
    fn getrange_follows_redis() {
        // "This is a string" examples from the Redis docs.
        let len = 16;
        assert_eq!(range(len, 0, 3), Some((0, 4)));
        assert_eq!(range(len, -3, -1), Some((13, 16)));
        assert_eq!(range(len, 0, -1), Some((0, 16)));
        assert_eq!(range(len, 10, 100), Some((10, 16)));
        assert_eq!(range(len, 5, 2), None);
        assert_eq!(range(0, 0, -1), None);
        assert_eq!(range(len, -100, 2), Some((0, 3)));
    }
}
