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
        // Placement talks to every server, so give replies more time than a connect.
        s.set_read_timeout(Some(self.timeout * 15))?;
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

    pub fn call(&self, req: &ControlRequest) -> Result<ControlResponse, ClientError> {
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
