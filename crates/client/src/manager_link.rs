//! The client's control connection to the manager; reconnects once per call so a
//! manager restart is invisible to the application.

use std::time::Duration;

use farcache_net::TlsConnector;
use farcache_net::stream::BlockingStream;
use farcache_proto::blocking::{RpcError, control_call, handshake};
use farcache_proto::control::{ControlRequest, ControlResponse};
use farcache_proto::{Credential, Role};
use parking_lot::Mutex;

use crate::error::ClientError;

pub(crate) struct ManagerLink {
    addr: String,
    timeout: Duration,
    cred: Credential,
    tls: Option<TlsConnector>,
    conn: Mutex<Option<BlockingStream>>,
}

impl ManagerLink {
    pub fn new(
        addr: String,
        timeout: Duration,
        cred: Credential,
        tls: Option<TlsConnector>,
    ) -> Self {
        Self {
            addr,
            timeout,
            cred,
            tls,
            conn: Mutex::new(None),
        }
    }

    fn dial(&self) -> Result<BlockingStream, RpcError> {
        let mut s =
            BlockingStream::connect(&self.addr, self.timeout, self.timeout, self.tls.as_ref())
                .map_err(|e| match e {
                    farcache_net::NetError::Io(e) => RpcError::Io(e),
                    other => RpcError::Unexpected(other.to_string()),
                })?;
        handshake(
            &mut s,
            Role::Client,
            std::process::id().into(),
            "",
            &self.cred,
        )?;
        Ok(s)
    }

    /// Connects (and authenticates) now, to fail fast on a wrong address or credential.
    pub fn check(&self) -> Result<(), ClientError> {
        let mut g = self.conn.lock();
        if g.is_none() {
            *g = Some(self.dial().map_err(|source| ClientError::Manager {
                addr: self.addr.clone(),
                source,
            })?);
        }
        Ok(())
    }

    /// Placement talks to every server: replies get 15 times the connect timeout.
    pub fn call(&self, req: &ControlRequest) -> Result<ControlResponse, ClientError> {
        self.call_within(req, self.timeout * 15)
    }

    /// A call that reads nothing but the catalogue (a cache's table): a manager that
    /// does not answer within the connect timeout is out of reach, and a client that
    /// waits for a table (a moved region, a silent server) should not wait 15 times
    /// that to find out.
    pub fn lookup(&self, req: &ControlRequest) -> Result<ControlResponse, ClientError> {
        self.call_within(req, self.timeout)
    }

    fn call_within(
        &self,
        req: &ControlRequest,
        read_timeout: Duration,
    ) -> Result<ControlResponse, ClientError> {
        let mut g = self.conn.lock();
        let mut last = None;
        for _ in 0..2 {
            if g.is_none() {
                match self.dial() {
                    Ok(s) => *g = Some(s),
                    Err(e) => {
                        last = Some(e);
                        continue;
                    }
                }
            }
            let Some(s) = g.as_mut() else { continue };
            if let Err(e) = s.set_read_timeout(Some(read_timeout)) {
                *g = None;
                last = Some(e.into());
                continue;
            }
            match control_call(s, req) {
                Ok(r) => return Ok(r),
                Err(RpcError::Remote { code, message }) => {
                    return Err(ClientError::Rejected { code, message });
                }
                Err(e) => {
                    // The connection is unusable (manager restarted?): redial once.
                    *g = None;
                    last = Some(e);
                }
            }
        }
        Err(ClientError::Manager {
            addr: self.addr.clone(),
            source: last.unwrap_or_else(|| RpcError::Unexpected("no attempt made".into())),
        })
    }
}
