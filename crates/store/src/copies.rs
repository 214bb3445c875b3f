//! Manifest copies of erasure-coded objects: one beside every chunk, so an object
//! outlives its home shard. Copies of two objects of one key placed alike share
//! their keys, so they only move forward in (`seq`, version); readers without the
//! home (a lost home, or a GET's hedge past a slow one) take the newest.

use std::time::Duration;

use bytes::Bytes;
use farcache_client::Ticket;
use farcache_kvformat::item;
use farcache_kvformat::manifest::{self, Manifest};

use crate::lookup::Lookups;
use crate::options::Condition;
use crate::put::{Entry, Guard, PutSpec};
use crate::store::{MAX_ATTEMPTS, Probe, Store};
use crate::{Result, StoreError};

impl Store {
    /// Writes the copy of `m` beside chunk `c` (after the chunk: a copy names only
    /// pieces that are there).
    /// Copies only move forward in (`seq`, `version`): a put that lost a race, or a
    /// repair, never replaces a newer object's copy.
    pub(crate) fn write_copy(
        &self,
        key: &[u8],
        m: &Manifest,
        c: usize,
        spec: PutSpec,
    ) -> Result<()> {
        let menc = m.encode();
        let ck = manifest::copy_key(m.copy_shard(c), key);
        for _ in 0..MAX_ATTEMPTS {
            let guard = match self.current(&ck)? {
                Some(cur) => match Manifest::decode(&cur.value) {
                    Ok(o) if newest_first(&o, m) => return Ok(()),
                    _ => Guard::Slot(cur.word),
                },
                None => Guard::Cond(Condition::IfAbsent),
            };
            let copy = Entry {
                key: &ck,
                value: &menc,
                flags: item::FLAG_MANIFEST,
            };
            let put = PutSpec { guard, ..spec };
            if self.put_entries(&[copy], put).pop().unwrap_or(Ok(false))? {
                return Ok(());
            }
        }
        Err(StoreError::Contended {
            attempts: MAX_ATTEMPTS,
        })
    }

    /// After this put's swap failed for good: drops its object, then writes the
    /// copies of whatever the key names now (its own copy writes may have taken
    /// their place, and dropping them left those shards without one).
    pub(crate) fn lost_race(&self, key: &[u8], m: &Manifest, spec: PutSpec) {
        self.drop_object(key, m);
        if let Ok(Some(cur)) = self.current(key)
            && cur.flags & item::FLAG_MANIFEST != 0
            && let Ok(now) = Manifest::decode(&cur.value)
        {
            let spec = PutSpec {
                expires: cur.expires_ms.unwrap_or(item::NO_EXPIRY),
                ..spec
            };
            for c in 0..now.chunks() {
                let _ = self.write_copy(key, &now, c, spec);
            }
        }
    }

    /// An erasure-coded value of `key` read without its home (a GET's hedge): the
    /// newest manifest copy among the servers that answer (see
    /// [`Store::find_copy_within`]), then its chunks. `None` if it is not coded, or
    /// not readable so.
    pub(crate) fn get_large_from_copies(&self, key: &[u8]) -> Option<Bytes> {
        let desc = self.inner.layout.0;
        if desc.ec_data == 0 || desc.ec_parity == 0 {
            return None;
        }
        let m = self.find_copy_within(key, crate::store::HEDGE_AFTER)?;
        tracing::debug!(seq = m.seq, "get: home slow, read through a manifest copy");
        self.get_large(key, &m.encode()).ok().flatten()
    }

    /// The newest manifest copy of `key` among the servers that answer within
    /// `budget`, asked for all at once. `None` unless all but at most `p` servers
    /// answered: an object's `d + p` copies are on distinct servers, so then at
    /// least `d` copies of the newest object were among the answers, and no older
    /// copy can outrank them.
    pub(crate) fn find_copy_within(&self, key: &[u8], budget: Duration) -> Option<Manifest> {
        let mut by_server: Vec<(u32, Vec<Vec<u8>>)> = Vec::new();
        for (shard, server) in self.shard_servers().into_iter().enumerate() {
            let Some(server) = server else { continue };
            let ck = manifest::copy_key(shard as u32, key);
            match by_server.iter_mut().find(|(s, _)| *s == server) {
                Some((_, keys)) => keys.push(ck),
                None => by_server.push((server, vec![ck])),
            }
        }
        let total = by_server.len();
        // On fewer servers than `d + p`, objects are coded with less parity (see
        // `large::coding_for`), some with none: then every server must answer.
        let d = self.inner.layout.0;
        let parity = if total >= usize::from(d.ec_data) + usize::from(d.ec_parity) {
            usize::from(d.ec_parity)
        } else {
            0
        };
        let need = total.saturating_sub(parity).max(1);
        let mut pending: Vec<(Lookups<'_>, Ticket)> = by_server
            .iter()
            .map(|(_, keys)| {
                let mut l =
                    Lookups::new(self, keys.iter().map(Vec::as_slice).collect(), Probe::Value);
                let t = l.batch(self).submit();
                (l, t)
            })
            .collect();
        let start = std::time::Instant::now();
        let (mut answered, mut best): (usize, Option<Manifest>) = (0, None);
        while answered < total && !pending.is_empty() {
            let mut i = 0;
            while i < pending.len() {
                let Some(r) = pending[i].1.try_take() else {
                    i += 1;
                    continue;
                };
                let (mut l, _) = pending.swap_remove(i);
                l.absorb(self, &r);
                // Only a server that answered every key counts (a failed or busy
                // lookup is not an absent copy).
                if !l.is_done() {
                    continue;
                }
                let found = l.finish();
                if found.iter().any(|f| f.is_err()) {
                    continue;
                }
                answered += 1;
                for f in found {
                    if let Ok(Some((flags, v))) = f
                        && flags & item::FLAG_MANIFEST != 0
                        && let Ok(m) = Manifest::decode(&v)
                        && best.as_ref().is_none_or(|b| newest_first(&m, b))
                    {
                        best = Some(m);
                    }
                }
            }
            if answered >= need || start.elapsed() >= budget {
                break;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        best.filter(|_| answered >= need)
    }

    /// The newest manifest copy of `key` on any shard (highest `seq`).
    pub(crate) fn find_copy(&self, key: &[u8]) -> Option<Manifest> {
        let shards = self.inner.layout.0.shards;
        let keys: Vec<Vec<u8>> = (0..shards).map(|s| manifest::copy_key(s, key)).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        self.lookup_raw(&refs, Probe::Value)
            .into_iter()
            .filter_map(|r| match r {
                Ok(Some((flags, v))) if flags & item::FLAG_MANIFEST != 0 => {
                    Manifest::decode(&v).ok()
                }
                _ => None,
            })
            .max_by_key(|m| (m.seq, m.version))
    }
}

/// Whether `a` is at least as new as `b`: higher `seq`, ties broken by version (two
/// puts may take the same clock millisecond).
pub(crate) fn newest_first(a: &Manifest, b: &Manifest) -> bool {
    (a.seq, a.version) >= (b.seq, b.version)
}
