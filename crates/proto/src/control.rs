//! Control-plane messages (JSON in `Control` / `ControlReply` frames).
//!
//! Low rate, so readability wins over compactness. The same connection type carries
//! client → manager (catalogue), server → manager (registration, heartbeats) and
//! manager → server (place and free regions). A frame's payload is `json_len u32`, the
//! JSON, then an attachment: the raw bytes of a procedure's code (JSON would carry
//! them as an array of numbers, four times their size), empty otherwise.

use serde::{Deserialize, Serialize};

use crate::auth::Rights;
pub use crate::elastic::{
    LostRegion, MigrationMode, MigrationPhase, MigrationRecord, MigrationReport, Promotion,
};
use crate::slo::{Slo, SloChoice};
use crate::wire::Cursor;
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
    /// Being reclaimed: takes no new regions while its regions move elsewhere.
    Leaving,
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
    /// Worker threads (0: not reported).
    #[serde(default)]
    pub threads: u32,
    pub price_class: PriceClass,
    pub price_per_gib_hour: f64,
    pub state: ServerState,
    /// Where clients reach this server over TLS, if it serves TLS.
    #[serde(default)]
    pub tls_addr: Option<String>,
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
    /// The servers named in `regions` or `backups`.
    pub servers: Vec<ServerInfo>,
    /// Copies kept of every region (1: no backups).
    #[serde(default = "one")]
    pub replicas: u32,
    /// `backups[i]`: the servers holding an up-to-date backup of region `i` (empty,
    /// or one list per region). Clients route to `regions` only.
    #[serde(default)]
    pub backups: Vec<Vec<ServerId>>,
    /// The file a read-only cache was loaded from (lost regions reload from it).
    #[serde(default)]
    pub from_file: Option<String>,
    /// Set for a cache created from an SLO: the transport chosen to meet it.
    #[serde(default)]
    pub slo: Option<SloChoice>,
}

fn one() -> u32 {
    1
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
    /// The latest finished migrations (oldest first, a bounded number).
    #[serde(default)]
    pub migrations: Vec<MigrationRecord>,
    /// Regions lost (oldest first, a bounded number; kept in the catalogue).
    #[serde(default)]
    pub lost: Vec<LostRegion>,
    /// Backups that took regions over from dead owners (oldest first, bounded).
    #[serde(default)]
    pub promotions: Vec<Promotion>,
}

/// When a server acknowledged clients' writes to one region while it held it: the
/// first and the last acknowledgement, in microseconds of the wall clock (for the
/// chaos tool's split-brain check: two servers' windows for one region must not
/// overlap). A region that leaves the server keeps its window in a bounded log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckWindow {
    pub cache: CacheId,
    pub region: u32,
    pub first_us: u64,
    pub last_us: u64,
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
    /// What the server did to protect itself from its peers.
    #[serde(default)]
    pub guard: GuardStats,
    /// Worker threads that panicked and were restarted.
    #[serde(default)]
    pub worker_panics: u64,
    /// When this server acknowledged writes to each region it holds or held.
    #[serde(default)]
    pub ack_windows: Vec<AckWindow>,
    /// Regions being copied away from this server, or waiting for their switch.
    #[serde(default)]
    pub migrations: u64,
    /// Bytes of held regions still lost (see `Status::DataLost`).
    #[serde(default)]
    pub lost_bytes: u64,
    #[serde(default)]
    pub replication: ReplicationStats,
    #[serde(default)]
    pub completions: CompletionStats,
}

/// Answers of tagged ops kept for clients' retries (see [`crate::op::Tag`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionStats {
    /// Records held now.
    pub records: u64,
    /// Ops sent again that were answered from their record instead of run twice.
    pub repeats: u64,
    /// Records dropped to bound a session's memory.
    pub evicted: u64,
    /// Writing EXECUTEs whose replies were too long to record (their retries
    /// after a failover run again).
    #[serde(default)]
    pub unrecorded: u64,
}

