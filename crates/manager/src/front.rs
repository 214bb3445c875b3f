//! Who answers the listener's connections: the service while this manager leads,
//! and while it stands by (on etcd, another manager leads) a redirect naming the
//! leader, so a client or server given any one manager's address finds the leader
//! in one round trip instead of trying the list.

use std::net::SocketAddr;
use std::sync::Arc;

use farcache_proto::ServerId;
use farcache_proto::control::{ControlErrorCode, ControlRequest, ControlResponse};
use parking_lot::Mutex;

use crate::listener::Handler;
use crate::service::{Caller, Service};

impl Handler for Service {
    fn handle(&self, caller: &Caller, req: ControlRequest) -> ControlResponse {
        Service::handle(self, caller, req)
    }

    fn link_closed(&self, id: ServerId) {
        self.suspect(id);
    }
}

/// What the leader key in etcd holds: the leader's control address, and its TLS
/// address when it serves TLS (`"ADDR"` or `"ADDR TLS_ADDR"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaderAddr {
    pub addr: String,
    pub tls: Option<String>,
}

impl LeaderAddr {
    pub(crate) fn new(addr: SocketAddr, tls: Option<SocketAddr>) -> Self {
        Self {
            addr: addr.to_string(),
            tls: tls.map(|t| t.to_string()),
        }
    }

    pub(crate) fn encode(&self) -> String {
        match &self.tls {
            Some(t) => format!("{} {t}", self.addr),
            None => self.addr.clone(),
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        let mut it = s.split_whitespace();
        let addr = it.next()?.to_owned();
        Some(Self {
            addr,
            tls: it.next().map(str::to_owned),
        })
    }

    /// An address others can dial: not a wildcard such as 0.0.0.0.
    fn reachable(&self) -> bool {
        self.addr
            .parse::<SocketAddr>()
            .map_or(true, |a| !a.ip().is_unspecified())
    }
}

/// A standby's answers: the leader it last saw in etcd.
#[derive(Debug, Default)]
pub(crate) struct Standby {
    leader: Mutex<Option<LeaderAddr>>,
}

impl Standby {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The leader key changed (`None`: none leads, an election is under way).
    pub(crate) fn set_leader(&self, leader: Option<&str>) {
        *self.leader.lock() = leader.and_then(LeaderAddr::parse);
    }
}

impl Handler for Standby {
    fn handle(&self, _caller: &Caller, _req: ControlRequest) -> ControlResponse {
        match self.leader.lock().clone() {
            Some(l) if l.reachable() => ControlResponse::Redirect {
                leader: l.addr,
                leader_tls: l.tls,
            },
            Some(l) => ControlResponse::error(
                ControlErrorCode::NotLeader,
                format!(
                    "this manager stands by; the leader listens on {} (all interfaces): \
                     ask the managers in your list",
                    l.addr
                ),
            ),
            None => ControlResponse::error(
                ControlErrorCode::NotLeader,
                "this manager stands by and no manager leads right now (an election is under way)",
            ),
        }
    }

    fn link_closed(&self, _id: ServerId) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_key_holds_both_addresses() {
        let plain = LeaderAddr::new("10.0.0.1:7400".parse().unwrap(), None);
        assert_eq!(LeaderAddr::parse(&plain.encode()), Some(plain));
        let both = LeaderAddr::new(
            "10.0.0.1:7400".parse().unwrap(),
            Some("10.0.0.1:7401".parse().unwrap()),
        );
        assert_eq!(both.encode(), "10.0.0.1:7400 10.0.0.1:7401");
        assert_eq!(LeaderAddr::parse(&both.encode()), Some(both));
        assert_eq!(LeaderAddr::parse("  "), None);
    }

    #[test]
    fn a_standby_redirects_to_a_leader_it_can_name() {
        let s = Standby::new();
        let caller = Caller {
            role: farcache_proto::Role::Client,
            access: farcache_proto::Access::Cluster,
            identity: String::new(),
        };
        let ask = || s.handle(&caller, ControlRequest::Status);
        assert!(matches!(
            ask(),
            ControlResponse::Error {
                code: ControlErrorCode::NotLeader,
                ..
            }
        ));
        s.set_leader(Some("10.0.0.2:7400 10.0.0.2:7401"));
        assert_eq!(
            ask(),
            ControlResponse::Redirect {
                leader: "10.0.0.2:7400".into(),
                leader_tls: Some("10.0.0.2:7401".into()),
            }
        );
        // A wildcard address is no use to a peer on another host.
        s.set_leader(Some("0.0.0.0:7400"));
        assert!(matches!(
            ask(),
            ControlResponse::Error {
                code: ControlErrorCode::NotLeader,
                ..
            }
        ));
        s.set_leader(None);
        assert!(matches!(
            ask(),
            ControlResponse::Error {
                code: ControlErrorCode::NotLeader,
                ..
            }
        ));
    }
}
