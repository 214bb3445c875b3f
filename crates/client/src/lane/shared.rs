//! What the API holds of the transport: a client's [`Transport`] (its lanes, the
//! config and manager link they work with, and the thread that drives lanes for
//! pending futures) and a cache's [`RouteTable`] (its region table, refreshed from the
//! manager), which the tickets of the cache's batches hold in place of the cache.
//!
//! Invariant: a table is replaced whole, never patched in place, and a refresh never
//! puts back an older epoch of the same cache; so a connection checked against one
//! table (`ServerConn::checked`, compared by pointer) sees any change as a new table.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

use farcache_proto::CacheId;
use farcache_proto::control::{CacheInfo, ControlRequest, ControlResponse};
use parking_lot::{Mutex, RwLock};

use super::{Lane, lane_for_thread};
use crate::config::ClientConfig;
use crate::error::ClientError;
use crate::manager_link::ManagerLink;
use crate::op::BatchOp;

/// A client's lanes and what they work with. Shared by the client's handles, its
/// caches' route tables and its tickets.
pub(crate) struct Transport {
    pub config: ClientConfig,
    pub manager: ManagerLink,
    pub lanes: Vec<Lane>,
    async_driver: Mutex<Option<Thread>>,
}

impl Transport {
    /// `config.connections` lanes (at least one) talking to the manager over `manager`.
    pub fn new(config: ClientConfig, manager: ManagerLink) -> std::io::Result<Arc<Self>> {
        let lanes = (0..config.connections.max(1))
            .map(|_| Lane::new(config.clone()))
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Arc::new(Self {
            config,
            manager,
            lanes,
            async_driver: Mutex::new(None),
        }))
    }

    /// A transport that has not talked to any manager (lane tests against fake servers).
    #[cfg(test)]
    pub(crate) fn for_test(config: ClientConfig) -> Arc<Self> {
        let cred = config.credential.clone().expect("a credential");
        let manager = ManagerLink::new(config.manager.clone(), config.connect_timeout, cred, None);
        Self::new(config, manager).expect("poller")
    }

    /// Submits a batch's ops on the calling thread's lane, routed by `route`: returns
    /// the lane and the ticket's key and id there.
    pub fn submit(
        &self,
        route: Arc<RouteTable>,
        ops: Vec<BatchOp>,
        data: Vec<u8>,
        names: String,
    ) -> (usize, usize, u64) {
        let lane = lane_for_thread(self.lanes.len());
        let (key, id) = self.lanes[lane]
            .inner
            .lock()
            .submit(route, ops, data, names);
        (lane, key, id)
    }

    /// Wakes (starting it on first use) the thread that drives lanes for pending futures.
    pub fn kick_async_driver(self: &Arc<Self>) {
        let mut g = self.async_driver.lock();
        if let Some(t) = g.as_ref() {
            t.unpark();
            return;
        }
        let weak = Arc::downgrade(self);
        match std::thread::Builder::new()
            .name("fc-client-async".into())
            .spawn(move || async_driver(weak))
        {
            Ok(h) => *g = Some(h.thread().clone()),
            Err(e) => tracing::error!("cannot start the async driver thread: {e}"),
        }
    }
}

/// Polls lanes that have futures waiting, or work nobody else will drive (see
/// `LaneInner::orphaned_work`); exits when the transport is dropped.
fn async_driver(transport: Weak<Transport>) {
    loop {
        let Some(c) = transport.upgrade() else { return };
        // `busy`: futures wait, so spin; `orphans`: only left-behind work, so look
        // again shortly without holding the lane (its caller may be back).
        let (mut busy, mut orphans) = (false, false);
        for lane in &c.lanes {
            let futures = lane.async_pending.load(Ordering::Acquire) > 0;
            if !futures && !lane.background.load(Ordering::Acquire) {
                continue;
            }
            match lane.inner.try_lock() {
                Some(mut g) => {
                    let block = if futures {
                        Duration::from_millis(1)
                    } else {
                        Duration::ZERO
                    };
                    g.drive_once(Some(block));
                    let waiting = g.async_waiters();
                    let left = g.orphaned_work();
                    lane.async_pending.store(waiting, Ordering::Release);
                    lane.background.store(left, Ordering::Release);
                    busy |= waiting > 0;
                    orphans |= left;
                }
                None if futures => busy = true,
                // A caller drives it now, and hands it back if it leaves work.
                None => orphans = true,
            }
        }
        drop(c);
        if busy {
            std::thread::yield_now();
        } else if orphans {
            std::thread::park_timeout(Duration::from_micros(500));
        } else {
            std::thread::park_timeout(Duration::from_millis(100));
        }
    }
}

