//! Runs `BATCHES` batches of 1,024 8-byte ops (read or write, uniform over 64 MiB)
//! through the server's executor in this thread, for counting instructions per op
//! under `valgrind --tool=cachegrind` (run with two batch counts and subtract).
//!
//! `cargo run --release -p farcache-server --example exec_ops -- write 1000`

use farcache_proto::{Op, RequestEncoder};
use farcache_server::inproc::InProcess;

const CAP: u64 = 64 << 20;
const OPS: usize = 1024;

fn main() {
    let mut args = std::env::args().skip(1);
    let write = args.next().as_deref() == Some("write");
    let batches: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100);
    let mut cache = InProcess::new(CAP, 8 << 20).expect("in-process cache");
    let id = cache.cache_id();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let data = [7u8; 8];
    let ring: Vec<Vec<u8>> = (0..16)
        .map(|b| {
            let mut buf = Vec::new();
            let mut e = RequestEncoder::begin(&mut buf, b);
            for _ in 0..OPS {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let addr = (x % (CAP / 8)) * 8;
                let op = if write {
                    Op::Write {
                        cache: id,
                        addr,
                        data: &data,
                    }
                } else {
                    Op::Read {
                        cache: id,
                        addr,
                        len: 8,
                    }
                };
                e.push(&mut buf, &op);
            }
            e.finish(&mut buf);
            buf
        })
        .collect();
    let mut out = Vec::with_capacity(64 << 10);
    let mut n = 0u64;
    for i in 0..batches {
        out.clear();
        let payload = &ring[i % ring.len()][farcache_proto::HEADER_LEN..];
        n += u64::from(cache.execute(payload, i as u64, &mut out).expect("batch"));
    }
    println!("{n} ops, {} errors", cache.errors());
}
