//! Scripts by their SHA-1, as `SCRIPT LOAD` and `EVAL` leave them for `EVALSHA`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::Ended;
use sha1::{Digest, Sha1};

/// Most scripts kept, and most bytes of their sources: past either, `EVAL` still
/// runs a new script but does not keep it, and `SCRIPT LOAD` is refused.
const MAX_SCRIPTS: usize = 10_000;
const MAX_BYTES: usize = 64 << 20;

/// The lowercase hex SHA-1 of `body` (the name `EVALSHA` takes).
pub fn sha1_hex(body: &[u8]) -> String {
    let digest = Sha1::digest(body);
    let mut s = String::with_capacity(40);
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[derive(Default)]
struct Scripts {
    by_sha: HashMap<String, Arc<[u8]>>,
    bytes: usize,
}

/// The script cache of one front end (every connection and event loop sees it).
#[derive(Default)]
pub struct ScriptCache {
    inner: Mutex<Scripts>,
    /// Advanced by `SCRIPT FLUSH`: event loops drop their compiled functions.
    generation: AtomicU64,
    /// Runs by how they ended (`INFO stats`).
    returned: AtomicU64,
    failed: AtomicU64,
    killed: AtomicU64,
}

impl ScriptCache {
    /// Keeps `body` under its SHA-1 if there is room; returns the SHA-1 and whether
    /// it is kept.
    pub fn add(&self, body: &[u8]) -> (String, bool) {
        let sha = sha1_hex(body);
        let mut s = self.inner.lock();
        if s.by_sha.contains_key(&sha) {
            return (sha, true);
        }
        if s.by_sha.len() >= MAX_SCRIPTS || s.bytes + body.len() > MAX_BYTES {
            return (sha, false);
        }
        s.bytes += body.len();
        s.by_sha.insert(sha.clone(), body.into());
        (sha, true)
    }

    /// The script named by `sha` (either case).
    pub fn get(&self, sha: &[u8]) -> Option<Arc<[u8]>> {
        let sha = std::str::from_utf8(sha).ok()?.to_ascii_lowercase();
        self.inner.lock().by_sha.get(&sha).cloned()
    }

    pub fn flush(&self) {
        let mut s = self.inner.lock();
        s.by_sha.clear();
        s.bytes = 0;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    pub fn count(&self, ended: Ended) {
        let c = match ended {
            Ended::Returned => &self.returned,
            Ended::Failed => &self.failed,
            Ended::Killed => &self.killed,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs that returned, failed, and were killed at the time limit.
    pub fn runs(&self) -> (u64, u64, u64) {
        (
            self.returned.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            self.killed.load(Ordering::Relaxed),
        )
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Scripts kept and their bytes (`INFO`).
    pub fn size(&self) -> (usize, usize) {
        let s = self.inner.lock();
        (s.by_sha.len(), s.bytes)
    }

    /// The limits, for error messages.
    pub fn limits() -> (usize, usize) {
        (MAX_SCRIPTS, MAX_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_redis_sha1s_and_flush_forgets() {
        // Redis's SHA-1 of "return 1".
        assert_eq!(
            sha1_hex(b"return 1"),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
        let c = ScriptCache::default();
        let (sha, kept) = c.add(b"return 1");
        assert!(kept);
        assert!(c.get(sha.to_ascii_uppercase().as_bytes()).is_some());
        assert_eq!(c.size(), (1, 8));
        let g = c.generation();
        c.flush();
        assert!(c.get(sha.as_bytes()).is_none());
        assert_eq!(c.generation(), g + 1);
    }
}