/// Writes this server (as a region's owner) applied on the region's backups.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicationStats {
    /// Frames and bytes of written ranges sent to backups.
    pub frames: u64,
    pub bytes: u64,
    /// Responses held until backups acknowledged their writes.
    pub held: u64,
    /// Links to backups that failed (writes wait until the link is back or the
    /// manager drops the backup).
    pub link_failures: u64,
    /// Frames sent and not yet acknowledged, now.
    pub unacked: u64,
}

/// A byte range of a file to load into a region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSlice {
    pub path: String,
    pub offset: u64,
    pub len: u64,
}

/// Connections refused, evicted or cut off, and handshakes that failed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GuardStats {
    /// Accepted and closed at once: the connection cap was reached.
    pub refused: u64,
    /// Unauthenticated connections closed to make room for new ones.
    pub evicted: u64,
    /// Handshakes that did not verify (wrong secret or token, bad Hello).
    pub auth_failures: u64,
    /// Closed for not finishing the handshake, or a frame, in time.
    pub timed_out: u64,
    /// Closed for not reading their replies.
    pub cut_off: u64,
    /// Requests refused because the peer's role or token does not allow them.
    pub forbidden: u64,
    /// Peer messages dropped because a session to another server was over its cap.
    pub peer_dropped: u64,
    /// Request batches refused (`NOT_SERVING`) because the server held no lease.
    #[serde(default)]
    pub unleased: u64,
    /// Times the manager fenced this server (declared dead): it dropped its regions.
    #[serde(default)]
    pub fenced: u64,
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
        /// Worker threads (`s` of the SLO model); 0 from servers that predate it.
        #[serde(default)]
        threads: u32,
        price_class: PriceClass,
        price_per_gib_hour: f64,
        /// Where clients reach this server over TLS, if it serves TLS.
        #[serde(default)]
        tls_addr: Option<String>,
    },
    /// Also says which regions the server holds (their count and [`region_digest`]),
    /// so the manager notices regions no cache owns.
    Heartbeat {
        server_id: ServerId,
        used: u64,
        #[serde(default)]
        regions: u64,
        #[serde(default)]
        digest: u64,
    },
    /// An owner's writes to `backup` (its data address) have waited `stalled_ms`
    /// for an acknowledgement: the manager drops that backup from the regions the
    /// owner owns (a backup the manager still sees alive, cut off from its owner
    /// only, would otherwise hold their writes until the link heals).
    BackupStalled {
        server_id: ServerId,
        backup: String,
        stalled_ms: u64,
    },
    // client -> manager
    CreateCache {
        name: String,
        capacity: u64,
        /// Defaults to the manager's `--region-size`.
        region_size: Option<u64>,
        /// Copies of every region, on distinct servers (0 or 1: no backups).
        #[serde(default)]
        replicas: u32,
        /// Load the cache from this file (on the servers' file system); the cache is
        /// read-only and regions lost with a server are reloaded from the file.
        #[serde(default)]
        from_file: Option<String>,
        /// Choose the transport (and servers) from the manager's performance model
        /// so that the cache meets this SLO at the least cost.
        #[serde(default)]
        slo: Option<Slo>,
    },
    /// Sets (or replaces) a cache's SLO: the manager searches its model again.
    SetSlo {
        name: String,
        slo: Slo,
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
    /// A token for the cache named `name` (cluster-secret holders only).
    IssueToken {
        name: String,
        rights: Rights,
    },
    /// Loads a stored procedure (WebAssembly, binary or text) on every server of a cache,
    /// now and whenever the cache grows onto another server.
    RegisterProc {
        cache: String,
        proc_name: String,
        /// Travels as the frame's attachment.
        #[serde(skip)]
        code: Vec<u8>,
    },
    Status,
    /// Server `server_id` will be taken back within `grace_ms`: move its regions away.
    /// From cluster-secret clients, or from the server itself (on SIGTERM).
    ReclaimServer {
        server_id: ServerId,
        grace_ms: u64,
        #[serde(default)]
        mode: MigrationMode,
    },
    /// Moves one region of cache `name` live to server `to` (or the best server with
    /// room), in `mode`; replies once the new owner serves it (cluster secret only).
    MoveRegion {
        name: String,
        region: u32,
        #[serde(default)]
        to: Option<ServerId>,
        #[serde(default)]
        mode: MigrationMode,
    },
    /// Acknowledges the loss of `[addr, addr+len)` of cache `name`: its bytes read as
    /// zeros from now on, no longer as `DATA_LOST`.
    ClearLost {
        name: String,
        addr: u64,
        len: u64,
    },
    // manager -> server
    /// Places a region. `epoch` is the region table's epoch that placed it: a region
    /// already held under an older epoch is stale (its free was lost) and is replaced
    /// by zeroed memory; the same epoch again is a retry and keeps the bytes.
    AllocRegion {
        cache: CacheId,
        region: u32,
        region_size: u64,
        capacity: u64,
        #[serde(default)]
        epoch: u64,
        /// The region's bytes were lost (no copy survived): reads fail with
        /// `DATA_LOST` until the range is overwritten or the loss acknowledged.
        #[serde(default)]
        lost: bool,
        /// The region is the target of a migration: only the source (a connection
        /// that proved the server role) may write it, and nothing reads it, until a
        /// region table names this server as its owner.
        #[serde(default)]
        incoming: bool,
        /// Fill the region from this file before serving it (read-only caches).
        #[serde(default)]
        load: Option<FileSlice>,
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
        /// Travels as the frame's attachment.
        #[serde(skip)]
        code: Vec<u8>,
    },
    /// The cache's whole region table, so a server can hand procedures and data
    /// requests to the owner of an address (FFlow / DFlow) without the client.
    SetRoutes {
        cache: CacheId,
        epoch: u64,
        /// `owners[i]` is the data address of the server holding region `i`.
        owners: Vec<String>,
        /// The cache's capacity in this table (0: unchanged).
        #[serde(default)]
        capacity: u64,
        /// `backups[i]`: data addresses of the backups of region `i`; the owner
        /// applies every write there before acknowledging it.
        #[serde(default)]
        backups: Vec<Vec<String>>,
    },
    /// The cache's capacity changed (reshape): serve bytes up to `capacity` in the
    /// regions held here, and zero what lies past it so a later grow shows zeros.
    ResizeCache {
        cache: CacheId,
        capacity: u64,
        epoch: u64,
    },
    /// Every region this server holds (for reconciling with the catalogue).
    ListRegions,
    /// Copy a region held here to the server at `to` (which already placed it), then
    /// pause its writes and report `HandedOff`; the switch comes with `FreeRegion`.
    MigrateRegion {
        cache: CacheId,
        region: u32,
        to: String,
        #[serde(default)]
        mode: MigrationMode,
        /// Copy to make `to` a new backup: this server stays the owner, and the
        /// switch is a region table listing `to` among the region's backups.
        #[serde(default)]
        replicate: bool,
    },
    MigrationStatus {
        cache: CacheId,
        region: u32,
        /// Answer once the copy is handed off or failed, or after this many
        /// milliseconds (at most 1,000), whichever is first; 0 answers at once. Writes
        /// to the region are paused between the hand-off and the switch, so a poll
        /// that wakes late lengthens that pause.
        #[serde(default)]
        wait_ms: u32,
    },
    /// Give up a migration: the region takes writes here again.
    AbortMigration {
        cache: CacheId,
        region: u32,
    },
    /// The part of `[addr, addr+len)` held here is no longer lost (see `ClearLost`).
    ForgetLost {
        cache: CacheId,
        addr: u64,
        len: u64,
    },
    // cluster members and cluster-secret clients -> server
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
    /// The connection's role or token does not allow the request.
    Forbidden,
    /// The server was declared dead: it must drop every region it holds and register
    /// again before it serves anything.
    Fenced,
    /// This manager does not lead (it stands by, or lost its leadership) and knows no
    /// leader: ask another. (A standby that knows the leader answers `Redirect`.)
    NotLeader,
}

