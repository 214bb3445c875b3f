//! Connections to servers: looked up in the cache's table, dialled (TCP, TLS,
//! handshake) on a short-lived thread so a silent server holds up no caller that needs
//! other servers, then registered with the lane's poll. Parts for a server being
//! dialled wait here and are routed once the dial is done.
//!
//! Invariant: at most one dial per server at a time, and none within
//! [`REDIAL_AFTER`] of a failed one (the remembered error stands meanwhile).

use std::time::{Duration, Instant};

use farcache_proto::ServerId;
use farcache_proto::control::CacheInfo;
use mio::Token;

use super::LaneInner;
use crate::conn::{Dial, Dialed, ServerConn};
use crate::error::OpError;
use crate::op::{Kind, PartRef};

/// How long a failed connection attempt is remembered before trying again.
const REDIAL_AFTER: Duration = Duration::from_millis(200);

/// A connection being dialed on its own thread, and the parts waiting for it.
pub(super) struct Dialing {
    pub(super) done: std::sync::mpsc::Receiver<Result<Dialed, OpError>>,
    /// With their ticket's id, in the order they were routed.
    pub(super) parts: Vec<(PartRef, u64)>,
}

impl LaneInner {
    /// Makes sure a connection to `server` exists or is being dialed: `Ok(true)`
    /// when it is ready, `Ok(false)` while a dialing thread works on it.
    pub(super) fn ensure_conn(
        &mut self,
        server: ServerId,
        info: &CacheInfo,
    ) -> Result<bool, OpError> {
        let tls = self.cfg.tls.is_some();
        let addr = info.server(server).and_then(|s| {
            if tls {
                s.tls_addr.as_deref()
            } else {
                Some(&s.addr)
            }
        });
        if tls && addr.is_none() && info.server(server).is_some() {
            return Err(OpError::ServerUnavailable {
                server,
                addr: info
                    .server(server)
                    .map(|s| s.addr.clone())
                    .unwrap_or_default(),
                reason: "the client uses TLS and this server does not serve it".into(),
            });
        }
        if let Some(c) = self.conns.get(&server) {
            if Some(c.addr.as_str()) == addr {
                return Ok(true);
            }
            let err = c.unavailable("server moved to a new address");
            self.fail_conn(server, err);
        }
        let Some(addr) = addr else {
            return Err(OpError::ServerUnavailable {
                server,
                addr: String::new(),
                reason: "server missing from the region table".into(),
            });
        };
        if let Some((at, e)) = self.failed.get(&server)
            && at.elapsed() < REDIAL_AFTER
        {
            return Err(e.clone());
        }
        let Some(cred) = self.cfg.credential.as_ref() else {
            return Err(OpError::ServerUnavailable {
                server,
                addr: addr.to_string(),
                reason: "the client has no credential".into(),
            });
        };
        if self.dialing.contains_key(&server) {
            return Ok(false);
        }
        let (tx, done) = std::sync::mpsc::channel();
        let (owned, tls) = (cred.clone(), self.cfg.tls.clone());
        // No op waits longer than its timeout, so neither does the dial it waits for:
        // a host that vanished (no RST) is given up on in time to find its successor.
        let dial_timeout = self.cfg.connect_timeout.min(self.cfg.op_timeout);
        let (timeout, waker, at) = (dial_timeout, self.waker.clone(), addr.to_string());
        let spawned = std::thread::Builder::new()
            .name("farcache-dial".into())
            .spawn(move || {
                let dial = Dial {
                    cred: &owned,
                    tls: tls.as_ref(),
                    timeout,
                };
                let _ = tx.send(ServerConn::dial(server, &at, &dial));
                let _ = waker.wake();
            });
        if spawned.is_ok() {
            let parts = Vec::new();
            self.dialing.insert(server, Dialing { done, parts });
            return Ok(false);
        }
        // No thread to spare: dial here.
        let dial = Dial {
            cred,
            tls: self.cfg.tls.as_ref(),
            timeout: dial_timeout,
        };
        let r = ServerConn::connect(
            server,
            addr,
            &dial,
            self.poll.registry(),
            Token(server as usize),
        );
        self.connected(server, r).map(|()| true)
    }

    /// Keeps a new connection, or remembers why there is none.
    fn connected(
        &mut self,
        server: ServerId,
        r: Result<ServerConn, OpError>,
    ) -> Result<(), OpError> {
        match r {
            Ok(c) => {
                self.failed.remove(&server);
                self.conns.insert(server, c);
                Ok(())
            }
            Err(e) => {
                tracing::debug!(server, "connect failed: {e}");
                self.failed.insert(server, (Instant::now(), e.clone()));
                Err(e)
            }
        }
    }

    /// Takes the dials that finished: their parts go out on the new connection, or
    /// fail over as unreachable.
    pub(super) fn finish_dials(&mut self) {
        use std::sync::mpsc::TryRecvError;
        let done: Vec<(ServerId, Result<Dialed, OpError>)> = self
            .dialing
            .iter()
            .filter_map(|(&server, d)| match d.done.try_recv() {
                Ok(r) => Some((server, r)),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => Some((
                    server,
                    Err(OpError::ServerUnavailable {
                        server,
                        addr: String::new(),
                        reason: "the dialing thread ended without an answer".into(),
                    }),
                )),
            })
            .collect();
        for (server, r) in done {
            let Some(d) = self.dialing.remove(&server) else {
                continue;
            };
            let token = Token(server as usize);
            let r = r.and_then(|dialed| ServerConn::attach(dialed, self.poll.registry(), token));
            let outcome = self.connected(server, r);
            for (part, id) in d.parts {
                let Some(t) = self.tickets.get(part.key as usize).filter(|t| t.id == id) else {
                    continue;
                };
                match &outcome {
                    Err(e) if t.abandoned && part.kind == Kind::Read => {
                        self.fail_part(part, e.clone())
                    }
                    Err(e) => self.unreachable(part, server, e.clone()),
                    Ok(()) if t.abandoned && part.kind == Kind::Read => {
                        let e = OpError::ServerUnavailable {
                            server,
                            addr: String::new(),
                            reason: "not sent: its caller stopped waiting".into(),
                        };
                        self.fail_part(part, e)
                    }
                    Ok(()) => {
                        let info = t.route.info();
                        self.route(part, server, &info);
                    }
                }
            }
        }
        self.seal_and_flush();
    }
}
