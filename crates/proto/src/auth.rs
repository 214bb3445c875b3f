//! Who is talking: the cluster secret, per-cache tokens, and the proofs exchanged in the
//! handshake ([`crate::hello`]).
//!
//! - The **cluster secret** (16+ random bytes, hex in a key file) is held by the manager,
//!   every server and trusted clients. It is never sent: a peer proves it holds the
//!   key with an HMAC-SHA256 over the acceptor's fresh nonce and everything it claims.
//! - A **cache token** lets a client use one cache, read-write or read-only. Its key is
//!   `HMAC(secret, "farcache token v1" | cache | rights)`, so any holder of the cluster
//!   secret (the manager issues tokens, servers check them) derives it without storing
//!   tokens; a token for one cache proves nothing about another. Tokens are bound to
//!   the cache id, which is never reused: deleting a cache revokes its tokens.
//! - The acceptor answers with its own proof over the connector's nonce, so a client
//!   also knows it reached a real member of the cluster.
//!
//! Without TLS the session after the handshake is not encrypted or integrity-protected:
//! the handshake keeps strangers out, TLS keeps eavesdroppers out.

use std::fmt;
use std::path::Path;

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use thiserror::Error;

use crate::CacheId;
use crate::hello::{Challenge, Claim, Hello, HelloAck, MAX_IDENTITY, PROTOCOL_VERSION, Role};
pub use crate::hello::{NONCE_LEN, PROOF_LEN, Rights};

/// Shortest cluster secret accepted.
pub const SECRET_MIN_BYTES: usize = 16;
/// Bytes of a generated secret.
pub const SECRET_BYTES: usize = 32;

const TOKEN_LABEL: &[u8] = b"farcache token v1";
const HELLO_LABEL: &[u8] = b"farcache hello v2";
const ACK_LABEL: &[u8] = b"farcache ack v2";
const TOKEN_PREFIX: &str = "fct1";

type HmacSha256 = Hmac<Sha256>;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum AuthError {
    #[error("cluster secret {path}: {reason}")]
    SecretFile { path: String, reason: String },
    #[error("cluster secret: {0}")]
    BadSecret(String),
    #[error("cache token: {0}")]
    BadToken(String),
    /// The proof does not verify: a different secret or token, or a tampered Hello.
    #[error("authentication failed: the proof does not match (wrong cluster secret or token)")]
    BadProof,
    #[error("authentication failed: role {0:?} needs the cluster secret, not a cache token")]
    RoleNeedsSecret(Role),
    /// The acceptor's answer does not prove it holds the key.
    #[error(
        "the server could not prove it holds the cluster secret (wrong secret, or not a member of this cluster)"
    )]
    BadAck,
}

fn mac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut m = <HmacSha256 as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    for p in parts {
        m.update(p);
    }
    m
}

fn tag(key: &[u8], parts: &[&[u8]]) -> [u8; PROOF_LEN] {
    mac(key, parts).finalize().into_bytes().into()
}

fn verify(key: &[u8], parts: &[&[u8]], proof: &[u8]) -> bool {
    // Constant-time comparison inside `verify_slice`.
    mac(key, parts).verify_slice(proof).is_ok()
}

pub fn random_nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    rand::thread_rng().fill_bytes(&mut n);
    n
}

/// The key every member of a cluster holds.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(Vec<u8>);

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

impl ClusterSecret {
    /// A new random secret.
    pub fn generate() -> Self {
        let mut b = vec![0u8; SECRET_BYTES];
        rand::thread_rng().fill_bytes(&mut b);
        Self(b)
    }

    pub fn from_bytes(b: &[u8]) -> Result<Self, AuthError> {
        if b.len() < SECRET_MIN_BYTES {
            return Err(AuthError::BadSecret(format!(
                "{} bytes; at least {SECRET_MIN_BYTES} are needed",
                b.len()
            )));
        }
        Ok(Self(b.to_vec()))
    }