/// The tokens issued with a new cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheTokens {
    pub read_write: String,
    pub read_only: String,
}

/// One region a server holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldRegion {
    pub cache: CacheId,
    pub region: u32,
}

/// An order-independent digest of a set of regions: the manager compares a server's
/// heartbeat digest with the one of the regions the catalogue places there.
pub fn region_digest(regions: impl IntoIterator<Item = HeldRegion>) -> u64 {
    regions.into_iter().fold(0u64, |acc, r| {
        // splitmix64 of the pair, summed: the order of the regions does not matter.
        let mut z =
            (u64::from(r.cache) << 32 | u64::from(r.region)).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        acc.wrapping_add(z ^ (z >> 31))
    })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlResponse {
    Ok,
    Registered {
        server_id: ServerId,
        heartbeat_ms: u64,
        /// How long the server may serve its regions, counted from when it sent the
        /// request (0: no lease, serve without one).
        #[serde(default)]
        lease_ms: u64,
        /// The manager had declared this server dead: every region it held before
        /// registering is stale and must be dropped before it serves.
        #[serde(default)]
        fenced: bool,
    },
    /// The answer to a heartbeat: the server's lease, renewed for `lease_ms` counted
    /// from when it sent the heartbeat.
    Lease {
        lease_ms: u64,
    },
    Cache(CacheInfo),
    /// A new cache and its tokens.
    Created {
        cache: CacheInfo,
        tokens: CacheTokens,
    },
    Token {
        token: String,
    },
    /// A struct, not a tuple: internally tagged JSON cannot hold a bare sequence.
    Regions {
        regions: Vec<HeldRegion>,
    },
    Status(ClusterStatus),
    Stats(ServerStats),
    Migration(MigrationReport),
    /// A standby's answer to every request: ask the manager at `leader` (or at
    /// `leader_tls`, over TLS), which leads. With no leader elected it answers
    /// `Error` with `NotLeader` instead.
    Redirect {
        leader: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        leader_tls: Option<String>,
    },
    Error {
        code: ControlErrorCode,
        message: String,
    },
}

/// `json_len u32`, the JSON, then the attachment.
fn encode_payload(json: &[u8], attachment: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + json.len() + attachment.len());
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(json);
    out.extend_from_slice(attachment);
    out
}

