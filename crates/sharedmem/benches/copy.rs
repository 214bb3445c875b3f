//! What racing-safe copies cost against plain `memcpy`, per size, both directions:
//! `cargo bench -p farcache-sharedmem`.

use std::hint::black_box;
use std::sync::atomic::AtomicU64;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use farcache_sharedmem::words;

fn copies(c: &mut Criterion) {
    let shared: Vec<AtomicU64> = (0..(1 << 14)).map(|_| AtomicU64::new(7)).collect();
    let base = shared.as_ptr().cast::<u8>().cast_mut();
    let mut g = c.benchmark_group("load");
    for n in [8usize, 24, 64, 512, 4096, 65536] {
        let mut dst = vec![0u8; n];
        g.throughput(Throughput::Bytes(n as u64));
        // Offset 8 (aligned) and 3 (not): item records land both ways.
        for off in [8usize, 3] {
            g.bench_with_input(BenchmarkId::new(format!("atomic+{off}"), n), &n, |b, &n| {
                b.iter(|| unsafe { words::load(black_box(base.add(off)), &mut dst[..n]) })
            });
            g.bench_with_input(BenchmarkId::new(format!("memcpy+{off}"), n), &n, |b, &n| {
                b.iter(|| unsafe {
                    std::ptr::copy_nonoverlapping(black_box(base.add(off)), dst.as_mut_ptr(), n)
                })
            });
        }
    }
    g.finish();
    let mut g = c.benchmark_group("store");
    for n in [8usize, 24, 64, 512, 4096, 65536] {
        let src = vec![1u8; n];
        g.throughput(Throughput::Bytes(n as u64));
        for off in [8usize, 3] {
            g.bench_with_input(BenchmarkId::new(format!("atomic+{off}"), n), &n, |b, _| {
                b.iter(|| unsafe { words::store(black_box(base.add(off)), &src) })
            });
            g.bench_with_input(BenchmarkId::new(format!("memcpy+{off}"), n), &n, |b, &n| {
                b.iter(|| unsafe {
                    std::ptr::copy_nonoverlapping(src.as_ptr(), black_box(base.add(off)), n)
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, copies);
criterion_main!(benches);
