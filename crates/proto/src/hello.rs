//! Versioned, authenticated handshake: the first three frames on every connection to a
//! server or to the manager.
//!
//! ```text
//! acceptor                         connector
//!    | -- Challenge(server nonce) --> |
//!    | <-- Hello(role, claim, proof) --|   proof = HMAC(key, transcript)
//!    | -- HelloAck(proof) ----------> |   the acceptor knows the key too
//! ```
//!
//! `Challenge` payload: magic `FCAC`, version u16, reserved u16, nonce [32].
//! `Hello` payload: magic `FCAC`, version u16, role u8, claim u8, client id u64,
//! nonce [32], cache u32, rights u8, identity (u8 len), proof [32].
//! `HelloAck` payload: version u16, reserved u16, server id u32, max frame u32, proof [32].
//!
//! What the proofs are computed over and which key signs them is in the `auth` module.

use serde::{Deserialize, Serialize};

use crate::wire::Cursor;
use crate::{CacheId, DecodeError, ServerId};

pub const NONCE_LEN: usize = 32;
pub const PROOF_LEN: usize = 32;

/// What a cache token allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[repr(u8)]
pub enum Rights {
    /// Reads and procedures (procedures only read).
    ReadOnly = 1,
    /// Also writes, atomics, procedure registration, reshape and delete of the cache.
    ReadWrite = 2,
}

impl Rights {
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::ReadOnly),
            2 => Some(Self::ReadWrite),
            _ => None,
        }
    }

    pub(crate) fn tag(self) -> &'static str {
        match self {
            Self::ReadOnly => "ro",
            Self::ReadWrite => "rw",
        }
    }
}

/// Version 2 added the challenge–response, 3 EXECUTE_RUN, 4 DONE_RUN replies, 5 TAG
/// ops (exactly once) and the `NOT_SERVING` status (leases), 6 ANSWER ops (a tagged
/// writing EXECUTE's reply, server to server); a peer speaking another
/// version is refused at the handshake, with both versions named, rather than meeting
/// ops or statuses it cannot decode.
pub const PROTOCOL_VERSION: u16 = 6;
const MAGIC: &[u8; 4] = b"FCAC";
/// Longest identity a Hello may carry (a server's advertised `host:port`).
pub const MAX_IDENTITY: usize = 255;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Role {
    Client = 1,
    /// Another cache server (sessions between servers, for stored procedures).
    Server = 2,
    Manager = 3,
}

impl Role {
    fn from_u8(v: u8) -> Result<Self, DecodeError> {
        Ok(match v {
            1 => Self::Client,
            2 => Self::Server,
            3 => Self::Manager,
            r => return Err(DecodeError::BadHello(format!("unknown role {r}"))),
        })
    }
}

/// What a Hello claims to hold: the cluster secret, or a token for one cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    Cluster,
    Token { cache: CacheId, rights: Rights },
}

/// The acceptor's first frame: a fresh nonce the connector must sign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Challenge {
    pub version: u16,
    pub nonce: [u8; NONCE_LEN],
}

impl Challenge {
    pub const LEN: usize = 8 + NONCE_LEN;

