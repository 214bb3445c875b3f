//! Hot keys stay balanced (DistCache, §3–4 of the paper): a hot key gets a second
//! copy in a shard picked by an independent hash, and readers send each read of it
//! to the less loaded of its two homes (power of two choices), judged by the lookup
//! counts servers piggyback on every `kv_get` reply.
//!
//! Who does what:
//! - **Servers** count lookups and keep a sampled count-min sketch with a top-k
//!   (`kv_hot`).
//! - **One controller per store** ([`Store::spawn_hot_keys`], holding a lease in
//!   shard 0) polls every server's heavy hitters, marks the hottest keys with the
//!   `HOT` flag in their slot word, and refreshes each one's copy every period.
//! - **Readers** learn that a key is hot from its home's reply (a flag) and route from
//!   then on.
//!
//! Coherence, by leases instead of DistCache's switch-side invalidation: a copy
//! carries `valid_until = t0 + LEASE_MS`, where `t0` is taken before its value was
//! read from the home, and readers ignore an expired copy. A writer that changes a
//! `HOT` key deletes the copy, and acknowledges only `LEASE_MS + SKEW_MS` after its
//! swap. Any copy made from the old value was read before the swap, so it has
//! expired by then. The guarantee: once a write is acknowledged, no read returns an
//! older value. Writes to hot keys pay up to `LEASE_MS` of latency (hot keys are read
//! mostly; that is the premise). Clocks must agree within `SKEW_MS`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use farcache_kvformat::hash::{placed_shard, second_shard};
use farcache_kvformat::layout::CONTROLLER;
use farcache_kvformat::manifest::hot_key;
use farcache_kvformat::slot::{LockWord, TOMB};
use farcache_kvformat::wire;
use farcache_kvformat::{SlotWord, item};

use crate::Result;
pub use crate::hot_state::{COPY_HEAD, LEASE_MS, SKEW_MS};
use crate::options::PutOptions;
use crate::put::Entry;
use crate::store::{Probe, Store, now_ms};

/// How [`Store::spawn_hot_keys`] picks hot keys.
#[derive(Debug, Clone, PartialEq)]
pub struct HotOptions {
    /// Period of polling servers and refreshing copies (below `LEASE_MS`).
    pub every: Duration,
    /// Most keys with a second copy at once.
    pub max_keys: usize,
    /// Fewest sampled hits (since the sketch last aged) for a key to count as hot.
    pub min_count: u32,
}

impl Default for HotOptions {
    fn default() -> Self {
        Self {
            every: Duration::from_millis(40),
            max_keys: 32,
            min_count: 16,
        }
    }
}

/// The hot-key controller; stops when dropped (its copies then expire and their keys
/// are cleared by the next controller, or stay marked until one runs).
pub struct HotController {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for HotController {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Store {
    /// Keys this handle knows to be hot (it learned them from their homes' replies).
    pub fn hot_keys(&self) -> Vec<Vec<u8>> {
        self.inner.hot.inner.lock().keys()
    }

    /// Reads this handle served from hot keys' second copies.
    pub fn copy_reads(&self) -> u64 {
        self.inner.hot.copy_reads.load(Ordering::Relaxed)
    }

    /// Writes and deletes of hot keys by this handle that waited out the copies'
    /// lease before acknowledging ([`LEASE_MS`] + [`SKEW_MS`] each).
    pub fn lease_waits(&self) -> u64 {
        self.inner.hot.lease_waits.load(Ordering::Relaxed)
    }

    /// The shard of `key`'s second copy: picked by the independent hash, then moved
    /// on to the next shard held by a server other than the home's (two homes on
    /// one server would balance nothing). Readers and the controller both use the
    /// current region table; while theirs differ a read misses the copy and goes
    /// to the home.
    pub(crate) fn second_home(&self, key: &[u8], home: u32) -> u32 {
        let shards = self.inner.layout.0.shards;
        let first = second_shard(key, shards, home);
        let info = self.inner.cache.info();
        let home_server = self.server_of(&info, home);
        (0..shards)
            .map(|i| (first + i) % shards)
            .find(|&s| self.server_of(&info, s) != home_server)
            .unwrap_or(first)
    }

