//! Manager settings.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use farcache_net::{GuardConfig, TlsAcceptor};
use farcache_proto::ClusterSecret;

use crate::error::ManagerError;

/// Default region size: large regions keep region tables (and manager work) small.
pub const DEFAULT_REGION_SIZE: u64 = 1 << 30;
/// Region sizes must be page multiples so servers can map regions directly.
pub const REGION_ALIGN: u64 = 4096;

#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// Control-plane listen address; port 0 picks a free port (see `ManagerHandle::addr`).
    pub listen: SocketAddr,
    /// Holds `manager.redb`, the persistent catalogue.
    pub data_dir: PathBuf,
    /// Region size for caches that don't ask for one.
    pub region_size: u64,
    /// How often servers should heartbeat (sent to them in `Registered`).
    pub heartbeat_interval: Duration,
    /// Silence after which an alive server is declared dead.
    pub heartbeat_timeout: Duration,
    /// The cluster's shared key: servers and clients prove they hold it (or a cache
    /// token derived from it); the manager uses it to reach servers and issue tokens.
    pub secret: ClusterSecret,
    /// Serve clients over TLS on this address too (with `tls`).
    pub tls_listen: Option<SocketAddr>,
    pub tls: Option<TlsAcceptor>,
    /// Connection caps and timeouts.
    pub guard: GuardConfig,
    /// The performance model and prices that answer caches created from an SLO.
    pub slo: crate::slo::SloSettings,
    /// Where the catalogue lives.
    pub catalogue: CatalogueBackend,
}

/// Where the catalogue lives: an embedded file (one manager) or etcd (several
/// managers, one leading).
#[derive(Debug, Clone, Default)]
pub enum CatalogueBackend {
    /// `manager.redb` in the data directory.
    #[default]
    Redb,
    Etcd(crate::store::etcd::EtcdSettings),
}

impl ManagerConfig {
    /// Defaults: 1 GiB regions, 500 ms heartbeats, 3 s timeout, no TLS.
    pub fn new(listen: SocketAddr, data_dir: impl Into<PathBuf>, secret: ClusterSecret) -> Self {
        Self {
            listen,
            data_dir: data_dir.into(),
            region_size: DEFAULT_REGION_SIZE,
            heartbeat_interval: Duration::from_millis(500),
            heartbeat_timeout: Duration::from_secs(3),
            secret,
            tls_listen: None,
            tls: None,
            guard: GuardConfig::default(),
            slo: crate::slo::SloSettings::default(),
            catalogue: CatalogueBackend::Redb,
        }
    }

    /// Rejects settings that would make placement or liveness meaningless.
    pub fn validate(&self) -> Result<(), ManagerError> {
        if self.region_size == 0 || !self.region_size.is_multiple_of(REGION_ALIGN) {
            return Err(ManagerError::Config(format!(
                "region size {} must be a positive multiple of {REGION_ALIGN}",
                self.region_size
            )));
        }
        if let CatalogueBackend::Etcd(e) = &self.catalogue {
            if e.endpoints.is_empty() {
                return Err(ManagerError::Config("no etcd endpoint given".into()));
            }
            if e.lease_ttl < Duration::from_secs(1) {
                return Err(ManagerError::Config(
                    "the etcd lease lasts at least a second (etcd counts whole seconds)".into(),
                ));
            }
        }
        if self.heartbeat_interval.is_zero() {
            return Err(ManagerError::Config(
                "heartbeat interval must be positive".into(),
            ));
        }
        if self.tls_listen.is_some() && self.tls.is_none() {
            return Err(ManagerError::Config(
                "a TLS listen address needs a certificate and key".into(),
            ));
        }
        if self.heartbeat_timeout <= self.heartbeat_interval {
            return Err(ManagerError::Config(format!(
                "heartbeat timeout {:?} must exceed the heartbeat interval {:?}",
                self.heartbeat_timeout, self.heartbeat_interval
            )));
        }
        // A server renews its lease once per interval: a shorter lease would lapse
        // between heartbeats.
        let lease = crate::lease::lease_for(self.heartbeat_timeout);
        if lease <= self.heartbeat_interval {
            return Err(ManagerError::Config(format!(
                "heartbeat timeout {:?} gives servers leases of {lease:?}, not longer than \
                 the heartbeat interval {:?}: make the timeout at least 1.25x the interval",
                self.heartbeat_timeout, self.heartbeat_interval
            )));
        }
        Ok(())
    }

    /// Location of the redb file inside `data_dir`.
    pub fn store_path(&self) -> PathBuf {
        self.data_dir.join("manager.redb")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_values_are_rejected() {
        let base = ManagerConfig::new(
            ([127, 0, 0, 1], 0).into(),
            "/tmp/x",
            ClusterSecret::generate(),
        );
        assert!(base.validate().is_ok());
        assert_eq!(base.store_path(), PathBuf::from("/tmp/x/manager.redb"));

        let mut c = base.clone();
        c.region_size = 4097;
        assert!(c.validate().is_err());
        let mut c = base.clone();
        c.heartbeat_timeout = c.heartbeat_interval;
        assert!(c.validate().is_err());
        let mut c = base;
        c.heartbeat_interval = Duration::ZERO;
        assert!(c.validate().is_err());
    }
}
