//! Read-modify-write under the key's stripe lock: the command sees the value and its
//! expiry, decides, and its write lands before any other command of this front end
//! touches the key.
use std::time::{SystemTime, UNIX_EPOCH};

use farcache_store::{Entry, Update};

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
    let soon = u64::try_from(now_ms()).unwrap_or(0) + 1;
    e.expires_ms.map(|at| at.max(soon))
}

/// Runs `f` on `key`'s entry and applies its change; returns `f`'s answer or the
/// error line to reply. Two round trips for a rewrite ([`Store::update_many`]): if
/// a writer outside this front end changed the key in between, `f` runs again on
/// what it wrote.
///
/// [`Store::update_many`]: farcache_store::Store::update_many
pub fn rmw<T>(
    s: &Session,
    key: &[u8],
    mut f: impl FnMut(Option<&Entry>) -> Result<(Change, T), String>,
) -> Result<T, String> {
    let sh = &s.shared;
    let _held = sh.lock_keys([&key]);
    let mut answer = None;
    let mut delete = false;
    let r = sh.store.update_many(&[key], |_, entry| {
        delete = false;
        let (change, a) = match f(entry) {
            Ok(r) => r,
            Err(e) => {
                answer = Some(Err(e));
                return Update::Keep;
            }
        };
        answer = Some(Ok(a));
        match change {
            Change::None => Update::Keep,
            Change::Delete => {
                delete = true;
                Update::Keep
            }
            Change::Put(value, ttl) => Update::Put {
                value,
                expires_ms: match ttl {
                    Ttl::Keep => entry.and_then(keep_expiry),
                    Ttl::Clear => None,
                    Ttl::At(ms) => Some(ms),
                },
            },
        }
    });
    if let Some(Err(e)) = r.into_iter().next() {
        return Err(store_error_line(&e));
    }
    if delete {
        sh.store.delete(key).map_err(|e| store_error_line(&e))?;
    }
    answer.unwrap_or_else(|| Err("ERR the store answered no entry".into()))
}

/// Wall-clock milliseconds since the epoch: Redis's expiry clock.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
