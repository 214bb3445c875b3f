//! The read path: GET, EXISTS and MGET, each key looked up in one `kv_get` on its
//! home server and, for erasure-coded values, read from its chunks; a home that is
//! slow to answer is read around through the manifest copies (hedged reads).

use std::sync::atomic::Ordering;

use bytes::Bytes;
use farcache_client::BatchResults;
use farcache_kvformat::hash::KeyHash;
use farcache_kvformat::item;
use farcache_kvformat::wire::{self, GetReply, Lookup};

use crate::lookup::{Lookups, RawLookup};
use crate::store::{HEDGE_AFTER, Probe, Store};
use crate::{Result, StoreError};

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

impl Store {
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
}
