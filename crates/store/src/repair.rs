//! Bringing a store back to full strength after servers died (InfiniCache's
//! recovery): shards whose bytes were lost are reset to empty; erasure-coded objects
//! that lost chunks are decoded from the rest and written again on live servers; a
//! manifest lost with its home shard is restored from a copy. [`Store::repair`] runs
//! once; [`Store::spawn_repairer`] runs it in the background.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use farcache_client::OpError;
use farcache_kvformat::SlotWord;
use farcache_kvformat::item;
use farcache_kvformat::layout::{DESCRIPTOR_LEN, GENERATION};
use farcache_kvformat::manifest::{self, Manifest};
use farcache_kvformat::wire::{self, Scan};

use crate::Result;
use crate::options::Condition;
use crate::put::{Entry, Guard, PutSpec};
use crate::store::{Probe, Store};

/// What one repair pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RepairReport {
    /// Shards whose bytes were lost with a server, reset to an empty shard.
    pub shards_reset: u32,
    /// Erasure-coded objects looked at.
    pub objects: u64,
    /// Objects whose lost chunks were rebuilt (the object is written again).
    pub objects_rebuilt: u64,
    /// Chunks that were missing in those.
    pub chunks_rebuilt: u64,
    /// Manifests restored under their key from a copy.
    pub homes_restored: u64,
    /// Objects with more than `p` chunks gone.
    pub unrecoverable: u64,
}

/// A background repairer; stops when dropped.
pub struct Repairer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Repairer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An object's manifests as found: under its key, and beside its chunks.
#[derive(Default)]
struct Found {
    home: Option<Manifest>,
    copies: Vec<(u32, Manifest)>,
}

impl Store {
    /// Runs [`Store::repair`] every `every` until the returned handle is dropped.
    pub fn spawn_repairer(&self, every: Duration) -> Repairer {
        let stop = Arc::new(AtomicBool::new(false));
        let (store, flag) = (self.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("farcache-store-repair".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    match store.repair() {
                        Ok(r)
                            if r != RepairReport {
                                objects: r.objects,
                                ..Default::default()
                            } =>
                        {
                            tracing::info!(?r, "store repaired")
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "store repair failed"),
                    }
                    let until = std::time::Instant::now() + every;
                    while !flag.load(Ordering::Relaxed) && std::time::Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            })
            .ok();
        Repairer { stop, thread }
    }

    /// One repair pass over the whole store.
    pub fn repair(&self) -> Result<RepairReport> {
        let mut report = RepairReport::default();
        let cache = &self.inner.cache;
        let lay = self.inner.layout;
        let _ = cache.refresh();
        // 1. Shards whose bytes died with a server start again empty.
        let mut b = cache.batch();
        for s in 0..lay.0.shards {
            b.read(lay.shard_base(s), DESCRIPTOR_LEN as u64);
        }
        let r = b.run();
        let desc = lay.0.encode();
        for s in 0..lay.0.shards {
            if let Some(OpError::DataLost { .. }) = r.error(s as usize) {
                let base = lay.shard_base(s);
                cache.clear_lost(base, lay.0.shard_size)?;
                // A new generation: handles drop what they kept of the old shard.
                let generation = (self.fresh_version(&base.to_le_bytes()) as u32).max(1);
                cache.write(base + GENERATION, &u64::from(generation).to_le_bytes())?;
                cache.write(base, &desc)?;
                report.shards_reset += 1;
            }
        }
        // 2. Every erasure-coded object, by its manifests.
        let mut objects: BTreeMap<Vec<u8>, Found> = BTreeMap::new();
        for s in 0..lay.0.shards {
            self.scan_manifests(s, &mut objects)?;
        }
        // 3. Each back to d + p chunks, a manifest under its key and beside each chunk.
        for (key, found) in objects {
            report.objects += 1;
            self.repair_object(&key, found, &mut report)?;
        }
        Ok(report)
    }

    fn scan_manifests(&self, shard: u32, into: &mut BTreeMap<Vec<u8>, Found>) -> Result<()> {
        let base = self.inner.layout.shard_base(shard);
        let mut from = 0;
        loop {
            let args = Scan {
                mask: item::FLAG_MANIFEST,
                from,
                max_bytes: 256 << 10,
                now_ms: 0,
            }
            .encode();
            let raw = self.inner.cache.execute(wire::KV_SCAN, base, &args)?;
            let (next, items) = wire::scan_reply(&raw)?;
            for (k, v) in items {
                let Ok(m) = Manifest::decode(v) else { continue };
                match manifest::copy_owner(k) {
                    Some(owner) => into
                        .entry(owner.to_vec())
                        .or_default()
                        .copies
                        .push((shard, m)),
                    None => into.entry(k.to_vec()).or_default().home = Some(m),
                }
            }
            if next == wire::SCAN_DONE || next <= from {
                return Ok(());
            }
            from = next;
        }
    }

