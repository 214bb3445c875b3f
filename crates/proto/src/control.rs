//! Control-plane messages (JSON in `Control` / `ControlReply` frames).
//!
//! Low rate, so readability wins over compactness. The same connection type carries
//! client → manager (catalogue), server → manager (registration, heartbeats) and
//! manager → server (place and free regions).

use serde::{Deserialize, Serialize};

use crate::{CacheId, DecodeError, ServerId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PriceClass {
    Spot,
    OnDemand,
}

impl std::str::FromStr for PriceClass {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "spot" => Ok(Self::Spot),
            "on-demand" | "ondemand" => Ok(Self::OnDemand),
            other => Err(format!(
                "price class must be 'spot' or 'on-demand', not '{other}'"
            )),
        }
    }
}

impl std::fmt::Display for PriceClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Spot => "spot",
            Self::OnDemand => "on-demand",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerState {
    /// Heartbeats arrive on time.
    Alive,
    /// Known from the store but not heard from since the manager started.
    Unknown,
    /// Missed heartbeats past the timeout.
    Dead,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    pub id: ServerId,
    /// Address clients and peers connect to for data.
    pub addr: String,
    pub memory: u64,
    /// Bytes promised to placed regions.
    pub used: u64,
    pub cores: u32,
    pub price_class: PriceClass,
    pub price_per_gib_hour: f64,
    pub state: ServerState,
}

/// A cache and its region table: region `i` covers `[i*region_size, (i+1)*region_size)`
/// and lives on server `regions[i]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheInfo {
    pub id: CacheId,
    pub name: String,
    pub capacity: u64,
    pub region_size: u64,
    /// Grows on every change of the region table.
    pub epoch: u64,
    pub regions: Vec<ServerId>,
    /// The servers named in `regions` (and only those).
    pub servers: Vec<ServerInfo>,
}

/// `(addr / region_size, addr % region_size)`: the region holding `addr` and the offset
/// in it. Region sizes are usually powers of two, where a shift and a mask replace the
/// division every op on the data path would otherwise pay (twice on a server running a
/// procedure). `region_size` must not be 0.
#[inline(always)]
pub fn region_split(addr: u64, region_size: u64) -> (u64, u64) {
    if region_size.is_power_of_two() {
        (
            addr >> region_size.trailing_zeros(),
            addr & (region_size - 1),
        )
    } else {
        (addr / region_size, addr % region_size)
    }
}

impl CacheInfo {
    #[inline]
    pub fn region_of(&self, addr: u64) -> usize {
        region_split(addr, self.region_size).0 as usize
    }

