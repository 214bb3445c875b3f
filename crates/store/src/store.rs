//! The store handle: creating and opening a store, and the read path.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use farcache_client::{BatchResults, Cache, Client, CreateOptions};
use farcache_kvformat::hash::{self, KeyHash};
use farcache_kvformat::layout::{self, DESCRIPTOR_LEN};
use farcache_kvformat::wire::{self, GetReply, Lookup};
use farcache_kvformat::{Descriptor, Layout, class, item};
use parking_lot::Mutex;

use crate::alloc::FreeCache;
use crate::options::{StoreOptions, shard_size_for};
use crate::{Result, StoreError};

/// Attempts at a key whose bucket keeps changing before [`StoreError::Contended`].
pub(crate) const MAX_ATTEMPTS: u32 = 128;
/// How long store calls keep retrying [transient](StoreError::is_transient) failures
/// (a failover takes a few heartbeat intervals).
pub const TRANSIENT_BUDGET: std::time::Duration = std::time::Duration::from_secs(15);

pub(crate) use crate::lookup::{Lookups, RawLookup};

/// How long [`Store::get`] waits for a key's home before it also reads an
/// erasure-coded value through its manifest copies. Far above a healthy lookup
/// (tens of µs), far below the client's op timeout (10 s by default).
pub const HEDGE_AFTER: std::time::Duration = std::time::Duration::from_millis(50);

/// How long a home server read around by a hedge stays suspect: GETs homed there
/// go to the copies without waiting, and after this one waits `HEDGE_AFTER` again
/// (so a server that recovers costs at most one late hedge per this period).
const SLOW_HOME_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// An MGET on its way ([`Store::mget_submit`]); [`PendingGets::wait`] finishes it.
pub struct PendingGets<'k, K> {
    store: &'k Store,
    keys: &'k [K],
    probe: Probe,
    lookups: Lookups<'k>,
    ticket: Option<farcache_client::Ticket>,
    at: Vec<usize>,
    out: Vec<Option<Result<Option<Bytes>>>>,
}

impl<K: AsRef<[u8]>> PendingGets<'_, K> {
    /// Blocks for the values (further rounds, if a bucket was busy, run here).
    pub fn wait(mut self) -> Result<Vec<Result<Option<Bytes>>>> {
        let store = self.store;
        let l = &mut self.lookups;
        if let Some(t) = self.ticket.take() {
            let r = t.wait();
            if l.absorb(store, &r) {
                crate::put::backoff(l.attempts);
            }
        }
        while !l.is_done() {
            let r = l.batch(store).run();
            if l.absorb(store, &r) {
                crate::put::backoff(l.attempts);
            }
        }
        let raw = self.lookups.finish();
        let probe = self.probe;
        if self.at.len() == self.keys.len() {
            // Every key was looked up (none refused): one pass, in order.
            return Ok(raw
                .into_iter()
                .zip(self.keys)
                .map(|(r, k)| store.resolve(k.as_ref(), r, probe))
                .collect());
        }
        for (r, i) in raw.into_iter().zip(self.at) {
            self.out[i] = Some(store.resolve(self.keys[i].as_ref(), r, probe));
        }
        Ok(self
            .out
            .into_iter()
            .map(|o| o.unwrap_or(Ok(None)))
            .collect())
    }
}

/// What a lookup asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    Value,
    /// The value, read from the key's home even if the key is hot.
    Home,
    Exists,
    /// The key's slot and its bucket (for a write).
    Find,
    /// The value with its expiry, from the key's home (a read-modify-write).
    Entry,
    /// [`Probe::Find`] followed by the item the key's slot names: what a
    /// read-modify-write needs, in one round trip.
    FindEntry,
}

/// Opening and creating stores on a [`Client`].
pub trait StoreExt {
    /// Creates a store of at least `capacity` bytes (rounded up to whole shards).
    fn create_store(&self, name: &str, capacity: u64, opts: &StoreOptions) -> Result<Store>;
    fn open_store(&self, name: &str) -> Result<Store>;
}

impl StoreExt for Client {
    fn create_store(&self, name: &str, capacity: u64, opts: &StoreOptions) -> Result<Store> {
        Store::create(self, name, capacity, opts)
    }

