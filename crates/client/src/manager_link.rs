//! The client's control connection to the manager; reconnects once per call so a
//! manager restart is invisible to the application. With several managers (a
//! comma-separated list: one leads, the others stand by) it follows the leader: a
//! standby names the leader (`Redirect`, followed at once, even to a manager not in
//! the list), and a manager that does not answer or says `NotLeader` sends it to
//! the next.

use std::time::{Duration, Instant};

use farcache_net::TlsConnector;
use farcache_net::stream::BlockingStream;
use farcache_proto::blocking::{RpcError, control_call, handshake};
use farcache_proto::control::{ControlErrorCode, ControlRequest, ControlResponse};
use farcache_proto::{Credential, Role};
use parking_lot::Mutex;

use crate::error::ClientError;

/// How long a call looks for a leader among several managers.
const FAILOVER_PATIENCE: Duration = Duration::from_secs(5);
/// Managers a client keeps in its list (given, plus leaders standbys named).
const MAX_MANAGERS: usize = 64;
/// Wait before asking again when standbys keep naming a leader that does not answer
/// (it just died; they name the next one once it leads).
const REDIRECT_PAUSE: Duration = Duration::from_millis(20);

pub(crate) struct ManagerLink {
    /// As given (for errors).
    addr: String,
    /// The list given, and leaders standbys named that it lacked.
    addrs: Mutex<Vec<String>>,
    /// The one that answered last: tried first.
    current: std::sync::atomic::AtomicUsize,
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
        let mut addrs: Vec<String> = addr
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(String::from)
            .collect();
        if addrs.is_empty() {
            // Dialing it fails with the address in the error.
            addrs.push(addr.clone());
        }
        Self {
            addr,
            addrs: Mutex::new(addrs),
            current: std::sync::atomic::AtomicUsize::new(0),
            timeout,
            cred,
            tls,
            conn: Mutex::new(None),
        }
    }

    /// Dials the managers in turn from the one that answered last.
    fn dial(&self) -> Result<BlockingStream, RpcError> {
        use std::sync::atomic::Ordering;
        let first = self.current.load(Ordering::Relaxed);
        let addrs = self.addrs.lock().clone();
        let mut last = None;
        for i in 0..addrs.len() {
            let at = (first + i) % addrs.len();
            match self.dial_one(&addrs[at]) {
                Ok(s) => {
                    self.current.store(at, Ordering::Relaxed);
                    return Ok(s);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| RpcError::Unexpected("no manager address".into())))
    }

    /// After a `NotLeader` answer: start with the next manager.
    fn skip_current(&self) {
        use std::sync::atomic::Ordering;
        let at = self.current.load(Ordering::Relaxed);
        let n = self.addrs.lock().len().max(1);
        self.current.store((at + 1) % n, Ordering::Relaxed);
    }

    /// After a `Redirect`: the leader it names is dialed next (added to the list if
    /// the list lacks it).
    fn follow(&self, leader: &str, leader_tls: Option<&str>) {
        use std::sync::atomic::Ordering;
        let to = match (&self.tls, leader_tls) {
            (Some(_), Some(t)) => t,
            _ => leader,
        };
        let mut addrs = self.addrs.lock();
        let at = match addrs.iter().position(|a| a == to) {
            Some(at) => at,
            // Standbys prove the cluster secret, but a list is bounded all the same:
            // past the cap, a named leader replaces the last one added.
            None if addrs.len() < MAX_MANAGERS => {
                addrs.push(to.to_owned());
                addrs.len() - 1
            }
            None => {
                let last = addrs.len() - 1;
                addrs[last] = to.to_owned();
                last
            }
        };
        self.current.store(at, Ordering::Relaxed);
    }

    fn dial_one(&self, addr: &str) -> Result<BlockingStream, RpcError> {
        let mut s = BlockingStream::connect(addr, self.timeout, self.timeout, self.tls.as_ref())
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
        // With standbys, a new leader may be taking over (an etcd lease, a second or
        // two): keep looking for one that long.
        let several = self.addrs.lock().len() > 1;
        let started = Instant::now();
        let mut patience = started
            + if several {
                self.timeout.max(FAILOVER_PATIENCE)
            } else {
                Duration::ZERO
            };
        let mut tries = 0;
        let mut named: Option<String> = None;
        while tries < 2 || Instant::now() < patience {
            tries += 1;
            if g.is_none() {
                match self.dial() {
                    Ok(s) => *g = Some(s),
                    Err(e) => {
                        last = Some(e);
                        if several {
                            std::thread::sleep(Duration::from_millis(50));
                        }
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
                Err(RpcError::Redirect { leader, leader_tls }) => {
                    *g = None;
                    self.follow(&leader, leader_tls.as_deref());
                    if named.as_deref() == Some(leader.as_str()) {
                        // Named again: it did not answer. Wait for the standbys to
                        // see the next leader, as long as a failover may take.
                        patience = patience.max(started + self.timeout.max(FAILOVER_PATIENCE));
                        std::thread::sleep(REDIRECT_PAUSE);
                    } else if started.elapsed() < FAILOVER_PATIENCE {
                        // Not a failed try: the next dial goes to the leader.
                        tries -= 1;
                    }
                    named = Some(leader.clone());
                    last = Some(RpcError::Redirect { leader, leader_tls });
                }
                Err(RpcError::Remote {
                    code: ControlErrorCode::NotLeader,
                    message,
                }) if several => {
                    *g = None;
                    self.skip_current();
                    last = Some(RpcError::Remote {
                        code: ControlErrorCode::NotLeader,
                        message,
                    });
                }
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
