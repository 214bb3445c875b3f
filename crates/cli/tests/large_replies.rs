//! Batches whose replies are larger than a connection's write cap (8 MiB), several
//! in flight at once: every reply must arrive, however fast the client drains the
//! socket. Replies left unsent with no write pushed back arm no edge-triggered
//! event, so a missed flush shows as a batch that waits out the op timeout.

mod common;

use std::time::{Duration, Instant};

use common::{cluster, diff, pattern};

const PIECE: u64 = 512 << 10;
/// Pieces in the cache (48 MiB).
const PIECES: u64 = 96;
/// Pieces per batch: 10 MiB of replies, past the server's write cap on its own.
const PER_BATCH: u64 = 20;
/// Batches in flight at once from the one thread.
const IN_FLIGHT: u64 = 3;

#[test]
fn pipelined_batches_of_large_reads_never_stall() {
    let c = cluster(1, 64 << 20, 256 << 20);
    let client = c
        .client_with(farcache_client::ClientConfig::new("").op_timeout(Duration::from_secs(3)))
        .expect("client");
    let cache = client.create("big-replies", 64 << 20).expect("create");
    let img = pattern(7, (PIECE * PIECES) as usize);
    for (i, part) in img.chunks(8 << 20).enumerate() {
        cache
            .write(i as u64 * (8 << 20), part)
            .expect("fill the cache");
    }
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut rounds = 0u64;
    // Long enough to hit the stall within a run or two on the code that had it.
    while rounds < 40 || (Instant::now() < deadline && rounds < 2000) {
        let started = Instant::now();
        let batches: Vec<_> = (0..IN_FLIGHT)
            .map(|k| {
                let first = (rounds * 13 + k * 31) % (PIECES - PER_BATCH);
                let mut b = cache.batch();
                let ids: Vec<(u64, usize)> = (first..first + PER_BATCH)
                    .map(|p| (p, b.read(p * PIECE, PIECE - p % 7)))
                    .collect();
                (ids, b.submit())
            })
            .collect();
        for (k, (ids, t)) in batches.into_iter().enumerate() {
            let r = t.wait();
            for (p, i) in ids {
                let at = (p * PIECE) as usize;
                let want = &img[at..at + (PIECE - p % 7) as usize];
                match r.data(i) {
                    Ok(got) => {
                        if let Some(d) = diff(got, want) {
                            panic!("round {rounds}, batch {k}, piece {p}: {d}");
                        }
                    }
                    Err(e) => panic!(
                        "round {rounds}, batch {k}, piece {p}: {e} (after {:?})",
                        started.elapsed()
                    ),
                }
            }
        }
        rounds += 1;
    }
}
