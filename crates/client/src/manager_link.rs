//! The client's control connection to the manager; reconnects once per call so a
//! manager restart is invisible to the application.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use farcache_proto::blocking::{RpcError, control_call};
use farcache_proto::control::{ControlRequest, ControlResponse};
use parking_lot::Mutex;

use crate::error::ClientError;

pub(crate) struct ManagerLink {
    addr: String,
    timeout: Duration,
    conn: Mutex<Option<TcpStream>>,
}

impl ManagerLink {
    pub fn new(addr: String, timeout: Duration) -> Self {
        Self {
            addr,
            timeout,
            conn: Mutex::new(None),
        }
    }

    fn dial(&self) -> Result<TcpStream, RpcError> {
        let sa = self
            .addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| RpcError::Unexpected(format!("'{}' does not resolve", self.addr)))?;
        let s = TcpStream::connect_timeout(&sa, self.timeout)?;
        s.set_nodelay(true)?;
        // Placement talks to every server, so give replies more time than a connect.
        s.set_read_timeout(Some(self.timeout * 15))?;
        s.set_write_timeout(Some(self.timeout))?;
        Ok(s)
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
