//! Server-wide scheduling of runnable invocations.
//!
//! An invocation becomes runnable on the worker that received it: a FORWARD from
//! another server (FFlow), or a parked invocation whose pulled bytes all arrived
//! (DFlow). It goes on that worker's queue, not straight onto its stack, so that a
//! frame carrying hundreds of hand-offs does not pin one thread while the others
//! sleep: a worker with a backlog wakes an idle one, which steals half of it.
//!
//! Each worker owns a `crossbeam_deque::Worker`; the board holds every queue's
//! stealer and a bit per worker that is about to block in `poll` with nothing to do.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_deque::{Steal, Stealer, Worker as Deque};

use super::engine::Invocation;

/// Queued invocations at which a worker asks an idle one for help: stealing costs a
/// wake-up (a syscall) and a few cache misses, more than one short invocation.
pub const SHARE_AT: usize = 8;

/// Every worker's queue, as others see it.
pub struct Board {
    stealers: Vec<Stealer<Invocation>>,
    /// Bit `w` set: worker `w` found nothing to do and is (about to be) blocked.
    idle: AtomicU64,
}

impl Board {
    /// A board for `n` workers, with each worker's own end of its queue.
    pub fn new(n: usize) -> (Self, Vec<Deque<Invocation>>) {
        let queues: Vec<Deque<Invocation>> = (0..n).map(|_| Deque::new_fifo()).collect();
        let stealers = queues.iter().map(Deque::stealer).collect();
        (
            Self {
                stealers,
                idle: AtomicU64::new(0),
            },
            queues,
        )
    }

    fn bit(w: usize) -> u64 {
        // Workers past the 64th are never woken for stealing; they still steal
        // whenever something else wakes them.
        if w < 64 { 1 << w } else { 0 }
    }

    pub fn set_idle(&self, w: usize) {
        self.idle.fetch_or(Self::bit(w), Ordering::SeqCst);
    }

    pub fn clear_idle(&self, w: usize) {
        self.idle.fetch_and(!Self::bit(w), Ordering::SeqCst);
    }

    /// Claims one idle worker other than `me` (clearing its bit), if any.
    pub fn claim_idle(&self, me: usize) -> Option<usize> {
        let mut cur = self.idle.load(Ordering::SeqCst);
        loop {
            let others = cur & !Self::bit(me);
            if others == 0 {
                return None;
            }
            let w = others.trailing_zeros() as usize;
            match self.idle.compare_exchange_weak(
                cur,
                cur & !(1 << w),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Some(w),
                Err(now) => cur = now,
            }
        }
    }

    /// Moves about half of another worker's queue into `mine` and returns one
    /// invocation to run now; `None` if every other queue is empty.
    pub fn steal(&self, me: usize, mine: &Deque<Invocation>) -> Option<Invocation> {
        let n = self.stealers.len();
        // Start after `me` so thieves spread over victims instead of all hitting 0.
        for k in 1..n {
            let victim = (me + k) % n;
            loop {
                match self.stealers[victim].steal_batch_and_pop(mine) {
                    Steal::Success(inv) => return Some(inv),
                    Steal::Empty => break,
                    Steal::Retry => continue,
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::flow::engine::Target;
    use crate::engine::memory::Pulled;

    fn inv(addr: u64) -> Invocation {
        Invocation {
            cache: 1,
            proc_name: "p".into(),
            addr,
            state: Vec::new(),
            hops: 0,
            pulled: Pulled::default(),
            target: Target::Remote {
                origin: "o".into(),
                ticket: addr,
            },
        }
    }

    #[test]
    fn idle_workers_are_claimed_once_and_never_self() {
        let (b, _q) = Board::new(3);
        assert_eq!(b.claim_idle(0), None);
        b.set_idle(0);
        assert_eq!(b.claim_idle(0), None, "a worker does not wake itself");
        b.set_idle(2);
        assert_eq!(b.claim_idle(0), Some(2));
        assert_eq!(b.claim_idle(0), None, "claimed workers leave the idle set");
        assert_eq!(b.claim_idle(1), Some(0));
        b.set_idle(1);
        b.clear_idle(1);
        assert_eq!(b.claim_idle(0), None);
    }

    #[test]
    fn a_thief_takes_part_of_a_backlog_and_nothing_is_lost() {
        let (b, q) = Board::new(2);
        for a in 0..100 {
            q[0].push(inv(a));
        }
        let first = b.steal(1, &q[1]).expect("stole");
        let mut seen = vec![first.addr];
        let stolen = 1 + q[1].len();
        assert!((2..=100).contains(&stolen), "took {stolen}");
        assert!(q[0].len() >= 50 - 1, "the owner keeps about half");
        while let Some(i) = q[1].pop() {
            seen.push(i.addr);
        }
        while let Some(i) = q[0].pop() {
            seen.push(i.addr);
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..100).collect::<Vec<_>>());
        assert!(b.steal(1, &q[1]).is_none(), "nothing left to steal");
    }

    #[test]
    fn thieves_in_threads_run_every_invocation_once() {
        let (b, mut q) = Board::new(4);
        let b = std::sync::Arc::new(b);
        let owner = q.remove(0);
        for a in 0..10_000 {
            owner.push(inv(a));
        }
        let handles: Vec<_> = q
            .into_iter()
            .enumerate()
            .map(|(i, mine)| {
                let b = b.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while let Some(first) = b.steal(i + 1, &mine) {
                        got.push(first.addr);
                        while let Some(x) = mine.pop() {
                            got.push(x.addr);
                        }
                    }
                    got
                })
            })
            .collect();
        let mut all: Vec<u64> = std::iter::from_fn(|| owner.pop()).map(|i| i.addr).collect();
        for h in handles {
            all.extend(h.join().expect("thief"));
        }
        all.sort_unstable();
        assert_eq!(all, (0..10_000).collect::<Vec<_>>());
    }
}
