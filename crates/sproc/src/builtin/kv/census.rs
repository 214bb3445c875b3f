//! A store's census and listings: `kv_stats` (a shard's occupancy), `kv_hot` (the
//! server's heavy hitters), `kv_scan` (manifests, a page at a time).

use super::*;

/// `kv_stats`: one shard's census (live items, tombstones, bytes reserved against
/// bytes needed, heap carved), invoked at the shard's first byte with `now_ms`.
pub struct KvStats;

impl KvStats {
    pub const NAME: &'static str = wire::KV_STATS;
}

impl Procedure for KvStats {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, mem: &dyn Memory, addr: u64, args: &[u8]) -> Result<Outcome, SprocError> {
        const P: &str = wire::KV_STATS;
        let mut r = crate::args::ArgReader::new(P, args);
        let now_ms = r.u64("now_ms")?;
        r.end()?;
        let again = || args.to_vec();
        let mut head = [0u8; layout::DESCRIPTOR_LEN];
        if let Err(m) = mem.read(addr, &mut head) {
            return crate::builtin::on_miss(P, mem, m, addr, head.len() as u64, again);
        }
        let d = Descriptor::decode(&head).map_err(|e| SprocError::bad(P, e.to_string()))?;
        let lay = Layout(d);
        if !addr.is_multiple_of(d.shard_size) {
            return Err(SprocError::bad(P, "not invoked at a shard's first byte"));
        }
        let read = |at: u64| mem.read_u64(at).map_err(|m| (m, at));
        let counters =
            read(addr + layout::BUMP).and_then(|b| Ok((b, read(addr + layout::EVICTIONS)?)));
        let (bump, evictions) = match counters {
            Ok(c) => c,
            Err((m, at)) => return crate::builtin::on_miss(P, mem, m, at, 8, again),
        };
        let heap = d.shard_size - lay.heap_start();
        let mut s = ShardStats {
            carved: bump.min(heap),
            heap,
            evictions,
            ..Default::default()
        };
        let mut head = [0u8; item::HEADER];
        for b in 0..d.buckets {
            let at = addr + layout::INDEX + u64::from(b) * BUCKET_BYTES;
            let words = match read_words(mem, at) {
                Ok(w) => w,
                Err((m, at, len)) => {
                    return crate::builtin::on_miss(P, mem, m, at, len as u64, again);
                }
            };
            for &w in &words[..SLOTS] {
                match w {
                    farcache_kvformat::slot::EMPTY => s.empty += 1,
                    farcache_kvformat::slot::TOMB => s.tombstones += 1,
                    w => {
                        let sw = SlotWord(w);
                        let item_at = addr + sw.offset();
                        if let Err(m) = mem.read(item_at, &mut head) {
                            return crate::builtin::on_miss(P, mem, m, item_at, 24, again);
                        }
                        let (k, v) = item::lengths(&head).unwrap_or((0, 0));
                        let mut exp = [0u8; 8];
                        exp.copy_from_slice(&head[16..24]);
                        let exp = u64::from_le_bytes(exp);
                        if exp != item::NO_EXPIRY && exp <= now_ms {
                            s.expired += 1;
                        }
                        s.live += 1;
                        s.reserved += u64::from(class::size(sw.class()).unwrap_or(0));
                        s.requested += (item::HEADER + k + v) as u64;
                    }
                }
            }
        }
        Ok(Outcome::Done(s.encode()))
    }
}

/// `kv_hot`: this server's heavy hitters (from the sampled sketch) and its count of
/// lookups served. Invoked at any address the server holds; no arguments.
pub struct KvHot;

impl KvHot {
    pub const NAME: &'static str = wire::KV_HOT;
}

impl Procedure for KvHot {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, mem: &dyn Memory, _addr: u64, args: &[u8]) -> Result<Outcome, SprocError> {
        if !args.is_empty() {
            return Err(SprocError::bad(wire::KV_HOT, "takes no arguments"));
        }
        // The sketch is the whole server's: report only keys present in the caller's
        // own cache, so no tenant learns another cache's keys.
        let mut buf = Vec::new();
        let hot: Vec<wire::HotKey> = crate::builtin::hot::top()
            .into_iter()
            .filter(|h| in_this_cache(mem, h.shard_base, &h.key, &mut buf))
            .map(|h| wire::HotKey {
                shard_base: h.shard_base,
                count: h.count,
                key: h.key,
            })
            .collect();
        Ok(Outcome::Done(wire::encode_hot(
            crate::builtin::hot::lookups(),
            &hot,
        )))
    }
}

