//! Completion records: the answers of tagged ops (see [`farcache_proto::Tag`]), kept
//! so that an op a client sends again after a failover is applied once.
//!
//! An owner records each tagged WRITE, CAS, FETCH_ADD and writing EXECUTE it
//! applies (an EXECUTE's record is its reply's body), and sends the record to the
//! region's backups with the replicated bytes; a backup promoted to
//! owner thus knows every op the old owner applied and replicated. A live copy of a
//! region (a move, a new backup) carries the records of its address range. A session's
//! records below its `done_below` are dropped (the client has those answers), and a
//! session not heard from for [`IDLE`] is dropped whole (its client is gone: its
//! retries would have timed out long before).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use farcache_proto::Tag;
use parking_lot::Mutex;

/// A session silent this long is forgotten (well above any client's op timeout).
pub const IDLE: Duration = Duration::from_secs(120);
/// Records kept per session at most; past it the oldest go (counted in
/// `evicted`). A client lane has at most its in-flight ops unanswered.
const PER_SESSION: usize = 1 << 20;
/// Sessions are hashed over this many locks.
const SHARDS: usize = 16;
/// Records kept on a server at most (about 40 bytes each): a client that invents
/// sessions cannot fill the server's memory. Past it, the sessions heard from
/// longest ago are dropped whole (their ops lose the exactly-once promise; counted
/// in `evicted`).
const MAX_RECORDS: usize = 1 << 22;
/// The longest EXECUTE reply recorded: a longer one is not (its retry after a
/// failover runs again; counted in `unrecorded`). Store procedures answer a few
/// bytes per key.
pub const MAX_BODY: usize = 64 << 10;
/// Reply bodies kept per lock shard at most (64 MiB over all): past it, the
/// sessions heard from longest ago go whole, as past [`MAX_RECORDS`].
const BODY_BYTES_PER_SHARD: usize = 4 << 20;

/// One tagged op's answer, as a batch hands it over.
#[derive(Debug, Clone)]
pub struct Record {
    pub tag: Tag,
    pub addr: u64,
    pub result: u64,
    /// A writing EXECUTE's reply body.
    pub body: Option<Arc<[u8]>>,
}

/// Hashes an op's `(seq, addr)` with one multiply: keys are not chosen by an
/// adversary (a client only names its own session's ops).
#[derive(Default)]
struct MixHasher(u64);

impl std::hash::Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(29) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Records = HashMap<(u64, u64), u64, std::hash::BuildHasherDefault<MixHasher>>;
type Bodies = HashMap<(u64, u64), Arc<[u8]>, std::hash::BuildHasherDefault<MixHasher>>;

/// Records start being pruned (below `done_below`) from this many.
const PRUNE_FROM: usize = 1024;

#[derive(Default)]
struct Session {
    done_below: u64,
    /// The highest `seq` recorded: a client numbers its ops upwards, so an op above
    /// it is new and needs no lookup.
    max_seq: u64,
    /// `(seq, addr)` → answer. Ops arrive out of order (a backup may hear of an op
    /// from its owner before the client's next frame reaches it), hence a map.
    records: Records,
    /// The reply bodies of writing EXECUTEs among `records`.
    bodies: Bodies,
    /// Bytes in `bodies`.
    body_bytes: usize,
    /// Records left after the last pruning: the next waits until there are twice as
    /// many, so pruning costs O(1) per record.
    pruned_to: usize,
    heard: Option<Instant>,
}

impl Session {
    fn insert(&mut self, seq: u64, addr: u64, result: u64, body: Option<&Arc<[u8]>>) {
        if seq < self.done_below {
            return;
        }
        self.max_seq = self.max_seq.max(seq);
        self.records.insert((seq, addr), result);
        if let Some(b) = body {
            self.body_bytes += b.len();
            if let Some(old) = self.bodies.insert((seq, addr), b.clone()) {
                self.body_bytes -= old.len();
            }
        }
    }

    /// Drops the bodies whose records went.
    fn prune_bodies(&mut self) {
        if self.bodies.is_empty() {
            return;
        }
        let records = &self.records;
        let mut freed = 0;
        self.bodies.retain(|k, b| {
            let keep = records.contains_key(k);
            if !keep {
                freed += b.len();
            }
            keep
        });
        self.body_bytes -= freed;
    }

