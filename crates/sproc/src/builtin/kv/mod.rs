//! The keyed store's lookups (`farcache-kvformat` describes the layout): a key's
//! bucket and its item live in one shard on one server, so a GET is one run here.
//!
//! Items can be freed and reused while a lookup reads them, so a lookup trusts an
//! item only if its slot still points at it afterwards (else it reads the bucket
//! again, a few times, then answers `BUSY`) and its checksum holds (an item that
//! fails it while its slot stays put is damaged, and never returned).

use std::cell::RefCell;

use farcache_kvformat::layout::{BUCKET_BYTES, SLOTS};
use farcache_kvformat::slot::EMPTY;
use farcache_kvformat::wire::{self, FindReply, Lookup, ShardStats};
use farcache_kvformat::{Descriptor, Layout, SlotWord, class, item, layout};

use crate::memory::Miss;
use crate::procedure::run_by_into;
use crate::{Memory, Outcome, Procedure, SprocError};

/// Times a lookup re-reads a bucket that changed under it before answering BUSY.
const ATTEMPTS: usize = 8;
/// Bytes read at once for an item before its header says how long it is.
const FIRST_READ: usize = 256;

mod census;
mod edit;
mod find;
mod get;
mod put;

pub use census::{KvHot, KvScan, KvStats};
pub use edit::KvMedit;
pub use find::{KvFind, KvMfind};
pub use get::{KvGet, KvMget};
pub use put::{KvMput, KvPut};

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

enum Found {
    /// The key's slot (numbered home-then-pair, see `wire::REACH`) and word; its
    /// checked item is in the scratch buffer.
    Hit {
        slot: usize,
        word: u64,
        item: Checked,
    },
    Miss,
    Busy,
}

/// What a lookup learnt of the item it checked (its checksum is verified once).
#[derive(Clone, Copy)]
struct Checked {
    /// Where the value lies in the scratch buffer.
    value: (usize, usize),
    flags: u8,
    expires_ms: u64,
}

impl Checked {
    fn expired(&self, now_ms: u64) -> bool {
        self.expires_ms != item::NO_EXPIRY && self.expires_ms <= now_ms
    }
}

/// A failed read as the lookup's outcome: continue where the bucket is, or an error.
fn missed(
    proc: &'static str,
    mem: &dyn Memory,
    m: Miss,
    at: u64,
    len: usize,
    addr: u64,
    args: &[u8],
) -> Result<Outcome, SprocError> {
    super::on_miss(proc, mem, m, at, len as u64, || args.to_vec()).map(|o| match o {
        // Resume at the bucket (the item's region moved with it).
        Outcome::Continue { state, .. } => Outcome::Continue { addr, state },
        o => o,
    })
}

fn read_words(mem: &dyn Memory, addr: u64) -> Result<[u64; SLOTS + 1], (Miss, u64, usize)> {
    let mut raw = [0u8; BUCKET_BYTES as usize];
    mem.read(addr, &mut raw)
        .map_err(|m| (m, addr, BUCKET_BYTES as usize))?;
    let mut w = [0u64; SLOTS + 1];
    for (i, v) in w.iter_mut().enumerate() {
        let mut a = [0u8; 8];
        a.copy_from_slice(&raw[i * 8..i * 8 + 8]);
        *v = u64::from_le_bytes(a);
    }
    Ok(w)
}

/// Reads the item at `at` of class `size` into `buf`; its length if its header is
/// plausible, `None` if not (damaged, or being reused under us).
fn read_item(
    mem: &dyn Memory,
    at: u64,
    size: u32,
    buf: &mut Vec<u8>,
) -> Result<Option<usize>, (Miss, u64, usize)> {
    let first = (size as usize).min(FIRST_READ);
    buf.clear();
    buf.resize(first, 0);
    mem.read(at, buf).map_err(|m| (m, at, first))?;
    let Some((k, v)) = item::lengths(buf) else {
        return Ok(None);
    };
    let total = item::HEADER + k + v;
    if total > size as usize {
        return Ok(None);
    }
    if total > first {
        buf.resize(total, 0);
        mem.read(at + first as u64, &mut buf[first..])
            .map_err(|m| (m, at, total))?;
    }
    Ok(Some(total))
}

/// What one bucket's scan for a key found.
enum Scanned {
    Hit {
        slot: usize,
        word: u64,
        item: Checked,
    },
    Absent,
    /// A slot changed under the scan: look again.
    Changed,
}