    /// Parses the hex form (surrounding whitespace ignored).
    pub fn from_hex(s: &str) -> Result<Self, AuthError> {
        let b = hex::decode(s.trim()).map_err(|e| AuthError::BadSecret(format!("not hex: {e}")))?;
        Self::from_bytes(&b)
    }

    pub fn to_hex(&self) -> String {
        hex::encode(&self.0)
    }

    /// Reads a key file written by [`ClusterSecret::create`] (hex text).
    pub fn load(path: &Path) -> Result<Self, AuthError> {
        let fail = |reason: String| AuthError::SecretFile {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        Self::from_hex(&text).map_err(|e| fail(e.to_string()))
    }

    /// Generates a secret and writes it to a new file readable only by its owner.
    /// Refuses to overwrite: replacing a cluster's secret locks every member out.
    pub fn create(path: &Path) -> Result<Self, AuthError> {
        use std::io::Write;
        let fail = |reason: String| AuthError::SecretFile {
            path: path.display().to_string(),
            reason,
        };
        let s = Self::generate();
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        let mut f = o.open(path).map_err(|e| fail(e.to_string()))?;
        writeln!(f, "{}", s.to_hex()).map_err(|e| fail(e.to_string()))?;
        Ok(s)
    }

    /// Loads `path`, creating it with a new secret first if it does not exist.
    pub fn load_or_create(path: &Path) -> Result<Self, AuthError> {
        if path.exists() {
            Self::load(path)
        } else {
            Self::create(path)
        }
    }

    /// The token for `cache` with `rights` (what the manager hands out).
    pub fn token(&self, cache: CacheId, rights: Rights) -> CacheToken {
        CacheToken {
            cache,
            rights,
            key: tag(
                &self.0,
                &[TOKEN_LABEL, &cache.to_le_bytes(), &[rights as u8]],
            ),
        }
    }

    fn key_for(&self, claim: Claim) -> KeyBytes {
        match claim {
            Claim::Cluster => KeyBytes(self.0.clone()),
            Claim::Token { cache, rights } => KeyBytes(self.token(cache, rights).key.to_vec()),
        }
    }
}

/// A client's right to one cache. Its text form is what users pass around:
/// `fct1_<cache id>_<ro|rw>_<64 hex digits>`.
#[derive(Clone, PartialEq, Eq)]
pub struct CacheToken {
    cache: CacheId,
    rights: Rights,
    key: [u8; PROOF_LEN],
}

impl fmt::Debug for CacheToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CacheToken({} {:?} ..)", self.cache, self.rights)
    }
}

impl fmt::Display for CacheToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{TOKEN_PREFIX}_{}_{}_{}",
            self.cache,
            self.rights.tag(),
            hex::encode(self.key)
        )
    }
}

impl std::str::FromStr for CacheToken {
    type Err = AuthError;

    fn from_str(s: &str) -> Result<Self, AuthError> {
        let bad = |why: &str| {
            AuthError::BadToken(format!(
                "{why} (expected {TOKEN_PREFIX}_<cache>_<ro|rw>_<hex>)"
            ))
        };
        let mut it = s.trim().split('_');
        if it.next() != Some(TOKEN_PREFIX) {
            return Err(bad("unknown prefix"));
        }
        let cache = it
            .next()
            .and_then(|c| c.parse::<CacheId>().ok())
            .ok_or_else(|| bad("bad cache id"))?;
        let rights = match it.next() {
            Some("ro") => Rights::ReadOnly,
            Some("rw") => Rights::ReadWrite,
            _ => return Err(bad("rights must be ro or rw")),
        };
        let key = it
            .next()
            .and_then(|k| hex::decode(k).ok())
            .and_then(|k| <[u8; PROOF_LEN]>::try_from(k).ok())
            .ok_or_else(|| bad("bad key"))?;
        if it.next().is_some() {
            return Err(bad("trailing fields"));
        }
        Ok(Self { cache, rights, key })
    }
}

