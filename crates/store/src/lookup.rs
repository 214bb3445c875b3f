//! Reads of many keys in rounds, driven by a blocking or an async caller: each round
//! sends [`Lookups::batch`] and hands its results to [`Lookups::absorb`]; keys whose
//! bucket was busy, or whose server is failing over, go again.
//!
//! A round sends one `kv_mget` per server for up to [`MGET_KEYS`] of its keys (one
//! procedure run serves them all), a `kv_get` per key that is alone on its server,
//! was moved, or is read from a hot key's copy, and a `kv_find` per key for writes.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use farcache_client::{BatchResults, CacheInfo};
use farcache_kvformat::hash::KeyHash;
use farcache_kvformat::manifest::hot_key;
use farcache_kvformat::wire::{self, MgetKey};

use crate::store::{MAX_ATTEMPTS, Probe, Store, TRANSIENT_BUDGET, now_ms};
use crate::{Result, StoreError};

/// Keys per `kv_mget`.
pub const MGET_KEYS: usize = 128;

/// One key's lookup: on a hit, the item's flags and value.
pub(crate) type RawLookup = Result<Option<(u8, Bytes)>>;

/// What one op of a round asked.
enum Sent {
    /// Key `i` alone (from its copy if the flag is set).
    One(usize, bool),
    /// These keys, in this order, in one `kv_mget`.
    Many(Vec<usize>),
}

pub(crate) struct Lookups<'k> {
    keys: Vec<&'k [u8]>,
    /// Each key's home, hashed once.
    homes: Vec<KeyHash>,
    probe: Probe,
    out: Vec<Option<RawLookup>>,
    todo: Vec<usize>,
    pub attempts: u32,
    started: std::time::Instant,
    args: Vec<u8>,
    sent: Vec<Sent>,
    /// Per key: never again from a hot copy / never again in a `kv_mget`.
    home_only: Vec<bool>,
    alone: Vec<bool>,
}

/// Results go to slot `i` of `out`; keys to retry to `again`.
struct Sink<'a> {
    out: &'a mut [Option<RawLookup>],
    again: &'a mut Vec<usize>,
    touch: &'a mut farcache_client::Batch,
}

impl<'k> Lookups<'k> {
    pub fn new(store: &Store, keys: Vec<&'k [u8]>, probe: Probe) -> Self {
        Self {
            homes: keys.iter().map(|k| store.locate(k)).collect(),
            probe,
            out: (0..keys.len()).map(|_| None).collect(),
            todo: (0..keys.len()).collect(),
            attempts: 0,
            started: std::time::Instant::now(),
            args: Vec::new(),
            sent: Vec::new(),
            home_only: vec![false; keys.len()],
            alone: vec![false; keys.len()],
            keys,
        }
    }

    pub fn is_done(&self) -> bool {
        self.todo.is_empty()
    }

    /// The next round's lookups.
    pub fn batch(&mut self, store: &Store) -> farcache_client::Batch {
        self.attempts += 1;
        self.sent.clear();
        let now = now_ms();
        let mut b = store.inner.cache.batch().with_capacity(self.todo.len());
        let info = store.inner.cache.info();
        let route = self.probe == Probe::Value && store.inner.hot.any.load(Ordering::Relaxed);
        let mut hot = route.then(|| store.inner.hot.inner.lock());
        let grouped = self.probe != Probe::Find;
        // Keys by server (a cluster has few servers: a short list beats a map).
        let mut groups: Vec<(u32, Vec<usize>)> = Vec::new();
        for &i in &self.todo {
            let k = self.keys[i];
            let h = self.homes[i];
            if let Some(hot) = hot.as_mut()
                && !self.home_only[i]
            {
                let second = store.second_home(k, h.shard);
                let (hs, cs) = (
                    store.server_of(&info, h.shard),
                    store.server_of(&info, second),
                );
                if hot.prefer_copy(k, hs, cs) {
                    let ck = hot_key(second, k);
                    let h2 = store.locate(&ck);
                    store.push_lookup(&mut b, Probe::Value, &ck, h2, now, &mut self.args);
                    self.sent.push(Sent::One(i, true));
                    continue;
                }
            }
            if !grouped || self.alone[i] {
                store.push_lookup(&mut b, self.probe, k, h, now, &mut self.args);
                self.sent.push(Sent::One(i, false));
                continue;
            }
            let server = store.server_of(&info, h.shard);
            match groups.iter_mut().find(|(s, _)| *s == server) {
                Some((_, g)) => g.push(i),
                None => {
                    // Room for every key: a group never grows by reallocation.
                    let mut g = Vec::with_capacity(self.todo.len());
                    g.push(i);
                    groups.push((server, g));
                }
            }
        }
        drop(hot);
        let mode = if self.probe == Probe::Exists {
            wire::MODE_EXISTS
        } else {
            wire::MODE_VALUE
        };
        for (_, g) in groups {
            if g.len() <= MGET_KEYS {
                // The common case: the whole group in one `kv_mget`, its list kept.
                if self.push_keys(store, &mut b, mode, now, &g) {
                    self.sent.push(Sent::Many(g));
                }
                continue;
            }
            for chunk in g.chunks(MGET_KEYS) {
                if self.push_keys(store, &mut b, mode, now, chunk) {
                    self.sent.push(Sent::Many(chunk.to_vec()));
                }
            }
        }
        b
    }

