#[cfg(feature = "bench")]
pub mod bench;
#[cfg(feature = "bench")]
pub mod bench_resp;
#[cfg(feature = "bench")]
pub mod bench_slo;
#[cfg(feature = "bench")]
pub mod calibrate;
pub mod chaos;
pub mod create;
pub mod demo;
pub mod graph;
pub mod lab;
pub mod manager;
pub mod reclaim;
pub mod resp;
pub mod secret;
pub mod server;
#[cfg(feature = "bench")]
pub mod simulate;
pub mod status;
pub mod token;
pub mod up;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use farcache_client::{CacheToken, ClientConfig, ClusterSecret, TlsConnector};
use farcache_net::{GuardConfig, TlsAcceptor};

/// Writes the bound address (and the TLS address, if any) and a newline to `path`
/// (how test harnesses learn ephemeral ports).
pub fn write_addr_file(
    path: Option<&std::path::Path>,
    addr: &str,
    tls: Option<&str>,
) -> anyhow::Result<()> {
    if let Some(p) = path {
        let tmp = p.with_extension("tmp");
        let line = match tls {
            Some(t) => format!("{addr} {t}\n"),
            None => format!("{addr}\n"),
        };
        std::fs::write(&tmp, line)?;
        std::fs::rename(&tmp, p)?;
    }
    Ok(())
}

/// Tells how to reach a process that just started listening: the address file (for
/// test harnesses) and a line per address.
pub fn announce(
    what: &str,
    addr: std::net::SocketAddr,
    tls: Option<std::net::SocketAddr>,
    addr_file: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let tls = tls.map(|t| t.to_string());
    write_addr_file(addr_file, &addr.to_string(), tls.as_deref())?;
    outln!("farcache {what} listening on {addr}")?;
    if let Some(t) = tls {
        outln!("TLS clients: {t}")?;
    }
    Ok(())
}

/// How a client command proves who it is. Without flags, the client library reads
/// FARCACHE_TOKEN, FARCACHE_SECRET_FILE or FARCACHE_SECRET.
#[derive(clap::Args, Clone)]
pub struct Credentials {
    /// The cluster's secret key file.
    #[arg(long)]
    secret_file: Option<PathBuf>,
    /// A cache token instead of the cluster secret (reaches that cache only).
    #[arg(long)]
    token: Option<String>,
    /// Speak TLS, trusting the certificates in this PEM file (the manager address is
    /// then its TLS address).
    #[arg(long)]
    tls_ca: Option<PathBuf>,
}

impl Credentials {
    /// Refuses a cache token for an operation only the cluster's operator may do,
    /// before any call fails on it with a less direct message.
    pub fn require_secret(&self, what: &str) -> Result<()> {
        if self.token.is_some() {
            anyhow::bail!(
                "{what} needs the cluster secret (--secret-file); a cache token reaches \
                 its one cache only"
            );
        }
        Ok(())
    }

    pub fn config(&self, manager: &str) -> Result<ClientConfig> {
        let mut c = ClientConfig::new(manager);
        if let Some(p) = &self.secret_file {
            c = c.secret(ClusterSecret::load(p)?);
        }
        if let Some(t) = &self.token {
            c = c.token(t.parse::<CacheToken>()?);
        }
        if let Some(ca) = &self.tls_ca {
            c = c.tls(TlsConnector::from_ca_file(ca)?);
        }
        Ok(c)
    }
}

/// What every listening process (server, manager) shares: its key, TLS and limits.
#[derive(clap::Args, Clone)]
pub struct Listening {
    /// The cluster's secret key file (`farcache secret --out PATH` makes one). Every
    /// connection must prove it holds this key or a cache token derived from it.
    #[arg(long)]
    secret_file: PathBuf,
    /// Also serve clients over TLS on this address (needs --tls-cert and --tls-key).
    #[arg(long)]
    tls_listen: Option<std::net::SocketAddr>,
    /// PEM certificate chain for TLS.
    #[arg(long)]
    tls_cert: Option<PathBuf>,
    /// PEM private key for TLS.
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// Most open connections.
    #[arg(long, default_value_t = GuardConfig::default().max_connections)]
    max_connections: usize,
    /// Most connections that have not authenticated; a new one evicts the oldest.
    #[arg(long, default_value_t = GuardConfig::default().max_unauthenticated)]
    max_unauthenticated: usize,
    /// A connection must finish the handshake within this many ms.
    #[arg(long, default_value_t = GuardConfig::default().handshake_timeout.as_millis() as u64)]
    handshake_timeout_ms: u64,
    /// A frame that started arriving must make progress within this many ms.
    #[arg(long, default_value_t = GuardConfig::default().frame_timeout.as_millis() as u64)]
    frame_timeout_ms: u64,
    /// A peer that does not read its replies for this many ms is cut off.
    #[arg(long, default_value_t = GuardConfig::default().write_stall_timeout.as_millis() as u64)]
    stall_timeout_ms: u64,
}

impl Listening {
    pub fn secret(&self) -> Result<ClusterSecret> {
        ClusterSecret::load(&self.secret_file).with_context(|| {
            format!(
                "create the cluster's key with `farcache secret --out {}` and give the same file to the manager, every server and trusted clients",
                self.secret_file.display()
            )
        })
    }

    pub fn tls(&self) -> Result<Option<(std::net::SocketAddr, TlsAcceptor)>> {
        match (self.tls_listen, &self.tls_cert, &self.tls_key) {
            (None, None, None) => Ok(None),
            (Some(at), Some(c), Some(k)) => Ok(Some((at, TlsAcceptor::from_pem_files(c, k)?))),
            _ => anyhow::bail!("TLS needs --tls-listen, --tls-cert and --tls-key together"),
        }
    }

    pub fn guard(&self) -> GuardConfig {
        GuardConfig {
            max_connections: self.max_connections.max(1),
            max_unauthenticated: self.max_unauthenticated.max(1),
            handshake_timeout: Duration::from_millis(self.handshake_timeout_ms.max(1)),
            frame_timeout: Duration::from_millis(self.frame_timeout_ms.max(1)),
            write_stall_timeout: Duration::from_millis(self.stall_timeout_ms.max(1)),
        }
    }
}