impl CacheToken {
    pub fn cache(&self) -> CacheId {
        self.cache
    }

    pub fn rights(&self) -> Rights {
        self.rights
    }
}

/// Key material, kept out of `Debug` output.
#[derive(Clone)]
struct KeyBytes(Vec<u8>);

/// What a connector proves it holds.
#[derive(Clone, Debug)]
pub enum Credential {
    Cluster(ClusterSecret),
    Token(CacheToken),
}

/// Everything a Hello's proof covers: the acceptor's challenge, the connector's nonce
/// and every field the Hello claims.
fn hello_transcript(challenge: &[u8; NONCE_LEN], h: &Hello) -> Vec<u8> {
    let (kind, cache, rights) = crate::hello::claim_fields(h.claim);
    let id = &h.identity.as_bytes()[..h.identity.len().min(MAX_IDENTITY)];
    let mut t = Vec::with_capacity(HELLO_LABEL.len() + 2 * NONCE_LEN + 20 + id.len());
    t.extend_from_slice(HELLO_LABEL);
    t.extend_from_slice(challenge);
    t.extend_from_slice(&h.nonce);
    t.extend_from_slice(&h.version.to_le_bytes());
    t.push(h.role as u8);
    t.push(kind);
    t.extend_from_slice(&cache.to_le_bytes());
    t.push(rights);
    t.extend_from_slice(&h.client_id.to_le_bytes());
    t.push(id.len() as u8);
    t.extend_from_slice(id);
    t
}

/// What the acceptor's proof covers: both nonces and what the ack announces.
fn ack_transcript(
    hello_nonce: &[u8; NONCE_LEN],
    challenge: &[u8; NONCE_LEN],
    server_id: u32,
    max_frame: u32,
) -> Vec<u8> {
    let mut t = Vec::with_capacity(ACK_LABEL.len() + 2 * NONCE_LEN + 8);
    t.extend_from_slice(ACK_LABEL);
    t.extend_from_slice(hello_nonce);
    t.extend_from_slice(challenge);
    t.extend_from_slice(&server_id.to_le_bytes());
    t.extend_from_slice(&max_frame.to_le_bytes());
    t
}

impl Credential {
    pub fn claim(&self) -> Claim {
        match self {
            Self::Cluster(_) => Claim::Cluster,
            Self::Token(t) => Claim::Token {
                cache: t.cache,
                rights: t.rights,
            },
        }
    }

    fn key(&self) -> &[u8] {
        match self {
            Self::Cluster(s) => &s.0,
            Self::Token(t) => &t.key,
        }
    }

    /// The Hello answering `challenge`, with a fresh nonce and its proof.
    pub fn hello(
        &self,
        role: Role,
        client_id: u64,
        identity: &str,
        challenge: &Challenge,
    ) -> Hello {
        let mut identity = identity.to_owned();
        if identity.len() > MAX_IDENTITY {
            let mut cut = MAX_IDENTITY;
            while !identity.is_char_boundary(cut) {
                cut -= 1;
            }
            identity.truncate(cut);
        }
        let mut h = Hello {
            version: PROTOCOL_VERSION,
            role,
            claim: self.claim(),
            client_id,
            nonce: random_nonce(),
            identity,
            proof: [0; PROOF_LEN],
        };
        h.proof = tag(self.key(), &[&hello_transcript(&challenge.nonce, &h)]);
        h
    }

    /// Checks that the acceptor's answer proves it holds the same key.
    pub fn check_ack(
        &self,
        hello: &Hello,
        challenge: &Challenge,
        ack: &HelloAck,
    ) -> Result<(), AuthError> {
        let t = ack_transcript(&hello.nonce, &challenge.nonce, ack.server_id, ack.max_frame);
        if verify(self.key(), &[&t], &ack.proof) {
            Ok(())
        } else {
            Err(AuthError::BadAck)
        }
    }
}

