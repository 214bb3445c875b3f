//! Versioned handshake: the first frame on every data connection.
//!
//! `Hello` payload: magic `FCAC`, version u16, role u8, reserved u8, client id u64.
//! `HelloAck` payload: version u16, reserved u16, server id u32, max frame u32.

use crate::wire::Cursor;
use crate::{DecodeError, ServerId};

pub const PROTOCOL_VERSION: u16 = 1;
const MAGIC: &[u8; 4] = b"FCAC";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Role {
    Client = 1,
    /// Another cache server (sessions between servers, for stored procedures).
    Server = 2,
    Manager = 3,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    pub role: Role,
    pub client_id: u64,
}

impl Hello {
    pub const LEN: usize = 16;

    pub fn new(role: Role, client_id: u64) -> Self {
        Self {
            version: PROTOCOL_VERSION,
            role,
            client_id,
        }
    }

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(MAGIC);
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[6] = self.role as u8;
        b[8..16].copy_from_slice(&self.client_id.to_le_bytes());
        b
    }

    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        if payload.len() != Self::LEN {
            return Err(DecodeError::BadHello(format!(
                "length {} != {}",
                payload.len(),
                Self::LEN
            )));
        }
        let mut c = Cursor::new(payload);
        if c.bytes(4, "magic")? != MAGIC {
            return Err(DecodeError::BadHello(
                "bad magic (not a farcache client?)".into(),
            ));
        }
        let version = c.u16("version")?;
        let role = match c.u8("role")? {
            1 => Role::Client,
            2 => Role::Server,
            3 => Role::Manager,
            r => return Err(DecodeError::BadHello(format!("unknown role {r}"))),
        };
        let _reserved = c.u8("reserved")?;
        Ok(Self {
            version,
            role,
            client_id: c.u64("client id")?,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloAck {
    pub version: u16,
    pub server_id: ServerId,
    pub max_frame: u32,
}

impl HelloAck {
    pub const LEN: usize = 12;

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..2].copy_from_slice(&self.version.to_le_bytes());
        b[4..8].copy_from_slice(&self.server_id.to_le_bytes());
        b[8..12].copy_from_slice(&self.max_frame.to_le_bytes());
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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_roundtrip_and_rejects() {
        let h = Hello::new(Role::Client, 0xDEAD_BEEF);
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        let mut bad = h.encode();
        bad[0] = b'X';
        assert!(Hello::decode(&bad).is_err());
        assert!(Hello::decode(&bad[..3]).is_err());
        let a = HelloAck {
            version: 1,
            server_id: 3,
            max_frame: 1024,
        };
        assert_eq!(HelloAck::decode(&a.encode()).unwrap(), a);
    }
}