    pub fn new(nonce: [u8; NONCE_LEN]) -> Self {
        Self {
            version: PROTOCOL_VERSION,
            nonce,
        }
    }

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(MAGIC);
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[8..].copy_from_slice(&self.nonce);
        b
    }

    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        if payload.len() != Self::LEN {
            return Err(DecodeError::BadHello(format!(
                "challenge of {} bytes, expected {}",
                payload.len(),
                Self::LEN
            )));
        }
        let mut c = Cursor::new(payload);
        if c.bytes(4, "magic")? != MAGIC {
            return Err(DecodeError::BadHello(
                "bad magic (not a farcache server?)".into(),
            ));
        }
        let version = c.u16("version")?;
        let _ = c.u16("reserved")?;
        Ok(Self {
            version,
            nonce: array(c.bytes(NONCE_LEN, "nonce")?),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    pub role: Role,
    pub claim: Claim,
    pub client_id: u64,
    /// The connector's nonce, which the acceptor's proof covers.
    pub nonce: [u8; NONCE_LEN],
    /// A server's advertised data address (`Role::Server`); empty otherwise.
    pub identity: String,
    pub proof: [u8; PROOF_LEN],
}

impl Hello {
    /// Bytes before the identity.
    const FIXED: usize = 4 + 2 + 1 + 1 + 8 + NONCE_LEN + 4 + 1;

    pub fn encode(&self) -> Vec<u8> {
        let id = &self.identity.as_bytes()[..self.identity.len().min(MAX_IDENTITY)];
        let mut b = Vec::with_capacity(Self::FIXED + 1 + id.len() + PROOF_LEN);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&self.version.to_le_bytes());
        b.push(self.role as u8);
        let (kind, cache, rights) = claim_fields(self.claim);
        b.push(kind);
        b.extend_from_slice(&self.client_id.to_le_bytes());
        b.extend_from_slice(&self.nonce);
        b.extend_from_slice(&cache.to_le_bytes());
        b.push(rights);
        b.push(id.len() as u8);
        b.extend_from_slice(id);
        b.extend_from_slice(&self.proof);
        b
    }

    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(payload);
        if c.bytes(4, "magic")? != MAGIC {
            return Err(DecodeError::BadHello(
                "bad magic (not a farcache client?)".into(),
            ));
        }
        let version = c.u16("version")?;
        if version != PROTOCOL_VERSION {
            // The rest of the layout depends on the version: stop here.
            return Err(DecodeError::BadHello(format!(
                "peer speaks protocol v{version}, this side speaks v{PROTOCOL_VERSION}"
            )));
        }
        let role = Role::from_u8(c.u8("role")?)?;
        let kind = c.u8("claim")?;
        let client_id = c.u64("client id")?;
        let nonce = array(c.bytes(NONCE_LEN, "nonce")?);
        let cache = c.u32("cache")?;
        let rights = c.u8("rights")?;
        let claim = match kind {
            // Canonical: a cluster claim carries no cache fields.
            0 if cache == 0 && rights == 0 => Claim::Cluster,
            0 => {
                return Err(DecodeError::BadHello(
                    "a cluster-secret claim names a cache".into(),
                ));
            }
            1 => Claim::Token {
                cache,
                rights: Rights::from_u8(rights)
                    .ok_or_else(|| DecodeError::BadHello(format!("unknown rights {rights}")))?,
            },
            k => return Err(DecodeError::BadHello(format!("unknown claim {k}"))),
        };
        let n = c.u8("identity length")?;
        let identity = std::str::from_utf8(c.bytes(n.into(), "identity")?)
            .map_err(|_| DecodeError::Utf8("identity"))?
            .to_owned();
        let proof = array(c.bytes(PROOF_LEN, "proof")?);
        if c.remaining() != 0 {
            return Err(DecodeError::TrailingBytes(c.remaining()));
        }
        Ok(Self {
            version,
            role,
            claim,
            client_id,
            nonce,
            identity,
            proof,
        })
    }
}

/// (claim kind, cache, rights) as they appear on the wire and in the proof.
pub(crate) fn claim_fields(claim: Claim) -> (u8, CacheId, u8) {
    match claim {
        Claim::Cluster => (0, 0, 0),
        Claim::Token { cache, rights } => (1, cache, rights as u8),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloAck {
    pub version: u16,
    pub server_id: ServerId,
    pub max_frame: u32,
    /// The acceptor's proof that it holds the same key (see the `auth` module).
    pub proof: [u8; PROOF_LEN],
}

impl HelloAck {
    pub const LEN: usize = 12 + PROOF_LEN;

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..2].copy_from_slice(&self.version.to_le_bytes());
        b[4..8].copy_from_slice(&self.server_id.to_le_bytes());
        b[8..12].copy_from_slice(&self.max_frame.to_le_bytes());
        b[12..].copy_from_slice(&self.proof);
        b
    }

    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        if payload.len() != Self::LEN {
            return Err(DecodeError::BadHello(format!(
                "ack length {}",
                payload.len()
            )));
        }
        let mut c = Cursor::new(payload);
        let version = c.u16("version")?;
        let _ = c.u16("reserved")?;
        Ok(Self {
            version,
            server_id: c.u32("server id")?,
            max_frame: c.u32("max frame")?,
            proof: array(c.bytes(PROOF_LEN, "proof")?),
        })
    }
}

fn array<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_frames_roundtrip_and_reject() {
        let ch = Challenge::new([7; NONCE_LEN]);
        assert_eq!(Challenge::decode(&ch.encode()).unwrap(), ch);
        assert!(Challenge::decode(&ch.encode()[1..]).is_err());

        let h = Hello {
            version: PROTOCOL_VERSION,
            role: Role::Server,
            claim: Claim::Token {
                cache: 9,
                rights: Rights::ReadOnly,
            },
            client_id: 0xDEAD_BEEF,
            nonce: [3; NONCE_LEN],
            identity: "10.0.0.1:7401".into(),
            proof: [5; PROOF_LEN],
        };
        let enc = h.encode();
        assert_eq!(Hello::decode(&enc).unwrap(), h);
        for cut in 0..enc.len() {
            assert!(Hello::decode(&enc[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = enc.clone();
        extra.push(0);
        assert!(Hello::decode(&extra).is_err());
        let mut bad = enc.clone();
        bad[0] = b'X';
        assert!(Hello::decode(&bad).is_err());
        let mut v1 = enc;
        v1[4] = 1;
        let e = Hello::decode(&v1).unwrap_err().to_string();
        assert!(e.contains("v1"), "{e}");

        let a = HelloAck {
            version: PROTOCOL_VERSION,
            server_id: 3,
            max_frame: 1024,
            proof: [1; PROOF_LEN],
        };
        assert_eq!(HelloAck::decode(&a.encode()).unwrap(), a);
    }
}
