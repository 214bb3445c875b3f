//! Completion records: the answers of tagged ops (see [`farcache_proto::Tag`]), kept
//! so that an op a client sends again after a failover is applied once.
//!
//! An owner records each tagged WRITE, CAS and FETCH_ADD it applies, and sends the
//! record to the region's backups with the replicated bytes; a backup promoted to
//! owner thus knows every op the old owner applied and replicated. A session's
//! records below its `done_below` are dropped (the client has those answers), and a
//! session not heard from for [`IDLE`] is dropped whole (its client is gone: its
//! retries would have timed out long before).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A session silent this long is forgotten (well above any client's op timeout).
pub const IDLE: Duration = Duration::from_secs(120);
/// Records kept per session at most; past it the oldest go (counted in
/// `evicted`). A client lane has at most its in-flight ops unanswered.
const PER_SESSION: usize = 1 << 20;
/// Sessions are hashed over this many locks.
const SHARDS: usize = 16;

#[derive(Default)]
struct Session {
    done_below: u64,
    /// `(seq, addr)` → the op's answer.
    records: BTreeMap<(u64, u64), u64>,
    heard: Option<Instant>,
}

#[derive(Default)]
struct Shard {
    sessions: HashMap<u64, Session>,
    swept: Option<Instant>,
}

/// Every session's records on this server.
#[derive(Default)]
pub struct Completions {
    shards: [Mutex<Shard>; SHARDS],
    /// Repeats answered from a record instead of run again.
    pub repeats: AtomicU64,
    /// Records dropped to bound a session's memory.
    pub evicted: AtomicU64,
}

impl Completions {
    fn shard(&self, session: u64) -> &Mutex<Shard> {
        // Sessions are random: their low bits spread well.
        &self.shards[(session as usize) % SHARDS]
    }

    /// The answer recorded for `(session, seq, addr)`, if this op already ran here
    /// or reached here from its owner.
    pub fn get(&self, session: u64, seq: u64, addr: u64) -> Option<u64> {
        let sh = self.shard(session).lock();
        sh.sessions
            .get(&session)?
            .records
            .get(&(seq, addr))
            .copied()
    }

    /// Records an op's answer; drops what the session says it no longer needs.
    pub fn record(&self, session: u64, seq: u64, addr: u64, done_below: u64, result: u64) {
        let now = Instant::now();
        let mut sh = self.shard(session).lock();
        let s = sh.sessions.entry(session).or_default();
        s.heard = Some(now);
        if done_below > s.done_below {
            s.done_below = done_below;
            s.records = s.records.split_off(&(done_below, 0));
        }
        if seq >= s.done_below {
            s.records.insert((seq, addr), result);
        }
        while s.records.len() > PER_SESSION {
            s.records.pop_first();
            self.evicted.fetch_add(1, Relaxed);
        }
        if sh.swept.is_none_or(|t| now.duration_since(t) > IDLE / 4) {
            sh.swept = Some(now);
            sh.sessions
                .retain(|_, s| s.heard.is_some_and(|h| now.duration_since(h) < IDLE));
        }
    }

    /// Records held, over all sessions (for metrics).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .sessions
                    .values()
                    .map(|s| s.records.len())
                    .sum::<usize>()
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_answer_is_found_until_the_client_is_done_with_it() {
        let c = Completions::default();
        c.record(7, 10, 64, 0, 41);
        c.record(7, 10, 4096, 0, 0);
        c.record(7, 11, 64, 0, 42);
        assert_eq!(c.get(7, 10, 64), Some(41));
        assert_eq!(c.get(7, 10, 4096), Some(0));
        assert_eq!(c.get(7, 10, 128), None, "another part of the op");
        assert_eq!(c.get(8, 10, 64), None, "another session");
        // The client has every answer below 11 now.
        c.record(7, 12, 64, 11, 43);
        assert_eq!(c.get(7, 10, 64), None);
        assert_eq!(c.get(7, 11, 64), Some(42));
        assert_eq!(c.len(), 2);
        // A late record below the mark is not kept.
        c.record(7, 5, 64, 0, 1);
        assert_eq!(c.get(7, 5, 64), None);
    }
}
