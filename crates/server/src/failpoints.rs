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
//! | `migration-before-copy` | a region's copy to another server is about to start (writes still go on; a `sleep` makes a drain slow enough to fail a manager over in the middle) |
//! | `migration-throttle` | with `return(N)`: a copy with dirty tracking throttles writers from its first round, to `N` dirty chunks (as it does by itself once writes outpace the copy) |
//! | `execute-refuse-args` | with `return(HEX)`: an EXECUTE whose arguments contain the bytes `HEX` is answered `NOT_SERVING`, as by a server whose region fails over (in-process clusters set it with `fail::cfg`) |

/// Applies `FAILPOINTS` for the life of the process (a no-op without the feature).
/// `farcache manager` calls it too: the points are process-wide, so the manager's
/// own (`farcache_manager`'s `failpoints` module) are set the same way.
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

/// Whether `execute-refuse-args` refuses an EXECUTE with these arguments.
#[cfg(feature = "failpoints")]
pub(crate) fn refuses_execute(args: &[u8]) -> bool {
    let needle = fail::eval("execute-refuse-args", |hex| hex.map(|h| unhex(&h)));
    match needle.flatten().flatten() {
        Some(n) if !n.is_empty() => args.windows(n.len()).any(|w| w == n),
        _ => false,
    }
}

/// The dirty-chunk limit `migration-throttle` sets from a copy's first round.
#[cfg(feature = "failpoints")]
pub(crate) fn throttle_from_start() -> Option<u64> {
    fail::eval("migration-throttle", |v| v.and_then(|s| s.parse().ok())).flatten()
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn throttle_from_start() -> Option<u64> {
    None
}

#[cfg(feature = "failpoints")]
fn unhex(h: &str) -> Option<Vec<u8>> {
    let h = h.as_bytes();
    if !h.len().is_multiple_of(2) {
        return None;
    }
    h.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect()
}