    fn forget_below(&mut self, done_below: u64) {
        if done_below <= self.done_below {
            return;
        }
        self.done_below = done_below;
        if self.records.len() >= PRUNE_FROM.max(2 * self.pruned_to) {
            self.records.retain(|k, _| k.0 >= done_below);
            self.pruned_to = self.records.len();
            self.prune_bodies();
        }
    }

    /// Bounds the session's memory: drops the oldest half when over [`PER_SESSION`].
    fn bound(&mut self) -> u64 {
        if self.records.len() <= PER_SESSION {
            return 0;
        }
        let before = self.records.len();
        let cut = self.max_seq.saturating_sub(PER_SESSION as u64 / 2);
        self.done_below = self.done_below.max(cut);
        self.records.retain(|k, _| k.0 >= cut);
        self.pruned_to = self.records.len();
        self.prune_bodies();
        (before - self.records.len()) as u64
    }
}

#[derive(Default)]
struct Shard {
    sessions: HashMap<u64, Session>,
    swept: Option<Instant>,
    /// Records over all its sessions.
    held: usize,
    /// Reply bodies' bytes over all its sessions.
    body_bytes: usize,
}

impl Shard {
    /// Drops the sessions heard from longest ago while over its share of
    /// [`MAX_RECORDS`]; returns the records dropped.
    fn shed(&mut self) -> u64 {
        let mut dropped = 0u64;
        while self.held > MAX_RECORDS / SHARDS || self.body_bytes > BODY_BYTES_PER_SHARD {
            let oldest = self
                .sessions
                .iter()
                .min_by_key(|(_, s)| s.heard)
                .map(|(k, _)| *k);
            let Some(k) = oldest.and_then(|k| self.sessions.remove(&k)) else {
                break;
            };
            self.held -= k.records.len();
            self.body_bytes -= k.body_bytes;
            dropped += k.records.len() as u64;
        }
        dropped
    }
}

/// Every session's records on this server.
#[derive(Default)]
pub struct Completions {
    shards: [Mutex<Shard>; SHARDS],
    /// Repeats answered from a record instead of run again.
    pub repeats: AtomicU64,
    /// Records dropped to bound a session's memory.
    pub evicted: AtomicU64,
    /// Writing EXECUTEs whose replies were too long to record.
    pub unrecorded: AtomicU64,
}

impl Completions {
    fn shard(&self, session: u64) -> &Mutex<Shard> {
        // Sessions are random: their low bits spread well.
        &self.shards[(session as usize) % SHARDS]
    }

    /// The highest op number recorded for `session` (0 for none): ops above it
    /// cannot be repeats.
    pub fn max_seq(&self, session: u64) -> u64 {
        let sh = self.shard(session).lock();
        sh.sessions.get(&session).map_or(0, |s| s.max_seq)
    }

    /// The answer recorded for `(session, seq, addr)`, if this op already ran here
    /// or reached here from its owner.
    pub fn get(&self, session: u64, seq: u64, addr: u64) -> Option<u64> {
        let sh = self.shard(session).lock();
        let s = sh.sessions.get(&session)?;
        // Below `done_below` the client has the answer: it never asks again.
        if seq < s.done_below {
            return None;
        }
        s.records.get(&(seq, addr)).copied()
    }

    /// The reply body recorded for the writing EXECUTE `(session, seq, addr)`.
    pub fn body(&self, session: u64, seq: u64, addr: u64) -> Option<Arc<[u8]>> {
        let sh = self.shard(session).lock();
        let s = sh.sessions.get(&session)?;
        if seq < s.done_below {
            return None;
        }
        s.bodies.get(&(seq, addr)).cloned()
    }

    /// Records one op's answer (see [`record_many`](Self::record_many)).
    pub fn record(&self, session: u64, seq: u64, addr: u64, done_below: u64, result: u64) {
        let tag = Tag {
            session,
            seq,
            done_below,
            result,
        };
        self.record_many(&[Record {
            tag,
            addr,
            result,
            body: None,
        }]);
    }