/// Whether `key` is in the store whose shard starts at `shard_base` in the cache
/// `mem` serves (a lookup there, as `kv_get` would do it).
fn in_this_cache(mem: &dyn Memory, shard_base: u64, key: &[u8], buf: &mut Vec<u8>) -> bool {
    let mut head = [0u8; layout::DESCRIPTOR_LEN];
    if mem.read(shard_base, &mut head).is_err() {
        return false;
    }
    let Ok(d) = Descriptor::decode(&head) else {
        return false;
    };
    let lay = Layout(d);
    let h = farcache_kvformat::hash::locate(key, d.shards, d.buckets);
    if lay.shard_base(h.shard) != shard_base {
        return false;
    }
    let l = Lookup {
        mode: wire::MODE_EXISTS,
        tag: h.tag,
        now_ms: 0,
        shard_base,
        refs_addr: lay.refs_addr(h.shard, h.bucket),
        key,
    };
    let (mut words, mut pair) = ([0u64; SLOTS + 1], false);
    matches!(
        lookup(
            mem,
            lay.bucket_addr(h.shard, h.bucket),
            &l,
            buf,
            &mut words,
            &mut pair
        ),
        Ok(Found::Hit { .. })
    )
}

/// `kv_scan`: the keys and values of a shard's items whose flags meet a mask (the
/// store's repair lists erasure-coded objects with it), or every live key (`SCAN`,
/// `KEYS`), a page at a time.
pub struct KvScan;

impl KvScan {
    pub const NAME: &'static str = wire::KV_SCAN;
}

impl Procedure for KvScan {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&self, mem: &dyn Memory, addr: u64, args: &[u8]) -> Result<Outcome, SprocError> {
        const P: &str = wire::KV_SCAN;
        let a = wire::Scan::decode(args).map_err(|e| SprocError::bad(P, e.to_string()))?;
        let again = || args.to_vec();
        let mut head = [0u8; layout::DESCRIPTOR_LEN];
        if let Err(m) = mem.read(addr, &mut head) {
            return crate::builtin::on_miss(P, mem, m, addr, head.len() as u64, again);
        }
        let d = Descriptor::decode(&head).map_err(|e| SprocError::bad(P, e.to_string()))?;
        if !addr.is_multiple_of(d.shard_size) {
            return Err(SprocError::bad(P, "not invoked at a shard's first byte"));
        }
        let max = (a.max_bytes as usize).clamp(4096, crate::procedure::MAX_OUTPUT / 2);
        let mut out = wire::SCAN_DONE.to_le_bytes().to_vec();
        let mut buf = Vec::new();
        for b in a.from..d.buckets {
            if out.len() >= max {
                out[..4].copy_from_slice(&b.to_le_bytes());
                break;
            }
            let at = addr + layout::INDEX + u64::from(b) * BUCKET_BYTES;
            let words = match read_words(mem, at) {
                Ok(w) => w,
                Err((m, at, len)) => {
                    return crate::builtin::on_miss(P, mem, m, at, len as u64, again);
                }
            };
            for &w in &words[..SLOTS] {
                if !SlotWord::is_item(w) {
                    continue;
                }
                let sw = SlotWord(w);
                let Some(size) = class::size(sw.class()) else {
                    continue;
                };
                let item_at = addr + sw.offset();
                buf.clear();
                buf.resize(size as usize, 0);
                if let Err(m) = mem.read(item_at, &mut buf) {
                    return crate::builtin::on_miss(P, mem, m, item_at, u64::from(size), again);
                }
                // Items changing under the scan are skipped; the caller scans again.
                let Ok(it) = item::decode(&buf) else { continue };
                if a.mask == wire::SCAN_KEYS {
                    if !it.expired(a.now_ms) {
                        out.extend_from_slice(&(it.key.len() as u32).to_le_bytes());
                        out.extend_from_slice(&0u32.to_le_bytes());
                        out.extend_from_slice(it.key);
                    }
                } else if it.flags & a.mask != 0 {
                    out.extend_from_slice(&(it.key.len() as u32).to_le_bytes());
                    out.extend_from_slice(&(it.value.len() as u32).to_le_bytes());
                    out.extend_from_slice(it.key);
                    out.extend_from_slice(it.value);
                }
            }
        }
        Ok(Outcome::Done(out))
    }
}