    /// Appends the lookups of `keys` (all on one server): a `kv_get` for a lone key
    /// (recorded here), else one `kv_mget`, whose key list the caller records (true).
    fn push_keys(
        &mut self,
        store: &Store,
        b: &mut farcache_client::Batch,
        mode: u8,
        now: u64,
        keys: &[usize],
    ) -> bool {
        if let [i] = keys {
            let k = self.keys[*i];
            store.push_lookup(b, self.probe, k, self.homes[*i], now, &mut self.args);
            self.sent.push(Sent::One(*i, false));
            return false;
        }
        let lay = store.inner.layout;
        self.args.clear();
        wire::mget_head(&mut self.args, mode, now, keys.len() as u32);
        let mut first = 0;
        for (n, &i) in keys.iter().enumerate() {
            let h = self.homes[i];
            let bucket_addr = lay.bucket_addr(h.shard, h.bucket);
            if n == 0 {
                first = bucket_addr;
            }
            MgetKey {
                tag: h.tag,
                bucket_addr,
                shard_base: lay.shard_base(h.shard),
                refs_addr: lay.refs_addr(h.shard, h.bucket),
                key: self.keys[i],
            }
            .encode_into(&mut self.args);
        }
        b.execute(wire::KV_MGET, first, &self.args);
        true
    }

    /// Takes a round's results; true if keys go again after a pause.
    pub fn absorb(&mut self, store: &Store, r: &BatchResults) -> bool {
        let mut again = Vec::new();
        let mut touch = store.inner.cache.batch();
        let tracking = store.inner.hot.any.load(Ordering::Relaxed);
        let info = store.inner.cache.info();
        let sent = std::mem::take(&mut self.sent);
        let mut out = std::mem::take(&mut self.out);
        for (j, s) in sent.iter().enumerate() {
            let mut sink = Sink {
                out: &mut out,
                again: &mut again,
                touch: &mut touch,
            };
            match s {
                Sent::One(i, true) => {
                    if self.copy_reply(store, r, j, *i, tracking, &info, &mut sink) {
                        self.home_only[*i] = true;
                    }
                }
                Sent::One(i, false) => self.one_reply(store, r, j, *i, tracking, &info, &mut sink),
                Sent::Many(keys) => {
                    let moved = self.many_reply(store, r, j, keys, tracking, &info, &mut sink);
                    for i in moved {
                        self.alone[i] = true;
                    }
                }
            }
        }
        self.out = out;
        if !touch.is_empty() {
            // CLOCK's second chance: best effort, nobody waits for it.
            drop(touch.submit());
        }
        self.todo = again;
        !self.todo.is_empty() && self.attempts > 1
    }

    /// A failed op for key `i`: again if the failure is transient, else the error.
    fn failed(&mut self, e: StoreError, i: usize, sink: &mut Sink<'_>) {
        if e.is_transient() && self.started.elapsed() < TRANSIENT_BUDGET {
            // Failing over: the transient budget bounds these, not the attempts.
            self.attempts = self.attempts.min(MAX_ATTEMPTS - 1);
            sink.again.push(i);
        } else {
            sink.out[i] = Some(Err(e));
        }
    }

    /// A hit, miss or busy answer for key `i` from its home.
    #[allow(clippy::too_many_arguments)]
    fn answer(
        &mut self,
        store: &Store,
        i: usize,
        status: u8,
        hit: Option<(usize, u8, u8, Bytes)>,
        tracking: bool,
        sink: &mut Sink<'_>,
    ) {
        let key = self.keys[i];
        sink.out[i] = match (status, hit) {
            (wire::BUSY, _) if self.attempts < MAX_ATTEMPTS => {
                sink.again.push(i);
                return;
            }
            (wire::BUSY, _) => Some(Err(StoreError::Contended {
                attempts: self.attempts,
            })),
            (wire::HIT, Some((slot, referenced, flags, v))) => {
                if referenced == 0 {
                    let h = self.homes[i];
                    let at = store.inner.layout.reach_ref_addr(h.shard, h.bucket, slot);
                    sink.touch.write(at, &[1]);
                }
                let is_hot = flags & wire::REPLY_HOT != 0;
                if is_hot || tracking {
                    let hot = &store.inner.hot;
                    let any = hot.inner.lock().learn(key, is_hot);
                    hot.any.store(any, Ordering::Relaxed);
                }
                Some(Ok(Some((flags & !wire::REPLY_HOT, v))))
            }
            _ => Some(Ok(None)),
        };
    }

