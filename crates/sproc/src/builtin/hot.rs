//! What a server knows about key popularity (DistCache's heavy-hitter detection):
//! a count-min sketch of sampled `kv_get` hits with a small top-k beside it, aged by
//! halving, and a count of all lookups that replies carry so clients can tell which
//! of a hot key's two homes is less loaded. Process-wide: one server, one sketch.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// One hit in this many is counted (keeps the sketch off the hot path).
const SAMPLE: u32 = 16;
const ROWS: usize = 4;
const WIDTH: usize = 4096;
/// Keys the top-k keeps.
pub const TOP: usize = 32;
/// Sampled hits between agings (every count halves).
const AGE_EVERY: u64 = 1 << 16;

static LOOKUPS: AtomicU64 = AtomicU64::new(0);
static SAMPLES: AtomicU64 = AtomicU64::new(0);
static SKETCH: [AtomicU32; ROWS * WIDTH] = [const { AtomicU32::new(0) }; ROWS * WIDTH];
static TOPK: Mutex<Vec<Hot>> = Mutex::new(Vec::new());
/// The smallest count in a full top-k (0 while it has room): an estimate at or
/// below it changes nothing there, so it skips the lock (most samples of a flat
/// workload).
static TOP_FLOOR: AtomicU32 = AtomicU32::new(0);

thread_local! {
    static TICK: Cell<u32> = const { Cell::new(0) };
}

/// A heavy hitter: a key (of the store whose shard starts at `shard_base`) and its
/// estimated sampled hits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hot {
    pub shard_base: u64,
    pub key: Vec<u8>,
    pub count: u32,
}

/// Lookups served so far (the load figure replies carry).
pub fn lookups() -> u64 {
    LOOKUPS.load(Ordering::Relaxed)
}

/// Counts a lookup that is not a candidate for the sketch (the store's own keys).
#[inline]
pub fn count_only() {
    LOOKUPS.fetch_add(1, Ordering::Relaxed);
}

/// Counts a lookup of `key`; every [`SAMPLE`]th goes into the sketch.
#[inline]
pub fn record(shard_base: u64, key: &[u8]) {
    LOOKUPS.fetch_add(1, Ordering::Relaxed);
    sample(shard_base, key);
}

/// Counts `n` lookups at once (a `kv_mget`'s keys, each also [`sample`]d): one
/// shared-counter update per call instead of one per key.
#[inline]
pub fn count_many(n: usize) {
    LOOKUPS.fetch_add(n as u64, Ordering::Relaxed);
}

/// Every [`SAMPLE`]th call puts `key` into the sketch; counts nothing else.
#[inline]
pub fn sample(shard_base: u64, key: &[u8]) {
    let sampled = TICK.with(|t| {
        let n = t.get().wrapping_add(1);
        t.set(n);
        n.is_multiple_of(SAMPLE)
    });
    if sampled {
        count(shard_base, key);
    }
}

#[cold]
fn count(shard_base: u64, key: &[u8]) {
    let h = xxh3_64_with_seed(key, shard_base);
    let mut est = u32::MAX;
    for r in 0..ROWS {
        let col = ((h >> (r * 12)) as usize) & (WIDTH - 1);
        let v = SKETCH[r * WIDTH + col].fetch_add(1, Ordering::Relaxed) + 1;
        est = est.min(v);
    }
    if SAMPLES.fetch_add(1, Ordering::Relaxed) % AGE_EVERY == AGE_EVERY - 1 {
        age();
    }
    if est <= TOP_FLOOR.load(Ordering::Relaxed) {
        return;
    }
    let mut top = TOPK.lock();
    update_top(&mut top, shard_base, key, est);
    set_floor(&top);
}

fn set_floor(top: &[Hot]) {
    let floor = if top.len() < TOP {
        0
    } else {
        top.iter().map(|e| e.count).min().unwrap_or(0)
    };
    TOP_FLOOR.store(floor, Ordering::Relaxed);
}

fn update_top(top: &mut Vec<Hot>, shard_base: u64, key: &[u8], est: u32) {
    if let Some(e) = top
        .iter_mut()
        .find(|e| e.shard_base == shard_base && e.key == key)
    {
        e.count = est;
        return;
    }
    if top.len() < TOP {
        top.push(Hot {
            shard_base,
            key: key.to_vec(),
            count: est,
        });
    } else if let Some(min) = top.iter_mut().min_by_key(|e| e.count)
        && min.count < est
    {
        *min = Hot {
            shard_base,
            key: key.to_vec(),
            count: est,
        };
    }
}

/// Halves every count, so popularity follows the recent past.
fn age() {
    for c in &SKETCH {
        let v = c.load(Ordering::Relaxed);
        c.store(v / 2, Ordering::Relaxed);
    }
    let mut top = TOPK.lock();
    for e in top.iter_mut() {
        e.count /= 2;
    }
    top.retain(|e| e.count > 0);
    set_floor(&top);
}

/// The current heavy hitters, most popular first.
pub fn top() -> Vec<Hot> {
    let mut v = TOPK.lock().clone();
    v.sort_by_key(|e| std::cmp::Reverse(e.count));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heavy_hitters_rise_to_the_top() {
        let base = 0xfeed_0000;
        for i in 0..200_000u32 {
            // Key 7 takes a fifth of all lookups; the rest spread over 5000 keys.
            let k = if i % 5 == 0 { 7 } else { i % 5000 + 100 };
            record(base, &k.to_le_bytes());
        }
        let t = top();
        assert_eq!(t[0].key, 7u32.to_le_bytes().to_vec(), "{:?}", &t[..3]);
        assert!(t[0].count > 10 * t[1].count.max(1) / 2, "{:?}", &t[..3]);
        assert!(lookups() >= 200_000);
    }
}
