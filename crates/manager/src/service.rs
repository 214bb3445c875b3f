//! Request handling: turns each `ControlRequest` into a `ControlResponse`, after
//! checking that the caller's proven role and credential allow it.
//!
//! Two locks: `state` (catalogue + store) is only held for short in-memory work and a
//! store commit, never across network calls, so heartbeats keep flowing while a create
//! waits on a slow server; `changes` serialises catalogue-changing requests end to end,
//! so a placement computed before the server calls is still valid after them.
//!
//! Who may ask what: servers register and heartbeat; clients holding the cluster
//! secret may do anything a client can; a client holding a cache token may open its
//! cache, and with a read-write token also reshape it, delete it and register
//! procedures on it. Everything else is refused with `Forbidden`.

use std::time::{Duration, Instant};

use farcache_proto::blocking::RpcError;
use farcache_proto::control::{
    CacheInfo, CacheTokens, ClusterStatus, ControlErrorCode, ControlRequest, ControlResponse,
    HeldRegion, ServerState,
};
use farcache_proto::slo::Slo;
use farcache_proto::{Access, Authority, CacheId, Rights, Role, ServerId};
use parking_lot::Mutex;

use crate::catalogue::{CacheRecord, Catalogue, ProcDef, Seen, ServerRecord};
use crate::config::{ManagerConfig, REGION_ALIGN};
use crate::error::Reject;
use crate::placement;
use crate::server_link::{LinkError, ServerLinks};
use crate::slo::Planner;
use crate::store::{Store, Write};

/// Longest cache name, so names stay printable in status tables and logs.
pub const MAX_NAME_CHARS: usize = 128;
/// Largest procedure module accepted.
pub const MAX_PROC_CODE: usize = 16 << 20;
/// Most regions one cache may have; bounds the work (and memory) one request can cause.
pub const MAX_REGIONS: u64 = 1 << 20;
/// Timeout for each connect, read and write to a cache server.
const SERVER_CALL_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) struct State {
    pub(crate) catalogue: Catalogue,
    /// Recent migrations and losses, for `status`.
    pub(crate) events: crate::membership::Events,
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
}

/// Who sent a request: the role and credential its connection proved.
#[derive(Debug, Clone)]
pub struct Caller {
    pub role: Role,
    pub access: Access,
    /// A server's advertised address (from its Hello).
    pub identity: String,
}

/// A region the manager asked a server to hold (for rollback and cleanup).
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) server: ServerId,
    pub(crate) addr: String,
    pub(crate) state: ServerState,
}

pub struct Service {
    authority: Authority,
    region_size: u64,
    heartbeat_ms: u64,
    heartbeat_timeout: Duration,
    pub(crate) state: Mutex<State>,
    pub(crate) changes: Mutex<()>,
    /// Held for a whole live copy (one at a time); `changes` only while it decides
    /// and commits.
    pub(crate) copies: Mutex<()>,
    pub(crate) links: ServerLinks,
    /// This service, for the threads it starts (draining a reclaimed server).
    pub(crate) this: std::sync::OnceLock<std::sync::Weak<Service>>,
    /// Answers caches created from an SLO.
    slo: Planner,
}

impl Service {
    pub(crate) fn new(
        config: &ManagerConfig,
        catalogue: Catalogue,
        store: Store,
        slo: Planner,
    ) -> Self {
        Self {
            slo,
            region_size: config.region_size,
            heartbeat_ms: u64::try_from(config.heartbeat_interval.as_millis()).unwrap_or(u64::MAX),
            heartbeat_timeout: config.heartbeat_timeout,
            this: std::sync::OnceLock::new(),
            state: Mutex::new(State {
                events: crate::membership::Events::default(),
                catalogue,
                store: Some(store),
            }),
            changes: Mutex::new(()),
            copies: Mutex::new(()),
            links: ServerLinks::new(SERVER_CALL_TIMEOUT, config.secret.clone()),
            authority: Authority::new(config.secret.clone()),
        }
    }

    pub fn status(&self) -> ClusterStatus {
        let st = self.state.lock();
        let mut s = st.catalogue.status();
        s.migrations = st.events.migrations.iter().cloned().collect();
        s.lost = st.events.lost.iter().cloned().collect();
        s.promotions = st.events.promotions.iter().cloned().collect();
        s
    }

    /// Releases the store and server connections; later requests get `Unavailable`.
    pub fn close(&self) {
        let _changes = self.changes.lock();
        self.state.lock().store = None;
        self.links.close_all();
    }

    /// Declares silent servers dead (called by the liveness thread).
    pub fn check_liveness(&self, now: Instant) {
        let dead = self
            .state
            .lock()
            .catalogue
            .expire(now, self.heartbeat_timeout);
        for id in dead {
            tracing::info!(server = id, timeout = ?self.heartbeat_timeout, "server missed heartbeats, marked dead");
            self.recover_dead(id);
        }
    }