    fn observe(&self, store: &Store, info: &CacheInfo, shard: u32, load: u32) {
        let server = store.server_of(info, shard);
        store.inner.hot.inner.lock().observe(server, load);
    }

    /// The load figure in a `kv_get` reply, from the server holding `shard`.
    fn observe_get(&self, store: &Store, info: &CacheInfo, r: &BatchResults, j: usize, shard: u32) {
        if let Ok(raw) = r.data(j)
            && raw.len() >= wire::GET_HEAD
        {
            let load = u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]);
            self.observe(store, info, shard, load);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn one_reply(
        &mut self,
        store: &Store,
        r: &BatchResults,
        j: usize,
        i: usize,
        tracking: bool,
        info: &CacheInfo,
        sink: &mut Sink<'_>,
    ) {
        if tracking && self.probe != Probe::Find {
            self.observe_get(store, info, r, j, self.homes[i].shard);
        }
        match store.get_reply(r, j) {
            Ok((status, hit)) => self.answer(store, i, status, hit, tracking, sink),
            Err(e) => self.failed(e, i, sink),
        }
    }

    /// A read from a hot key's copy; true if the key must be read from its home.
    #[allow(clippy::too_many_arguments)]
    fn copy_reply(
        &mut self,
        store: &Store,
        r: &BatchResults,
        j: usize,
        i: usize,
        tracking: bool,
        info: &CacheInfo,
        sink: &mut Sink<'_>,
    ) -> bool {
        let key = self.keys[i];
        let second = store.second_home(key, self.homes[i].shard);
        if tracking {
            self.observe_get(store, info, r, j, second);
        }
        let copy = match store.get_reply(r, j) {
            Ok((wire::HIT, Some((_, _, _, v)))) => crate::hot_state::copy_value(&v, now_ms()),
            _ => None,
        };
        match copy {
            Some(v) => {
                store.inner.hot.copy_reads.fetch_add(1, Ordering::Relaxed);
                sink.out[i] = Some(Ok(Some((0, v))));
                false
            }
            None => {
                // Expired, missing or unreachable: the home has it.
                sink.again.push(i);
                true
            }
        }
    }

    /// A `kv_mget` reply; returns the keys to ask for alone.
    #[allow(clippy::too_many_arguments)]
    fn many_reply(
        &mut self,
        store: &Store,
        r: &BatchResults,
        j: usize,
        keys: &[usize],
        tracking: bool,
        info: &CacheInfo,
        sink: &mut Sink<'_>,
    ) -> Vec<usize> {
        let raw = match r.bytes(j) {
            Ok(raw) => raw,
            Err(e) => {
                let op = r.error(j).cloned();
                for &i in keys {
                    let e = op
                        .clone()
                        .map(StoreError::from)
                        .unwrap_or_else(|| StoreError::Reply {
                            proc: wire::KV_MGET,
                            reason: e.to_string(),
                        });
                    self.failed(e, i, sink);
                }
                return Vec::new();
            }
        };
        let (load, entries) = match wire::decode_mget_reply(&raw) {
            Ok(x) if x.1.len() == keys.len() => x,
            Ok(_) | Err(_) => {
                for &i in keys {
                    sink.out[i] = Some(Err(StoreError::Reply {
                        proc: wire::KV_MGET,
                        reason: "reply does not match the keys asked".into(),
                    }));
                }
                return Vec::new();
            }
        };
        if tracking && let Some(&i) = keys.first() {
            self.observe(store, info, self.homes[i].shard, load);
        }
        let mut alone = Vec::new();
        for (e, &i) in entries.iter().zip(keys) {
            match e.status {
                wire::MOVED => {
                    alone.push(i);
                    sink.again.push(i);
                }
                wire::AGAIN => sink.again.push(i),
                // A plain hit whose CLOCK byte is set: nothing to learn or touch.
                wire::HIT if e.referenced != 0 && !tracking && e.flags & wire::REPLY_HOT == 0 => {
                    sink.out[i] = Some(Ok(Some((e.flags, raw.slice(e.value.0..e.value.1)))));
                }
                status => {
                    let hit = (status == wire::HIT).then(|| {
                        (
                            usize::from(e.slot),
                            e.referenced,
                            e.flags,
                            raw.slice(e.value.0..e.value.1),
                        )
                    });
                    self.answer(store, i, status, hit, tracking, sink);
                }
            }
        }
        alone
    }

    pub fn finish(self) -> Vec<RawLookup> {
        self.out
            .into_iter()
            .map(|o| o.unwrap_or(Ok(None)))
            .collect()
    }
}
