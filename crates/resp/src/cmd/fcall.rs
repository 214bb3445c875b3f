//! `FCALL procedure numkeys [address] [args]`: runs a stored procedure (built-in or
//! registered WebAssembly) on the store's cache. The one key, if given, is the
//! decimal cache address the procedure starts at (it runs on the server holding
//! it); the one argument, if given, is the procedure's argument bytes. The reply is
//! the procedure's result as a bulk string.

use super::int_arg;
use crate::parse::Args;
use crate::reply::Out;
use crate::session::Session;

pub fn fcall(s: &mut Session, a: &Args, out: &mut Out) {
    let Ok(proc_name) = std::str::from_utf8(&a[1]) else {
        return out.error("ERR procedure names are UTF-8");
    };
    let numkeys = match int_arg(&a[2]) {
        Ok(n) if (0..=1).contains(&n) => n as usize,
        Ok(_) => {
            return out.error(
                "ERR numkeys must be 0 or 1 (the one key is the cache address the procedure runs at)",
            );
        }
        Err(e) => return out.error(e),
    };
    if a.len() < 3 + numkeys {
        return out.error("ERR Number of keys can't be greater than number of args");
    }
    let addr = if numkeys == 1 {
        match std::str::from_utf8(&a[3])
            .ok()
            .and_then(|t| t.parse::<u64>().ok())
        {
            Some(x) => x,
            None => return out.error("ERR the key of FCALL is a decimal cache address"),
        }
    } else {
        0
    };
    let rest = &a[3 + numkeys..];
    if rest.len() > 1 {
        return out.error("ERR FCALL takes at most one argument (the procedure's argument bytes)");
    }
    let args = rest.first().map(|b| &b[..]).unwrap_or_default();
    match s.shared.store.cache().execute(proc_name, addr, args) {
        Ok(v) => out.bulk(&v),
        Err(e) => out.error(&format!("ERR {e}")),
    }
}
