//! What a store handle knows about hot keys (which keys, how loaded each server is)
//! and the timing of hot copies: a copy is valid for [`LEASE_MS`] after its value was
//! read, so a writer of a hot key acknowledges only once no copy made before its swap
//! can be served ([`wait_lease`]). The policy that uses these is the `hot` module.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// How long a copy may be served after its value was read from the home.
pub const LEASE_MS: u64 = 100;
/// How far clients' clocks may disagree.
pub const SKEW_MS: u64 = 5;
/// Bytes before the value in a copy: `valid_until` (ms).
pub const COPY_HEAD: usize = 8;

/// A lookup rate estimate for one server, from its piggybacked counter.
#[derive(Debug, Clone, Copy)]
struct Load {
    last: u32,
    at: Instant,
    rate: f64,
}

/// What a handle knows about hot keys and server load.
#[derive(Default)]
pub(crate) struct HotState {
    pub any: AtomicBool,
    pub inner: parking_lot::Mutex<HotInner>,
    /// Reads this handle served from second copies.
    pub copy_reads: std::sync::atomic::AtomicU64,
    /// Writes of hot keys that waited out the copies' lease before acknowledging.
    pub lease_waits: std::sync::atomic::AtomicU64,
}

impl HotState {
    /// Returns once no copy made before a swap at `swapped_at` can still be served
    /// (and counts the wait).
    pub fn wait_lease(&self, swapped_at: Instant) {
        self.lease_waits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        wait_lease(swapped_at);
    }
}

#[derive(Default)]
pub(crate) struct HotInner {
    keys: HashSet<Vec<u8>>,
    loads: HashMap<u32, Load>,
    /// Alternates ties between the two homes.
    flip: bool,
}

impl HotInner {
    /// Feeds a server's lookup counter (low 32 bits) into its rate estimate.
    pub fn observe(&mut self, server: u32, count: u32) {
        let now = Instant::now();
        match self.loads.get_mut(&server) {
            Some(l) => {
                let dt = now.duration_since(l.at).as_secs_f64();
                if dt >= 0.002 {
                    let r = f64::from(count.wrapping_sub(l.last)) / dt;
                    l.rate = 0.5 * l.rate + 0.5 * r;
                    l.last = count;
                    l.at = now;
                }
            }
            None => {
                self.loads.insert(
                    server,
                    Load {
                        last: count,
                        at: now,
                        rate: 0.0,
                    },
                );
            }
        }
    }

    fn rate(&self, server: u32) -> f64 {
        self.loads.get(&server).map_or(0.0, |l| l.rate)
    }

    /// Whether to read `key` from its copy on `copy_server` rather than its home on
    /// `home_server`: the less loaded of the two.
    pub fn prefer_copy(&mut self, key: &[u8], home_server: u32, copy_server: u32) -> bool {
        if !self.keys.contains(key) || home_server == copy_server {
            return false;
        }
        let (h, c) = (self.rate(home_server), self.rate(copy_server));
        if (h - c).abs() <= 0.05 * h.max(c) {
            self.flip = !self.flip;
            self.flip
        } else {
            c < h
        }
    }

    /// The keys this handle knows to be hot.
    pub fn keys(&self) -> Vec<Vec<u8>> {
        self.keys.iter().cloned().collect()
    }

    pub fn learn(&mut self, key: &[u8], hot: bool) -> bool {
        if hot {
            if !self.keys.contains(key) {
                self.keys.insert(key.to_vec());
            }
        } else {
            self.keys.remove(key);
        }
        !self.keys.is_empty()
    }
}

/// The value of a copy read at `now`, if the copy is still valid.
pub(crate) fn copy_value(raw: &Bytes, now: u64) -> Option<Bytes> {
    let mut a = [0u8; 8];
    a.copy_from_slice(raw.get(..COPY_HEAD)?);
    (now < u64::from_le_bytes(a)).then(|| raw.slice(COPY_HEAD..))
}

/// Returns once no copy made before a swap at `swapped_at` can still be served.
pub(crate) fn wait_lease(swapped_at: Instant) {
    let until = swapped_at + Duration::from_millis(LEASE_MS + SKEW_MS);
    let now = Instant::now();
    if until > now {
        std::thread::sleep(until - now);
    }
}
