//! Reed–Solomon codecs at the sizes the store uses: `reed-solomon-simd` (chosen) and
//! `reed-solomon-erasure`, coding values of 1–100 MiB as the store does, stripe by
//! stripe (512 KiB of each chunk at a time), and `reed-solomon-simd` on whole chunks
//! for comparison. Decoding restores one lost data chunk and `p` lost data chunks.
//! `cargo bench -p farcache-store --bench codec` prints MiB/s of value (best of 5).

use std::time::Instant;

use reed_solomon_erasure::galois_8::ReedSolomon;

const STRIPE: usize = 512 << 10;

fn best<F: FnMut()>(mut f: F) -> f64 {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::MAX, f64::min)
}

/// `d` data shards of `width` bytes.
fn shards(d: usize, width: usize) -> Vec<Vec<u8>> {
    (0..d)
        .map(|i| (0..width).map(|j| (i * 31 + j * 7) as u8).collect())
        .collect()
}

/// (encode, decode one lost, decode p lost) seconds for `stripes` stripes of `width`.
fn simd(d: usize, p: usize, width: usize, stripes: usize) -> (f64, f64, f64) {
    let data = shards(d, width);
    let mut parity = Vec::new();
    let enc = best(|| {
        for _ in 0..stripes {
            parity = reed_solomon_simd::encode(d, p, &data).expect("encode");
        }
    });
    let dec = |lost: usize| {
        best(|| {
            for _ in 0..stripes {
                let orig = data.iter().enumerate().skip(lost);
                let rec = parity.iter().enumerate().take(lost);
                let r = reed_solomon_simd::decode(d, p, orig, rec).expect("decode");
                assert_eq!(r.len(), lost);
            }
        })
    };
    (enc, dec(1), dec(p))
}

fn rse(d: usize, p: usize, width: usize, stripes: usize) -> (f64, f64, f64) {
    let rs = ReedSolomon::new(d, p).expect("codec");
    let mut all = shards(d, width);
    all.extend((0..p).map(|_| vec![0u8; width]));
    let enc = best(|| {
        for _ in 0..stripes {
            rs.encode(&mut all).expect("encode");
        }
    });
    let dec = |lost: usize| {
        best(|| {
            for _ in 0..stripes {
                let mut s: Vec<Option<Vec<u8>>> = all.iter().cloned().map(Some).collect();
                for x in s.iter_mut().take(lost) {
                    *x = None;
                }
                rs.reconstruct_data(&mut s).expect("decode");
            }
        })
    };
    (enc, dec(1), dec(p))
}

fn main() {
    println!(
        "{:>8} {:>5} | {:>27} | {:>27} | {:>27}",
        "value", "d+p", "simd, stripes (enc/dec1/decp)", "erasure, stripes", "simd, whole chunks"
    );
    for (d, p) in [(4usize, 2usize), (2, 1), (10, 4)] {
        for len in [1usize << 20, 10 << 20, 100 << 20] {
            let chunk = len.div_ceil(d).div_ceil(64) * 64;
            let width = chunk.min(STRIPE);
            let stripes = chunk.div_ceil(width);
            let mib = len as f64 / (1 << 20) as f64;
            let f = |(e, a, b): (f64, f64, f64)| {
                format!("{:>7.0} {:>7.0} {:>7.0}", mib / e, mib / a, mib / b)
            };
            println!(
                "{:>4} MiB {:>2}+{:<2} | {:>27} | {:>27} | {:>27}",
                len >> 20,
                d,
                p,
                f(simd(d, p, width, stripes)),
                f(rse(d, p, width, stripes)),
                f(simd(d, p, chunk, 1)),
            );
        }
    }
}