/// Looks for `l.key` among the `words` of the bucket at `addr`. On a hit the item is
/// left in `buf`.
fn scan(
    mem: &dyn Memory,
    addr: u64,
    words: &[u64; SLOTS + 1],
    l: &Lookup<'_>,
    buf: &mut Vec<u8>,
) -> Result<Scanned, (Miss, u64, usize)> {
    for (i, &w) in words[..SLOTS].iter().enumerate() {
        if !SlotWord::is_item(w) || SlotWord(w).tag() != l.tag {
            continue;
        }
        let slot_at = addr + i as u64 * 8;
        let sw = SlotWord(w);
        let whole = match class::size(sw.class()) {
            Some(size) => read_item(mem, l.shard_base.saturating_add(sw.offset()), size, buf)?,
            None => None,
        };
        // Whatever was read counts only if the slot still points at it: if not,
        // the item was replaced (and maybe reused) meanwhile, so look again.
        if mem.read_u64(slot_at).map_err(|m| (m, slot_at, 8))? != w {
            return Ok(Scanned::Changed);
        }
        match whole.map(|total| (total, item::decode(&buf[..total]))) {
            Some((total, Ok(it))) if it.key == l.key => {
                return Ok(Scanned::Hit {
                    slot: i,
                    word: w,
                    item: Checked {
                        value: (total - it.value.len(), total),
                        flags: it.flags,
                        expires_ms: it.expires_ms,
                    },
                });
            }
            // Another key with the same tag, or a damaged item the slot still
            // points at: not this key's.
            _ => {}
        }
    }
    Ok(Scanned::Absent)
}

fn has_empty(words: &[u64; SLOTS + 1]) -> bool {
    words[..SLOTS].contains(&EMPTY)
}

/// Finds `l.key` in its home bucket at `addr` or, if the home has no empty slot
/// left, in the pair bucket (a key spills there only once its home is full, and
/// slots never become empty again). On a hit the item is left in `buf`. `words_out`
/// and `pair_out` get the bucket a [`FindReply`] describes: the key's, or on a miss
/// the one a new key would go to.
fn lookup(
    mem: &dyn Memory,
    addr: u64,
    l: &Lookup<'_>,
    buf: &mut Vec<u8>,
    words_out: &mut [u64; SLOTS + 1],
    pair_out: &mut bool,
) -> Result<Found, (Miss, u64, usize)> {
    'attempt: for _ in 0..ATTEMPTS {
        let home = read_words(mem, addr)?;
        *words_out = home;
        *pair_out = false;
        match scan(mem, addr, &home, l, buf)? {
            Scanned::Hit { slot, word, item } => return Ok(Found::Hit { slot, word, item }),
            Scanned::Changed => continue 'attempt,
            Scanned::Absent if has_empty(&home) => return Ok(Found::Miss),
            Scanned::Absent => {}
        }
        let pair_at = layout::pair_bucket_addr(addr);
        let pair = read_words(mem, pair_at)?;
        match scan(mem, pair_at, &pair, l, buf)? {
            Scanned::Hit { slot, word, item } => {
                *words_out = pair;
                *pair_out = true;
                return Ok(Found::Hit {
                    slot: slot + SLOTS,
                    word,
                    item,
                });
            }
            Scanned::Changed => continue 'attempt,
            Scanned::Absent => {
                if has_empty(&pair) {
                    *words_out = pair;
                    *pair_out = true;
                }
                return Ok(Found::Miss);
            }
        }
    }
    Ok(Found::Busy)
}

/// The CLOCK byte of `slot` (numbered home-then-pair) of the bucket whose bytes
/// are at `refs_addr`.
fn ref_addr(refs_addr: u64, slot: usize) -> u64 {
    if slot < SLOTS {
        refs_addr.saturating_add(slot as u64)
    } else {
        layout::pair_refs_addr(refs_addr).saturating_add((slot - SLOTS) as u64)
    }
}

fn decode_args<'a>(proc: &'static str, args: &'a [u8]) -> Result<Lookup<'a>, SprocError> {
    Lookup::decode(args).map_err(|e| SprocError::bad(proc, e.to_string()))
}

/// Keys between a key's item prefetch and its lookup in `kv_mget` (its bucket is
/// asked for twice as far ahead): enough misses in flight to fill the core's line
/// fill buffers, few enough that the lines are still there when used.
const AHEAD: usize = 8;

