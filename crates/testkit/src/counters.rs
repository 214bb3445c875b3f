//! A load of fetch-adds that checks each one counted once: counters spread over a
//! cache's regions, each add's outcome tallied, and at the end every counter must
//! lie between the adds acknowledged and those plus the adds of unknown outcome.
//! Above it, an add was applied twice (a retry after a failover run again); below
//! it, an acknowledged add was lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use farcache_client::Cache;
use serde::Serialize;

/// What the counters saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CounterReport {
    pub counters: u64,
    /// Adds acknowledged.
    pub adds: u64,
    /// Adds that failed (a timeout, a lost connection, a refusal): applied or not.
    pub adds_unknown: u64,
    /// Counts above acknowledged + unknown: adds applied twice. Must be 0.
    pub double_adds: u64,
    /// Counts below the acknowledged adds: acknowledged adds lost. Must be 0.
    pub lost_adds: u64,
    /// Counters that could not be read at the end (their region lost).
    pub unreadable: u64,
}

/// The running load; [`stop`](Self::stop) checks the counters.
pub struct Counters {
    cache: Cache,
    addrs: Vec<u64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<(Vec<u64>, Vec<u64>)>>,
}

impl Counters {
    /// One counter per region (up to 64) of `cache`, added to in batches of one add
    /// each, from one thread.
    pub fn start(cache: &Cache) -> Self {
        let info = cache.info();
        let n = info.regions.len().clamp(1, 64) as u64;
        let step = (info.capacity / n / 8 * 8).max(8);
        let addrs: Vec<u64> = (0..n)
            .map(|i| i * step)
            .filter(|a| a + 8 <= info.capacity)
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (cache, addrs, stop) = (cache.clone(), addrs.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut acked = vec![0u64; addrs.len()];
                let mut unknown = vec![0u64; addrs.len()];
                while !stop.load(Ordering::Relaxed) {
                    let mut b = cache.batch();
                    for &a in &addrs {
                        b.fetch_add(a, 1);
                    }
                    let r = b.run();
                    for i in 0..addrs.len() {
                        match r.value(i) {
                            Ok(_) => acked[i] += 1,
                            Err(_) => unknown[i] += 1,
                        }
                    }
                    if r.first_error().is_some() {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                }
                (acked, unknown)
            })
        };
        Self {
            cache: cache.clone(),
            addrs,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the load and checks every counter against its adds.
    pub fn stop(mut self) -> CounterReport {
        self.stop.store(true, Ordering::Relaxed);
        let (acked, unknown) = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        let mut rep = CounterReport {
            counters: self.addrs.len() as u64,
            adds: acked.iter().sum(),
            adds_unknown: unknown.iter().sum(),
            ..CounterReport::default()
        };
        for (i, &a) in self.addrs.iter().enumerate() {
            let (ok, maybe) = (
                acked.get(i).copied().unwrap_or(0),
                unknown.get(i).copied().unwrap_or(0),
            );
            match self.cache.read(a, 8) {
                Ok(b) if b.len() == 8 => {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(&b);
                    let v = u64::from_le_bytes(w);
                    rep.double_adds += v.saturating_sub(ok + maybe);
                    rep.lost_adds += ok.saturating_sub(v);
                }
                _ => rep.unreadable += 1,
            }
        }
        rep
    }
}

impl Drop for Counters {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
