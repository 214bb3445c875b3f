//! What every session and event loop of a front end shares: the store, the access
//! policy, the counters `INFO` reports, and the key-stripe locks.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use farcache_store::Store;
use parking_lot::{Mutex, MutexGuard};

use crate::auth::AuthPolicy;
use crate::script::ScriptCache;

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
    /// `INFO`'s `run_id`: differs between runs of the front end.
    pub run_id: u128,
    /// Rounds run, keys and pairs they batched, and µs spent in their store calls
    /// (`INFO stats`: how much batching the load gives and where a round's time goes).
    pub rounds: AtomicU64,
    pub round_ops: AtomicU64,
    pub round_store_us: AtomicU64,
    /// Commands run on the offload pool (`INFO stats`: `offloaded_commands`).
    pub offloaded: AtomicU64,
    /// Connections closed before authenticating: a frame past the pre-auth limits
    /// (or malformed), or no `AUTH` in time (`INFO stats`: `rejected_unauthenticated`).
    pub rejected_unauthenticated: AtomicU64,
    /// Lua scripts by SHA-1 (`EVALSHA`, `SCRIPT`).
    pub scripts: ScriptCache,
    stripes: Box<[Mutex<()>]>,
    /// One version per stripe (see [`Shared::version`]).
    versions: Box<[AtomicU64]>,
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
            run_id: xxhash_rust::xxh3::xxh3_128(
                format!("{}-{:?}", std::process::id(), std::time::SystemTime::now()).as_bytes(),
            ),
            rounds: AtomicU64::new(0),
            round_ops: AtomicU64::new(0),
            round_store_us: AtomicU64::new(0),
            offloaded: AtomicU64::new(0),
            rejected_unauthenticated: AtomicU64::new(0),
            scripts: ScriptCache::default(),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            versions: (0..STRIPES).map(|_| AtomicU64::new(0)).collect(),
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
    /// atomic against every other command of this front end. Stripes this thread
    /// already holds (an `EXEC` running its commands) are not taken again. When the
    /// guard drops, the stripes' versions move on: a `WATCH` on them fails.
    pub fn lock_keys<'a, K: AsRef<[u8]> + 'a>(
        &self,
        keys: impl IntoIterator<Item = &'a K>,
    ) -> KeyLocks<'_> {
        let mut idx: Vec<usize> = keys.into_iter().map(|k| Self::stripe(k.as_ref())).collect();
        idx.sort_unstable();
        idx.dedup();
        HELD.with_borrow(|held| idx.retain(|i| !held.contains(i)));
        let guards = idx.iter().map(|&i| self.stripes[i].lock()).collect();
        HELD.with_borrow_mut(|held| held.extend_from_slice(&idx));
        KeyLocks {
            shared: self,
            idx,
            _guards: guards,
        }
    }

    /// The version of `key`'s stripe: it moves on with every write through this
    /// front end to a key of the stripe (`WATCH` compares it at `EXEC`).
    pub fn version(&self, key: &[u8]) -> u64 {
        self.versions[Self::stripe(key)].load(Ordering::Acquire)
    }
}

thread_local! {
    /// Stripes the current thread holds (so an `EXEC` holding its keys' stripes can
    /// run commands that lock them again).
    static HELD: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Stripes held for a write; dropping them advances their versions.
pub struct KeyLocks<'a> {
    shared: &'a Shared,
    idx: Vec<usize>,
    _guards: Vec<MutexGuard<'a, ()>>,
}

impl Drop for KeyLocks<'_> {
    fn drop(&mut self) {
        for &i in &self.idx {
            self.shared.versions[i].fetch_add(1, Ordering::AcqRel);
        }
        HELD.with_borrow_mut(|held| held.retain(|i| !self.idx.contains(i)));
    }
}
