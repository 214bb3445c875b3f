//! A history of register operations and the check a skeptic runs on it.
//!
//! Each address is a register. Writes put values that are unique per address (the
//! load writes counters), reads return one value, and every op is recorded with when
//! it was invoked and when its outcome came back: `Ok`, `Fail` (it surely did not
//! happen, e.g. refused before it ran) or `Unknown` (a timeout or a lost connection:
//! it may have happened, at any time after its invocation).
//!
//! [`check`] is the register check of Jepsen's and Porcupine's per-key models,
//! written as the three conditions a linearizable register must meet when written
//! values are unique (Gibbons and Korach show the check is polynomial in that case):
//! 1. a read returns the initial value or a value some write put there, whose write
//!    was invoked before the read returned (no bytes no write put there, no read from
//!    the future);
//! 2. a read never returns a value older than one whose write was acknowledged before
//!    the read was invoked (W then W' both done before R starts, R sees W: stale);
//! 3. reads never go back: if R1 returned before R2 was invoked, R2 does not return a
//!    value whose write was acknowledged before R1's value was even written.
//!
//! Failed and unknown writes never count as acknowledged; an unknown write may
//! still be read (it may have happened).

use std::collections::HashMap;
use std::time::Instant;

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// It surely had no effect.
    Fail,
    /// It may have had an effect.
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Wrote `value`.
    Write(u64),
    /// Read `value` (meaningful when the outcome is `Ok`).
    Read(u64),
}

#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub addr: u64,
    pub kind: Kind,
    pub invoked: Instant,
    pub completed: Instant,
    pub outcome: Outcome,
}

/// How a client call ended, as the check sees it: a write refused before it ran
/// (a status, lost bytes, out of range) surely did nothing; a timeout or a lost
/// connection may have let it happen.
pub fn outcome_of<T>(r: &Result<T, farcache_client::ClientError>) -> Outcome {
    use farcache_client::{ClientError, OpError};
    match r {
        Ok(_) => Outcome::Ok,
        Err(ClientError::Op(
            OpError::Status(_) | OpError::DataLost { .. } | OpError::OutOfRange { .. },
        )) => Outcome::Fail,
        Err(_) => Outcome::Unknown,
    }
}

/// A recorded history, safe to append to from many threads.
#[derive(Debug, Default)]
pub struct History {
    events: parking_lot::Mutex<Vec<Event>>,
}

impl History {
    pub fn record(&self, e: Event) {
        self.events.lock().push(e);
    }

    pub fn len(&self) -> usize {
        self.events.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn events(&self) -> Vec<Event> {
        self.events.lock().clone()
    }
}

/// What the check found.
#[derive(Debug, Default, Clone)]
pub struct Verdict {
    pub reads: u64,
    pub writes_ok: u64,
    pub writes_failed: u64,
    pub writes_unknown: u64,
    /// Reads of a value older than one acknowledged before they started.
    pub stale_reads: u64,
    /// Reads of a value no write put there (or written only after they returned).
    pub wrong_reads: u64,
    /// Reads that went back behind an earlier read.
    pub reads_back_in_time: u64,
    /// A few of the violations, described.
    pub samples: Vec<String>,
}

impl Verdict {
    pub fn violations(&self) -> u64 {
        self.stale_reads + self.wrong_reads + self.reads_back_in_time
    }

