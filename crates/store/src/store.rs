//! The store handle: creating and opening a store, and the read path.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use farcache_client::{Cache, Client, CreateOptions};
use farcache_kvformat::hash::{self, KeyHash};
use farcache_kvformat::layout::{self, DESCRIPTOR_LEN};
use farcache_kvformat::wire;
use farcache_kvformat::{Descriptor, Layout, class, item};
use parking_lot::Mutex;

use crate::free::FreeCache;
use crate::options::{StoreOptions, shard_size_for};
use crate::{Result, StoreError};

/// Attempts at a key whose bucket keeps changing before [`StoreError::Contended`].
pub(crate) const MAX_ATTEMPTS: u32 = 128;
/// How long store calls keep retrying [transient](StoreError::is_transient) failures
/// (a failover takes a few heartbeat intervals).
pub const TRANSIENT_BUDGET: std::time::Duration = std::time::Duration::from_secs(15);

/// How long [`Store::get`] waits for a key's home before it also reads an
/// erasure-coded value through its manifest copies. Far above a healthy lookup
/// (tens of µs), far below the client's op timeout (10 s by default).
pub const HEDGE_AFTER: std::time::Duration = std::time::Duration::from_millis(50);

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
    pub pool: crate::pool::PoolCell,
    /// Hot keys this handle knows of, and server load estimates.
    pub hot: crate::hot_state::HotState,
    /// Servers a GET recently read around (its home did not answer within the
    /// hedge), and until when: GETs homed there hedge at once.
    pub slow_homes: Mutex<Vec<(u32, std::time::Instant)>>,
    /// `slow_homes` is not empty (GETs skip its lock otherwise).
    pub any_slow_home: std::sync::atomic::AtomicBool,
    /// Puts try `kv_put` first (one round trip); off when a server lacks it, or
    /// when asked ([`Store::set_one_round_puts`]).
    pub one_round_puts: std::sync::atomic::AtomicBool,
    /// The value length each recently edited key had after its edits (see
    /// `Store::edit_values`): the size of the item offered for its next edits.
    pub edit_lengths: Mutex<std::collections::HashMap<Vec<u8>, u64>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Items this handle kept for reuse go back to the shared lists.
        let cached = self.free.get_mut().drain();
        if let Err(e) = crate::free::push_all(&self.cache, &self.layout, cached) {
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
                one_round_puts: std::sync::atomic::AtomicBool::new(true),
                edit_lengths: Mutex::default(),
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
