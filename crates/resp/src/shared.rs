//! What every session and event loop of a front end shares: the store, the access
//! policy, the counters `INFO` reports, and the key-stripe locks.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use farcache_store::Store;
use parking_lot::{Mutex, MutexGuard};

use crate::auth::AuthPolicy;

/// Key stripes serialising the front end's writes (see [`Shared::lock_keys`]).
const STRIPES: usize = 4096;

/// What every session of a front end shares.
pub struct Shared {
    pub store: Store,
    pub auth: AuthPolicy,
    pub addr: SocketAddr,
    pub started: Instant,
    pub connected: AtomicU64,
    pub connections_total: AtomicU64,
    pub commands: AtomicU64,
    pub rejected: AtomicU64,
    pub next_id: AtomicU64,
    /// Rounds run, keys and pairs they batched, and µs spent in their store calls
    /// (`INFO stats`: how much batching the load gives and where a round's time goes).
    pub rounds: AtomicU64,
    pub round_ops: AtomicU64,
    pub round_store_us: AtomicU64,
    stripes: Box<[Mutex<()>]>,
    stop: AtomicBool,
}

impl Shared {
    pub fn new(store: Store, auth: AuthPolicy, addr: SocketAddr) -> Self {
        Self {
            store,
            auth,
            addr,
            started: Instant::now(),
            connected: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
            rounds: AtomicU64::new(0),
            round_ops: AtomicU64::new(0),
            round_store_us: AtomicU64::new(0),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            stop: AtomicBool::new(false),
        }
    }

    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn stripe(key: &[u8]) -> usize {
        (xxhash_rust::xxh3::xxh3_64(key) % STRIPES as u64) as usize
    }

    /// Locks the stripes of `keys` (in stripe order, so two sessions never wait on
    /// each other in a cycle). Every write through the front end holds its keys'
    /// stripes, which makes read-modify-writes (`INCR`, `SETRANGE`, `EXPIRE` ...)
    /// atomic against every other command of this front end.
    pub fn lock_keys<'a, K: AsRef<[u8]> + 'a>(
        &self,
        keys: impl IntoIterator<Item = &'a K>,
    ) -> Vec<MutexGuard<'_, ()>> {
        let mut idx: Vec<usize> = keys.into_iter().map(|k| Self::stripe(k.as_ref())).collect();
        idx.sort_unstable();
        idx.dedup();
        idx.into_iter().map(|i| self.stripes[i].lock()).collect()
    }
}
