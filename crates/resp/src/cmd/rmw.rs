//! Read-modify-write under the key's stripe lock: the command sees the value and its
//! expiry, decides, and its write lands before any other command of this front end
//! touches the key.

use std::time::Duration;

use farcache_store::{Entry, PutOptions};

use crate::error::store_error_line;
use crate::session::Session;

/// The expiry a rewrite gives its key.
pub enum Ttl {
    /// As the old value had it (`INCR`, `APPEND`, `SETRANGE`, `SET KEEPTTL`).
    Keep,
    /// None (`GETSET`, `PERSIST`).
    Clear,
    Set(Duration),
}

/// What a read-modify-write does to its key.
pub enum Change {
    None,
    Put(Vec<u8>, Ttl),
    Delete,
}

/// Runs `f` on `key`'s entry and applies its change; returns `f`'s answer or the
/// error line to reply.
pub fn rmw<T>(
    s: &Session,
    key: &[u8],
    f: impl FnOnce(Option<&Entry>) -> Result<(Change, T), String>,
) -> Result<T, String> {
    let sh = &s.shared;
    let _held = sh.lock_keys([&key]);
    let entry = sh.store.entry(key).map_err(|e| store_error_line(&e))?;
    let (change, answer) = f(entry.as_ref())?;
    match change {
        Change::None => {}
        Change::Put(value, ttl) => {
            let ttl = match ttl {
                Ttl::Keep => entry
                    .as_ref()
                    .and_then(Entry::ttl)
                    // Expiring right now: keep it alive for the write, barely.
                    .map(|d| d.max(Duration::from_millis(1))),
                Ttl::Clear => None,
                Ttl::Set(d) => Some(d),
            };
            let opts = PutOptions {
                ttl,
                ..PutOptions::default()
            };
            sh.store
                .put_with(key, &value, opts)
                .map_err(|e| store_error_line(&e))?;
        }
        Change::Delete => {
            sh.store.delete(key).map_err(|e| store_error_line(&e))?;
        }
    }
    Ok(answer)
}