    pub fn server(&self, id: ServerId) -> Option<&ServerInfo> {
        self.servers.iter().find(|s| s.id == id)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterStatus {
    pub servers: Vec<ServerInfo>,
    pub caches: Vec<CacheInfo>,
}

/// Counters a server exposes (also served as text by `--metrics-listen`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerStats {
    pub server_id: ServerId,
    pub memory: u64,
    pub used: u64,
    pub regions: u64,
    pub connections: u64,
    /// Per op name: (ops, bytes, errors).
    pub ops: Vec<OpStats>,
    pub protocol_errors: u64,
    /// Server-to-server traffic for stored procedures.
    #[serde(default)]
    pub peer: PeerStats,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PeerStats {
    /// Frames and messages sent to other servers.
    pub frames_sent: u64,
    pub msgs_sent: u64,
    /// Invocations shipped to another server (FFlow).
    pub forwards: u64,
    /// Byte ranges pulled from another server (DFlow).
    pub fetches: u64,
    /// Invocations that ended on this server for a caller elsewhere.
    pub results: u64,
    /// Hand-offs given up: unreachable peer or no result before the deadline.
    pub failures: u64,
    /// Invocations put on a worker's run queue (hand-offs received, pulls completed).
    #[serde(default)]
    pub queued: u64,
    /// Queued invocations taken over by another, idle worker of this server.
    #[serde(default)]
    pub stolen: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OpStats {
    pub op: String,
    pub count: u64,
    pub bytes: u64,
    pub errors: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlRequest {
    // server -> manager
    RegisterServer {
        /// Set when a restarted server (or a server after a manager restart) rejoins.
        server_id: Option<ServerId>,
        addr: String,
        memory: u64,
        cores: u32,
        price_class: PriceClass,
        price_per_gib_hour: f64,
    },
    Heartbeat {
        server_id: ServerId,
        used: u64,
    },
    // client -> manager
    CreateCache {
        name: String,
        capacity: u64,
        /// Defaults to the manager's `--region-size`.
        region_size: Option<u64>,
    },
    OpenCache {
        name: String,
    },
    ReshapeCache {
        name: String,
        capacity: u64,
    },
    DeleteCache {
        name: String,
    },
    /// Loads a stored procedure (WebAssembly, binary or text) on every server of a cache,
    /// now and whenever the cache grows onto another server.
    RegisterProc {
        cache: String,
        proc_name: String,
        code: Vec<u8>,
    },
    Status,
    // manager -> server
    AllocRegion {
        cache: CacheId,
        region: u32,
        region_size: u64,
        capacity: u64,
    },
    FreeRegion {
        cache: CacheId,
        region: u32,
        /// Where the region went, so stale clients can be redirected.
        moved_to: Option<String>,
    },
    DropCache {
        cache: CacheId,
    },
    /// Compile and keep a procedure for one cache.
    LoadProc {
        cache: CacheId,
        proc_name: String,
        code: Vec<u8>,
    },
    /// The cache's whole region table, so a server can hand procedures and data
    /// requests to the owner of an address (FFlow / DFlow) without the client.
    SetRoutes {
        cache: CacheId,
        epoch: u64,
        /// `owners[i]` is the data address of the server holding region `i`.
        owners: Vec<String>,
    },
    // anyone -> server
    ServerStats,
}

/// Stable error codes for control replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlErrorCode {
    NotFound,
    AlreadyExists,
    InsufficientMemory,
    InvalidArgument,
    UnknownServer,
    Unavailable,
    Internal,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlResponse {
    Ok,
    Registered {
        server_id: ServerId,
        heartbeat_ms: u64,
    },
    Cache(CacheInfo),
    Status(ClusterStatus),
    Stats(ServerStats),
    Error {
        code: ControlErrorCode,
        message: String,
    },
}

impl ControlRequest {
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn from_json(b: &[u8]) -> Result<Self, DecodeError> {
        serde_json::from_slice(b).map_err(|e| DecodeError::BadControl(e.to_string()))
    }
}

impl ControlResponse {
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn from_json(b: &[u8]) -> Result<Self, DecodeError> {
        serde_json::from_slice(b).map_err(|e| DecodeError::BadControl(e.to_string()))
    }

    pub fn error(code: ControlErrorCode, message: impl Into<String>) -> Self {
        Self::Error {
            code,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_json_roundtrip() {
        let r = ControlRequest::CreateCache {
            name: "a".into(),
            capacity: 10,
            region_size: None,
        };
        assert_eq!(ControlRequest::from_json(&r.to_json()).unwrap(), r);
        assert!(ControlRequest::from_json(b"{\"type\":\"nope\"}").is_err());
        let e = ControlResponse::error(ControlErrorCode::NotFound, "x");
        assert_eq!(ControlResponse::from_json(&e.to_json()).unwrap(), e);
    }

    #[test]
    fn region_split_matches_division() {
        let sizes = [4096u64, 1 << 20, 1 << 30, 12288, 3 * (1 << 20), 4096 * 7];
        let addrs = [0u64, 1, 4095, 4096, 12287, 1 << 20, (1 << 40) + 5, u64::MAX];
        for &rs in &sizes {
            for &a in &addrs {
                assert_eq!(
                    region_split(a, rs),
                    (a / rs, a % rs),
                    "{a} in regions of {rs}"
                );
            }
        }
    }
}