/// The JSON and the attachment of a control payload.
fn split_payload(b: &[u8]) -> Result<(&[u8], &[u8]), DecodeError> {
    let mut c = Cursor::new(b);
    let n = c.u32("control json length")?;
    let json = c.bytes(n as usize, "control json")?;
    Ok((json, c.rest()))
}

impl ControlRequest {
    /// The payload of a `Control` frame.
    pub fn encode(&self) -> Vec<u8> {
        let json = serde_json::to_vec(self).unwrap_or_default();
        let code: &[u8] = match self {
            Self::RegisterProc { code, .. } | Self::LoadProc { code, .. } => code,
            _ => &[],
        };
        encode_payload(&json, code)
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let (json, attachment) = split_payload(b)?;
        let mut req: Self =
            serde_json::from_slice(json).map_err(|e| DecodeError::BadControl(e.to_string()))?;
        match &mut req {
            Self::RegisterProc { code, .. } | Self::LoadProc { code, .. } => {
                *code = attachment.to_vec();
            }
            _ if !attachment.is_empty() => {
                return Err(DecodeError::BadControl(format!(
                    "{} bytes attached to a request that takes none",
                    attachment.len()
                )));
            }
            _ => {}
        }
        Ok(req)
    }

    /// The request's name as it appears in the JSON (`create_cache`, ...), for messages.
    pub fn name(&self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned))
            .unwrap_or_default()
    }
}

impl ControlResponse {
    /// The payload of a `ControlReply` frame.
    pub fn encode(&self) -> Vec<u8> {
        encode_payload(&serde_json::to_vec(self).unwrap_or_default(), &[])
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let (json, attachment) = split_payload(b)?;
        if !attachment.is_empty() {
            return Err(DecodeError::TrailingBytes(attachment.len()));
        }
        serde_json::from_slice(json).map_err(|e| DecodeError::BadControl(e.to_string()))
    }

    pub fn error(code: ControlErrorCode, message: impl Into<String>) -> Self {
        Self::Error {
            code,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests;