    fn open_store(&self, name: &str) -> Result<Store> {
        Store::open(self, name)
    }
}

/// A keyed store. Cheap to clone; share it between threads.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub cache: Cache,
    pub layout: Layout,
    /// This handle's name in bucket locks.
    pub holder: u16,
    pub free: Mutex<FreeCache>,
    /// Threads for async writes, started on first use.
    pub pool: crate::async_api::PoolCell,
    /// Hot keys this handle knows of, and server load estimates.
    pub hot: crate::hot::HotState,
    /// Servers a GET recently read around (its home did not answer within the
    /// hedge), and until when: GETs homed there hedge at once.
    pub slow_homes: Mutex<Vec<(u32, std::time::Instant)>>,
    /// `slow_homes` is not empty (GETs skip its lock otherwise).
    pub any_slow_home: std::sync::atomic::AtomicBool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Items this handle kept for reuse go back to the shared lists.
        let cached = self.free.get_mut().drain();
        if let Err(e) = crate::alloc::push_all(&self.cache, &self.layout, cached) {
            tracing::warn!(error = %e, "store handle dropped without returning its free items");
        }
    }
}

/// Milliseconds since the Unix epoch (the clock TTLs are measured on).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Store {
    fn create(client: &Client, name: &str, capacity: u64, o: &StoreOptions) -> Result<Self> {
        if o.ec_data == 0 || o.ec_parity == 0 || u32::from(o.ec_data) + u32::from(o.ec_parity) > 32
        {
            return Err(StoreError::Options(format!(
                "erasure coding {}+{}: need ≥ 1 data and ≥ 1 parity chunk, at most 32 in all",
                o.ec_data, o.ec_parity
            )));
        }
        let cache = client.create_with(
            name,
            capacity.max(1),
            &CreateOptions {
                region_size: o.region_size,
                replicas: o.replicas,
                from_file: None,
            },
        )?;
        let d = match Self::plan(capacity, cache.info().region_size, o) {
            Ok(d) => d,
            Err(e) => {
                let _ = client.delete(name);
                return Err(e);
            }
        };
        let shards = d.shards;
        let total = u64::from(shards) * d.shard_size;
        if total != cache.capacity() {
            // Whole shards only.
            cache.reshape(total)?;
        }
        // Every shard gets the descriptor; shard 0's, written last, marks the store
        // as ready for `open_store`.
        let desc = d.encode();
        let lay = Layout(d);
        let mut b = cache.batch();
        for s in (1..shards).rev() {
            b.write(lay.shard_base(s) + layout::DESCRIPTOR, &desc);
        }
        b.run().first_error().map_or(Ok(()), |e| Err(e.clone()))?;
        cache.write(layout::DESCRIPTOR, &desc)?;
        Ok(Self::from_parts(cache, lay))
    }

    /// The descriptor for a store of `capacity` bytes in regions of `region` bytes.
    fn plan(capacity: u64, region: u64, o: &StoreOptions) -> Result<Descriptor> {
        let shard_size = match o.shard_size {
            Some(s) if s > 0 && region.is_multiple_of(s) => s,
            Some(s) => {
                return Err(StoreError::Options(format!(
                    "shard size {s} does not divide the region size {region}"
                )));
            }
            None => shard_size_for(region).ok_or_else(|| {
                StoreError::Options(format!("no shard size divides the region size {region}"))
            })?,
        };
        if shard_size > crate::options::MAX_SHARD {
            return Err(StoreError::Options(format!(
                "shard size {shard_size} above the limit of {}",
                crate::options::MAX_SHARD
            )));
        }
        let shards = u32::try_from(capacity.div_ceil(shard_size).max(1))
            .map_err(|_| StoreError::Options(format!("capacity {capacity} is too large")))?;
        let avg_item = item::len(16, o.avg_value_size as usize);
        Ok(Descriptor::plan(
            shards,
            shard_size,
            avg_item,
            o.large_threshold,
            (o.ec_data, o.ec_parity),
        )?)
    }

    fn open(client: &Client, name: &str) -> Result<Self> {
        let cache = client.open(name)?;
        let head = cache.read(0, DESCRIPTOR_LEN as u64)?;
        let d = Descriptor::decode(&head)?;
        let lay = Layout(d);
        if lay.capacity() > cache.capacity() {
            return Err(StoreError::Format(
                farcache_kvformat::FormatError::Descriptor(format!(
                    "store spans {} bytes, its cache holds {}",
                    lay.capacity(),
                    cache.capacity()
                )),
            ));
        }
        Ok(Self::from_parts(cache, lay))
    }

    fn from_parts(cache: Cache, layout: Layout) -> Self {
        // Distinct per handle: the clock, the process and a per-process count.
        static HANDLES: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
        let n = HANDLES.fetch_add(0x9e37, Ordering::Relaxed);
        let holder = ((now_ms() as u16) ^ (std::process::id() as u16).rotate_left(7) ^ n) | 1;
        Self {
            inner: Arc::new(Inner {
                cache,
                layout,
                holder,
                free: Mutex::new(FreeCache::default()),
                pool: Default::default(),
                hot: Default::default(),
                slow_homes: Mutex::new(Vec::new()),
                any_slow_home: Default::default(),
            }),
        }
    }

    /// The cache holding the store.
    pub fn cache(&self) -> &Cache {
        &self.inner.cache
    }

    pub fn descriptor(&self) -> Descriptor {
        self.inner.layout.0
    }

    /// Largest value stored whole (larger ones are erasure coded).
    ///
    /// Also the largest piece of an erasure-coded chunk.
    pub fn max_small_value(&self) -> u64 {
        let d = self.inner.layout.0;
        let heap = d.shard_size - self.inner.layout.heap_start();
        // A class must fit a quarter of a shard's heap, and a reply must carry it.
        let by_heap = heap / 4 - (item::HEADER + item::MAX_KEY) as u64;
        let by_reply = (2 << 20) - (wire::GET_HEAD + item::HEADER + item::MAX_KEY) as u64;
        d.large_threshold.min(by_heap).min(by_reply)
    }

    pub(crate) fn check_key(key: &[u8]) -> Result<()> {
        if key.starts_with(&hash::PLACED) {
            return Err(StoreError::Key(
                "keys starting with ff fe 46 43 are reserved for the store's own items".into(),
            ));
        }
        if key.len() > item::MAX_KEY {
            return Err(StoreError::Key(format!(
                "{} bytes, the limit is {}",
                key.len(),
                item::MAX_KEY
            )));
        }
        Ok(())
    }

    pub(crate) fn locate(&self, key: &[u8]) -> KeyHash {
        let d = self.inner.layout.0;
        hash::locate(key, d.shards, d.buckets)
    }

    /// Appends the lookup of `key` to `b`.
    pub(crate) fn push_lookup(
        &self,
        b: &mut farcache_client::Batch,
        probe: Probe,
        key: &[u8],
        h: KeyHash,
        now: u64,
        args: &mut Vec<u8>,
    ) -> usize {
        let lay = &self.inner.layout;
        let (proc, mode) = match probe {
            Probe::Value | Probe::Home => (wire::KV_GET, wire::MODE_VALUE),
            Probe::Exists => (wire::KV_GET, wire::MODE_EXISTS),
            Probe::Find => (wire::KV_FIND, wire::MODE_VALUE),
            Probe::Entry => (wire::KV_GET, wire::MODE_ENTRY),
            Probe::FindEntry => (wire::KV_FIND, wire::MODE_ENTRY),
        };
        args.clear();
        Lookup {
            mode,
            tag: h.tag,
            now_ms: now,
            shard_base: lay.shard_base(h.shard),
            refs_addr: lay.refs_addr(h.shard, h.bucket),
            key,
        }
        .encode_into(args);
        b.execute(proc, lay.bucket_addr(h.shard, h.bucket), args)
    }

    /// The value of `key`, or `None` if it is absent or expired. One round trip.
    ///
    /// If the key's home server has not answered after [`HEDGE_AFTER`] (stopped,
    /// or far behind), the GET also looks for an erasure-coded value's manifest
    /// copies on the other servers and reads the value from its chunks, so a stopped
    /// home holds up coded values no more than a stopped chunk server does. Small
    /// values have one home, and wait for it.
    pub fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        Self::check_key(key)?;
        let started = std::time::Instant::now();
        let mut hedged = false;
        let wait_home = match self.slow_home(key, started) {
            true => std::time::Duration::ZERO,
            false => HEDGE_AFTER,
        };
        let mut l = Lookups::new(self, vec![key], Probe::Value);
        loop {
            let t = l.batch(self).submit();
            let r = match hedged {
                true => t.wait(),
                false => match t.wait_until(started + wait_home) {
                    Ok(r) => r,
                    Err(t) => {
                        hedged = true;
                        if let Some(v) = self.get_large_from_copies(key) {
                            self.mark_slow_home(key);
                            return Ok(Some(v));
                        }
                        t.wait()
                    }
                },
            };
            let pause = l.absorb(self, &r);
            if l.is_done() {
                break;
            }
            // Asked again (the home failed over, or is unreachable since the op
            // timeout failed its connection): past the hedge, try the copies once.
            if !hedged && started.elapsed() >= wait_home {
                hedged = true;
                if let Some(v) = self.get_large_from_copies(key) {
                    self.mark_slow_home(key);
                    return Ok(Some(v));
                }
            }
            if pause {
                crate::put::backoff(l.attempts);
            }
        }
        let raw = l.finish().pop().unwrap_or(Ok(None));
        self.resolve(key, raw, Probe::Value)
    }

    fn home_server(&self, key: &[u8]) -> u32 {
        self.server_of(&self.inner.cache.info(), self.locate(key).shard)
    }

    /// Whether `key`'s home server was read around by a hedge less than
    /// [`SLOW_HOME_FOR`] ago.
    fn slow_home(&self, key: &[u8], now: std::time::Instant) -> bool {
        if !self.inner.any_slow_home.load(Ordering::Relaxed) {
            return false;
        }
        let server = self.home_server(key);
        let mut slow = self.inner.slow_homes.lock();
        slow.retain(|&(_, until)| until > now);
        if slow.is_empty() {
            self.inner.any_slow_home.store(false, Ordering::Relaxed);
        }
        slow.iter().any(|&(s, _)| s == server)
    }

    fn mark_slow_home(&self, key: &[u8]) {
        let server = self.home_server(key);
        let until = std::time::Instant::now() + SLOW_HOME_FOR;
        let mut slow = self.inner.slow_homes.lock();
        match slow.iter_mut().find(|(s, _)| *s == server) {
            Some(e) => e.1 = until,
            None => slow.push((server, until)),
        }
        self.inner.any_slow_home.store(true, Ordering::Relaxed);
    }

    /// Whether `key` is present (and not expired).
    pub fn exists(&self, key: &[u8]) -> Result<bool> {
        Ok(self
            .lookup_many(&[key], Probe::Exists)?
            .pop()
            .ok_or_else(|| StoreError::Reply {
                proc: wire::KV_GET,
                reason: "no result".into(),
            })??
            .is_some())
    }

    /// Whether each of `keys` is present, in one batch (values are not sent).
    pub fn exists_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Result<bool>>> {
        Ok(self
            .lookup_many(keys, Probe::Exists)?
            .into_iter()
            .map(|r| r.map(|v| v.is_some()))
            .collect())
    }

    /// The values of `keys` in one batch (one round trip unless a bucket was busy;
    /// an erasure-coded value costs one more for its chunks).
    pub fn mget<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Result<Option<Bytes>>>> {
        self.lookup_many(keys, Probe::Value)
    }

    fn lookup_many<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        probe: Probe,
    ) -> Result<Vec<Result<Option<Bytes>>>> {
        self.submit_lookups(keys, probe).wait()
    }

    /// Sends the first round of an MGET and returns without waiting: several may be
    /// in flight from one thread (as with [`farcache_client::Batch::submit`]).
    pub fn mget_submit<'k, K: AsRef<[u8]>>(&'k self, keys: &'k [K]) -> PendingGets<'k, K> {
        self.submit_lookups(keys, Probe::Value)
    }

    fn submit_lookups<'k, K: AsRef<[u8]>>(
        &'k self,
        keys: &'k [K],
        probe: Probe,
    ) -> PendingGets<'k, K> {
        let (checked, at, out) = Self::check_keys(keys);
        let mut lookups = Lookups::new(self, checked, probe);
        let ticket = (!lookups.is_done()).then(|| lookups.batch(self).submit());
        PendingGets {
            store: self,
            keys,
            probe,
            lookups,
            ticket,
            at,
            out,
        }
    }

    /// The keys that pass [`Store::check_key`], their positions, and the results so
    /// far (the refusals).
    #[allow(clippy::type_complexity)]
    pub(crate) fn check_keys<K: AsRef<[u8]>>(
        keys: &[K],
    ) -> (Vec<&[u8]>, Vec<usize>, Vec<Option<Result<Option<Bytes>>>>) {
        let mut out: Vec<Option<Result<Option<Bytes>>>> = (0..keys.len()).map(|_| None).collect();
        let mut checked = Vec::with_capacity(keys.len());
        let mut at = Vec::with_capacity(keys.len());
        for (i, k) in keys.iter().enumerate() {
            match Self::check_key(k.as_ref()) {
                Ok(()) => {
                    checked.push(k.as_ref());
                    at.push(i);
                }
                Err(e) => out[i] = Some(Err(e)),
            }
        }
        (checked, at, out)
    }

    /// A user key's value from its lookup: erasure-coded values are read from their
    /// chunks, and a lost home shard falls back to a manifest copy.
    #[inline]
    pub(crate) fn resolve(&self, key: &[u8], r: RawLookup, probe: Probe) -> Result<Option<Bytes>> {
        match r {
            Ok(Some((flags, v))) if flags & item::FLAG_MANIFEST == 0 => Ok(Some(v)),
            Ok(Some((flags, v))) if flags & item::FLAG_MANIFEST != 0 => match probe {
                Probe::Value => self.get_large(key, &v),
                _ => Ok(Some(v)),
            },
            Ok(hit) => Ok(hit.map(|(_, v)| v)),
            Err(e) if probe == Probe::Value && self.home_unreadable(&e) => {
                // The home shard is gone; an erasure-coded value survives it.
                self.get_large_without_home(key, e)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether a lookup result needs more than its own reply (chunks or a copy).
    pub(crate) fn needs_more(r: &RawLookup, probe: Probe) -> bool {
        probe == Probe::Value
            && match r {
                Ok(Some((flags, _))) => flags & item::FLAG_MANIFEST != 0,
                Ok(None) => false,
                Err(_) => true,
            }
    }

    /// Lookups of keys the caller checked (the store's own placed keys included):
    /// on a hit, the item's flags and value.
    pub(crate) fn lookup_raw(&self, keys: &[&[u8]], probe: Probe) -> Vec<RawLookup> {
        let mut l = Lookups::new(self, keys.to_vec(), probe);
        while !l.is_done() {
            let r = l.batch(self).run();
            if l.absorb(self, &r) {
                crate::put::backoff(l.attempts);
            }
        }
        l.finish()
    }

    /// Status and, on a hit, (slot, reference byte, flags, value) of lookup `j`.
    #[allow(clippy::type_complexity)]
    pub(crate) fn get_reply(
        &self,
        r: &BatchResults,
        j: usize,
    ) -> Result<(u8, Option<(usize, u8, u8, Bytes)>)> {
        let raw = r.bytes(j)?;
        let g = GetReply::decode(&raw).map_err(|e| StoreError::Reply {
            proc: wire::KV_GET,
            reason: e.to_string(),
        })?;
        Ok(match g.status {
            wire::HIT => (
                wire::HIT,
                Some((
                    usize::from(g.slot),
                    g.referenced,
                    g.flags,
                    raw.slice(wire::GET_HEAD..),
                )),
            ),
            s => (s, None),
        })
    }

    /// The size class and item length for a key and value, checked against limits.
    pub(crate) fn item_class(&self, key: &[u8], value: &[u8]) -> Result<(u8, u32)> {
        let max = self.max_small_value();
        if value.len() as u64 > max {
            return Err(StoreError::ValueTooLarge {
                len: value.len() as u64,
                limit: max,
            });
        }
        let len = item::len(key.len(), value.len());
        let c = class::for_len(len).ok_or(StoreError::ValueTooLarge {
            len: value.len() as u64,
            limit: max,
        })?;
        Ok((c, class::size(c).unwrap_or(u32::MAX)))
    }
}
