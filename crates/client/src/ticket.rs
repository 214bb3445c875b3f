//! Handles for submitted work: wait for it, or `.await` it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::error::ClientError;
use crate::lane::{LaneInner, Transport};
use crate::results::BatchResults;
use parking_lot::MutexGuard;

/// A submitted batch. `wait()` blocks (driving the connections on this thread);
/// awaiting it works on any executor.
pub struct Ticket {
    /// The lanes of the client that submitted the batch.
    transport: Arc<Transport>,
    lane: usize,
    key: usize,
    id: u64,
    taken: bool,
}

impl Ticket {
    pub(crate) fn new(transport: Arc<Transport>, lane: usize, key: usize, id: u64) -> Self {
        Self {
            transport,
            lane,
            key,
            id,
            taken: false,
        }
    }

    /// Blocks until every op of the batch has a result.
    pub fn wait(mut self) -> BatchResults {
        // Without a deadline the loop only ends with the results.
        self.wait_inner(None).unwrap_or_default()
    }

    /// [`Ticket::wait`] until `deadline`: the results, or the ticket back if they
    /// have not all come (to wait again, or drop). For hedged reads.
    pub fn wait_until(mut self, deadline: Instant) -> Result<BatchResults, Ticket> {
        match self.wait_inner(Some(deadline)) {
            Some(r) => Ok(r),
            None => Err(self),
        }
    }

    fn wait_inner(&mut self, deadline: Option<Instant>) -> Option<BatchResults> {
        let lane = &self.transport.lanes[self.lane];
        let mut g = lane.inner.lock();
        let mut idle_rounds = 0;
        let spin_until = Instant::now() + g.spin();
        while !g.is_done(self.key, self.id) {
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return None;
            }
            let block = if now < spin_until {
                Duration::ZERO
            } else {
                deadline.map_or(Duration::from_millis(100), |d| {
                    d.saturating_duration_since(now)
                        .min(Duration::from_millis(100))
                })
            };
            g.drive_once(Some(block));
            if block.is_zero() && !g.is_done(self.key, self.id) {
                // Spinning: let a thread that needs this core (a server on the same
                // host, woken by our request) run rather than wait out the spin.
                drop(g);
                std::thread::yield_now();
                g = lane.inner.lock();
            } else if !block.is_zero() {
                // A long wait (a silent server) must not keep the lane from other
                // threads: hand it to one that waits for it, if any (fairly: an
                // unlock and lock again would usually win it straight back).
                MutexGuard::bump(&mut g);
            }
            // Guard against a lost op: nothing in flight anywhere and still not done.
            if g.stuck() && !g.is_done(self.key, self.id) {
                idle_rounds += 1;
                if idle_rounds > 2 {
                    g.fail_pending(self.key, self.id);
                }
            } else {
                idle_rounds = 0;
            }
        }
        self.taken = true;
        let r = g.take(self.key, self.id);
        self.release(g);
        Some(r)
    }

    /// Unlocks the lane, first handing work that no caller will drive (see
    /// `LaneInner::orphaned_work`) to the async driver.
    fn release(&self, g: MutexGuard<'_, LaneInner>) {
        let orphaned = g.orphaned_work();
        drop(g);
        if orphaned {
            self.transport.lanes[self.lane]
                .background
                .store(true, Ordering::Release);
            self.transport.kick_async_driver();
        }
    }

    /// Drives this lane's connections once, without blocking, and returns the
    /// results if every op has one (the ticket is then spent and later calls return
    /// `None`). For waiting on several tickets at once, e.g. the first `d` of `d + p`.
    pub fn try_take(&mut self) -> Option<BatchResults> {
        if self.taken {
            return None;
        }
        let lane = &self.transport.lanes[self.lane];
        let mut g = lane.inner.lock();
        if !g.is_done(self.key, self.id) {
            g.drive_once(Some(Duration::ZERO));
            if !g.is_done(self.key, self.id) && g.stuck() {
                // Nothing in flight anywhere: these ops can never complete.
                g.fail_pending(self.key, self.id);
            }
        }
        if !g.is_done(self.key, self.id) {
            return None;
        }
        self.taken = true;
        let r = g.take(self.key, self.id);
        self.release(g);
        Some(r)
    }

    /// True once all results are in (does not drive I/O).
    pub fn is_ready(&self) -> bool {
        self.transport.lanes[self.lane]
            .inner
            .lock()
            .is_done(self.key, self.id)
    }
}

impl Future for Ticket {
    type Output = BatchResults;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<BatchResults> {
        let lane = &self.transport.lanes[self.lane];
        let mut g = lane.inner.lock();
        if !g.is_done(self.key, self.id) {
            g.drive_once(Some(Duration::ZERO));
        }
        if g.is_done(self.key, self.id) {
            let results = g.take(self.key, self.id);
            self.release(g);
            self.taken = true;
            return Poll::Ready(results);
        }
        g.set_waker(self.key, self.id, cx.waker());
        drop(g);
        lane.async_pending.fetch_add(1, Ordering::AcqRel);
        self.transport.kick_async_driver();
        Poll::Pending
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.taken {
            let mut g = self.transport.lanes[self.lane].inner.lock();
            g.abandon(self.key, self.id);
            self.release(g);
        }
    }
}

/// A single op's future: a one-op ticket plus the conversion of its result.
pub struct OpFuture<T> {
    ticket: Ticket,
    map: fn(BatchResults) -> Result<T, ClientError>,
}

impl<T> OpFuture<T> {
    pub(crate) fn new(ticket: Ticket, map: fn(BatchResults) -> Result<T, ClientError>) -> Self {
        Self { ticket, map }
    }

    /// Blocks for the result.
    pub fn wait(self) -> Result<T, ClientError> {
        (self.map)(self.ticket.wait())
    }
}

impl<T> Future for OpFuture<T> {
    type Output = Result<T, ClientError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let map = self.map;
        Pin::new(&mut self.ticket).poll(cx).map(map)
    }
}
