//! The cluster as the manager holds it: the catalogue and its store, the locks that
//! order changes, the links to servers, and the calls every concern makes on servers.
//! It sits below both the request service and membership, so those two share it
//! without importing each other.
//!
//! Two locks: `state` (catalogue + store) is only held for short in-memory work and a
//! store commit, never across network calls, so heartbeats keep flowing while a create
//! waits on a slow server; `changes` serialises catalogue-changing requests end to end,
//! so a placement computed before the server calls is still valid after them.

mod push;

use std::sync::{Arc, Weak};
use std::time::Duration;

use farcache_proto::control::{ClusterStatus, ControlRequest, ServerState};
use farcache_proto::{ClusterSecret, ServerId};
use parking_lot::Mutex;

use crate::catalogue::{CacheRecord, Catalogue};
use crate::error::Reject;
use crate::events::{Event, Events};
use crate::leadership::Leadership;
use crate::server_link::ServerLinks;
use crate::store::{Store, Write};

/// Timeout for each connect, read and write to a cache server.
const SERVER_CALL_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) struct State {
    pub(crate) catalogue: Catalogue,
    /// Recent migrations, promotions and losses, for `status`.
    pub(crate) events: Events,
    /// `None` after shutdown, which releases the file for the next manager.
    store: Option<Store>,
}

impl State {
    pub(crate) fn commit(&self, writes: &[Write<'_>]) -> Result<(), Reject> {
        let store = self
            .store
            .as_ref()
            .ok_or_else(|| Reject::unavailable("the manager is shutting down"))?;
        store.commit(writes).map_err(|e| {
            tracing::warn!(error = %e, "store commit failed");
            Reject::store(&e)
        })
    }

    /// Commits `writes` with `events` (promotions, losses) in one transaction, and
    /// records the events once it landed.
    pub(crate) fn commit_with_events(
        &mut self,
        writes: &[Write<'_>],
        events: Vec<Event>,
    ) -> Result<(), Reject> {
        let staged = self.events.stage(events);
        let mut all: Vec<Write<'_>> = writes.to_vec();
        all.extend(staged.put.iter().map(|(seq, e)| Write::Event(*seq, e)));
        all.extend(staged.drop.iter().map(|&seq| Write::DropEvent(seq)));
        self.commit(&all)?;
        self.events.committed(staged);
        Ok(())
    }
}

/// A region the manager asked a server to hold (for rollback and cleanup).
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) server: ServerId,
    pub(crate) addr: String,
    pub(crate) state: ServerState,
}

pub(crate) struct Cluster {
    pub(crate) state: Mutex<State>,
    pub(crate) changes: Mutex<()>,
    /// Held for a whole live copy (one at a time); `changes` only while it decides
    /// and commits.
    pub(crate) copies: Mutex<()>,
    pub(crate) links: ServerLinks,
    /// This cluster, for the threads it starts (draining a reclaimed server).
    pub(crate) this: Weak<Cluster>,
    /// Whether this manager may act (see `leadership`).
    pub(crate) leadership: Arc<Leadership>,
}

impl Cluster {
    pub(crate) fn new(
        catalogue: Catalogue,
        events: Events,
        store: Store,
        secret: ClusterSecret,
        leadership: Arc<Leadership>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|this| Self {
            state: Mutex::new(State {
                events,
                catalogue,
                store: Some(store),
            }),
            changes: Mutex::new(()),
            copies: Mutex::new(()),
            links: ServerLinks::new(SERVER_CALL_TIMEOUT, secret, Arc::clone(&leadership)),
            this: this.clone(),
            leadership,
        })
    }

    pub(crate) fn status(&self) -> ClusterStatus {
        let st = self.state.lock();
        let mut s = st.catalogue.status();
        s.migrations = st.events.migrations.iter().cloned().collect();
        s.lost = st.events.lost.iter().cloned().collect();
        s.promotions = st.events.promotions.iter().cloned().collect();
        s
    }

    /// Releases the store and server connections; later requests get `Unavailable`.
    pub(crate) fn close(&self) {
        let _changes = self.changes.lock();
        self.state.lock().store = None;
        self.links.close_all();
    }

    /// The cache named `name` and every server holding one of its regions, once each.
    pub(crate) fn cache_and_holders(
        &self,
        cat: &Catalogue,
        name: &str,
    ) -> Result<(CacheRecord, Vec<Target>), Reject> {
        let record = cat
            .cache_by_name(name)
            .ok_or_else(|| Reject::not_found(name))?
            .clone();
        let holders = self.targets(cat, &record.holders());
        Ok((record, holders))
    }

    pub(crate) fn targets(&self, cat: &Catalogue, servers: &[ServerId]) -> Vec<Target> {
        servers
            .iter()
            .map(|&server| Target {
                server,
                addr: cat
                    .server_record(server)
                    .map(|r| r.addr.clone())
                    .unwrap_or_default(),
                state: cat.server_state(server).unwrap_or(ServerState::Dead),
            })
            .collect()
    }

    pub(crate) fn best_effort(&self, t: &Target, req: &ControlRequest, what: &str) {
        if t.state == ServerState::Dead {
            tracing::warn!(server = t.server, addr = %t.addr, "skipping {what} on dead server");
            return;
        }
        if let Err(e) = self.links.call(t.server, &t.addr, req) {
            tracing::warn!(server = t.server, addr = %t.addr, error = %e, "{what} failed");
        }
    }
}

/// The part of a source file region `region` of a cache loaded from it holds.
pub(crate) fn file_slice(
    path: &str,
    capacity: u64,
    region_size: u64,
    region: u32,
) -> farcache_proto::control::FileSlice {
    let offset = u64::from(region).saturating_mul(region_size);
    farcache_proto::control::FileSlice {
        path: path.to_owned(),
        offset,
        len: region_size.min(capacity.saturating_sub(offset)),
    }
}
