//! Server membership as requests and timeouts see it: registration, heartbeats (each
//! answered with a lease) and declaring a server dead, after its heartbeat timeout or
//! at once when its link closed and its address refuses connections.
//!
//! An alive server keeps its id and its address, and a server declared dead is fenced
//! until it registers again; what happens to a dead server's regions is
//! `membership`'s work.

use std::sync::Arc;
use std::time::{Duration, Instant};

use farcache_proto::ServerId;
use farcache_proto::control::{ControlErrorCode, ControlResponse, ServerState};

use super::Service;
use crate::catalogue::{Seen, ServerRecord};
use crate::error::Reject;
use crate::store::Write;

impl Service {
    /// Declares silent servers dead (called by the liveness thread).
    pub fn check_liveness(&self, now: Instant) {
        if !self.cluster.leadership.holds() {
            return;
        }
        let dead = self
            .cluster
            .state
            .lock()
            .catalogue
            .expire(now, self.heartbeat_timeout);
        for id in dead {
            tracing::info!(server = id, timeout = ?self.heartbeat_timeout, "server missed heartbeats, marked dead");
            self.cluster.recover_dead(id);
        }
    }

    /// Server `id`'s heartbeat connection closed. If nothing accepts connections at
    /// its data address any more, it died: recover now instead of after the heartbeat
    /// timeout (a killed process's sockets refuse at once). Anything else (it answers,
    /// or the check times out) leaves the decision to the heartbeats.
    pub fn suspect(&self, id: ServerId) {
        let addr = {
            let st = self.cluster.state.lock();
            match st.catalogue.server_state(id) {
                Some(s) if crate::catalogue::up(s) => {}
                _ => return,
            }
            match st.catalogue.server_record(id) {
                Some(r) => r.addr.clone(),
                None => return,
            }
        };
        let Some(sa) = std::net::ToSocketAddrs::to_socket_addrs(&addr)
            .ok()
            .and_then(|mut a| a.next())
        else {
            return;
        };
        // A dying process closes its sockets one by one: its listener may still
        // accept for a moment after its manager link closed, so look a few times.
        let refused = (0..SUSPECT_PROBES).any(|k| {
            if k > 0 {
                std::thread::sleep(SUSPECT_SPACING);
            }
            matches!(
                std::net::TcpStream::connect_timeout(&sa, SUSPECT_PROBE),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
            )
        });
        if !refused {
            return;
        }
        if self.cluster.state.lock().catalogue.mark_dead(id) {
            tracing::info!(server = id, %addr, "server's link closed and its address refuses connections: marked dead");
            self.cluster.recover_dead(id);
        }
    }

