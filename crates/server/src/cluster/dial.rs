//! Dialing other servers and the manager: connect, then prove this server's role
//! with the cluster secret and its advertised address as identity. Migration,
//! replication and the manager link dial through this one path.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use farcache_proto::auth::AuthError;
use farcache_proto::blocking::{RpcError, handshake};
use farcache_proto::{Challenge, ClusterSecret, Credential, Hello, HelloAck, Role};

/// What dialing needs: the proof and the identity, nothing else of the server.
pub struct Dialer {
    cred: Credential,
    identity: String,
}

/// Timeouts of one dial: for connecting and the handshake, then left on the socket.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    /// Left on the socket after the handshake (`None`: reads may wait for ever).
    pub read: Option<Duration>,
    pub write: Option<Duration>,
}

impl Timeouts {
    /// The same bound for connecting, reading and writing.
    pub fn all(d: Duration) -> Self {
        Self {
            connect: d,
            read: Some(d),
            write: Some(d),
        }
    }
}

impl Dialer {
    pub fn new(secret: ClusterSecret, identity: String) -> Self {
        Self {
            cred: Credential::Cluster(secret),
            identity,
        }
    }

    /// A connection to `to` that has proved this server's role; `generation` is the
    /// Hello's `client_id` (a replication stream's generation, else 0).
    pub fn dial(
        &self,
        to: SocketAddr,
        t: Timeouts,
        generation: u64,
    ) -> Result<TcpStream, RpcError> {
        let mut s = TcpStream::connect_timeout(&to, t.connect)?;
        s.set_nodelay(true)?;
        // The handshake is bounded by the connect timeout whatever stays after it.
        s.set_read_timeout(Some(t.connect))?;
        s.set_write_timeout(Some(t.connect))?;
        handshake(&mut s, Role::Server, generation, &self.identity, &self.cred)?;
        s.set_read_timeout(t.read)?;
        s.set_write_timeout(t.write)?;
        Ok(s)
    }
}

impl Dialer {
    /// This server's Hello answering `challenge`, for a connection driven without
    /// blocking (the workers' peer sessions).
    pub fn hello(&self, challenge: &Challenge) -> Hello {
        self.cred.hello(Role::Server, 0, &self.identity, challenge)
    }

    /// Checks that the acceptor's answer to `hello` proves it holds the secret too.
    pub fn check_ack(
        &self,
        hello: &Hello,
        challenge: &Challenge,
        ack: &HelloAck,
    ) -> Result<(), AuthError> {
        self.cred.check_ack(hello, challenge, ack)
    }
}

/// The first address `addr` resolves to.
pub fn resolve(addr: &str) -> Result<SocketAddr, RpcError> {
    addr.to_socket_addrs()?
        .next()
        .ok_or_else(|| RpcError::Unexpected(format!("address '{addr}' does not resolve")))
}