/// What a verified peer may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Holds the cluster secret: every cache, every role-appropriate request.
    Cluster,
    /// Holds a token for one cache.
    Cache { cache: CacheId, rights: Rights },
}

impl Access {
    #[inline]
    pub fn may_read(&self, cache: CacheId) -> bool {
        match *self {
            Self::Cluster => true,
            Self::Cache { cache: c, .. } => c == cache,
        }
    }

    #[inline]
    pub fn may_write(&self, cache: CacheId) -> bool {
        match *self {
            Self::Cluster => true,
            Self::Cache { cache: c, rights } => c == cache && rights == Rights::ReadWrite,
        }
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster)
    }
}

/// A peer whose Hello verified.
#[derive(Clone)]
pub struct Verified {
    pub role: Role,
    pub access: Access,
    /// A server peer's advertised data address (what its Hello claimed, now proven to
    /// come from a holder of the cluster secret).
    pub identity: String,
    pub client_id: u64,
    key: KeyBytes,
    hello_nonce: [u8; NONCE_LEN],
}

impl fmt::Debug for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verified")
            .field("role", &self.role)
            .field("access", &self.access)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// The acceptor's side: checks Hellos against the cluster secret.
#[derive(Clone, Debug)]
pub struct Authority {
    secret: ClusterSecret,
}

impl Authority {
    pub fn new(secret: ClusterSecret) -> Self {
        Self { secret }
    }

    pub fn secret(&self) -> &ClusterSecret {
        &self.secret
    }

    /// A fresh challenge for a new connection.
    pub fn challenge(&self) -> Challenge {
        Challenge::new(random_nonce())
    }

    /// Verifies `hello` against the `challenge` this side sent.
    pub fn verify(&self, challenge: &Challenge, hello: &Hello) -> Result<Verified, AuthError> {
        if hello.role != Role::Client && hello.claim != Claim::Cluster {
            return Err(AuthError::RoleNeedsSecret(hello.role));
        }
        let key = self.secret.key_for(hello.claim);
        let t = hello_transcript(&challenge.nonce, hello);
        if !verify(&key.0, &[&t], &hello.proof) {
            return Err(AuthError::BadProof);
        }
        let access = match hello.claim {
            Claim::Cluster => Access::Cluster,
            Claim::Token { cache, rights } => Access::Cache { cache, rights },
        };
        Ok(Verified {
            role: hello.role,
            access,
            identity: hello.identity.clone(),
            client_id: hello.client_id,
            key,
            hello_nonce: hello.nonce,
        })
    }

