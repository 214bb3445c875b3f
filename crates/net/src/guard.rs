//! Limits that keep a single peer, authenticated or not, from exhausting a process.

use std::time::Duration;

/// Connection limits of a server or the manager.
#[derive(Debug, Clone)]
pub struct GuardConfig {
    /// Most open connections; more are accepted and closed at once.
    pub max_connections: usize,
    /// Most connections that have not finished the handshake; a new one evicts the
    /// oldest, so a flood of half-open connections cannot lock out real peers.
    pub max_unauthenticated: usize,
    /// A connection must finish the handshake within this time.
    pub handshake_timeout: Duration,
    /// A frame that started arriving must make progress within this time.
    pub frame_timeout: Duration,
    /// A peer that does not read its replies for this long is cut off.
    pub write_stall_timeout: Duration,
}

impl Default for GuardConfig {
    fn default() -> Self {
        Self {
            max_connections: 16_384,
            max_unauthenticated: 1024,
            handshake_timeout: Duration::from_secs(5),
            frame_timeout: Duration::from_secs(15),
            write_stall_timeout: Duration::from_secs(15),
        }
    }
}

/// Raises the soft open-file limit to the hard limit (as Redis and memcached do), so
/// the connection cap, not the default 1024 descriptors, bounds connections. Returns
/// the limit now in force.
pub fn raise_fd_limit() -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read or write the struct passed to them.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return 0;
        }
        if l.rlim_cur < l.rlim_max {
            let want = libc::rlimit {
                rlim_cur: l.rlim_max,
                rlim_max: l.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                return want.rlim_cur;
            }
        }
    }
    l.rlim_cur
}
