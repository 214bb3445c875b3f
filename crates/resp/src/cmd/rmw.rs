//! Read-modify-write under the key's stripe lock: the command sees the value and its
//! expiry, decides, and its write lands before any other command of this front end
//! touches the key.
use farcache_store::{Entry, PutOptions};

use crate::error::store_error_line;
use crate::session::Session;

/// The expiry a rewrite gives its key.
pub enum Ttl {
    /// As the old value had it, to the millisecond (`INCR`, `APPEND`, `SETRANGE`,
    /// `SET KEEPTTL`).
    Keep,
    /// None (`GETSET`, `PERSIST`).
    Clear,
    /// At this Unix time in milliseconds (`PEXPIREAT`, and every expiry computed
    /// once from the clock, so a slow write does not move it).
    At(u64),
}

/// What a read-modify-write does to its key.
pub enum Change {
    None,
    Put(Vec<u8>, Ttl),
    Delete,
}

/// The expiry a rewrite keeps: the entry's own; one expiring right now is kept
/// alive for the write, barely.
pub fn keep_expiry(e: &Entry) -> Option<u64> {
    let soon = u64::try_from(super::keys::now_ms()).unwrap_or(0) + 1;
    e.expires_ms.map(|at| at.max(soon))
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
            let opts = match ttl {
                Ttl::Keep => PutOptions::expires_at(entry.as_ref().and_then(keep_expiry)),
                Ttl::Clear => PutOptions::default(),
                Ttl::At(ms) => PutOptions::expires_at(Some(ms)),
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