/// Asks for every cache line of the items `k`'s bucket points at under its tag (as
/// far as a lookup's first read goes), and for its CLOCK byte: hints only.
fn prefetch_items(mem: &dyn Memory, k: &wire::MgetKey<'_>) {
    if let Ok(words) = read_words(mem, k.bucket_addr) {
        if !has_empty(&words) {
            // The key may have spilled there.
            mem.prefetch(layout::pair_bucket_addr(k.bucket_addr));
        }
        for &w in &words[..SLOTS] {
            if !SlotWord::is_item(w) || SlotWord(w).tag() != k.tag {
                continue;
            }
            let sw = SlotWord(w);
            let at = k.shard_base.saturating_add(sw.offset());
            let len = class::size(sw.class()).map_or(0, |s| (s as usize).min(FIRST_READ)) as u64;
            // From the line holding the first byte to the one holding the last.
            let end = at.saturating_add(len);
            let mut line = at & !63;
            while line < end {
                mem.prefetch(line);
                let Some(next) = line.checked_add(64) else {
                    break;
                };
                line = next;
            }
        }
    }
    mem.prefetch(k.refs_addr);
}

/// Runs `serve` over `keys` in order, as a software pipeline: the keys' memory is
/// scattered, so key `i + 2 * AHEAD`'s bucket and key `i + AHEAD`'s item lines are
/// asked for while key `i` is served, keeping several keys' misses in flight.
fn pipelined<E>(
    mem: &dyn Memory,
    keys: &[wire::MgetKey<'_>],
    mut serve: impl FnMut(&wire::MgetKey<'_>) -> Result<(), E>,
) -> Result<(), E> {
    for k in keys.iter().take(2 * AHEAD) {
        mem.prefetch(k.bucket_addr);
    }
    for k in keys.iter().take(AHEAD) {
        prefetch_items(mem, k);
    }
    for (i, k) in keys.iter().enumerate() {
        if let Some(next) = keys.get(i + 2 * AHEAD) {
            mem.prefetch(next.bucket_addr);
        }
        if let Some(next) = keys.get(i + AHEAD) {
            prefetch_items(mem, next);
        }
        serve(k)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::VecMemory;
    use farcache_kvformat::slot;
    use farcache_kvformat::wire::{GetReply, MISS};

    const SHARD: u64 = 64 << 10;

    /// A one-shard store image with `key` → `value` in bucket 0, slot 2.
    fn image(key: &[u8], value: &[u8], expires: u64) -> (Vec<u8>, Layout, u16) {
        image_at(key, value, expires, 0, 2)
    }

    /// A one-shard store image with `key` → `value` in `bucket`, `slot`.
    fn image_at(
        key: &[u8],
        value: &[u8],
        expires: u64,
        bucket: u32,
        slot: usize,
    ) -> (Vec<u8>, Layout, u16) {
        let d = Descriptor::plan(1, SHARD, 64, 1 << 20, (4, 2)).expect("plan");
        let lay = Layout(d);
        let mut mem = vec![0u8; SHARD as usize];
        mem[..64].copy_from_slice(&d.encode());
        let tag = 0x1234;
        let off = lay.heap_start();
        let mut it = Vec::new();
        item::encode_into(&mut it, key, value, expires, 0);
        let c = class::for_len(it.len() as u64).expect("class");
        mem[off as usize..off as usize + it.len()].copy_from_slice(&it);
        let w = SlotWord::new(tag, c, off).0;
        let slot = lay.slot_addr(0, bucket, slot) as usize;
        mem[slot..slot + 8].copy_from_slice(&w.to_le_bytes());
        mem[layout::BUMP as usize..layout::BUMP as usize + 8]
            .copy_from_slice(&u64::from(class::size(c).expect("size")).to_le_bytes());
        (mem, lay, tag)
    }

    fn get(mem: &[u8], lay: &Layout, tag: u16, key: &[u8], now: u64) -> Vec<u8> {
        run(&KvGet, mem, lay, tag, key, now)
    }

    /// Runs a one-key lookup procedure for `key`, whose home is bucket 0.
    fn run(p: &dyn Procedure, mem: &[u8], lay: &Layout, tag: u16, key: &[u8], now: u64) -> Vec<u8> {
        run_mode(p, wire::MODE_VALUE, mem, lay, tag, key, now)
    }

    fn run_mode(
        p: &dyn Procedure,
        mode: u8,
        mem: &[u8],
        lay: &Layout,
        tag: u16,
        key: &[u8],
        now: u64,
    ) -> Vec<u8> {
        let m = VecMemory {
            bytes: mem,
            region_size: SHARD,
            local: &[true],
        };
        let mut args = Vec::new();
        Lookup {
            mode,
            tag,
            now_ms: now,
            shard_base: 0,
            refs_addr: lay.refs_addr(0, 0),
            key,
        }
        .encode_into(&mut args);
        match p.run(&m, lay.bucket_addr(0, 0), &args).expect("run") {
            Outcome::Done(r) => r,
            o => panic!("{o:?}"),
        }
    }

    fn set_word(mem: &mut [u8], at: u64, w: u64) {
        mem[at as usize..at as usize + 8].copy_from_slice(&w.to_le_bytes());
    }

    #[test]
    fn a_key_spilled_into_the_pair_bucket_is_found_only_once_home_is_full() {
        // The key sits in slot 4 of bucket 1, the pair of its home bucket 0.
        let (mut mem, lay, tag) = image_at(b"key", b"spilled", 0, 1, 4);
        mem[lay.refs_addr(0, 1) as usize + 4] = 1;
        // While home has an empty slot, the pair is never looked at.
        for s in 0..SLOTS - 1 {
            set_word(&mut mem, lay.slot_addr(0, 0, s), slot::TOMB);
        }
        assert_eq!(get(&mem, &lay, tag, b"key", 1)[0], MISS);
        let f = FindReply::decode(&run(&KvFind, &mem, &lay, tag, b"key", 1)).expect("find");
        assert_eq!((f.status, f.pair), (MISS, false), "a new key goes home");
        // Home full: the lookup goes on to the pair.
        set_word(&mut mem, lay.slot_addr(0, 0, SLOTS - 1), slot::TOMB);
        let r = get(&mem, &lay, tag, b"key", 1);
        let g = GetReply::decode(&r).expect("reply");
        assert_eq!(
            (g.status, usize::from(g.slot), g.referenced, g.value),
            (wire::HIT, SLOTS + 4, 1, &b"spilled"[..])
        );
        let f = FindReply::decode(&run(&KvFind, &mem, &lay, tag, b"key", 1)).expect("find");
        assert_eq!((f.status, f.slot, f.pair), (wire::HIT, Some(4), true));
        assert_eq!(f.refs[4], 1, "the pair's CLOCK bytes");
        assert!(SlotWord::is_item(f.words[4]) && f.words[0] == slot::EMPTY);
        // Another key: a miss that points at the pair's empty slots.
        let f = FindReply::decode(&run(&KvFind, &mem, &lay, tag, b"other", 1)).expect("find");
        assert_eq!((f.status, f.pair, f.words[0]), (MISS, true, slot::EMPTY));
        // Both full: a miss that points home (its lock), with home's words.
        for s in 0..SLOTS {
            if s != 4 {
                set_word(&mut mem, lay.slot_addr(0, 1, s), slot::TOMB);
            }
        }
        let f = FindReply::decode(&run(&KvFind, &mem, &lay, tag, b"other", 1)).expect("find");
        assert_eq!((f.status, f.pair), (MISS, false));
        assert!(f.words[..SLOTS].iter().all(|&w| w == slot::TOMB));
        // kv_mget finds it too, and numbers its slot home-then-pair.
        let m = VecMemory {
            bytes: &mem,
            region_size: SHARD,
            local: &[true],
        };
        let mut args = Vec::new();
        wire::mget_head(&mut args, wire::MODE_VALUE, 1, 2);
        for key in [&b"key"[..], b"other"] {
            wire::MgetKey {
                tag,
                bucket_addr: lay.bucket_addr(0, 0),
                shard_base: 0,
                refs_addr: lay.refs_addr(0, 0),
                key,
            }
            .encode_into(&mut args);
        }
        let Outcome::Done(r) = KvMget.run(&m, lay.bucket_addr(0, 0), &args).expect("mget") else {
            panic!("not done")
        };
        let (_, e) = wire::decode_mget_reply(&r).expect("reply");
        assert_eq!(
            (e[0].status, usize::from(e[0].slot)),
            (wire::HIT, SLOTS + 4)
        );
        assert_eq!(&r[e[0].value.0..e[0].value.1], b"spilled");
        assert_eq!(e[1].status, MISS);
        // kv_mfind in MODE_ENTRY: the same finds as kv_find, each with its item.
        args[0] = wire::MODE_ENTRY;
        let Outcome::Done(r) = KvMfind
            .run(&m, lay.bucket_addr(0, 0), &args)
            .expect("mfind")
        else {
            panic!("not done")
        };
        let e = wire::decode_mfind_entries(&r).expect("reply");
        let (f, it) = e[0].expect("found");
        assert_eq!((f.status, f.slot, f.pair), (wire::HIT, Some(4), true));
        assert_eq!(it.map(|i| i.value), Some(&b"spilled"[..]));
        let (f, it) = e[1].expect("found");
        assert_eq!((f.status, it), (MISS, None));
        // The plain mode answers finds alone.
        args[0] = wire::MODE_VALUE;
        let Outcome::Done(r) = KvMfind
            .run(&m, lay.bucket_addr(0, 0), &args)
            .expect("mfind")
        else {
            panic!("not done")
        };
        assert_eq!(r.len(), 4 + 2 * wire::FIND_LEN);
    }

    #[test]
    fn lookups_hit_miss_and_refuse_damaged_items() {
        let (mut mem, lay, tag) = image(b"key", b"value", 0);
        let r = get(&mem, &lay, tag, b"key", 1);
        let g = GetReply::decode(&r).expect("reply");
        assert_eq!((g.status, g.slot, g.value), (wire::HIT, 2, &b"value"[..]));
        // Same tag, other key: a miss. Other tag: a miss.
        assert_eq!(get(&mem, &lay, tag, b"kex", 1)[0], MISS);
        assert_eq!(get(&mem, &lay, tag ^ 1, b"key", 1)[0], MISS);
        // A damaged item is never returned.
        let at = lay.heap_start() as usize + item::HEADER + 4;
        mem[at] ^= 1;
        assert_eq!(get(&mem, &lay, tag, b"key", 1)[0], MISS);
        // Expired: a miss.
        let (mem, lay, tag) = image(b"key", b"value", 10);
        assert_eq!(get(&mem, &lay, tag, b"key", 9)[0], wire::HIT);
        assert_eq!(get(&mem, &lay, tag, b"key", 10)[0], MISS);
        // MODE_ENTRY: the expiry, then the value.
        let r = run_mode(&KvGet, wire::MODE_ENTRY, &mem, &lay, tag, b"key", 9);
        assert_eq!(r[0], wire::HIT);
        assert_eq!(&r[wire::GET_HEAD..wire::GET_HEAD + 8], &10u64.to_le_bytes());
        assert_eq!(&r[wire::GET_HEAD + 8..], b"value");
    }

    #[test]
    fn find_and_stats_report_the_bucket_and_the_shard() {
        let (mem, lay, tag) = image(b"key", b"v", 0);
        let m = VecMemory {
            bytes: &mem,
            region_size: SHARD,
            local: &[true],
        };
        let mut args = Vec::new();
        Lookup {
            mode: 0,
            tag,
            now_ms: 1,
            shard_base: 0,
            refs_addr: lay.refs_addr(0, 0),
            key: b"key",
        }
        .encode_into(&mut args);
        let Outcome::Done(r) = KvFind.run(&m, lay.bucket_addr(0, 0), &args).expect("find") else {
            panic!("not done")
        };
        let f = FindReply::decode(&r).expect("reply");
        assert_eq!((f.status, f.slot, f.expired), (wire::HIT, Some(2), false));
        assert!(SlotWord::is_item(f.words[2]) && f.words[0] == 0);
        // MODE_ENTRY: the same find, then the item the slot names; a miss answers
        // the find alone.
        args[0] = wire::MODE_ENTRY;
        let Outcome::Done(r) = KvFind.run(&m, lay.bucket_addr(0, 0), &args).expect("find") else {
            panic!("not done")
        };
        let (fe, it) = FindReply::decode_with_item(&r).expect("reply");
        assert_eq!(fe, f);
        let it = it.expect("the item");
        assert_eq!((it.value, it.expires_ms), (&b"v"[..], item::NO_EXPIRY));
        let mut other = args.clone();
        other.truncate(wire::LOOKUP_HEAD);
        other.extend_from_slice(b"absent");
        let Outcome::Done(r) = KvFind.run(&m, lay.bucket_addr(0, 0), &other).expect("find") else {
            panic!("not done")
        };
        let (fm, it) = FindReply::decode_with_item(&r).expect("reply");
        assert_eq!((fm.status, it), (wire::MISS, None));
        args[0] = 0;
        let Outcome::Done(r) = KvStats.run(&m, 0, &1u64.to_le_bytes()).expect("stats") else {
            panic!("not done")
        };
        let s = ShardStats::decode(&r).expect("stats");
        assert_eq!(s.live, 1);
        assert_eq!(s.empty, u64::from(lay.0.buckets) * SLOTS as u64 - 1);
        assert_eq!(s.requested, item::len(3, 1));
        assert!(KvStats.run(&m, 8, &1u64.to_le_bytes()).is_err());
        // A remote bucket continues where the bucket is.
        let far = VecMemory {
            bytes: &mem,
            region_size: SHARD,
            local: &[false],
        };
        match KvGet.run(&far, lay.bucket_addr(0, 0), &args).expect("run") {
            Outcome::Continue { addr, .. } => assert_eq!(addr, lay.bucket_addr(0, 0)),
            o => panic!("{o:?}"),
        }
    }
}