    /// The shard where `key`'s hot copy goes (see `second_home`), for reports.
    pub fn hot_copy_shard(&self, key: &[u8]) -> u32 {
        self.second_home(key, self.locate(key).shard)
    }

    /// Server of `shard` in the current table (0 if unknown).
    pub(crate) fn server_of(&self, info: &farcache_client::CacheInfo, shard: u32) -> u32 {
        let r = self.inner.layout.shard_base(shard) / info.region_size.max(1);
        info.regions.get(r as usize).copied().unwrap_or(0)
    }

    /// Starts the store's hot-key controller (one per store: it holds a lease, and a
    /// second one waits for it).
    pub fn spawn_hot_keys(&self, opts: HotOptions) -> HotController {
        let stop = Arc::new(AtomicBool::new(false));
        let (store, flag) = (self.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("farcache-store-hot".into())
            .spawn(move || {
                let mut hot: HashMap<Vec<u8>, u32> = HashMap::new();
                let mut leaving: Vec<(Vec<u8>, Instant)> = Vec::new();
                while !flag.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    if let Err(e) = store.hot_round(&opts, &mut hot, &mut leaving) {
                        tracing::warn!(error = %e, "hot-key round failed");
                    }
                    let rest = opts.every.saturating_sub(started.elapsed());
                    std::thread::sleep(rest.max(Duration::from_millis(1)));
                }
            })
            .ok();
        HotController { stop, thread }
    }

    /// Takes or renews the controller lease; false if another controller holds it.
    fn controller_lease(&self, opts: &HotOptions) -> Result<bool> {
        let now = now_ms();
        let at = CONTROLLER;
        let cur = LockWord(crate::free::le(&self.inner.cache.read(at, 8)?));
        let mine = cur.0 >> 48 == u64::from(self.inner.holder);
        if !mine && !cur.takeable(now) {
            return Ok(false);
        }
        let until = now + 3 * opts.every.as_millis() as u64 + LEASE_MS;
        let new = LockWord::held(self.inner.holder, until);
        Ok(self.inner.cache.cas(at, cur.0, new.0)? == cur.0)
    }

    /// One controller round: pick the hot keys, refresh their copies, retire the
    /// copies of keys no longer hot once their leases ran out.
    fn hot_round(
        &self,
        opts: &HotOptions,
        hot: &mut HashMap<Vec<u8>, u32>,
        leaving: &mut Vec<(Vec<u8>, Instant)>,
    ) -> Result<()> {
        if !self.controller_lease(opts)? {
            return Ok(());
        }
        let lay = self.inner.layout;
        let info = self.inner.cache.info();
        // One shard per server to ask for its heavy hitters.
        let mut asked = HashSet::new();
        let mut b = self.inner.cache.batch();
        for s in 0..lay.0.shards {
            if asked.insert(self.server_of(&info, s)) {
                b.execute(wire::KV_HOT, lay.shard_base(s), &[]);
            }
        }
        let r = b.run();
        let mut seen: Vec<(Vec<u8>, u32)> = Vec::new();
        for i in 0..asked.len() {
            let Ok(raw) = r.data(i) else { continue };
            let Ok((_, list)) = wire::decode_hot(raw) else {
                continue;
            };
            for h in list {
                if h.count < opts.min_count || placed_shard(&h.key).is_some() {
                    continue;
                }
                // The sketch is per server: keep keys of this store's shards only.
                let home = self.locate(&h.key).shard;
                if lay.shard_base(home) == h.shard_base && Self::check_key(&h.key).is_ok() {
                    seen.push((h.key, h.count));
                }
            }
        }
        seen.sort_by_key(|(_, c)| std::cmp::Reverse(*c));
        seen.dedup_by(|a, b| a.0 == b.0);
        seen.truncate(opts.max_keys);
        let now_hot: HashSet<Vec<u8>> = seen.iter().map(|(k, _)| k.clone()).collect();
        for k in hot.keys() {
            if !now_hot.contains(k) && !leaving.iter().any(|(l, _)| l == k) {
                leaving.push((
                    k.clone(),
                    Instant::now() + Duration::from_millis(LEASE_MS + SKEW_MS),
                ));
            }
        }
        hot.retain(|k, _| now_hot.contains(k));
        leaving.retain(|(k, _)| !now_hot.contains(k));
        for (k, c) in seen {
            if self.refresh_copy(&k)? {
                hot.insert(k, c);
            } else {
                hot.remove(&k);
            }
        }
        // Copies of keys that cooled down: gone once no reader can still use them.
        let due: Vec<Vec<u8>> = leaving
            .iter()
            .filter(|(_, at)| Instant::now() >= *at)
            .map(|(k, _)| k.clone())
            .collect();
        leaving.retain(|(_, at)| Instant::now() < *at);
        for k in due {
            self.cool_down(&k)?;
        }
        Ok(())
    }