    /// Which chunks of `m` have all their pieces.
    fn chunks_present(&self, key: &[u8], m: &Manifest) -> Vec<bool> {
        let keys: Vec<Vec<u8>> = (0..m.chunks())
            .flat_map(|c| {
                (0..m.pieces()).map(move |j| {
                    manifest::piece_key(m.piece_shard(c, j), m.version, c as u8, j, key)
                })
            })
            .collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let hits: Vec<bool> = self
            .lookup_raw(&refs, Probe::Exists)
            .into_iter()
            .map(|r| matches!(r, Ok(Some(_))))
            .collect();
        hits.chunks(m.pieces().max(1) as usize)
            .map(|c| c.iter().all(|&h| h))
            .collect()
    }

    fn repair_object(&self, key: &[u8], found: Found, report: &mut RepairReport) -> Result<()> {
        // The manifest under the key rules; without it, the newest copy (highest
        // `seq`) whose object can still be decoded.
        let candidates: Vec<Manifest> = match &found.home {
            Some(h) => vec![h.clone()],
            None => {
                let mut v: Vec<Manifest> = found.copies.iter().map(|(_, m)| m.clone()).collect();
                v.sort_by_key(|m| m.version);
                v.dedup_by_key(|m| m.version);
                v
            }
        };
        let Some((m, present)) = candidates
            .into_iter()
            .map(|m| {
                let p = self.chunks_present(key, &m);
                (m, p)
            })
            .max_by_key(|(m, p)| {
                let n = p.iter().filter(|&&x| x).count();
                (n + usize::from(m.parity) >= m.chunks(), m.seq, m.version, n)
            })
        else {
            return Ok(());
        };
        let missing = present.iter().filter(|&&p| !p).count();
        if missing > usize::from(m.parity) {
            report.unrecoverable += 1;
            return Ok(());
        }
        // What the key names now. A put, delete or expiry since the scan wins over
        // the repair; otherwise the rewrite is guarded by the slot word seen here, so
        // a put landing while the object is decoded and written is never replaced.
        let (guard, expires) = match self.current(key) {
            Ok(Some(c)) if c.flags & item::FLAG_MANIFEST != 0 => match Manifest::decode(&c.value) {
                Ok(cur) if cur.version == m.version => (Guard::Slot(c.word), c.expires_ms),
                _ => return Ok(()),
            },
            Ok(Some(_)) => return Ok(()),
            Ok(None) if found.home.is_some() => return Ok(()),
            // The manifest was lost with its home shard: restored only where no put
            // came since, with the expiry its copies carry.
            Ok(None) => (
                Guard::Cond(Condition::IfAbsent),
                self.copy_expiry(key, &m, &found),
            ),
            Err(e) => {
                tracing::debug!(error = %e, "repair: key unreadable, left for the next pass");
                return Ok(());
            }
        };
        let spec = PutSpec {
            expires: expires.unwrap_or(item::NO_EXPIRY),
            guard,
        };
        if missing > 0 {
            let Some(value) = self.get_large(key, &m.encode())? else {
                // Replaced while decoding (its chunks dropped) is not a loss.
                if matches!(guard, Guard::Slot(w) if self.still_names(key, w)) {
                    report.unrecoverable += 1;
                }
                return Ok(());
            };
            if self.put_large_spec(key, &value, spec, m.seq.saturating_add(1))? {
                // Pieces of the old version left on live shards (a put over the
                // manifest drops them itself).
                if !matches!(guard, Guard::Slot(_)) {
                    self.drop_object(key, &m);
                }
                report.objects_rebuilt += 1;
                report.chunks_rebuilt += missing as u64;
            }
            return Ok(());
        }
        let enc = m.encode();
        if found.home.is_none() {
            let home = Entry {
                key,
                value: &enc,
                flags: item::FLAG_MANIFEST,
            };
            if self.put_entries(&[home], spec).pop().unwrap_or(Ok(false))? {
                report.homes_restored += 1;
            }
        }
        let copies = PutSpec {
            guard: Guard::Cond(Condition::Always),
            ..spec
        };
        for c in 0..m.chunks() {
            let shard = m.copy_shard(c);
            if !found
                .copies
                .iter()
                .any(|(s, c)| *s == shard && c.version == m.version)
            {
                // Never over a newer put's copy (the key may have moved on).
                self.write_copy(key, &m, c, copies)?;
            }
        }
        Ok(())
    }

