//! Named failpoints at the server's race windows (the `fail` crate, as TiKV uses it).
//! Tests reach a window deterministically by naming it in the `FAILPOINTS`
//! variable of a server process (`name=action;...`, e.g.
//! `backup-before-stream-check=1*sleep(3000)`); builds without the `failpoints`
//! feature compile every point to nothing and ignore the variable.
//!
//! | name | where |
//! |---|---|
//! | `backup-before-stream-check` | a backup has read a replication frame and is about to check that its stream is still the owner's newest |
//! | `owner-before-release` | an owner's backups acknowledged writes; the responses waiting for them are about to go out |

/// Applies `FAILPOINTS` for the life of the process (a no-op without the feature).
pub fn from_env() {
    #[cfg(feature = "failpoints")]
    {
        // Kept for the process's life: dropping the scenario would clear the points.
        let scenario = fail::FailScenario::setup();
        if std::env::var_os("FAILPOINTS").is_some() {
            tracing::warn!(
                points = ?fail::list(),
                "failpoints set from FAILPOINTS (a test build)"
            );
        }
        std::mem::forget(scenario);
    }
}