    /// Marks `key` hot and writes its copy with a fresh lease; false if it is gone.
    fn refresh_copy(&self, key: &[u8]) -> Result<bool> {
        let h = self.locate(key);
        let lay = self.inner.layout;
        for _ in 0..8 {
            let f = self.find(key, h, now_ms())?;
            let Some(s) = f.slot.filter(|_| f.status == wire::HIT && !f.expired) else {
                return Ok(false);
            };
            let w = f.words[usize::from(s)];
            if !SlotWord(w).is_hot()
                && self.inner.cache.cas(
                    lay.slot_addr(h.shard, f.bucket(h.bucket), usize::from(s)),
                    w,
                    SlotWord::with_hot(w),
                )? != w
            {
                continue;
            }
            // The lease starts before the value is read (see the module's notes).
            let t0 = now_ms();
            // From the home, never from the copy (a lease must rest on a home read).
            let Some(Ok(Some((flags, v)))) = self.lookup_raw(&[key], Probe::Home).pop() else {
                return Ok(false);
            };
            if flags & item::FLAG_MANIFEST != 0 {
                // Erasure-coded values are spread already; no copy.
                return Ok(false);
            }
            let mut copy = Vec::with_capacity(COPY_HEAD + v.len());
            copy.extend_from_slice(&(t0 + LEASE_MS).to_le_bytes());
            copy.extend_from_slice(&v);
            let ck = hot_key(self.second_home(key, h.shard), key);
            for r in self.put_entries(
                &[Entry {
                    key: &ck,
                    value: &copy,
                    flags: 0,
                }],
                PutOptions::default().into(),
            ) {
                r?;
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// Deletes `key`'s copy and clears its hot flag (its leases have run out).
    fn cool_down(&self, key: &[u8]) -> Result<()> {
        let h = self.locate(key);
        let _ = self.delete_raw(&hot_key(self.second_home(key, h.shard), key));
        for _ in 0..8 {
            let f = self.find(key, h, now_ms())?;
            let Some(s) = f.slot.filter(|_| f.status == wire::HIT) else {
                return Ok(());
            };
            let w = f.words[usize::from(s)];
            if !SlotWord(w).is_hot() {
                return Ok(());
            }
            let at = self
                .inner
                .layout
                .slot_addr(h.shard, f.bucket(h.bucket), usize::from(s));
            if self.inner.cache.cas(at, w, SlotWord::without_hot(w))? == w {
                return Ok(());
            }
        }
        Ok(())
    }

    /// After swapping away from a hot word: drops the key's copy (the caller then
    /// waits with [`wait_lease`] before acknowledging).
    pub(crate) fn drop_copy(&self, key: &[u8], home: u32) {
        let ck = hot_key(self.second_home(key, home), key);
        let h = self.locate(&ck);
        let lay = self.inner.layout;
        if let Ok(f) = self.find(&ck, h, now_ms())
            && let Some(s) = f.slot
        {
            let w = f.words[usize::from(s)];
            let at = lay.slot_addr(h.shard, f.bucket(h.bucket), usize::from(s));
            if let Ok(seen) = self.inner.cache.cas(at, w, TOMB)
                && seen == w
            {
                self.retire(h.shard, SlotWord(w), f.generation);
            }
        }
    }
}
