//! The light load of `bench drain`: one thread, one batch of 8-byte reads and writes
//! at random words every millisecond, while the regions move. Every write goes to a
//! word not touched before (and no read to a written word), so the final read-back
//! knows exactly what each word must hold, and every read knows what it must return.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use farcache_client::{Cache, OpOutput};

use super::data::{Slot, overwrite, word};

/// Writes and reads per batch.
pub const WRITES: usize = 16;
pub const READS: usize = 16;
/// One batch per interval at most (the next waits for the previous one).
pub const INTERVAL: Duration = Duration::from_millis(1);

/// What the load did.
#[derive(Debug, Clone, Default)]
pub struct LoadOutcome {
    pub reads: u64,
    pub writes: u64,
    pub errors: u64,
    /// Reads that returned something other than the fill's pattern.
    pub wrong_reads: u64,
    pub first_error: Option<String>,
    pub secs: f64,
    /// Longest batch, submit to completion.
    pub max_batch: Duration,
    /// Every word written, sorted by address.
    pub slots: Vec<Slot>,
}

/// xorshift64*: cheap and good enough to spread addresses.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((u128::from(x) * u128::from(n)) >> 64) as u64
    }
}

/// Runs until `stop` is set.
pub fn run(cache: &Cache, seed: u64, stop: &AtomicBool) -> LoadOutcome {
    let words = cache.capacity() / 8;
    let mut rng = Rng(seed | 1);
    let mut out = LoadOutcome::default();
    let mut touched: HashSet<u64> = HashSet::new();
    let next_addr = |rng: &mut Rng, touched: &HashSet<u64>| loop {
        let a = rng.below(words) * 8;
        if !touched.contains(&a) {
            return a;
        }
    };
    let t0 = Instant::now();
    let mut next = t0;
    // Half the words at most (a small cache under a long drain): new ones stay easy
    // to find.
    while !stop.load(Ordering::Relaxed) && (touched.len() as u64) < words / 2 {
        let mut b = cache.batch().with_capacity(WRITES + READS);
        let mut writes = Vec::with_capacity(WRITES);
        for _ in 0..WRITES {
            let a = next_addr(&mut rng, &touched);
            touched.insert(a);
            b.write(a, &overwrite(a).to_le_bytes());
            writes.push(a);
        }
        let reads: Vec<u64> = (0..READS)
            .map(|_| {
                let a = next_addr(&mut rng, &touched);
                b.read(a, 8);
                a
            })
            .collect();
        let sent = Instant::now();
        let results = b.submit().wait();
        out.max_batch = out.max_batch.max(sent.elapsed());
        let error = |e: String, out: &mut LoadOutcome| {
            out.errors += 1;
            out.first_error.get_or_insert(e);
        };
        for (i, &a) in writes.iter().enumerate() {
            let acked = match results.get(i) {
                Some(Ok(_)) => true,
                Some(Err(e)) => {
                    error(format!("write at {a}: {e}"), &mut out);
                    false
                }
                None => {
                    error(format!("write at {a}: no result"), &mut out);
                    false
                }
            };
            out.writes += 1;
            out.slots.push(Slot { addr: a, acked });
        }
        for (i, &a) in reads.iter().enumerate() {
            out.reads += 1;
            match results.get(WRITES + i) {
                Some(Ok(OpOutput::Data(d))) => {
                    if d[..] != word(a).to_le_bytes() {
                        out.wrong_reads += 1;
                    }
                }
                Some(Ok(o)) => error(format!("read at {a}: unexpected {o:?}"), &mut out),
                Some(Err(e)) => error(format!("read at {a}: {e}"), &mut out),
                None => error(format!("read at {a}: no result"), &mut out),
            }
        }
        next += INTERVAL;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    out.secs = t0.elapsed().as_secs_f64();
    out.slots.sort_unstable_by_key(|s| s.addr);
    out
}