/// One cache's region table as its lanes route by it: the routing handle a ticket
/// holds. Shared by the cache's handles, its batches and their tickets.
pub(crate) struct RouteTable {
    /// The lanes the cache's ops travel on, and the manager its table comes from.
    transport: Arc<Transport>,
    info: RwLock<Arc<CacheInfo>>,
    /// A [`refresh_soon`](Self::refresh_soon) is under way.
    refreshing: AtomicBool,
    /// When the last refresh that got a table began.
    refreshed: Mutex<Option<Instant>>,
}

impl RouteTable {
    pub fn new(transport: Arc<Transport>, info: CacheInfo) -> Arc<Self> {
        Arc::new(Self {
            transport,
            info: RwLock::new(Arc::new(info)),
            refreshing: AtomicBool::new(false),
            refreshed: Mutex::new(None),
        })
    }

    pub fn transport(&self) -> &Arc<Transport> {
        &self.transport
    }

    pub fn info(&self) -> Arc<CacheInfo> {
        self.info.read().clone()
    }

    pub fn id(&self) -> CacheId {
        self.info.read().id
    }

    /// Points the region holding `addr` at the server whose data address is `owner`
    /// (what a `wrong server` reply named), if the table lists that server. Returns
    /// the patched table; `None` means the table must come from the manager.
    pub fn follow_hint(&self, addr: u64, owner: &str) -> Option<Arc<CacheInfo>> {
        let mut g = self.info.write();
        let id = g
            .servers
            .iter()
            .find(|s| s.addr == owner || s.tls_addr.as_deref() == Some(owner))?
            .id;
        let idx = g.region_of(addr);
        if g.regions.get(idx) == Some(&id) {
            // Already pointing there: the hint does not help, ask the manager.
            return None;
        }
        let mut next = CacheInfo::clone(&g);
        *next.regions.get_mut(idx)? = id;
        *g = Arc::new(next);
        Some(g.clone())
    }

    /// Takes `info` unless it is older than the table held (an answer that was
    /// overtaken by a newer one); returns the table held afterwards.
    pub fn install(&self, info: CacheInfo) -> Arc<CacheInfo> {
        let mut g = self.info.write();
        if info.epoch >= g.epoch || info.id != g.id {
            *g = Arc::new(info);
        }
        g.clone()
    }

    /// Fetches the region table again from the manager.
    pub fn refresh(&self) -> Result<Arc<CacheInfo>, ClientError> {
        let began = Instant::now();
        let name = self.info.read().name.clone();
        match self
            .transport
            .manager
            .lookup(&ControlRequest::OpenCache { name })?
        {
            ControlResponse::Cache(info) => {
                let now = self.install(info);
                let mut r = self.refreshed.lock();
                *r = Some(r.map_or(began, |t| t.max(began)));
                Ok(now)
            }
            other => Err(ClientError::InvalidArgument(format!(
                "unexpected manager reply: {other:?}"
            ))),
        }
    }

    /// Fetches the table on a thread of its own, unless such a fetch is under way:
    /// for a lane, which must not hold its lock while a manager out of reach makes
    /// the call wait out its timeouts. [`refreshed_since`](Self::refreshed_since)
    /// tells when a table has come.
    pub fn refresh_soon(self: &Arc<Self>) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("fc-table".into())
            .spawn(move || {
                if let Err(e) = me.refresh() {
                    tracing::debug!(cache = me.id(), "table refresh failed: {e}");
                }
                me.refreshing.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.refreshing.store(false, Ordering::Release);
        }
    }

    /// Whether the table was fetched by a call that began at `t` or later.
    pub fn refreshed_since(&self, t: Instant) -> bool {
        self.refreshed.lock().is_some_and(|r| r >= t)
    }
}
