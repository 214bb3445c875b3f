//! The slow road of a put: a key whose buckets have no empty slot left goes in under
//! its home bucket's lock (a tombstone, else an eviction); and the repairs a failed
//! item write needs.

use super::*;

impl Store {
    /// After a swap whose item write failed: points the slot away from the item
    /// (a tombstone) if it still points there, so no reader meets a partial item.
    pub(super) fn unpublish(&self, job: &mut Job<'_>, new: u64) {
        let lay = self.inner.layout;
        let mut undone = false;
        let home = job.h.bucket;
        for (bucket, s) in [home, Layout::pair(home)]
            .into_iter()
            .flat_map(|b| (0..SLOTS).map(move |s| (b, s)))
        {
            let at = lay.slot_addr(job.h.shard, bucket, s);
            if let Ok(seen) = self.inner.cache.cas(at, new, TOMB)
                && seen == new
            {
                undone = true;
                break;
            }
        }
        if undone {
            job.written = false;
        } else {
            abandon(job);
        }
    }

    /// Gives `job` an item if it has none (shared free list or eviction).
    pub(super) fn ensure_item(&self, job: &mut Job<'_>) -> Result<()> {
        if job.item.is_none() {
            job.item = Some(self.alloc_slow(job.h.shard, job.class)?);
            job.written = false;
        }
        Ok(())
    }