    /// Records a batch's answers, taking each session's lock once per run of its
    /// records; drops what the sessions say they no longer need.
    pub fn record_many(&self, recs: &[Record]) {
        let Some(first) = recs.first() else {
            return;
        };
        let now = Instant::now();
        let mut rest = recs;
        let mut session = first.tag.session;
        while !rest.is_empty() {
            let n = rest
                .iter()
                .position(|r| r.tag.session != session)
                .unwrap_or(rest.len());
            let (run, after) = rest.split_at(n);
            let mut guard = self.shard(session).lock();
            let sh = &mut *guard;
            let s = sh.sessions.entry(session).or_default();
            let before = (s.records.len(), s.body_bytes);
            s.heard = Some(now);
            if let Some(d) = run.iter().map(|r| r.tag.done_below).max() {
                s.forget_below(d);
            }
            for r in run {
                s.insert(r.tag.seq, r.addr, r.result, r.body.as_ref());
            }
            let mut evicted = s.bound();
            sh.held = sh.held + s.records.len() - before.0;
            sh.body_bytes = sh.body_bytes + s.body_bytes - before.1;
            if sh.swept.is_none_or(|t| now.duration_since(t) > IDLE / 4) {
                sh.swept = Some(now);
                let (mut held, mut body_bytes) = (0, 0);
                sh.sessions.retain(|_, s| {
                    let keep = s.heard.is_some_and(|h| now.duration_since(h) < IDLE);
                    if keep {
                        held += s.records.len();
                        body_bytes += s.body_bytes;
                    }
                    keep
                });
                sh.held = held;
                sh.body_bytes = body_bytes;
            }
            evicted += sh.shed();
            if evicted > 0 {
                self.evicted.fetch_add(evicted, Relaxed);
            }
            drop(guard);
            rest = after;
            if let Some(r) = rest.first() {
                session = r.tag.session;
            }
        }
    }

    /// Every record of an op at `[lo, hi)`, as tags carrying the recorded answer and
    /// the session's `done_below`: what a region's new owner or new backup must know
    /// to answer retries of ops that ran here. Records name no cache, so ops of other
    /// caches at the same addresses come too (harmless: a retry names its own
    /// session and op number).
    pub fn in_range(&self, lo: u64, hi: u64) -> Vec<Record> {
        let mut out = Vec::new();
        for shard in &self.shards {
            let sh = shard.lock();
            for (&session, s) in &sh.sessions {
                for (&(seq, addr), &result) in &s.records {
                    if seq >= s.done_below && (lo..hi).contains(&addr) {
                        let tag = Tag {
                            session,
                            seq,
                            done_below: s.done_below,
                            result,
                        };
                        let body = s.bodies.get(&(seq, addr)).cloned();
                        out.push(Record {
                            tag,
                            addr,
                            result,
                            body,
                        });
                    }
                }
            }
        }
        out
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
        // A late record below the mark is not kept.
        c.record(7, 5, 64, 0, 1);
        assert_eq!(c.get(7, 5, 64), None);
        assert_eq!(c.max_seq(7), 12);
        assert_eq!(c.max_seq(9), 0);
        // Past PRUNE_FROM records, those below the mark go.
        for seq in 13..13 + PRUNE_FROM as u64 {
            c.record(7, seq, 0, 0, seq);
        }
        c.record(7, 5000, 0, 5000, 1);
        assert_eq!(c.len(), 1);
        assert_eq!(c.get(7, 5000, 0), Some(1));
    }

