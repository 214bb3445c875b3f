//! The keyspace as a whole: DBSIZE, SCAN, KEYS, FLUSHDB/FLUSHALL. Each walks the
//! store's index (`Store::scan_keys`), a page at a time.

use super::int_arg;
use crate::error::store_error_line;
use crate::parse::Args;
use crate::pattern;
use crate::reply::Out;
use crate::session::Session;

/// Keys in the store (a full pass over its index: an operator's command).
pub fn dbsize(s: &mut Session, _: &Args, out: &mut Out) {
    match s.shared.store.keys() {
        Ok(k) => out.int(k.len() as i64),
        Err(e) => out.error(&store_error_line(&e)),
    }
}

/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]`.
pub fn scan(s: &mut Session, a: &Args, out: &mut Out) {
    let cursor = match std::str::from_utf8(&a[1])
        .ok()
        .and_then(|t| t.parse::<u64>().ok())
    {
        Some(c) => c,
        None => return out.error("ERR invalid cursor"),
    };
    let (mut pat, mut count, mut only_strings) = (None, 10usize, true);
    let mut i = 2;
    while i < a.len() {
        let opt = a[i].to_ascii_lowercase();
        let Some(v) = a.get(i + 1) else {
            return out.error("ERR syntax error");
        };
        match &opt[..] {
            b"match" => pat = Some(v.clone()),
            b"count" => match int_arg(v) {
                Ok(n) if n >= 1 => count = n as usize,
                Ok(_) => return out.error("ERR syntax error"),
                Err(e) => return out.error(e),
            },
            // Every value is a string.
            b"type" => only_strings = v.eq_ignore_ascii_case(b"string"),
            _ => return out.error("ERR syntax error"),
        }
        i += 2;
    }
    let (next, keys) = match s.shared.store.scan_keys(cursor, count) {
        Ok(r) => r,
        Err(e) => return out.error(&store_error_line(&e)),
    };
    let keys: Vec<_> = keys
        .into_iter()
        .filter(|k| only_strings && pat.as_ref().is_none_or(|p| pattern::matches(p, k)))
        .collect();
    out.array(2);
    out.bulk(next.to_string().as_bytes());
    out.array(keys.len());
    for k in &keys {
        out.bulk(k);
    }
}

/// `KEYS pattern` (a full pass, as in Redis: use SCAN on a large store).
pub fn keys(s: &mut Session, a: &Args, out: &mut Out) {
    match s.shared.store.keys() {
        Ok(keys) => {
            let hits: Vec<_> = keys.iter().filter(|k| pattern::matches(&a[1], k)).collect();
            out.array(hits.len());
            for k in hits {
                out.bulk(k);
            }
        }
        Err(e) => out.error(&store_error_line(&e)),
    }
}

/// `FLUSHDB [ASYNC|SYNC]`: deletes every key (through the store, so large values'
/// chunks are freed too), each under its key's lock.
pub fn flushdb(s: &mut Session, a: &Args, out: &mut Out) {
    if a.len() > 2
        || a.get(1)
            .is_some_and(|m| !m.eq_ignore_ascii_case(b"async") && !m.eq_ignore_ascii_case(b"sync"))
    {
        return out.error("ERR syntax error");
    }
    let keys = match s.shared.store.keys() {
        Ok(k) => k,
        Err(e) => return out.error(&store_error_line(&e)),
    };
    // Batched deletes a chunk at a time, each under its keys' stripes only.
    for chunk in keys.chunks(4096) {
        let results = {
            let _held = s.shared.lock_keys(chunk);
            s.shared.store.delete_many(chunk)
        };
        if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
            return out.error(&store_error_line(&e));
        }
    }
    out.ok();
}

/// `RANDOMKEY`: a live key, or a null reply when there is none.
pub fn randomkey(s: &mut Session, _: &Args, out: &mut Out) {
    match s.shared.store.random_key() {
        Ok(k) => out.opt_bulk(k.as_deref()),
        Err(e) => out.error(&store_error_line(&e)),
    }
}