    /// Puts `job` whose home and pair buckets had no empty slot, under the home
    /// bucket's lock: reuses a tombstone, else evicts the bucket's least recently
    /// referenced item.
    pub(super) fn put_locked(&self, job: &mut Job<'_>) -> PutResult {
        let cache = &self.inner.cache;
        let lay = self.inner.layout;
        let (shard, bucket) = (job.h.shard, job.h.bucket);
        let lock_at = lay.lock_addr(shard, bucket);
        let mut backoff = Duration::from_micros(20);
        for _ in 0..MAX_ATTEMPTS {
            let now = now_ms();
            let f = self.find(job.key, job.h, now)?;
            if f.pair {
                // The key is in the pair bucket, or that has room after all: no
                // lock (the words are the pair's, and so would be the lock).
                match self.put_found(job, now, false)? {
                    Some(res) => return Ok(res),
                    None => continue,
                }
            }
            let lock = LockWord(f.words[SLOTS]);
            if !lock.takeable(now) {
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(5));
                continue;
            }
            let mine = LockWord::held(self.inner.holder, now + LEASE_MS);
            if cache.cas(lock_at, lock.0, mine.0)? != lock.0 {
                continue;
            }
            let r = self.put_found(job, now, true);
            // Release only our own lease (someone may have broken an expired one).
            let _ = cache.cas(lock_at, mine.0, LockWord::FREE.0);
            match r? {
                Some(res) => return Ok(res),
                None => continue,
            }
        }
        Err(StoreError::Contended {
            attempts: MAX_ATTEMPTS,
        })
    }

    /// The put after a fresh find; `None` when a slot changed under it. Only with
    /// the home bucket `locked` may it take a tombstone or evict: a new key may take
    /// only the first empty slot otherwise, which every insert of it races for.
    fn put_found(&self, job: &mut Job<'_>, now: u64, locked: bool) -> Result<Option<bool>> {
        let cache = &self.inner.cache;
        let lay = self.inner.layout;
        let f = self.find(job.key, job.h, now)?;
        if f.status == wire::BUSY {
            return Ok(None);
        }
        if !job.guard.allows(&f) {
            return Ok(Some(false));
        }
        let first_empty = f.words[..SLOTS].iter().position(|&w| w == EMPTY);
        let home = job.h.bucket;
        let (bucket, s, expect) = match (f.slot, first_empty) {
            (Some(s), _) => (f.bucket(home), usize::from(s), f.words[usize::from(s)]),
            (None, Some(s)) => (f.bucket(home), s, EMPTY),
            (None, None) if !locked || f.pair => return Ok(None),
            (None, None) => self.room_under_lock(job, &f)?,
        };
        self.ensure_item(job)?;
        let Some(off) = job.item else { return Ok(None) };
        let mut b = cache.batch();
        let mut wi = None;
        if !job.written {
            let mut buf = Vec::new();
            item::encode_into(&mut buf, job.key, job.value, job.expires, job.flags);
            wi = Some(b.write(lay.shard_base(job.h.shard) + off, &buf));
        }
        let new = if f.slot.is_some() {
            keep_hot(
                expect,
                SlotWord::new(job.h.tag, job.word_class(), off)
                    .after(expect)
                    .0,
            )
        } else {
            SlotWord::new(job.h.tag, job.word_class(), off)
                .after(expect)
                .0
        };
        let ci = b.cas(lay.slot_addr(job.h.shard, bucket, s), expect, new);
        let r = b.run();
        let swapped_at = std::time::Instant::now();
        let swapped = match r.value(ci) {
            Ok(seen) => seen == expect,
            Err(e) => {
                abandon(job);
                return Err(e.into());
            }
        };
        if let Some(e) = wi.and_then(|wi| r.error(wi).cloned()) {
            if swapped {
                self.unpublish(job, new);
            }
            return Err(e.into());
        }
        job.written = true;
        if !swapped {
            return Ok(None);
        }
        job.cas = Some((ci, expect, new));
        if f.slot.is_some() && SlotWord(expect).is_hot() {
            self.drop_copy(job.key, job.h.shard);
            self.inner.hot.wait_lease(swapped_at);
        }
        if SlotWord::is_item(expect) {
            let old = SlotWord(expect);
            if f.slot.is_none() {
                // An eviction to make room.
                cache.fetch_add(
                    lay.shard_base(job.h.shard) + farcache_kvformat::layout::EVICTIONS,
                    1,
                )?;
            }
            self.retire(job.h.shard, old, f.generation);
        }
        Ok(Some(true))
    }

    /// A slot for a new key when neither of its buckets has an empty one, with the
    /// home bucket locked (`f` is its find, with home's words): a tombstone at home,
    /// else one in the pair, else the least recently referenced item of either
    /// (CLOCK byte 0 first; hot keys are not evicted, their copies would outlive
    /// them). Holding the home lock serialises every such insert of the key, so it
    /// may take any of them; keys of the pair's own take the pair's lock, and the
    /// slot's compare-and-swap settles a meeting.
    fn room_under_lock(&self, job: &Job<'_>, f: &FindReply) -> Result<(u32, usize, u64)> {
        let home = job.h.bucket;
        if let Some(s) = f.words[..SLOTS].iter().position(|&w| w == TOMB) {
            return Ok((home, s, TOMB));
        }
        let lay = self.inner.layout;
        let pair = Layout::pair(home);
        let mut b = self.inner.cache.batch();
        let wi = b.read(lay.bucket_addr(job.h.shard, pair), SLOTS as u64 * 8);
        let ri = b.read(lay.refs_addr(job.h.shard, pair), SLOTS as u64);
        let r = b.run();
        let (raw, refs) = (r.data(wi)?, r.data(ri)?);
        let pair_words: Vec<u64> = raw.chunks_exact(8).map(crate::free::le).collect();
        if let Some(s) = pair_words.iter().position(|&w| w == TOMB) {
            return Ok((pair, s, TOMB));
        }
        let home_items = (0..SLOTS).map(|s| (home, s, f.words[s], f.refs[s]));
        let pair_items = pair_words
            .iter()
            .zip(refs.iter())
            .enumerate()
            .map(|(s, (&w, &r))| (pair, s, w, r));
        home_items
            .chain(pair_items)
            .filter(|&(_, _, w, _)| SlotWord::is_item(w) && !SlotWord(w).is_hot())
            .min_by_key(|&(_, _, _, r)| r)
            .map(|(b, s, w, _)| (b, s, w))
            .ok_or(StoreError::Full {
                shard: job.h.shard,
                size: job.size,
            })
    }
}
