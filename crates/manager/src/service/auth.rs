//! Who may ask what. Every connection proved a role (and, for clients, a credential)
//! in its handshake; each request is checked against it before anything runs.
//!
//! Servers register and heartbeat, and speak only for their own address; clients
//! holding the cluster secret may do anything a client can; a client holding a cache
//! token may open its cache, and with a read-write token also reshape it, delete it
//! and register procedures on it. Everything else is refused with `Forbidden`, and a
//! token never reveals whether another tenant's cache exists.

use farcache_proto::control::{CacheTokens, ControlErrorCode, ControlRequest, ControlResponse};
use farcache_proto::{Access, CacheId, Rights, Role, ServerId};

use super::Service;
use crate::error::Reject;

/// Who sent a request: the role and credential its connection proved.
#[derive(Debug, Clone)]
pub struct Caller {
    pub role: Role,
    pub access: Access,
    /// A server's advertised address (from its Hello).
    pub identity: String,
}

impl Service {
    /// Whether `caller` may make `req` (see the module docs).
    pub(super) fn authorize(&self, caller: &Caller, req: &ControlRequest) -> Result<(), Reject> {
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
        self.cluster
            .state
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
            .cluster
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

    pub(super) fn tokens(&self, cache: CacheId) -> CacheTokens {
        let s = self.authority.secret();
        CacheTokens {
            read_write: s.token(cache, Rights::ReadWrite).to_string(),
            read_only: s.token(cache, Rights::ReadOnly).to_string(),
        }
    }

    pub(super) fn issue_token(
        &self,
        name: &str,
        rights: Rights,
    ) -> Result<ControlResponse, Reject> {
        let id = self
            .cluster
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