    /// Server `id`'s heartbeat connection closed. If nothing accepts connections at
    /// its data address any more, it died: recover now instead of after the heartbeat
    /// timeout (a killed process's sockets refuse at once). Anything else (it answers,
    /// or the check times out) leaves the decision to the heartbeats.
    pub fn suspect(&self, id: ServerId) {
        let addr = {
            let st = self.state.lock();
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
        if self.state.lock().catalogue.mark_dead(id) {
            tracing::info!(server = id, %addr, "server's link closed and its address refuses connections: marked dead");
            self.recover_dead(id);
        }
    }

    pub fn handle(&self, caller: &Caller, req: ControlRequest) -> ControlResponse {
        if let Err(r) = self.authorize(caller, &req) {
            tracing::warn!(
                who = %role_name(caller.role, &caller.access),
                request = %req.name(),
                "request refused: {}",
                r.message
            );
            return r.into();
        }
        let result = match req {
            ControlRequest::RegisterServer {
                server_id,
                addr,
                memory,
                cores,
                threads,
                price_class,
                price_per_gib_hour,
                tls_addr,
            } => self.register(
                ServerRecord {
                    id: server_id.unwrap_or(0),
                    addr,
                    memory,
                    cores,
                    threads,
                    price_class,
                    price_per_gib_hour,
                    tls_addr,
                },
                server_id.is_some(),
            ),
            ControlRequest::Heartbeat {
                server_id,
                used,
                regions,
                digest,
            } => self.heartbeat(server_id, used, (regions, digest)),
            ControlRequest::BackupStalled {
                server_id,
                backup,
                stalled_ms,
            } => self.backup_stalled(server_id, &backup, stalled_ms),
            ControlRequest::CreateCache {
                name,
                capacity,
                region_size,
                replicas,
                from_file,
                slo,
            } => self.create(name, capacity, region_size, replicas, from_file, slo),
            ControlRequest::SetSlo { name, slo } => {
                self.set_slo(&name, slo).map(ControlResponse::Cache)
            }
            ControlRequest::OpenCache { name } => self.open(&name).map(ControlResponse::Cache),
            ControlRequest::ReshapeCache { name, capacity } => {
                self.reshape(&name, capacity).map(ControlResponse::Cache)
            }
            ControlRequest::DeleteCache { name } => {
                self.delete(&name).map(|()| ControlResponse::Ok)
            }
            ControlRequest::IssueToken { name, rights } => self.issue_token(&name, rights),
            ControlRequest::Status => Ok(ControlResponse::Status(self.status())),
            ControlRequest::ReclaimServer {
                server_id,
                grace_ms,
                mode,
            } => self
                .reclaim(server_id, Duration::from_millis(grace_ms), mode)
                .map(|()| ControlResponse::Ok),
            ControlRequest::MoveRegion {
                name,
                region,
                to,
                mode,
            } => self
                .move_region(&name, region, to, mode)
                .map(|()| ControlResponse::Ok),
            ControlRequest::ClearLost { name, addr, len } => self
                .clear_lost(&name, addr, len)
                .map(|()| ControlResponse::Ok),
            ControlRequest::RegisterProc {
                cache,
                proc_name,
                code,
            } => self
                .register_proc(&cache, &proc_name, code)
                .map(|()| ControlResponse::Ok),
            other => Err(server_only(&other.name())),
        };
        result.unwrap_or_else(ControlResponse::from)
    }

    /// Whether `caller` may make `req` (see the module docs).
    fn authorize(&self, caller: &Caller, req: &ControlRequest) -> Result<(), Reject> {
        let who = || role_name(caller.role, &caller.access);
        let refuse = |what: &str| {
            Err(Reject::new(
                ControlErrorCode::Forbidden,
                format!("{} may not {what}", who()),
            ))
        };
        match req {
            ControlRequest::RegisterServer { addr, .. } => {
                if caller.role != Role::Server {
                    return refuse("register as a server");
                }
                // The address was part of what the server proved in its handshake.
                if *addr != caller.identity {
                    return refuse(&format!(
                        "register the address {addr} (it proved it is {})",
                        caller.identity
                    ));
                }
                Ok(())
            }
            ControlRequest::Heartbeat { server_id, .. } => {
                if caller.role != Role::Server {
                    return refuse("heartbeat as a server");
                }
                let at = self.addr_of(*server_id);
                match at {
                    Some(a) if a != caller.identity => refuse(&format!(
                        "heartbeat for server {server_id} at {a} (it proved it is {})",
                        caller.identity
                    )),
                    _ => Ok(()), // unknown ids get `unknown server` and re-register
                }
            }
            ControlRequest::BackupStalled { server_id, .. } => {
                if caller.role != Role::Server {
                    return refuse("report a backup as a server");
                }
                // Only an owner speaks for its own regions.
                match self.addr_of(*server_id) {
                    Some(a) if a == caller.identity => Ok(()),
                    _ => refuse(&format!(
                        "report backups of server {server_id} (it proved it is {})",
                        caller.identity
                    )),
                }
            }
            ControlRequest::ReclaimServer { server_id, .. } if caller.role == Role::Server => {
                // A server may announce only its own reclamation (on SIGTERM).
                let at = self.addr_of(*server_id);
                match at {
                    Some(a) if a == caller.identity => Ok(()),
                    _ => refuse(&format!(
                        "reclaim server {server_id} (it proved it is {})",
                        caller.identity
                    )),
                }
            }
            _ if caller.role != Role::Client => refuse("make client requests"),
            _ if caller.access.is_cluster() => Ok(()),
            ControlRequest::OpenCache { name } => {
                self.token_reaches(caller, name, Rights::ReadOnly)
            }
            ControlRequest::ReshapeCache { name, .. }
            | ControlRequest::DeleteCache { name }
            | ControlRequest::SetSlo { name, .. } => {
                self.token_reaches(caller, name, Rights::ReadWrite)
            }
            ControlRequest::RegisterProc { cache, .. } => {
                self.token_reaches(caller, cache, Rights::ReadWrite)
            }
            ControlRequest::ClearLost { name, .. } => {
                self.token_reaches(caller, name, Rights::ReadWrite)
            }
            ControlRequest::ReclaimServer { .. } => refuse("reclaim servers"),
            ControlRequest::MoveRegion { .. } => refuse("move regions"),
            ControlRequest::CreateCache { .. } => refuse("create caches"),
            ControlRequest::IssueToken { .. } => refuse("issue tokens"),
            ControlRequest::Status => refuse("see the whole cluster"),
            _ => Ok(()), // server requests: refused below as such
        }
    }

    /// The address server `id` registered.
    fn addr_of(&self, id: ServerId) -> Option<String> {
        self.state
            .lock()
            .catalogue
            .server_record(id)
            .map(|r| r.addr.clone())
    }

    /// A token caller may act on the cache `name` only if the token is for it, with at
    /// least `need`.
    fn token_reaches(&self, caller: &Caller, name: &str, need: Rights) -> Result<(), Reject> {
        let Access::Cache { cache, rights } = caller.access else {
            return Ok(());
        };
        let id = self
            .state
            .lock()
            .catalogue
            .cache_by_name(name)
            .map(|c| c.id);
        if id != Some(cache) {
            // The same answer whether or not the cache exists: a token says nothing
            // about other tenants' caches.
            return Err(Reject::new(
                ControlErrorCode::Forbidden,
                format!("this token is for cache {cache}, not for '{name}'"),
            ));
        }
        if need == Rights::ReadWrite && rights != Rights::ReadWrite {
            return Err(Reject::new(
                ControlErrorCode::Forbidden,
                format!("a read-only token cannot change cache '{name}'"),
            ));
        }
        Ok(())
    }

    fn tokens(&self, cache: CacheId) -> CacheTokens {
        let s = self.authority.secret();
        CacheTokens {
            read_write: s.token(cache, Rights::ReadWrite).to_string(),
            read_only: s.token(cache, Rights::ReadOnly).to_string(),
        }
    }

    fn issue_token(&self, name: &str, rights: Rights) -> Result<ControlResponse, Reject> {
        let id = self
            .state
            .lock()
            .catalogue
            .cache_by_name(name)
            .map(|c| c.id)
            .ok_or_else(|| Reject::not_found(name))?;
        Ok(ControlResponse::Token {
            token: self.authority.secret().token(id, rights).to_string(),
        })
    }

    fn register(&self, mut record: ServerRecord, has_id: bool) -> Result<ControlResponse, Reject> {
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
        let mut st = self.state.lock();
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
        if matches!(seen, Seen::Back(ServerState::Unknown)) {
            // First word from it since this manager started: tell it the tables this
            // manager knows. A move the previous manager left uncommitted is thereby
            // rolled back (the table still names the source), a committed one is
            // completed (the table names the target).
            self.push_tables_of(id);
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

    fn heartbeat(
        &self,
        id: ServerId,
        used: u64,
        held: (u64, u64),
    ) -> Result<ControlResponse, Reject> {
        let seen = self
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

    fn open(&self, name: &str) -> Result<CacheInfo, Reject> {
        let st = self.state.lock();
        let cache = st
            .catalogue
            .cache_by_name(name)
            .ok_or_else(|| Reject::not_found(name))?;
        Ok(st.catalogue.cache_info(cache))
    }

    fn create(
        &self,
        name: String,
        capacity: u64,
        region_size: Option<u64>,
        replicas: u32,
        from_file: Option<String>,
        slo: Option<Slo>,
    ) -> Result<ControlResponse, Reject> {
        validate_name(&name)?;
        let region_size = region_size.unwrap_or(self.region_size);
        let n = region_count(capacity, region_size)?;
        let replicas = replicas.max(1).max(slo.as_ref().map_or(1, |s| s.replicas));
        if let Some(s) = &slo {
            s.validate().map_err(Reject::invalid)?;
        }
        if replicas > MAX_REPLICAS {
            return Err(Reject::invalid(format!(
                "at most {MAX_REPLICAS} copies of a region (asked for {replicas})"
            )));
        }
        if let Some(path) = &from_file {
            check_source_file(path, capacity)?;
        }
        let _changes = self.changes.lock();

        let (id, plan, backups, choice) = {
            let mut st = self.state.lock();
            if st.catalogue.cache_by_name(&name).is_some() {
                return Err(Reject::new(
                    ControlErrorCode::AlreadyExists,
                    format!("a cache named '{name}' already exists"),
                ));
            }
            let (plan, choice) = match &slo {
                None => (self.plan(&st.catalogue, n, region_size, &name)?, None),
                Some(slo) => {
                    let regions =
                        usize::try_from(n).map_err(|_| Reject::invalid("too many regions"))?;
                    let cands = crate::slo::candidates(&st.catalogue);
                    let p = self.slo.plan(slo, &cands, &[], regions, region_size)?;
                    (self.targets(&st.catalogue, &p.servers), Some(p.choice))
                }
            };
            let backups = if replicas > 1 {
                let owners: Vec<ServerId> = plan.iter().map(|t| t.server).collect();
                placement::place_backups(
                    &st.catalogue.candidates(),
                    &owners,
                    replicas as usize - 1,
                    region_size,
                )
                .map_err(|s| {
                    Reject::new(
                        ControlErrorCode::InsufficientMemory,
                        format!("cache '{name}' with {replicas} copies: {s}"),
                    )
                })?
            } else {
                Vec::new()
            };
            let id = st.catalogue.next_cache_id();
            // Persist the id before any server sees it, so it is never handed out twice.
            st.commit(&[Write::NextCacheId(id.saturating_add(1))])?;
            st.catalogue.take_cache_id();
            (id, plan, backups, choice)
        };

        let epoch = 1;
        let source = from_file.as_deref().map(|path| (path, capacity));
        let layout = Layout {
            region_size,
            capacity,
            epoch,
            from_file: from_file.as_deref(),
        };
        self.alloc_all(id, 0, &plan, &layout)?;
        // Backups: every copy on its own server, all zeros like the owner.
        let mut placed: Vec<(u32, Target)> = Vec::new();
        for (i, copies) in backups.iter().enumerate() {
            let targets = {
                let st = self.state.lock();
                self.targets(&st.catalogue, copies)
            };
            for t in targets {
                let region = i as u32;
                let req = ControlRequest::AllocRegion {
                    cache: id,
                    region,
                    region_size,
                    capacity,
                    epoch,
                    lost: false,
                    incoming: true,
                    load: source.map(|(path, cap)| file_slice(path, cap, region_size, region)),
                };
                if let Err(e) = self.links.call(t.server, &t.addr, &req) {
                    self.free_regions(id, 0, &plan);
                    self.free_backups(id, &placed);
                    return Err(Reject::unavailable(format!(
                        "server {} ({}) could not allocate a backup of region {region}: {e}",
                        t.server, t.addr
                    )));
                }
                placed.push((region, t));
            }
        }

        let record = CacheRecord {
            id,
            name,
            capacity,
            region_size,
            epoch,
            regions: plan.iter().map(|t| t.server).collect(),
            procs: Vec::new(),
            replicas,
            backups,
            from_file,
            slo: choice,
        };
        let mut st = self.state.lock();
        if let Err(e) = st.commit(&[Write::Cache(&record)]) {
            drop(st);
            self.free_regions(id, 0, &plan);
            self.free_backups(id, &placed);
            return Err(e);
        }
        // Insert first so the reply's server `used` figures include this cache.
        st.catalogue.insert_cache(record.clone());
        let info = st.catalogue.cache_info(&record);
        drop(st);
        self.push_routes(&info);
        tracing::info!(cache = id, name = %info.name, capacity, regions = n, replicas, servers = info.servers.len(), from_file = ?info.from_file, "cache created");
        Ok(ControlResponse::Created {
            tokens: self.tokens(id),
            cache: info,
        })
    }

    /// Gives a cache a new SLO: the search runs again over the servers holding it
    /// (their threads bound `s`; regions do not move).
    fn set_slo(&self, name: &str, slo: Slo) -> Result<CacheInfo, Reject> {
        slo.validate().map_err(Reject::invalid)?;
        let _changes = self.changes.lock();
        let mut st = self.state.lock();
        let mut record = st
            .catalogue
            .cache_by_name(name)
            .ok_or_else(|| Reject::not_found(name))?
            .clone();
        let p = self.slo.plan(
            &slo,
            &crate::slo::candidates(&st.catalogue),
            &record.regions,
            0,
            record.region_size,
        )?;
        tracing::info!(cache = record.id, name, transport = %p.choice.transport, slo = %slo, "SLO set");
        record.slo = Some(p.choice);
        st.commit(&[Write::Cache(&record)])?;
        st.catalogue.insert_cache(record.clone());
        Ok(st.catalogue.cache_info(&record))
    }

    /// Changes a cache's capacity. Servers keeping regions learn the new capacity
    /// before the table commits (a grow makes the old last region accept bytes past
    /// the old end; a shrink stops serving, and zeroes, the bytes past the new end),
    /// new regions are placed first and cut ones freed last.
    fn reshape(&self, name: &str, capacity: u64) -> Result<CacheInfo, Reject> {
        let _changes = self.changes.lock();
        let (mut record, grow, shrink, kept) = {
            let st = self.state.lock();
            let mut record = st
                .catalogue
                .cache_by_name(name)
                .ok_or_else(|| Reject::not_found(name))?
                .clone();
            if record.replicas > 1 || record.from_file.is_some() {
                return Err(Reject::invalid(format!(
                    "cache '{name}' has backups or was loaded from a file: reshaping such \
                     caches is not supported yet (create a new cache and copy)"
                )));
            }
            let n = region_count(capacity, record.region_size)? as usize;
            let old = record.regions.len();
            let grow = match &record.slo {
                // The search runs again: the cost changes, and new regions go to
                // servers with enough threads.
                Some(choice) => {
                    let p = self.slo.plan(
                        &choice.slo,
                        &crate::slo::candidates(&st.catalogue),
                        &record.regions[..old.min(n)],
                        n.saturating_sub(old),
                        record.region_size,
                    )?;
                    let grown = p.servers.get(old.min(n)..).unwrap_or_default().to_vec();
                    record.slo = Some(p.choice);
                    self.targets(&st.catalogue, &grown)
                }
                None if n > old => {
                    self.plan(&st.catalogue, (n - old) as u64, record.region_size, name)?
                }
                None => Vec::new(),
            };
            let shrink = self.targets(&st.catalogue, record.regions.get(n..).unwrap_or_default());
            let mut keep: Vec<ServerId> = record.regions[..old.min(n)].to_vec();
            keep.sort_unstable();
            keep.dedup();
            let kept = self.targets(&st.catalogue, &keep);
            (record, grow, shrink, kept)
        };

        let (old, old_cap) = (record.regions.len(), record.capacity);
        let epoch = record.epoch.saturating_add(1);
        let layout = Layout {
            region_size: record.region_size,
            capacity,
            epoch,
            from_file: None,
        };
        self.alloc_all(record.id, old, &grow, &layout)?;
        let undo = |why: Reject| {
            self.resize(record.id, &kept, old_cap, epoch, false).ok();
            self.free_regions(record.id, old, &grow);
            why
        };
        if !record.procs.is_empty() {
            self.load_procs(record.id, &grow, &record.procs)
                .map_err(undo)?;
        }
        self.resize(record.id, &kept, capacity, epoch, true)
            .map_err(undo)?;
        let keep = old - shrink.len();

        let previous = record.clone();
        record.regions.truncate(keep);
        record.regions.extend(grow.iter().map(|t| t.server));
        record.capacity = capacity;
        record.epoch = epoch;

        let mut st = self.state.lock();
        if let Err(e) = st.commit(&[Write::Cache(&record)]) {
            drop(st);
            return Err(undo(e));
        }
        // Insert first so the reply's server `used` figures include this cache.
        st.catalogue.insert_cache(record.clone());
        let info = st.catalogue.cache_info(&record);
        drop(st);
        // Free only once the new table is durable: until then the old one is authoritative.
        self.free_regions(previous.id, keep, &shrink);
        self.push_routes(&info);
        tracing::info!(
            cache = info.id,
            name,
            from = previous.capacity,
            to = capacity,
            regions = info.regions.len(),
            epoch = info.epoch,
            "cache reshaped"
        );
        Ok(info)
    }

    /// Tells every live server in `targets` the cache's capacity under `epoch`. With
    /// `required`, the first failure is returned; otherwise failures are logged.
    fn resize(
        &self,
        cache: CacheId,
        targets: &[Target],
        capacity: u64,
        epoch: u64,
        required: bool,
    ) -> Result<(), Reject> {
        let req = ControlRequest::ResizeCache {
            cache,
            capacity,
            epoch,
        };
        for t in targets {
            if !required {
                self.best_effort(t, &req, "restore capacity");
                continue;
            }
            if t.state == ServerState::Dead {
                continue;
            }
            if let Err(e) = self.links.call(t.server, &t.addr, &req) {
                return Err(Reject::unavailable(format!(
                    "server {} ({}) could not take the new capacity of cache {cache}: {e}",
                    t.server, t.addr
                )));
            }
        }
        Ok(())
    }

    /// Frees regions servers hold that no cache in the catalogue places there (left by
    /// a manager that died between placing regions and committing the cache, or by a
    /// free that never arrived), for every alive server whose heartbeat disagrees with
    /// the catalogue. Each suspect is asked what it holds with no lock held (a server
    /// that went silent must not hold promotions up behind its connect timeout); the
    /// decisions are then made under the change lock, against the catalogue as it is
    /// by then.
    pub fn reconcile(&self) {
        let suspects: Vec<(Target, Vec<HeldRegion>)> = {
            let st = self.state.lock();
            st.catalogue
                .disagreeing()
                .into_iter()
                .filter_map(|id| {
                    let t = self.targets(&st.catalogue, &[id]).pop()?;
                    Some((t, st.catalogue.placed_on(id)))
                })
                .collect()
        };
        if suspects.is_empty() {
            return;
        }
        let answers: Vec<(Target, Vec<HeldRegion>, Vec<HeldRegion>)> = suspects
            .into_iter()
            .filter_map(|(t, placed_then)| match self.links.list_regions(t.server, &t.addr) {
                Ok(held) => Some((t, placed_then, held)),
                Err(e) => {
                    tracing::warn!(server = t.server, error = %e, "cannot list the regions a server holds");
                    None
                }
            })
            .collect();
        // Not while a copy runs: its target holds a region the catalogue does not
        // place there yet, which must not be freed as an orphan.
        let _copies = self.copies.lock();
        let _changes = self.changes.lock();
        for (t, placed_then, held) in answers {
            let (placed, known) = {
                let st = self.state.lock();
                // Died, or agrees again, since it answered: nothing to do here.
                if !st.catalogue.disagreeing().contains(&t.server) {
                    continue;
                }
                let placed = st.catalogue.placed_on(t.server);
                let known: Vec<CacheId> =
                    st.catalogue.status().caches.iter().map(|c| c.id).collect();
                (placed, known)
            };
            let mut dropped: Vec<CacheId> = Vec::new();
            for r in held.iter().filter(|r| !placed.contains(r)) {
                if !known.contains(&r.cache) {
                    if !dropped.contains(&r.cache) {
                        dropped.push(r.cache);
                        tracing::info!(
                            server = t.server,
                            cache = r.cache,
                            "dropping a cache the catalogue does not know"
                        );
                        self.best_effort(
                            &t,
                            &ControlRequest::DropCache { cache: r.cache },
                            "drop orphan cache",
                        );
                    }
                    continue;
                }
                tracing::info!(
                    server = t.server,
                    cache = r.cache,
                    region = r.region,
                    "freeing a region no cache places there"
                );
                let req = ControlRequest::FreeRegion {
                    cache: r.cache,
                    region: r.region,
                    moved_to: None,
                };
                self.best_effort(&t, &req, "free orphan region");
            }
            // Missing only if placed there before it answered as well as now: a
            // region placed since (a copy finished) may have arrived after the answer.
            let missing: Vec<HeldRegion> = placed
                .iter()
                .filter(|r| placed_then.contains(r) && !held.contains(r))
                .copied()
                .collect();
            if !missing.is_empty() {
                tracing::warn!(
                    server = t.server,
                    regions = missing.len(),
                    "server does not hold regions the catalogue places there (it restarted): they are lost"
                );
                // Backups take over what they can; the rest is placed again here.
                let orphans = self.promote_backups(t.server, Some(&missing));
                self.replace_lost(t.server, &orphans, "restarted", true);
            }
        }
    }

    fn delete(&self, name: &str) -> Result<(), Reject> {
        let _changes = self.changes.lock();
        let (record, holders) = {
            let mut st = self.state.lock();
            let (record, holders) = self.cache_and_holders(&st.catalogue, name)?;
            st.commit(&[Write::RemoveCache(record.id)])?;
            st.catalogue.remove_cache(record.id);
            (record, holders)
        };
        // The catalogue no longer maps these regions, so failures only leak server memory.
        for t in &holders {
            let req = ControlRequest::DropCache { cache: record.id };
            self.best_effort(t, &req, "drop cache");
        }
        tracing::info!(cache = record.id, name, "cache deleted");
        Ok(())
    }

    /// Loads a procedure on every server of `cache`, then records it so servers that
    /// receive regions of the cache later get it too. Nothing is recorded if a server
    /// refuses the code (it does not compile, or breaks the procedure ABI).
    fn register_proc(&self, cache: &str, proc_name: &str, code: Vec<u8>) -> Result<(), Reject> {
        if proc_name.is_empty() || proc_name.len() > farcache_proto::op::MAX_PROC_NAME {
            return Err(Reject::invalid(format!(
                "procedure names have 1 to {} bytes",
                farcache_proto::op::MAX_PROC_NAME
            )));
        }
        if code.is_empty() || code.len() > MAX_PROC_CODE {
            return Err(Reject::invalid(format!(
                "procedure code must have 1 to {MAX_PROC_CODE} bytes"
            )));
        }
        let _changes = self.changes.lock();
        let (mut record, holders) = {
            let st = self.state.lock();
            self.cache_and_holders(&st.catalogue, cache)?
        };
        let def = ProcDef {
            name: proc_name.to_string(),
            code,
        };
        self.load_procs(record.id, &holders, std::slice::from_ref(&def))?;
        record.procs.retain(|p| p.name != def.name);
        record.procs.push(def);
        let mut st = self.state.lock();
        st.commit(&[Write::Cache(&record)])?;
        st.catalogue.insert_cache(record.clone());
        tracing::info!(cache = record.id, proc_name, "procedure registered");
        Ok(())
    }

    /// Sends `procs` to every live server in `targets`.
    pub(crate) fn load_procs(
        &self,
        cache: CacheId,
        targets: &[Target],
        procs: &[ProcDef],
    ) -> Result<(), Reject> {
        for t in targets {
            if t.state == ServerState::Dead {
                continue;
            }
            for p in procs {
                let req = ControlRequest::LoadProc {
                    cache,
                    proc_name: p.name.clone(),
                    code: p.code.clone(),
                };
                if let Err(e) = self.links.call(t.server, &t.addr, &req) {
                    let why = format!(
                        "server {} ({}) refused procedure {}: {e}",
                        t.server, t.addr, p.name
                    );
                    return Err(match e {
                        LinkError::Rpc(RpcError::Remote { .. }) => Reject::invalid(why),
                        _ => Reject::unavailable(why),
                    });
                }
            }
        }
        Ok(())
    }

    /// Tells every server of a cache who holds each region, so procedures can move
    /// between servers without the client. Best effort: a server without the table
    /// returns continuations to the client instead.
    pub(crate) fn push_routes(&self, info: &CacheInfo) {
        let mut ids: Vec<ServerId> = info
            .regions
            .iter()
            .chain(info.backups.iter().flatten())
            .copied()
            .collect();
        ids.sort_unstable();
        ids.dedup();
        self.push_routes_to(info, &ids);
    }

    /// Sends a cache's region table to the servers `ids`, best effort.
    pub(crate) fn push_routes_to(&self, info: &CacheInfo, ids: &[ServerId]) {
        let addr_of = |id: ServerId| info.server(id).map(|s| s.addr.clone()).unwrap_or_default();
        let owners: Vec<String> = info.regions.iter().map(|&id| addr_of(id)).collect();
        let backups: Vec<Vec<String>> = info
            .backups
            .iter()
            .map(|b| b.iter().map(|&id| addr_of(id)).collect())
            .collect();
        let req = ControlRequest::SetRoutes {
            cache: info.id,
            epoch: info.epoch,
            owners,
            capacity: info.capacity,
            backups,
        };
        let targets = {
            let st = self.state.lock();
            self.targets(&st.catalogue, ids)
        };
        // In parallel: a server cut off from the manager costs one call timeout, not
        // one per server (a failover pushes tables to every holder).
        match targets.as_slice() {
            [] => {}
            [t] => self.best_effort(t, &req, "send region table"),
            many => std::thread::scope(|s| {
                for t in many {
                    let req = &req;
                    s.spawn(move || self.best_effort(t, req, "send region table"));
                }
            }),
        }
    }

    /// Pushes the region table of every cache with a region on server `id`.
    fn push_tables_of(&self, id: ServerId) {
        let _changes = self.changes.lock();
        let infos: Vec<CacheInfo> = {
            let st = self.state.lock();
            st.catalogue
                .status()
                .caches
                .into_iter()
                .filter(|c| c.regions.contains(&id) || c.backups.iter().flatten().any(|&b| b == id))
                .collect()
        };
        for info in &infos {
            self.push_routes(info);
        }
    }

    /// The cache named `name` and every server holding one of its regions, once each.
    fn cache_and_holders(
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

    /// Places `n` regions on alive servers, or explains what is missing.
    fn plan(
        &self,
        cat: &Catalogue,
        n: u64,
        region_size: u64,
        name: &str,
    ) -> Result<Vec<Target>, Reject> {
        let regions = usize::try_from(n).map_err(|_| Reject::invalid("too many regions"))?;
        let chosen = placement::place(&cat.candidates(), regions, region_size).map_err(|s| {
            Reject::new(
                ControlErrorCode::InsufficientMemory,
                format!("cache '{name}': {n} region(s) of {region_size} bytes: {s}"),
            )
        })?;
        Ok(self.targets(cat, &chosen))
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

    /// Asks each server to hold its region (`first` is the index of `plan[0]`); on any
    /// failure frees what was already placed so nothing leaks.
    fn alloc_all(
        &self,
        cache: CacheId,
        first: usize,
        plan: &[Target],
        layout: &Layout<'_>,
    ) -> Result<(), Reject> {
        let Layout {
            region_size,
            capacity,
            epoch,
            from_file,
        } = *layout;
        let source = from_file.map(|path| (path, capacity));
        for (i, t) in plan.iter().enumerate() {
            let index = first + i;
            let region = u32::try_from(index).map_err(|_| Reject::invalid("too many regions"))?;
            let req = ControlRequest::AllocRegion {
                cache,
                region,
                region_size,
                capacity,
                epoch,
                lost: false,
                incoming: false,
                load: source.map(|(path, cap)| file_slice(path, cap, region_size, region)),
            };
            if let Err(e) = self.links.call(t.server, &t.addr, &req) {
                tracing::warn!(cache, region, server = t.server, addr = %t.addr, error = %e, "region allocation failed, rolling back");
                self.free_regions(cache, first, &plan[..i]);
                return Err(Reject::unavailable(format!(
                    "server {} ({}) could not allocate region {region} of cache {cache}: {e}",
                    t.server, t.addr
                )));
            }
        }
        Ok(())
    }

    /// Frees `targets[i]` as region `first + i`, best effort.
    fn free_regions(&self, cache: CacheId, first: usize, targets: &[Target]) {
        for (i, t) in targets.iter().enumerate() {
            let Ok(region) = u32::try_from(first + i) else {
                return;
            };
            let req = ControlRequest::FreeRegion {
                cache,
                region,
                moved_to: None,
            };
            self.best_effort(t, &req, "free region");
        }
    }

    /// Frees backups placed by a create that failed, best effort.
    fn free_backups(&self, cache: CacheId, placed: &[(u32, Target)]) {
        for (region, t) in placed {
            let free = ControlRequest::FreeRegion {
                cache,
                region: *region,
                moved_to: None,
            };
            self.best_effort(t, &free, "free a backup");
        }
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

/// What every region placed by one change shares.
#[derive(Clone, Copy)]
struct Layout<'a> {
    region_size: u64,
    capacity: u64,
    epoch: u64,
    /// The source file of a read-only cache.
    from_file: Option<&'a str>,
}

/// How long the check of a server whose link closed waits for a connection, how
/// often it looks, and how far apart.
const SUSPECT_PROBE: Duration = Duration::from_millis(300);
const SUSPECT_PROBES: u32 = 5;
const SUSPECT_SPACING: Duration = Duration::from_millis(20);

/// Most copies of a region a cache may ask for.
const MAX_REPLICAS: u32 = 8;

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

/// A cache loaded from a file holds exactly the file's bytes; servers read it from
/// their own file system (the manager checks what it can see, when it shares it).
fn check_source_file(path: &str, capacity: u64) -> Result<(), Reject> {
    if path.is_empty() || !std::path::Path::new(path).is_absolute() {
        return Err(Reject::invalid(format!(
            "the source file must be an absolute path (got '{path}')"
        )));
    }
    if let Ok(meta) = std::fs::metadata(path)
        && meta.len() < capacity
    {
        return Err(Reject::invalid(format!(
            "{path} has {} bytes, fewer than the capacity {capacity}",
            meta.len()
        )));
    }
    Ok(())
}

fn server_only(what: &str) -> Reject {
    Reject::invalid(format!(
        "{what} is a server request; the manager does not serve it"
    ))
}

fn validate_name(name: &str) -> Result<(), Reject> {
    if name.is_empty() {
        return Err(Reject::invalid("cache name is empty"));
    }
    let chars = name.chars().count();
    if chars > MAX_NAME_CHARS {
        return Err(Reject::invalid(format!(
            "cache name has {chars} characters; at most {MAX_NAME_CHARS} are allowed"
        )));
    }
    Ok(())
}

/// Regions needed for `capacity` bytes, after checking both numbers.
fn region_count(capacity: u64, region_size: u64) -> Result<u64, Reject> {
    if capacity == 0 {
        return Err(Reject::invalid("capacity must be positive"));
    }
    if region_size == 0 || !region_size.is_multiple_of(REGION_ALIGN) {
        return Err(Reject::invalid(format!(
            "region size {region_size} must be a positive multiple of {REGION_ALIGN}"
        )));
    }
    let n = capacity.div_ceil(region_size);
    if n > MAX_REGIONS {
        return Err(Reject::invalid(format!(
            "capacity {capacity} needs {n} regions of {region_size} bytes; at most \
             {MAX_REGIONS} are allowed, use a larger region size"
        )));
    }
    Ok(n)
}

/// Who a caller is, in words (for refusals).
pub fn role_name(role: Role, access: &Access) -> String {
    match (role, access) {
        (Role::Client, Access::Cache { cache, rights }) => {
            format!("a client holding a {rights:?} token for cache {cache}")
        }
        (Role::Client, Access::Cluster) => "a client holding the cluster secret".into(),
        (role, _) => format!("{role:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(validate_name("a").is_ok());
        assert!(validate_name(&"é".repeat(MAX_NAME_CHARS)).is_ok());
        assert!(validate_name(&"x".repeat(MAX_NAME_CHARS + 1)).is_err());
        assert_eq!(
            validate_name("").unwrap_err().code,
            ControlErrorCode::InvalidArgument
        );
    }

    #[test]
    fn region_counts_round_up_and_reject_bad_input() {
        assert_eq!(region_count(1, 4096).unwrap(), 1);
        assert_eq!(region_count(4096, 4096).unwrap(), 1);
        assert_eq!(region_count(4097, 4096).unwrap(), 2);
        assert!(region_count(0, 4096).is_err());
        assert!(region_count(10, 0).is_err());
        assert!(region_count(10, 1000).is_err());
        assert!(region_count(u64::MAX, 4096).is_err(), "too many regions");
    }
}