    pub(super) fn register(
        &self,
        mut record: ServerRecord,
        has_id: bool,
    ) -> Result<ControlResponse, Reject> {
        if record.addr.trim().is_empty() {
            return Err(Reject::invalid("server address is empty"));
        }
        if !record.price_per_gib_hour.is_finite() || record.price_per_gib_hour < 0.0 {
            return Err(Reject::invalid(format!(
                "price per GiB-hour must be a non-negative number, not {}",
                record.price_per_gib_hour
            )));
        }
        if has_id && record.id == ServerId::MAX {
            return Err(Reject::invalid("server id out of range"));
        }
        let mut st = self.cluster.state.lock();
        let server_id = has_id.then_some(record.id);
        let id = server_id.unwrap_or_else(|| st.catalogue.next_server_id());
        record.id = id;
        // An alive server keeps its id and its address: another process cannot take
        // either over (it would receive, or hijack, that server's regions).
        if let Some(other) = st.catalogue.alive_at(&record.addr).filter(|&o| o != id) {
            return Err(Reject::new(
                ControlErrorCode::AlreadyExists,
                format!(
                    "server {other} is alive at {}; register under its id or another address",
                    record.addr
                ),
            ));
        }
        if let (Some(old), Some(state)) = (
            st.catalogue.server_record(id),
            st.catalogue.server_state(id),
        ) && crate::catalogue::up(state)
            && old.addr != record.addr
        {
            return Err(Reject::new(
                ControlErrorCode::AlreadyExists,
                format!(
                    "server {id} is alive at {}; it cannot move to {} until it is declared dead",
                    old.addr, record.addr
                ),
            ));
        }
        // The first word from a server this manager loaded (it took over, or
        // restarted): a reclamation the stored record holds goes on.
        let resume = (st.catalogue.server_state(id) == Some(ServerState::Unknown))
            .then(|| st.catalogue.server_record(id).and_then(|r| r.reclaim))
            .flatten();
        record.reclaim = resume;
        let next = st.catalogue.next_server_id().max(id.saturating_add(1));
        st.commit(&[Write::Server(&record), Write::NextServerId(next)])?;
        let (addr, used, memory) = (
            record.addr.clone(),
            st.catalogue.server_info(id).map_or(0, |s| s.used),
            record.memory,
        );
        let seen = st.catalogue.upsert_server(record, Instant::now());
        drop(st);
        match (seen, server_id) {
            (Seen::New, None) => tracing::info!(server = id, %addr, memory, "server registered"),
            (Seen::New, Some(_)) => {
                tracing::info!(server = id, %addr, memory, "server registered with an id the store did not know")
            }
            (Seen::Back(before), _) => {
                tracing::info!(server = id, %addr, memory, ?before, "server re-registered, alive")
            }
            (Seen::StillAlive, _) => {
                tracing::info!(server = id, %addr, memory, "server re-registered")
            }
            (Seen::Fenced, _) => {}
        }
        // What follows waits on the change lock (a reshape or create may hold it
        // across a slow commit), so it runs after the reply: a server whose
        // registration is not answered sends no heartbeats and would be declared
        // dead for the manager's own delay.
        let push = matches!(seen, Seen::Back(ServerState::Unknown));
        if push || resume.is_some() {
            let cluster = Arc::clone(&self.cluster);
            let spawned = std::thread::Builder::new()
                .name(format!("farcache-rejoin-{id}"))
                .spawn(move || cluster.rejoin(id, push, resume));
            if let Err(e) = spawned {
                tracing::warn!(
                    server = id,
                    "no rejoin thread ({e}): pushing its tables before answering"
                );
                self.cluster.rejoin(id, push, resume);
            }
        }
        if used > memory {
            tracing::warn!(
                server = id,
                used,
                memory,
                "server re-registered with less memory than its regions use"
            );
        }
        let fenced = matches!(seen, Seen::Back(ServerState::Dead));
        if fenced {
            tracing::warn!(server = id, %addr, "a server declared dead registered again: it drops the copies it held");
        }
        Ok(ControlResponse::Registered {
            server_id: id,
            heartbeat_ms: self.heartbeat_ms,
            lease_ms: crate::lease::lease_ms(self.heartbeat_timeout),
            fenced,
        })
    }

    pub(super) fn heartbeat(
        &self,
        id: ServerId,
        used: u64,
        held: (u64, u64),
    ) -> Result<ControlResponse, Reject> {
        let seen = self
            .cluster
            .state
            .lock()
            .catalogue
            .heartbeat(id, Instant::now(), held);
        match seen {
            None => Err(Reject::new(
                ControlErrorCode::UnknownServer,
                format!("server {id} is not registered; register again"),
            )),
            Some(Seen::Fenced) => {
                tracing::warn!(server = id, "heartbeat from a server declared dead: fenced");
                Err(Reject::new(
                    ControlErrorCode::Fenced,
                    format!(
                        "server {id} was declared dead and its regions were given to others; \
                         drop them and register again"
                    ),
                ))
            }
            Some(seen) => {
                if let Seen::Back(before) = seen {
                    tracing::info!(server = id, ?before, "server heartbeat, alive again");
                } else {
                    tracing::trace!(server = id, used, "heartbeat");
                }
                Ok(ControlResponse::Lease {
                    lease_ms: crate::lease::lease_ms(self.heartbeat_timeout),
                })
            }
        }
    }
}

/// How long the check of a server whose link closed waits for a connection, how
/// often it looks, and how far apart.
const SUSPECT_PROBE: Duration = Duration::from_millis(300);
const SUSPECT_PROBES: u32 = 5;
const SUSPECT_SPACING: Duration = Duration::from_millis(20);