    #[test]
    fn invented_sessions_cannot_fill_the_server() {
        let c = Completions::default();
        let share = MAX_RECORDS / SHARDS;
        // Three sessions of one shard, each holding 40 % of the shard's share.
        let per = (share * 2 / 5) as u64;
        for k in 1..=3u64 {
            let session = k * SHARDS as u64;
            let recs: Vec<Record> = (1..=per)
                .map(|seq| Record {
                    tag: Tag {
                        session,
                        seq,
                        done_below: 0,
                        result: 0,
                    },
                    addr: 0,
                    result: seq,
                    body: None,
                })
                .collect();
            c.record_many(&recs);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(
            c.len() <= share,
            "{} records over the {share} share",
            c.len()
        );
        assert_eq!(
            c.get(SHARDS as u64, 1, 0),
            None,
            "the session heard from first went"
        );
        assert_eq!(
            c.get(3 * SHARDS as u64, per, 0),
            Some(per),
            "the newest stays"
        );
        assert_eq!(c.evicted.load(Relaxed), per);
    }

    #[test]
    fn records_out_of_order_are_found_and_a_batch_spans_sessions() {
        let c = Completions::default();
        let rec = |session, seq, addr, result| Record {
            tag: Tag {
                session,
                seq,
                done_below: 0,
                result,
            },
            addr,
            result,
            body: None,
        };
        c.record_many(&[
            rec(1, 5, 0, 50),
            rec(1, 3, 8, 30),
            rec(2, 9, 0, 90),
            rec(1, 4, 0, 40),
        ]);
        assert_eq!(c.get(1, 3, 8), Some(30));
        assert_eq!(c.get(1, 4, 0), Some(40));
        assert_eq!(c.get(1, 5, 0), Some(50));
        assert_eq!(c.get(2, 9, 0), Some(90));
        assert_eq!(c.max_seq(1), 5);
        // The same op recorded again keeps one record.
        c.record_many(&[rec(1, 4, 0, 41)]);
        assert_eq!((c.get(1, 4, 0), c.len()), (Some(41), 4));
    }

    #[test]
    fn records_of_a_range_carry_their_answer_and_the_sessions_mark() {
        let c = Completions::default();
        c.record(1, 10, 100, 0, 7);
        c.record(1, 11, 200, 0, 8);
        c.record(2, 3, 150, 0, 9);
        c.record(1, 12, 120, 11, 5);
        let mut got: Vec<(u64, u64, u64, u64, u64)> = c
            .in_range(100, 200)
            .iter()
            .map(|r| (r.tag.session, r.tag.seq, r.addr, r.result, r.tag.done_below))
            .collect();
        got.sort_unstable();
        // Session 1's op 10 is below its mark (11): the client has that answer.
        assert_eq!(got, vec![(1, 12, 120, 5, 11), (2, 3, 150, 9, 0)]);
        // A copy recorded elsewhere answers the same retries.
        let d = Completions::default();
        d.record_many(&c.in_range(0, u64::MAX));
        assert_eq!(d.get(1, 12, 120), Some(5));
        assert_eq!(d.get(1, 11, 200), Some(8));
        assert_eq!(d.get(2, 3, 150), Some(9));
        assert_eq!(d.get(1, 10, 100), None);
    }

    #[test]
    fn an_execute_reply_is_kept_copied_with_its_range_and_dropped_with_its_record() {
        let c = Completions::default();
        let body: Arc<[u8]> = Arc::from(&b"new value 42"[..]);
        let rec = |seq, addr, done_below, body: Option<Arc<[u8]>>| Record {
            tag: Tag {
                session: 3,
                seq,
                done_below,
                result: 0,
            },
            addr,
            result: 0,
            body,
        };
        c.record_many(&[rec(10, 640, 0, Some(body.clone())), rec(11, 8, 0, None)]);
        assert_eq!(c.body(3, 10, 640).as_deref(), Some(&body[..]));
        assert_eq!(c.body(3, 11, 8), None, "a write's record has no body");
        assert_eq!(c.body(3, 10, 648), None, "another address");
        // A new owner's copy of the range answers with the same body.
        let d = Completions::default();
        d.record_many(&c.in_range(0, 1024));
        assert_eq!(d.body(3, 10, 640).as_deref(), Some(&body[..]));
        // Once the client has the answer, the body goes with the record.
        let last = 12 + PRUNE_FROM as u64;
        for seq in 12..last {
            c.record_many(&[rec(seq, 0, 0, None)]);
        }
        c.record_many(&[rec(last, 0, last, None)]);
        assert_eq!(c.body(3, 10, 640), None);
        let sh = c.shard(3).lock();
        assert_eq!(sh.sessions[&3].bodies.len(), 0);
        assert_eq!((sh.sessions[&3].body_bytes, sh.body_bytes), (0, 0));
    }

    #[test]
    fn reply_bodies_cannot_fill_the_server() {
        let c = Completions::default();
        let big: Arc<[u8]> = Arc::from(vec![7u8; MAX_BODY]);
        // Two sessions of one shard, each with bodies past the shard's share.
        for k in 1..=2u64 {
            let session = k * SHARDS as u64;
            let recs: Vec<Record> = (0..(BODY_BYTES_PER_SHARD / MAX_BODY) as u64)
                .map(|seq| Record {
                    tag: Tag {
                        session,
                        seq,
                        done_below: 0,
                        result: 0,
                    },
                    addr: 0,
                    result: 0,
                    body: Some(big.clone()),
                })
                .collect();
            c.record_many(&recs);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let sh = c.shard(0).lock();
        assert!(sh.body_bytes <= BODY_BYTES_PER_SHARD, "{}", sh.body_bytes);
        assert!(
            !sh.sessions.contains_key(&(SHARDS as u64)),
            "the older went"
        );
        assert!(sh.sessions.contains_key(&(2 * SHARDS as u64)));
    }
}
