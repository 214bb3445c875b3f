//! `Client`: the entry point; holds the transport (lanes, the manager link, the async
//! driver) and opens caches on it.

use std::sync::Arc;
use std::time::Duration;

use farcache_proto::control::{
    CacheInfo, ClusterStatus, ControlRequest, ControlResponse, MigrationMode,
};
use farcache_proto::slo::{Slo, Transport as SloTransport};
use farcache_proto::{Rights, ServerId};

use crate::cache::{Cache, CacheShared};
use crate::config::ClientConfig;
use crate::error::ClientError;
use crate::lane::{RouteTable, Transport};
use crate::manager_link::ManagerLink;

/// A connection to a farcache cluster. Cheap to clone; share it between threads.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Transport>,
}

fn unexpected(r: ControlResponse) -> ClientError {
    ClientError::InvalidArgument(format!("unexpected manager reply: {r:?}"))
}

impl Client {
    /// Connects with default transport settings (`c=1, b=64, q=4`).
    pub fn connect(manager: &str) -> Result<Self, ClientError> {
        Self::with_config(ClientConfig::new(manager))
    }

    /// Connects with `config`; a config without a credential takes one from the
    /// environment (see [`ClientConfig::credential`]).
    pub fn with_config(config: ClientConfig) -> Result<Self, ClientError> {
        let config = config.resolve()?;
        let cred = config.credential.clone().ok_or(ClientError::NoCredential)?;
        let manager = ManagerLink::new(
            config.manager.clone(),
            config.connect_timeout,
            cred,
            config.tls.clone(),
        );
        let shared = Transport::new(config, manager)
            .map_err(|e| ClientError::InvalidArgument(format!("cannot create poller: {e}")))?;
        // Fail fast on a wrong manager address or credential.
        shared.manager.check()?;
        Ok(Self { shared })
    }

    pub fn config(&self) -> &ClientConfig {
        &self.shared.config
    }

    fn cache_reply(&self, r: ControlResponse) -> Result<Cache, ClientError> {
        let (info, tokens) = match r {
            ControlResponse::Cache(info) => (info, None),
            ControlResponse::Created { cache, tokens } => (cache, Some(tokens)),
            other => return Err(unexpected(other)),
        };
        let client = match &info.slo {
            Some(choice) => self.shared_for(choice.transport)?,
            None => self.shared.clone(),
        };
        let route = RouteTable::new(client, info);
        Ok(Cache::new(CacheShared::new(route, tokens)))
    }

    /// This client's connections when they already run transport `t`'s `c`, `b`
    /// and `q`; otherwise a client of its own for the cache, configured so.
    fn shared_for(&self, t: SloTransport) -> Result<Arc<Transport>, ClientError> {
        let cfg = &self.shared.config;
        let (c, b, q) = (t.c as usize, t.b as usize, t.q as usize);
        if cfg.connections == c && cfg.batch_size == b && cfg.queue_depth == q {
            return Ok(self.shared.clone());
        }
        let cfg = cfg.clone().connections(c).batch_size(b).queue_depth(q);
        Ok(Client::with_config(cfg)?.shared)
    }

    /// Creates a cache of `capacity` bytes with the manager's default region size. The
    /// returned handle carries the cache's tokens ([`Cache::tokens`]).
    pub fn create(&self, name: &str, capacity: u64) -> Result<Cache, ClientError> {
        self.create_with_region_size(name, capacity, None)
    }

    pub fn create_with_region_size(
        &self,
        name: &str,
        capacity: u64,
        region_size: Option<u64>,
    ) -> Result<Cache, ClientError> {
        self.create_with(
            name,
            capacity,
            &CreateOptions {
                region_size,
                ..CreateOptions::default()
            },
        )
    }

    /// Creates a cache with the given options: region size, copies of each region
    /// (`replicas` ≥ 2 keeps backups on other servers, so acknowledged writes survive
    /// `replicas - 1` servers dying at once), or a read-only cache loaded from a file.
    pub fn create_with(
        &self,
        name: &str,
        capacity: u64,
        opts: &CreateOptions,
    ) -> Result<Cache, ClientError> {
        let r = self.shared.manager.call(&ControlRequest::CreateCache {
            slo: None,
            name: name.into(),
            capacity,
            region_size: opts.region_size,
            replicas: opts.replicas,
            from_file: opts.from_file.clone(),
        })?;
        self.cache_reply(r)
    }

