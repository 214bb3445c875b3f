//! Messages about regions that move or are lost: live migration between servers and
//! regions whose only copy died with a server (control-plane JSON, see `control`).

use serde::{Deserialize, Serialize};

use crate::{CacheId, ServerId};

/// How writes to a region wait while it is copied to another server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MigrationMode {
    /// Copy while writes go on, re-send the chunks written meanwhile, and pause writes
    /// only for the last dirty chunks and the switch of owner.
    #[default]
    DirtyTracking,
    /// Redy's scheme: writes to the region wait for the whole copy.
    PauseRegion,
    /// Baseline for comparison: writes to every region of the cache held by the
    /// source wait for the whole copy (a stop-the-world move).
    PauseAll,
}

impl std::str::FromStr for MigrationMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "dirty_tracking" | "dirty-tracking" => Ok(Self::DirtyTracking),
            "pause_region" | "pause-region" => Ok(Self::PauseRegion),
            "pause_all" | "pause-all" => Ok(Self::PauseAll),
            other => Err(format!(
                "migration mode must be 'dirty_tracking', 'pause_region' or 'pause_all', not '{other}'"
            )),
        }
    }
}

impl std::fmt::Display for MigrationMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::DirtyTracking => "dirty_tracking",
            Self::PauseRegion => "pause_region",
            Self::PauseAll => "pause_all",
        })
    }
}

/// Where one region's copy stands, as its source reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MigrationPhase {
    Copying,
    /// Every byte is at the target and writes are paused: the manager may switch owner.
    HandedOff,
    Failed,
    /// No migration of that region is known here.
    Unknown,
}

/// A source's report on one region's migration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigrationReport {
    pub phase: MigrationPhase,
    /// Bytes sent, re-sent dirty chunks included.
    pub bytes: u64,
    /// Copy rounds: the full copy, then one per batch of dirty chunks.
    pub rounds: u32,
    /// Microseconds from the start to the hand-off (so far, while copying).
    pub elapsed_us: u64,
    /// Longest stretch writes to the region were refused, in microseconds.
    pub max_pause_us: u64,
    #[serde(default)]
    pub error: Option<String>,
    /// Writes answered `PAUSED` while the region was still copying, because they
    /// dirtied it faster than it copied (each is sent again by its client).
    #[serde(default)]
    pub throttled_writes: u64,
}

/// A migration the manager finished (kept in the status for tools and benches).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigrationRecord {
    pub cache: CacheId,
    pub region: u32,
    pub from: ServerId,
    pub to: ServerId,
    pub mode: MigrationMode,
    pub bytes: u64,
    /// Microseconds from the copy's start to the new owner being pushed to servers.
    pub total_us: u64,
    pub copy_us: u64,
    pub max_pause_us: u64,
    pub rounds: u32,
    /// See [`MigrationReport::throttled_writes`].
    #[serde(default)]
    pub throttled_writes: u64,
}

/// A region whose only copy was lost, now held empty by `now_on`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostRegion {
    pub cache: CacheId,
    pub region: u32,
    /// The server that held it.
    pub was_on: ServerId,
    pub now_on: ServerId,
    /// Why: `killed` (missed heartbeats), `grace` (reclaimed before it could move) or
    /// `restarted` (the server came back without it).
    pub reason: String,
    /// The cache is read-only and the region was reloaded from its source file:
    /// nothing was lost after all.
    #[serde(default)]
    pub reloaded: bool,
}

/// A backup that took a region over when its owner died.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Promotion {
    pub cache: CacheId,
    pub region: u32,
    /// The owner that died.
    pub from: ServerId,
    /// The backup that owns the region now.
    pub to: ServerId,
    /// The region table's epoch that made the switch.
    pub epoch: u64,
}
