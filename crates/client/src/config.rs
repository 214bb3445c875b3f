use std::time::Duration;

use farcache_net::TlsConnector;
use farcache_proto::{CacheToken, ClusterSecret, Credential};

use crate::error::ClientError;

/// Environment variables a client reads when its config names no credential.
pub const ENV_TOKEN: &str = "FARCACHE_TOKEN";
pub const ENV_SECRET_FILE: &str = "FARCACHE_SECRET_FILE";
pub const ENV_SECRET: &str = "FARCACHE_SECRET";
/// A PEM file of certificates to trust: set, the client speaks TLS.
pub const ENV_TLS_CA: &str = "FARCACHE_TLS_CA";

/// Transport knobs of the Redy model (`s`, server threads, is the server's setting),
/// and how the client proves who it is.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Manager address, `host:port` (its TLS address when `tls` is set).
    pub manager: String,
    /// The cluster secret or a cache token. `None`: taken from the environment
    /// ([`ENV_TOKEN`], [`ENV_SECRET_FILE`] or [`ENV_SECRET`]) when the client starts.
    pub credential: Option<Credential>,
    /// Speak TLS to the manager and to servers (their TLS addresses).
    pub tls: Option<TlsConnector>,
    /// `c`: lanes, i.e. connections per server.
    pub connections: usize,
    /// `b`: most ops packed into one request frame.
    pub batch_size: usize,
    /// `q`: most request frames in flight per connection.
    pub queue_depth: usize,
    /// An op not answered within this time fails its connection. Also bounds how long
    /// an op keeps being sent again to a region paused for migration (then it fails
    /// with `Status::Paused`).
    pub op_timeout: Duration,
    /// Longest a dial to a server may take (never longer than `op_timeout`).
    pub connect_timeout: Duration,
    /// A connection with ops unanswered this long makes the client ask the manager
    /// for the tables of the caches it has ops for; if the server owns none of their
    /// regions any more (it vanished and was replaced), its ops go to the new owners
    /// at once instead of waiting out `op_timeout` (writes to caches with backups are
    /// tagged: sent twice, applied once). 0 turns this off.
    pub suspect_after: Duration,
    /// Attempts for an op that keeps hitting `wrong server` after table refreshes.
    pub max_redirects: u32,
    /// A waiting thread polls its sockets without sleeping for this long before it
    /// blocks: a sleeping thread's wake-up costs more than a loopback round trip.
    pub spin: Duration,
}

impl ClientConfig {
    pub fn new(manager: impl Into<String>) -> Self {
        Self {
            manager: manager.into(),
            credential: None,
            tls: None,
            connections: 1,
            batch_size: 64,
            queue_depth: 4,
            op_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            suspect_after: Duration::from_secs(1),
            max_redirects: 4,
            spin: Duration::from_micros(50),
        }
    }

    /// See [`suspect_after`](Self::suspect_after) (the field).
    pub fn suspect_after(mut self, d: Duration) -> Self {
        self.suspect_after = d;
        self
    }

    /// Proves the cluster secret: every cache, every client request.
    pub fn secret(mut self, s: ClusterSecret) -> Self {
        self.credential = Some(Credential::Cluster(s));
        self
    }

    /// Proves a cache token: that cache only, read-only or read-write.
    pub fn token(mut self, t: CacheToken) -> Self {
        self.credential = Some(Credential::Token(t));
        self
    }

    pub fn tls(mut self, t: TlsConnector) -> Self {
        self.tls = Some(t);
        self
    }

    /// Fills what is unset from the environment; fails if no credential is found.
    pub(crate) fn resolve(mut self) -> Result<Self, ClientError> {
        if self.credential.is_none() {
            self.credential = credential_from_env()?;
        }
        if self.credential.is_none() {
            return Err(ClientError::NoCredential);
        }
        if self.tls.is_none()
            && let Some(ca) = std::env::var_os(ENV_TLS_CA)
        {
            let c = TlsConnector::from_ca_file(ca.as_ref())
                .map_err(|e| ClientError::InvalidArgument(format!("{ENV_TLS_CA}: {e}")))?;
            self.tls = Some(c);
        }
        Ok(self)
    }

    pub fn connections(mut self, c: usize) -> Self {
        self.connections = c.max(1);
        self
    }

    pub fn batch_size(mut self, b: usize) -> Self {
        self.batch_size = b.clamp(1, u16::MAX as usize);
        self
    }

    pub fn queue_depth(mut self, q: usize) -> Self {
        self.queue_depth = q.max(1);
        self
    }

    /// Busy-poll window before a waiting thread sleeps (`Duration::ZERO` never spins);
    /// the thread yields the core between polls.
    pub fn spin(mut self, d: Duration) -> Self {
        self.spin = d;
        self
    }

    pub fn op_timeout(mut self, t: Duration) -> Self {
        self.op_timeout = t;
        self
    }
}

fn credential_from_env() -> Result<Option<Credential>, ClientError> {
    let bad =
        |var: &str, e: &dyn std::fmt::Display| ClientError::InvalidArgument(format!("{var}: {e}"));
    if let Ok(t) = std::env::var(ENV_TOKEN) {
        let t: CacheToken = t.parse().map_err(|e| bad(ENV_TOKEN, &e))?;
        return Ok(Some(Credential::Token(t)));
    }
    if let Some(p) = std::env::var_os(ENV_SECRET_FILE) {
        let s = ClusterSecret::load(p.as_ref()).map_err(|e| bad(ENV_SECRET_FILE, &e))?;
        return Ok(Some(Credential::Cluster(s)));
    }
    if let Ok(h) = std::env::var(ENV_SECRET) {
        let s = ClusterSecret::from_hex(&h).map_err(|e| bad(ENV_SECRET, &e))?;
        return Ok(Some(Credential::Cluster(s)));
    }
    Ok(None)
}