    /// The answer to a verified Hello, proving this side holds the key too.
    pub fn ack(
        &self,
        peer: &Verified,
        challenge: &Challenge,
        server_id: u32,
        max_frame: u32,
    ) -> HelloAck {
        let t = ack_transcript(&peer.hello_nonce, &challenge.nonce, server_id, max_frame);
        let proof = tag(&peer.key.0, &[&t]);
        HelloAck {
            version: PROTOCOL_VERSION,
            server_id,
            max_frame,
            proof,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(auth: &Authority, cred: &Credential, role: Role) -> Result<Verified, AuthError> {
        let ch = auth.challenge();
        let h = cred.hello(role, 42, "127.0.0.1:1", &ch);
        let h = Hello::decode(&h.encode()).expect("decodes");
        let v = auth.verify(&ch, &h)?;
        let ack = auth.ack(&v, &ch, 7, 1 << 20);
        cred.check_ack(&h, &ch, &HelloAck::decode(&ack.encode()).expect("ack"))?;
        Ok(v)
    }

    #[test]
    fn secrets_and_tokens_prove_what_they_hold() {
        let s = ClusterSecret::generate();
        let auth = Authority::new(s.clone());
        let v = exchange(&auth, &Credential::Cluster(s.clone()), Role::Manager).unwrap();
        assert_eq!(v.access, Access::Cluster);
        assert_eq!(v.identity, "127.0.0.1:1");

        let t = s.token(5, Rights::ReadOnly);
        let parsed: CacheToken = t.to_string().parse().unwrap();
        assert_eq!(parsed, t);
        let v = exchange(&auth, &Credential::Token(parsed), Role::Client).unwrap();
        assert_eq!(
            v.access,
            Access::Cache {
                cache: 5,
                rights: Rights::ReadOnly
            }
        );
        assert!(v.access.may_read(5) && !v.access.may_write(5) && !v.access.may_read(6));
        assert_eq!(
            exchange(&auth, &Credential::Token(t.clone()), Role::Server).unwrap_err(),
            AuthError::RoleNeedsSecret(Role::Server)
        );

        // Another cluster's secret, or a token claiming rights it was not issued for.
        let other = Credential::Cluster(ClusterSecret::generate());
        assert_eq!(
            exchange(&auth, &other, Role::Client).unwrap_err(),
            AuthError::BadProof
        );
        let forged: CacheToken = t.to_string().replace("_ro_", "_rw_").parse().unwrap();
        assert_eq!(
            exchange(&auth, &Credential::Token(forged), Role::Client).unwrap_err(),
            AuthError::BadProof
        );
        let moved: CacheToken = t.to_string().replacen("_5_", "_6_", 1).parse().unwrap();
        assert!(exchange(&auth, &Credential::Token(moved), Role::Client).is_err());
    }

    #[test]
    fn tampering_and_replay_fail() {
        let s = ClusterSecret::generate();
        let auth = Authority::new(s.clone());
        let cred = Credential::Cluster(s);
        let ch = auth.challenge();
        let h = cred.hello(Role::Client, 1, "", &ch);
        // A different role or identity than was signed.
        let mut h2 = h.clone();
        h2.role = Role::Manager;
        assert_eq!(auth.verify(&ch, &h2).unwrap_err(), AuthError::BadProof);
        let mut h3 = h.clone();
        h3.identity = "evil:1".into();
        assert!(auth.verify(&ch, &h3).is_err());
        // The same Hello against a new challenge (a replay).
        assert!(auth.verify(&auth.challenge(), &h).is_err());
        // An acceptor with another key cannot produce a valid ack.
        let v = auth.verify(&ch, &h).unwrap();
        let mut ack = auth.ack(&v, &ch, 1, 1);
        assert!(cred.check_ack(&h, &ch, &ack).is_ok());
        ack.server_id = 2;
        assert_eq!(cred.check_ack(&h, &ch, &ack), Err(AuthError::BadAck));
        let imposter = Authority::new(ClusterSecret::generate());
        let forged = Credential::Cluster(imposter.secret().clone());
        let fh = forged.hello(Role::Client, 1, "", &ch);
        let fv = imposter.verify(&ch, &fh).unwrap();
        let fake_ack = imposter.ack(&fv, &ch, 1, 1);
        assert_eq!(cred.check_ack(&h, &ch, &fake_ack), Err(AuthError::BadAck));
    }

    #[test]
    fn secret_files_and_token_text() {
        let dir = std::env::temp_dir().join(format!("fc-secret-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let s = ClusterSecret::create(&dir).unwrap();
        assert_eq!(ClusterSecret::load(&dir).unwrap(), s);
        assert!(ClusterSecret::create(&dir).is_err(), "never overwrites");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "owner-only");
        }
        let _ = std::fs::remove_file(&dir);
        assert!(ClusterSecret::from_hex("abcd").is_err(), "too short");
        assert!(ClusterSecret::from_hex("zz").is_err());
        for bad in [
            "",
            "fct1",
            "fct1_x_ro_00",
            "fct2_1_ro_00",
            "fct1_1_rx_00",
            "fct1_1_ro_0",
        ] {
            assert!(bad.parse::<CacheToken>().is_err(), "{bad}");
        }
    }
}
