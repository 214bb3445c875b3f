//! Manager → cache server calls (place, free and drop regions).
//!
//! A few cached connections per server (a migration status request waits at the
//! source while other calls go on), reopened after any transport failure: servers
//! restart and move.

use std::collections::HashMap;
use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use farcache_proto::blocking::{RpcError, control_call, handshake};
use farcache_proto::control::{ControlRequest, ControlResponse, HeldRegion};
use farcache_proto::{ClusterSecret, Credential, Role, ServerId};
use parking_lot::Mutex;
use thiserror::Error;

use crate::leadership::Leadership;

#[derive(Debug, Error)]
pub enum LinkError {
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: String, source: io::Error },
    #[error("{0}")]
    Rpc(#[from] RpcError),
    /// This manager no longer leads: it tells servers nothing.
    #[error("this manager no longer leads")]
    Deposed,
}

impl LinkError {
    /// True when the server answered: the connection is still good and retrying the
    /// same request would get the same answer.
    fn is_remote(&self) -> bool {
        matches!(self, LinkError::Rpc(RpcError::Remote { .. }))
    }
}

struct Link {
    addr: String,
    stream: TcpStream,
}

/// Idle connections kept per server: calls to one server at the same time (a
/// migration's status wait, a table push, a placement) each take one.
const IDLE_PER_SERVER: usize = 4;

pub struct ServerLinks {
    timeout: Duration,
    /// Proves the manager's role to servers.
    cred: Credential,
    /// Idle connections per server, at most [`IDLE_PER_SERVER`].
    links: Mutex<HashMap<ServerId, Vec<Link>>>,
    /// Checked before every call: a deposed manager's catalogue may be stale, and
    /// acting on it could undo what the new leader did.
    leadership: Arc<Leadership>,
}

impl ServerLinks {
    pub fn new(timeout: Duration, secret: ClusterSecret, leadership: Arc<Leadership>) -> Self {
        Self {
            timeout,
            cred: Credential::Cluster(secret),
            links: Mutex::new(HashMap::new()),
            leadership,
        }
    }

    /// Sends `req` to server `id` at `addr`; only `ControlResponse::Ok` counts as success.
    pub fn call(&self, id: ServerId, addr: &str, req: &ControlRequest) -> Result<(), LinkError> {
        match self.ask(id, addr, req)? {
            ControlResponse::Ok => Ok(()),
            other => Err(RpcError::Unexpected(format!("reply {other:?}")).into()),
        }
    }

    /// Where a region's copy away from server `id` stands.
    pub fn migration(
        &self,
        id: ServerId,
        addr: &str,
        cache: farcache_proto::CacheId,
        region: u32,
        wait_ms: u32,
    ) -> Result<farcache_proto::control::MigrationReport, LinkError> {
        let req = ControlRequest::MigrationStatus {
            cache,
            region,
            wait_ms,
        };
        match self.ask(id, addr, &req)? {
            ControlResponse::Migration(r) => Ok(r),
            other => Err(RpcError::Unexpected(format!("reply {other:?}")).into()),
        }
    }

    /// The regions server `id` holds.
    pub fn list_regions(&self, id: ServerId, addr: &str) -> Result<Vec<HeldRegion>, LinkError> {
        match self.ask(id, addr, &ControlRequest::ListRegions)? {
            ControlResponse::Regions { regions } => Ok(regions),
            other => Err(RpcError::Unexpected(format!("reply {other:?}")).into()),
        }
    }

    /// One request to server `id` at `addr`, on its cached connection if it has one.
    fn ask(
        &self,
        id: ServerId,
        addr: &str,
        req: &ControlRequest,
    ) -> Result<ControlResponse, LinkError> {
        if !self.leadership.holds() {
            return Err(LinkError::Deposed);
        }
        // Take the link out so no lock is held during network I/O.
        let cached = self.links.lock().get_mut(&id).and_then(|idle| {
            // A server that moved to another address: its old connections go.
            idle.retain(|l| l.addr == addr);
            idle.pop()
        });
        let (link, result) = match cached {
            Some(mut link) => match Self::exchange(&mut link.stream, req) {
                Err(e) if !e.is_remote() => {
                    // Most likely the server restarted and closed the old connection.
                    tracing::debug!(server = id, error = %e, "cached server link failed, reconnecting");
                    self.fresh_call(addr, req)?
                }
                result => (link, result),
            },
            None => self.fresh_call(addr, req)?,
        };
        if result.is_ok() || result.as_ref().is_err_and(LinkError::is_remote) {
            let mut links = self.links.lock();
            let idle = links.entry(id).or_default();
            if idle.len() < IDLE_PER_SERVER {
                idle.push(link);
            }
        }
        result
    }

    /// Drops every cached connection (shutdown).
    pub fn close_all(&self) {
        self.links.lock().clear();
    }

    fn fresh_call(
        &self,
        addr: &str,
        req: &ControlRequest,
    ) -> Result<(Link, Result<ControlResponse, LinkError>), LinkError> {
        let mut stream = self.connect(addr)?;
        handshake(&mut stream, Role::Manager, 0, "", &self.cred)?;
        let result = Self::exchange(&mut stream, req);
        Ok((
            Link {
                addr: addr.to_owned(),
                stream,
            },
            result,
        ))
    }

    fn connect(&self, addr: &str) -> Result<TcpStream, LinkError> {
        let fail = |source| LinkError::Connect {
            addr: addr.to_owned(),
            source,
        };
        let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing");
        for sa in addr.to_socket_addrs().map_err(fail)? {
            match TcpStream::connect_timeout(&sa, self.timeout) {
                Ok(s) => {
                    s.set_read_timeout(Some(self.timeout)).map_err(fail)?;
                    s.set_write_timeout(Some(self.timeout)).map_err(fail)?;
                    s.set_nodelay(true).map_err(fail)?;
                    return Ok(s);
                }
                Err(e) => last = e,
            }
        }
        Err(fail(last))
    }

    fn exchange(
        stream: &mut TcpStream,
        req: &ControlRequest,
    ) -> Result<ControlResponse, LinkError> {
        Ok(control_call(stream, req)?)
    }
}