    /// Whether `key`'s slot still names the item `word` names.
    fn still_names(&self, key: &[u8], word: u64) -> bool {
        matches!(self.current(key), Ok(Some(c))
            if SlotWord::with_hot(c.word) == SlotWord::with_hot(word))
    }

    /// The expiry of `m`'s manifest copies (they are written with the object's).
    fn copy_expiry(&self, key: &[u8], m: &Manifest, found: &Found) -> Option<u64> {
        found
            .copies
            .iter()
            .filter(|(_, c)| c.version == m.version)
            .find_map(|(s, _)| self.current(&manifest::copy_key(*s, key)).ok().flatten())
            .and_then(|c| c.expires_ms)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::store::now_ms;
    use crate::{PutOptions, StoreExt, StoreOptions};
    use farcache_testkit::{ClusterOptions, LocalCluster};

    fn ec_store(c: &LocalCluster) -> crate::Store {
        c.client()
            .unwrap()
            .create_store(
                "ec",
                48 << 20,
                &StoreOptions {
                    large_threshold: 64 << 10,
                    ec_data: 2,
                    ec_parity: 1,
                    ..StoreOptions::default()
                },
            )
            .unwrap()
    }

    fn ec_cluster() -> LocalCluster {
        let opts = ClusterOptions::default()
            .servers(3)
            .region_size(1 << 20)
            .server_memory(96 << 20)
            .server_threads(2);
        LocalCluster::start(&opts).unwrap()
    }

    /// A writer that stops between its copies and its swap, or a put whose old copies
    /// were not all deleted, leaves copies of another version beside the newest. A
    /// reader without the home takes the newest (highest `seq`), wherever the stale
    /// ones sit.
    #[test]
    fn the_newest_manifest_copy_wins_over_lingering_ones() {
        let c = ec_cluster();
        let s = ec_store(&c);
        let shards = s.descriptor().shards;
        // A key whose newest copies are all past shard 0, so a stale copy there is
        // met first by a scan in shard order.
        let (key, stale, newest) = (0..)
            .find_map(|i| {
                let key = format!("obj{i}").into_bytes();
                s.put(&key, &vec![1u8; 100_000]).unwrap();
                let a = s.manifest(&key).unwrap().unwrap();
                s.put(&key, &vec![2u8; 100_000]).unwrap();
                let b = s.manifest(&key).unwrap().unwrap();
                let copies: Vec<u32> = (0..b.chunks()).map(|c| b.copy_shard(c)).collect();
                (!copies.contains(&0)).then_some((key, a, b))
            })
            .unwrap();
        assert!(
            newest.seq > stale.seq,
            "a put orders above what it replaced"
        );
        assert_eq!(s.find_copy(&key), Some(newest.clone()));
        let copies: Vec<u32> = (0..newest.chunks()).map(|c| newest.copy_shard(c)).collect();
        let enc = stale.encode();
        for shard in (0..shards).filter(|s| !copies.contains(s)) {
            let ck = manifest::copy_key(shard, &key);
            let e = Entry {
                key: &ck,
                value: &enc,
                flags: item::FLAG_MANIFEST,
            };
            assert!(
                s.put_entries(&[e], PutOptions::default().into())
                    .pop()
                    .unwrap()
                    .unwrap()
            );
        }
        assert_eq!(s.find_copy(&key), Some(newest));
    }

    /// A put that loses its swap (a repair-like rewrite guarded by a word that has
    /// gone) after writing its copies over the winner's (same placement, higher
    /// `seq`) leaves every copy beside the winner's chunks naming the winner.
    #[test]
    fn a_put_that_loses_leaves_the_winners_copies() {
        let c = ec_cluster();
        let s = ec_store(&c);
        let key: &[u8] = b"race";
        s.put(key, &vec![1u8; 100_000]).unwrap();
        let stale = s.current(key).unwrap().unwrap().word;
        s.put(key, &vec![2u8; 100_000]).unwrap();
        let winner = s.manifest(key).unwrap().unwrap();
        let spec = PutSpec {
            expires: item::NO_EXPIRY,
            guard: Guard::Slot(stale),
        };
        assert!(!s.put_large_spec(key, &vec![3u8; 100_000], spec, 0).unwrap());
        assert_eq!(s.manifest(key).unwrap(), Some(winner.clone()));
        for c in 0..winner.chunks() {
            let ck = manifest::copy_key(winner.copy_shard(c), key);
            let copy = s.current(&ck).unwrap().expect("a copy beside every chunk");
            assert_eq!(
                Manifest::decode(&copy.value).unwrap().version,
                winner.version,
                "chunk {c}'s copy names another object"
            );
        }
        assert_eq!(s.find_copy(key).map(|m| m.version), Some(winner.version));
        assert_eq!(s.get(key).unwrap().unwrap()[..], vec![2u8; 100_000][..]);
    }

    /// Writers and losing rewrites race on one key from four threads; when they
    /// stop, every copy beside the winner's chunks names the winner.
    #[test]
    fn racing_coded_puts_leave_the_winners_copies() {
        let c = ec_cluster();
        let s = ec_store(&c);
        let key: &[u8] = b"race";
        s.put(key, &vec![0u8; 100_000]).unwrap();
        let writers: Vec<_> = (0..4u8)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for i in 0..25u8 {
                        let v = vec![t * 60 + i + 1; 100_000];
                        if t >= 2 {
                            // A rewrite guarded by a word that is often gone by the swap.
                            let Some(cur) = s.current(key).unwrap() else {
                                continue;
                            };
                            let spec = PutSpec {
                                expires: item::NO_EXPIRY,
                                guard: Guard::Slot(cur.word),
                            };
                            s.put_large_spec(key, &v, spec, 0).unwrap();
                        } else {
                            s.put(key, &v).unwrap();
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let home = s.manifest(key).unwrap().unwrap();
        for c in 0..home.chunks() {
            let ck = manifest::copy_key(home.copy_shard(c), key);
            let copy = s.current(&ck).unwrap().expect("a copy beside every chunk");
            assert_eq!(
                Manifest::decode(&copy.value).unwrap().version,
                home.version,
                "chunk {c}'s copy names another object"
            );
        }
        assert_eq!(s.find_copy(key).map(|m| m.version), Some(home.version));
        let v = s.get(key).unwrap().unwrap();
        assert!(v.iter().all(|&b| b == v[0]), "torn value");
    }

    /// The step a repair takes after decoding: a rewrite guarded by the slot word it
    /// saw. A put that lands in between wins; without one, the rewrite carries the
    /// expiry it was given.
    #[test]
    fn a_guarded_rewrite_never_replaces_a_newer_put() {
        let c = ec_cluster();
        let s = ec_store(&c);
        let (old, new) = (vec![1u8; 100_000], vec![2u8; 100_000]);
        let hour = Duration::from_secs(3600);
        assert!(s.put_with(b"k", &old, PutOptions::ttl(hour)).unwrap());
        let seen = s.current(b"k").unwrap().unwrap();
        assert!(seen.expires_ms.is_some());
        s.put(b"k", &new).unwrap();
        let stale = PutSpec {
            expires: seen.expires_ms.unwrap(),
            guard: Guard::Slot(seen.word),
        };
        assert!(!s.put_large_spec(b"k", &old, stale, 0).unwrap());
        assert_eq!(s.get(b"k").unwrap().unwrap()[..], new[..]);
        assert!(s.still_names(b"k", s.current(b"k").unwrap().unwrap().word));
        assert!(!s.still_names(b"k", seen.word));

        let now = s.current(b"k").unwrap().unwrap();
        let expires = now_ms() + 2 * 3_600_000;
        let fresh = PutSpec {
            expires,
            guard: Guard::Slot(now.word),
        };
        assert!(s.put_large_spec(b"k", &new, fresh, 0).unwrap());
        let e = s.entry(b"k").unwrap().unwrap();
        assert_eq!((&e.value[..], e.expires_ms), (&new[..], Some(expires)));

        // Small items take the same guard.
        s.put(b"small", b"v1").unwrap();
        let w = s.current(b"small").unwrap().unwrap().word;
        s.put(b"small", b"v2").unwrap();
        let entry = Entry {
            key: b"small",
            value: b"v0",
            flags: 0,
        };
        let spec = PutSpec {
            expires: item::NO_EXPIRY,
            guard: Guard::Slot(w),
        };
        assert!(!s.put_entries(&[entry], spec).pop().unwrap().unwrap());
        assert_eq!(s.get(b"small").unwrap().unwrap()[..], b"v2"[..]);
    }
}
