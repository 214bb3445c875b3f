//! Limits that keep a single peer, authenticated or not, from exhausting a process.

use std::time::{Duration, Instant};

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

/// Why a connection's deadline passed (the sweeps of every event loop close it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// The handshake did not finish within `handshake_timeout`.
    Handshake,
    /// A frame started arriving and then stalled past `frame_timeout`.
    Frame,
    /// Replies sat unsent past `write_stall_timeout`: the peer does not read.
    NotReading,
}

impl Expiry {
    pub fn why(self) -> &'static str {
        match self {
            Self::Handshake => "handshake not finished in time",
            Self::Frame => "frame stalled: no bytes of it arrived in time",
            Self::NotReading => "peer does not read its replies",
        }
    }
}

/// When a connection's deadlines started counting.
#[derive(Debug, Clone, Copy)]
pub struct Clocks {
    pub accepted: Instant,
    /// Whether the handshake is done (its deadline no longer applies).
    pub authenticated: bool,
    /// Since when part of a frame has sat in the buffer, while the connection waits
    /// on nothing of its own (a connection whose request is still running is not
    /// stalled).
    pub frame_since: Option<Instant>,
    /// Since when replies have been waiting for the peer to take them.
    pub stalled_since: Option<Instant>,
}

impl GuardConfig {
    /// The first deadline that passed by `now`, if any.
    pub fn expired(&self, now: Instant, c: Clocks) -> Option<Expiry> {
        let past =
            |t: Option<Instant>, limit: Duration| t.is_some_and(|t| now.duration_since(t) > limit);
        if !c.authenticated && now.duration_since(c.accepted) > self.handshake_timeout {
            Some(Expiry::Handshake)
        } else if past(c.frame_since, self.frame_timeout) {
            Some(Expiry::Frame)
        } else if past(c.stalled_since, self.write_stall_timeout) {
            Some(Expiry::NotReading)
        } else {
            None
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
