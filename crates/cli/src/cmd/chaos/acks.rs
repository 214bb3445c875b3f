//! Split-brain measure: the servers' own acknowledgement windows, polled during the
//! run, show how long two servers acknowledged writes to the same region.

use super::*;

/// The servers' acknowledgement windows, polled: per (server address, cache, region,
/// first acknowledgement) the latest last acknowledgement seen.
pub(super) struct Acks {
    secret: farcache_client::ClusterSecret,
    pub(super) windows: BTreeMap<(String, u32, u32, u64), u64>,
    polled: Instant,
}

impl Acks {
    pub(super) fn new(secret: farcache_client::ClusterSecret) -> Self {
        Self {
            secret,
            windows: BTreeMap::new(),
            polled: Instant::now(),
        }
    }

    /// Polls at most once a second.
    pub(super) fn poll(&mut self, cluster: &mut ProcessCluster) {
        if self.polled.elapsed() >= Duration::from_secs(1) {
            self.poll_now(cluster);
        }
    }

    /// Asks every running server for its windows (one that does not answer within
    /// 300 ms, cut off or vanished, is asked again next time).
    pub(super) fn poll_now(&mut self, cluster: &mut ProcessCluster) {
        self.polled = Instant::now();
        for i in 0..cluster.server_count() {
            if !cluster.server_running(i) {
                continue;
            }
            let addr = cluster.server_addr(i).to_owned();
            let Ok(stats) = server_stats(&addr, &self.secret) else {
                continue;
            };
            for w in stats.ack_windows {
                let last = self
                    .windows
                    .entry((addr.clone(), w.cache, w.region, w.first_us))
                    .or_default();
                *last = (*last).max(w.last_us);
            }
        }
    }

    /// Time two servers' windows for one region overlapped, summed over pairs.
    pub(super) fn split_brain_ms(&self) -> f64 {
        // (server, first, last) per (cache, region).
        type Windows<'a> = Vec<(&'a str, u64, u64)>;
        let mut by_region: BTreeMap<(u32, u32), Windows<'_>> = BTreeMap::new();
        for ((server, cache, region, first), &last) in &self.windows {
            by_region
                .entry((*cache, *region))
                .or_default()
                .push((server.as_str(), *first, last));
        }
        let mut us = 0u64;
        for w in by_region.values() {
            for (k, a) in w.iter().enumerate() {
                for b in &w[k + 1..] {
                    if a.0 != b.0 {
                        us += a.2.min(b.2).saturating_sub(a.1.max(b.1));
                    }
                }
            }
        }
        us as f64 / 1e3
    }
}
