//! The server's id, kept in its data directory so a restarted process rejoins the
//! cluster as the same server (the manager then reconciles what it holds: nothing).

use std::path::PathBuf;

use farcache_proto::ServerId;

use crate::config::ServerConfig;
use crate::error::ServerError;

fn path(c: &ServerConfig) -> Option<PathBuf> {
    c.data_dir.as_ref().map(|d| d.join("server.id"))
}

fn err(p: &std::path::Path, reason: impl ToString) -> ServerError {
    ServerError::Identity {
        path: p.display().to_string(),
        reason: reason.to_string(),
    }
}

/// The id kept by an earlier run, if any.
pub fn load(c: &ServerConfig) -> Result<Option<ServerId>, ServerError> {
    let Some(p) = path(c) else { return Ok(None) };
    match std::fs::read_to_string(&p) {
        Ok(s) => s
            .trim()
            .parse::<ServerId>()
            .map(Some)
            .map_err(|e| err(&p, format!("not a server id: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err(&p, e)),
    }
}

/// Keeps `id` for the next run (written aside and renamed, so a crash leaves the old
/// file or the new one).
pub fn save(c: &ServerConfig, id: ServerId) -> Result<(), ServerError> {
    let Some(p) = path(c) else { return Ok(()) };
    if load(c)? == Some(id) {
        return Ok(());
    }
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir).map_err(|e| err(&p, e))?;
    }
    let tmp = p.with_extension("id.tmp");
    std::fs::write(&tmp, format!("{id}\n")).map_err(|e| err(&p, e))?;
    std::fs::rename(&tmp, &p).map_err(|e| err(&p, e))
}