    /// Creates a cache that meets `slo` at the least cost: the manager searches its
    /// performance model for the transport (`c`, `s`, `b`, `q`) and places the cache
    /// on servers running `s` threads; the returned handle uses `c` connections,
    /// batches of up to `b` ops and `q` batches in flight ([`Cache::config`]). An SLO
    /// the model cannot meet fails with the best figures it predicts.
    pub fn create_with_slo(
        &self,
        name: &str,
        capacity: u64,
        slo: &Slo,
    ) -> Result<Cache, ClientError> {
        let r = self.shared.manager.call(&ControlRequest::CreateCache {
            slo: Some(slo.clone()),
            name: name.into(),
            capacity,
            region_size: None,
            replicas: slo.replicas,
            from_file: None,
        })?;
        self.cache_reply(r)
    }

    /// Gives cache `name` a new SLO; the manager searches again. Open the cache
    /// again for a handle with the new transport.
    pub fn set_slo(&self, name: &str, slo: &Slo) -> Result<CacheInfo, ClientError> {
        match self.shared.manager.call(&ControlRequest::SetSlo {
            name: name.into(),
            slo: slo.clone(),
        })? {
            ControlResponse::Cache(info) => Ok(info),
            other => Err(unexpected(other)),
        }
    }

    pub fn open(&self, name: &str) -> Result<Cache, ClientError> {
        let r = self
            .shared
            .manager
            .call(&ControlRequest::OpenCache { name: name.into() })?;
        self.cache_reply(r)
    }

    pub fn delete(&self, name: &str) -> Result<(), ClientError> {
        match self
            .shared
            .manager
            .call(&ControlRequest::DeleteCache { name: name.into() })?
        {
            ControlResponse::Ok => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Grows or shrinks a cache; handles opened before see the change on their next
    /// `wrong server` answer or `Cache::refresh`.
    pub fn reshape(&self, name: &str, capacity: u64) -> Result<CacheInfo, ClientError> {
        match self.shared.manager.call(&ControlRequest::ReshapeCache {
            name: name.into(),
            capacity,
        })? {
            ControlResponse::Cache(info) => Ok(info),
            other => Err(unexpected(other)),
        }
    }

    /// A token for the cache `name` (needs the cluster secret): hand it to a tenant
    /// that should reach that cache only.
    pub fn issue_token(&self, name: &str, rights: Rights) -> Result<String, ClientError> {
        match self.shared.manager.call(&ControlRequest::IssueToken {
            name: name.into(),
            rights,
        })? {
            ControlResponse::Token { token } => Ok(token),
            other => Err(unexpected(other)),
        }
    }

    /// Announces that server `server_id` will be taken back within `grace` (needs the
    /// cluster secret): the manager stops placing regions on it and moves its regions
    /// to other servers in `mode`. Returns once the manager accepted; follow the moves
    /// in [`Client::status`] (`migrations`, and `lost` for regions that could not move
    /// in time). Ops on a moving region pause for a few milliseconds and are sent
    /// again by the client, unseen by the application.
    pub fn reclaim(
        &self,
        server_id: ServerId,
        grace: Duration,
        mode: MigrationMode,
    ) -> Result<(), ClientError> {
        let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        match self.shared.manager.call(&ControlRequest::ReclaimServer {
            server_id,
            grace_ms,
            mode,
        })? {
            ControlResponse::Ok => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Moves region `region` of cache `name` live to server `to` (or, with `None`, to
    /// the cheapest other server with room), in `mode`; returns once the new owner
    /// serves it (needs the cluster secret). The move is listed in
    /// [`Client::status`]'s `migrations`.
    pub fn move_region(
        &self,
        name: &str,
        region: u32,
        to: Option<ServerId>,
        mode: MigrationMode,
    ) -> Result<(), ClientError> {
        match self.shared.manager.call(&ControlRequest::MoveRegion {
            name: name.to_owned(),
            region,
            to,
            mode,
        })? {
            ControlResponse::Ok => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    pub fn status(&self) -> Result<ClusterStatus, ClientError> {
        match self.shared.manager.call(&ControlRequest::Status)? {
            ControlResponse::Status(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }
}

/// How [`Client::create_with`] creates a cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateOptions {
    /// Defaults to the manager's region size.
    pub region_size: Option<u64>,
    /// Copies of every region on distinct servers (0 or 1: one copy, no backups).
    pub replicas: u32,
    /// An absolute path, on the servers' file system, to load the cache from: the
    /// cache is read-only, its capacity at most the file's length, and regions lost
    /// with a server are reloaded from the file.
    pub from_file: Option<String>,
}
