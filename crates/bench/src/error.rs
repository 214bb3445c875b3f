//! Error type for the benchmark harness.

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

/// Errors raised while installing tools, running baselines or writing reports.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// An external tool is not installed and could not be installed.
    #[error("required tool `{tool}` is not available: {hint}")]
    ToolMissing { tool: String, hint: String },
    /// Spawning an external command failed.
    #[error("failed to run `{cmd}`: {source}")]
    Spawn {
        cmd: String,
        #[source]
        source: io::Error,
    },
    /// An external command exited unsuccessfully.
    #[error("`{cmd}` failed ({status}): {output}")]
    CommandFailed {
        cmd: String,
        status: ExitStatus,
        output: String,
    },
    /// A child server never became ready.
    #[error("{what} on 127.0.0.1:{port} not ready after {waited:?}: {detail}")]
    NotReady {
        what: &'static str,
        port: u16,
        waited: Duration,
        detail: String,
    },
    /// Output of an external tool could not be parsed.
    #[error("could not parse {what} output: {detail}")]
    Parse { what: &'static str, detail: String },
    /// Invalid parameters (e.g. zero records).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Chart rendering failed.
    #[error("chart rendering failed: {0}")]
    Chart(String),
    /// The farcache cluster under test failed (start, create, ops).
    #[error("farcache cluster: {0}")]
    Cluster(String),
    /// Other I/O error (files, sockets).
    #[error(transparent)]
    Io(#[from] io::Error),
    /// JSON serialization error.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The SLO model being calibrated (building it, or interpolating from it).
    #[error(transparent)]
    Slo(#[from] farcache_slo::SloError),
}

/// Result alias for this crate.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;

pub(crate) fn parse_err(what: &'static str, detail: impl Into<String>) -> BenchError {
    BenchError::Parse {
        what,
        detail: detail.into(),
    }
}
