//! TLS settings (rustls with the ring provider) for connections from clients, and
//! self-signed certificates for local clusters.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::ring::default_provider;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::NetError;

fn tls(e: impl std::fmt::Display) -> NetError {
    NetError::Tls(e.to_string())
}

fn file_err(path: &Path, e: impl std::fmt::Display) -> NetError {
    NetError::File {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// The server side: a certificate chain and its key.
#[derive(Clone)]
pub struct TlsAcceptor {
    config: Arc<ServerConfig>,
}

impl std::fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsAcceptor")
    }
}

impl TlsAcceptor {
    /// Loads a PEM certificate chain and a PEM private key.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, NetError> {
        let certs = CertificateDer::pem_file_iter(cert)
            .map_err(|e| file_err(cert, e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| file_err(cert, e))?;
        if certs.is_empty() {
            return Err(file_err(cert, "no certificate in the file"));
        }
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file_err(key, e))?;
        Self::new(certs, key)
    }

    pub fn new(
        certs: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<Self, NetError> {
        let config = ServerConfig::builder_with_provider(Arc::new(default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(tls)?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(tls)?;
        Ok(Self {
            config: Arc::new(config),
        })
    }

    pub fn session(&self) -> Result<rustls::ServerConnection, NetError> {
        rustls::ServerConnection::new(self.config.clone()).map_err(tls)
    }
}

/// The client side: the certificates it trusts.
#[derive(Clone)]
pub struct TlsConnector {
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsConnector")
    }
}

impl TlsConnector {
    /// Trusts the certificates in a PEM file (a CA, or the cluster's self-signed one).
    pub fn from_ca_file(path: &Path) -> Result<Self, NetError> {
        let pem = std::fs::read(path).map_err(|e| file_err(path, e))?;
        Self::from_ca_pem(&pem).map_err(|e| file_err(path, e))
    }

    pub fn from_ca_pem(pem: &[u8]) -> Result<Self, NetError> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem) {
            roots.add(cert.map_err(tls)?).map_err(tls)?;
        }
        if roots.is_empty() {
            return Err(NetError::Tls("no certificate to trust".into()));
        }
        let config = ClientConfig::builder_with_provider(Arc::new(default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(tls)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self {
            config: Arc::new(config),
        })
    }

    /// A session to `addr` (`host:port`); the certificate must name the host.
    pub fn session(&self, addr: &str) -> Result<rustls::ClientConnection, NetError> {
        let host = host_of(addr);
        let name = ServerName::try_from(host.to_owned())
            .map_err(|e| NetError::Tls(format!("'{host}' is not a TLS server name: {e}")))?;
        rustls::ClientConnection::new(self.config.clone(), name).map_err(tls)
    }
}

/// The host part of `host:port`, `[v6]:port` or a bare host.
fn host_of(addr: &str) -> &str {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match addr.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.parse::<u16>().is_ok() => h,
        _ => addr,
    }
}

/// A self-signed certificate for `names` (host names or IP addresses): what
/// `farcache up --tls` and tests use. Returns (certificate PEM, private key PEM).
pub fn self_signed(names: &[String]) -> Result<(String, String), NetError> {
    let ck = rcgen::generate_simple_self_signed(names.to_vec()).map_err(tls)?;
    Ok((ck.cert.pem(), ck.signing_key.serialize_pem()))
}

/// Writes a self-signed certificate and key as `cert.pem` / `key.pem` in `dir` (the
/// key readable by its owner only) unless both exist; returns their paths.
pub fn ensure_self_signed(dir: &Path, names: &[String]) -> Result<(PathBuf, PathBuf), NetError> {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    let (cert_pem, key_pem) = self_signed(names)?;
    std::fs::write(&cert, cert_pem).map_err(|e| file_err(&cert, e))?;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let mut f = o.open(&key).map_err(|e| file_err(&key, e))?;
    std::io::Write::write_all(&mut f, key_pem.as_bytes()).map_err(|e| file_err(&key, e))?;
    Ok((cert, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_split_from_ports() {
        assert_eq!(host_of("127.0.0.1:7400"), "127.0.0.1");
        assert_eq!(host_of("[::1]:7400"), "::1");
        assert_eq!(host_of("db.example:1"), "db.example");
        assert_eq!(host_of("db.example"), "db.example");
    }

    #[test]
    fn self_signed_files_load() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let (c, k) = ensure_self_signed(dir.path(), &names).unwrap();
        TlsAcceptor::from_pem_files(&c, &k).unwrap();
        let conn = TlsConnector::from_ca_file(&c).unwrap();
        conn.session("127.0.0.1:7400").unwrap();
        assert!(TlsConnector::from_ca_pem(b"nothing").is_err());
        assert!(
            TlsAcceptor::from_pem_files(&k, &k).is_err(),
            "a key is not a cert"
        );
    }
}