    fn note(&mut self, s: String) {
        if self.samples.len() < 8 {
            self.samples.push(s);
        }
    }
}

/// The write that put a value: when it was invoked and, if acknowledged, completed.
#[derive(Clone, Copy)]
struct Put {
    invoked: Option<Instant>,
    acked: Option<Instant>,
}

/// Checks every address of `events` as a register that starts at `initial`.
pub fn check(events: &[Event], initial: u64) -> Verdict {
    let mut v = Verdict::default();
    let mut by_addr: HashMap<u64, Vec<&Event>> = HashMap::new();
    for e in events {
        by_addr.entry(e.addr).or_default().push(e);
    }
    for (addr, evs) in by_addr {
        check_register(addr, &evs, initial, &mut v);
    }
    v
}

fn check_register(addr: u64, evs: &[&Event], initial: u64, v: &mut Verdict) {
    // The initial value was "written" before everything and acknowledged.
    let mut puts: HashMap<u64, Put> = HashMap::new();
    puts.insert(
        initial,
        Put {
            invoked: None,
            acked: None,
        },
    );
    let mut acked_writes: Vec<(Instant, Instant)> = Vec::new(); // (invoked, acked)
    for e in evs {
        if let Kind::Write(val) = e.kind {
            match e.outcome {
                Outcome::Ok => {
                    v.writes_ok += 1;
                    acked_writes.push((e.invoked, e.completed));
                }
                Outcome::Fail => v.writes_failed += 1,
                Outcome::Unknown => v.writes_unknown += 1,
            }
            if e.outcome != Outcome::Fail {
                puts.insert(
                    val,
                    Put {
                        invoked: Some(e.invoked),
                        acked: (e.outcome == Outcome::Ok).then_some(e.completed),
                    },
                );
            }
        }
    }
    let mut reads: Vec<(&Event, u64)> = evs
        .iter()
        .filter(|e| e.outcome == Outcome::Ok)
        .filter_map(|e| match e.kind {
            Kind::Read(val) => Some((*e, val)),
            Kind::Write(_) => None,
        })
        .collect();
    reads.sort_by_key(|(e, _)| e.invoked);
    v.reads += reads.len() as u64;
    // (completed, the value's write invocation) of reads so far, for condition 3.
    let mut done_reads: Vec<(Instant, Option<Instant>)> = Vec::new();
    for (r, val) in &reads {
        let Some(put) = puts.get(val) else {
            v.wrong_reads += 1;
            v.note(format!("addr {addr}: read {val}, which no write put there"));
            continue;
        };
        if put.invoked.is_some_and(|i| i > r.completed) {
            v.wrong_reads += 1;
            v.note(format!(
                "addr {addr}: read {val} before its write was invoked"
            ));
            continue;
        }
        // 2. A write acknowledged before the read started, itself started after the
        // value's write was acknowledged, supersedes the value.
        if let Some(value_acked) = put_acked_or_initial(put) {
            let superseded = acked_writes
                .iter()
                .any(|&(wi, wa)| value_acked.is_none_or(|va| wi > va) && wa < r.invoked);
            if superseded {
                v.stale_reads += 1;
                v.note(format!(
                    "addr {addr}: stale read of {val} (a later write was acknowledged before the read)"
                ));
                continue;
            }
        }
        // 3. An earlier read (done before this one began) saw a value written after
        // this one's value was acknowledged.
        if let Some(value_acked) = put.acked {
            let back = done_reads
                .iter()
                .any(|&(rc, wi)| rc < r.invoked && wi.is_some_and(|wi| wi > value_acked));
            if back {
                v.reads_back_in_time += 1;
                v.note(format!(
                    "addr {addr}: read {val} after an earlier read saw a newer value"
                ));
            }
        } else if put.invoked.is_none() {
            // The initial value: any earlier read of a written value came after it.
            let back = done_reads
                .iter()
                .any(|&(rc, wi)| rc < r.invoked && wi.is_some());
            if back {
                v.reads_back_in_time += 1;
                v.note(format!(
                    "addr {addr}: read the initial value after an earlier read saw a write"
                ));
            }
        }
        done_reads.push((r.completed, put.invoked));
    }
}

/// `Some(None)`: the initial value (acknowledged before everything); `Some(Some(t))`:
/// acknowledged at `t`; `None`: never acknowledged (it cannot be superseded for sure).
fn put_acked_or_initial(p: &Put) -> Option<Option<Instant>> {
    match (p.invoked, p.acked) {
        (None, _) => Some(None),
        (Some(_), Some(a)) => Some(Some(a)),
        (Some(_), None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    fn w(t0: Instant, val: u64, from: u64, to: u64, outcome: Outcome) -> Event {
        Event {
            addr: 0,
            kind: Kind::Write(val),
            invoked: at(t0, from),
            completed: at(t0, to),
            outcome,
        }
    }

    fn r(t0: Instant, val: u64, from: u64, to: u64) -> Event {
        Event {
            addr: 0,
            kind: Kind::Read(val),
            invoked: at(t0, from),
            completed: at(t0, to),
            outcome: Outcome::Ok,
        }
    }

    #[test]
    fn a_clean_history_passes() {
        let t0 = Instant::now();
        let h = [
            r(t0, 0, 0, 1),
            w(t0, 1, 2, 3, Outcome::Ok),
            r(t0, 1, 4, 5),
            // Concurrent with write 2: either value is fine.
            w(t0, 2, 6, 10, Outcome::Ok),
            r(t0, 1, 7, 8),
            r(t0, 2, 9, 11),
            // An unknown write may show up.
            w(t0, 3, 12, 13, Outcome::Unknown),
            r(t0, 3, 14, 15),
        ];
        let v = check(&h, 0);
        assert_eq!(v.violations(), 0, "{:?}", v.samples);
        assert_eq!((v.reads, v.writes_ok, v.writes_unknown), (5, 2, 1));
    }

    #[test]
    fn a_stale_read_is_caught() {
        let t0 = Instant::now();
        let h = [
            w(t0, 1, 0, 1, Outcome::Ok),
            w(t0, 2, 2, 3, Outcome::Ok),
            // Both writes were done before the read began: 1 is stale.
            r(t0, 1, 4, 5),
        ];
        assert_eq!(check(&h, 0).stale_reads, 1);
        // The initial value after an acknowledged write is stale too.
        let h = [w(t0, 1, 0, 1, Outcome::Ok), r(t0, 0, 2, 3)];
        assert_eq!(check(&h, 0).stale_reads, 1);
    }

    #[test]
    fn bytes_no_write_put_there_and_reads_from_the_future_are_caught() {
        let t0 = Instant::now();
        let h = [w(t0, 1, 0, 1, Outcome::Ok), r(t0, 7, 2, 3)];
        assert_eq!(check(&h, 0).wrong_reads, 1);
        let h = [r(t0, 1, 0, 1), w(t0, 1, 2, 3, Outcome::Ok)];
        assert_eq!(check(&h, 0).wrong_reads, 1);
        // A failed write's value must never be read.
        let h = [w(t0, 1, 0, 1, Outcome::Fail), r(t0, 1, 2, 3)];
        assert_eq!(check(&h, 0).wrong_reads, 1);
    }

    #[test]
    fn a_read_going_back_behind_an_earlier_read_is_caught() {
        let t0 = Instant::now();
        let h = [
            w(t0, 1, 0, 1, Outcome::Ok),
            // Write 2 runs long; one read sees it, a later one sees 1 again.
            w(t0, 2, 2, 20, Outcome::Ok),
            r(t0, 2, 3, 4),
            r(t0, 1, 5, 6),
        ];
        assert_eq!(check(&h, 0).reads_back_in_time, 1);
    }
}
