//! Deterministic address generators for benchmark workloads.
//!
//! Records are numbered `0..records`; a record's byte offset is
//! `index * record_size`. Zipf ranks are scrambled with a multiplicative
//! permutation so that hot records are spread over the address space rather
//! than packed at the start.

use std::fmt;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use serde::{Deserialize, Serialize};

use crate::error::{BenchError, Result};

/// Default Zipf skew (YCSB's 0.99).
pub const DEFAULT_ZIPF_THETA: f64 = 0.99;

/// How record indices are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum KeyDistribution {
    /// Every record equally likely.
    Uniform,
    /// Zipfian with exponent `theta`: rank `k` (1-based) has weight `k^-theta`.
    Zipf { theta: f64 },
}

impl KeyDistribution {
    /// Zipf with [`DEFAULT_ZIPF_THETA`].
    pub const ZIPF: KeyDistribution = KeyDistribution::Zipf {
        theta: DEFAULT_ZIPF_THETA,
    };
}

impl fmt::Display for KeyDistribution {
    /// `uniform` or `zipf0.99` (used as the report's `distribution`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyDistribution::Uniform => f.write_str("uniform"),
            KeyDistribution::Zipf { theta } => write!(f, "zipf{theta}"),
        }
    }
}

#[derive(Debug, Clone)]
enum Sampler {
    Uniform,
    Zipf(Zipf<f64>),
}

/// Bijective scrambling of `0..n`: `rank -> (rank * mult + add) mod n`, with
/// `gcd(mult, n) == 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scramble {
    n: u64,
    mult: u64,
    add: u64,
}

impl Scramble {
    /// A permutation of `0..n` derived from `seed`. `n` must be > 0.
    pub fn new(n: u64, seed: u64) -> Self {
        let n = n.max(1);
        let mut mult = 0x9E37_79B9_7F4A_7C15_u64 % n;
        if mult == 0 {
            mult = 1;
        }
        while gcd(mult, n) != 1 {
            mult = (mult + 1) % n;
            if mult == 0 {
                mult = 1;
            }
        }
        let add = splitmix64(seed) % n;
        Scramble { n, mult, add }
    }

    /// Image of `rank` (`rank < n`).
    #[inline]
    pub fn apply(&self, rank: u64) -> u64 {
        ((u128::from(rank) * u128::from(self.mult) + u128::from(self.add)) % u128::from(self.n))
            as u64
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Seeded generator of record indices under a [`KeyDistribution`].
#[derive(Debug, Clone)]
pub struct KeyGen {
    dist: KeyDistribution,
    records: u64,
    record_size: usize,
    sampler: Sampler,
    scramble: Scramble,
    rng: StdRng,
}

impl KeyGen {
    /// Generator over `records` records of `record_size` bytes.
    pub fn new(dist: KeyDistribution, records: u64, record_size: usize, seed: u64) -> Result<Self> {
        if records == 0 {
            return Err(BenchError::InvalidArgument(
                "workload needs at least one record".into(),
            ));
        }
        let sampler = match dist {
            KeyDistribution::Uniform => Sampler::Uniform,
            KeyDistribution::Zipf { theta } => Sampler::Zipf(
                Zipf::new(records, theta)
                    .map_err(|e| BenchError::InvalidArgument(format!("zipf theta {theta}: {e}")))?,
            ),
        };
        Ok(KeyGen {
            dist,
            records,
            record_size,
            sampler,
            scramble: Scramble::new(records, seed),
            rng: StdRng::seed_from_u64(seed),
        })
    }

    /// Uniform generator.
    pub fn uniform(records: u64, record_size: usize, seed: u64) -> Result<Self> {
        Self::new(KeyDistribution::Uniform, records, record_size, seed)
    }

    /// Zipf generator with skew `theta` (use [`DEFAULT_ZIPF_THETA`] = 0.99).
    pub fn zipf(records: u64, record_size: usize, theta: f64, seed: u64) -> Result<Self> {
        Self::new(KeyDistribution::Zipf { theta }, records, record_size, seed)
    }

    pub fn distribution(&self) -> KeyDistribution {
        self.dist
    }
    pub fn records(&self) -> u64 {
        self.records
    }
    pub fn record_size(&self) -> usize {
        self.record_size
    }

    /// Next record index in `0..records`.
    #[inline]
    pub fn next_index(&mut self) -> u64 {
        match &self.sampler {
            Sampler::Uniform => self.rng.gen_range(0..self.records),
            Sampler::Zipf(z) => {
                // Zipf samples are ranks in 1..=records (as f64).
                let rank = (z.sample(&mut self.rng) as u64).clamp(1, self.records) - 1;
                self.scramble.apply(rank)
            }
        }
    }

    /// Byte offset of the next record (`index * record_size`).
    #[inline]
    pub fn next_offset(&mut self) -> u64 {
        self.next_index() * self.record_size as u64
    }

    /// Fills `out` with record indices.
    pub fn fill(&mut self, out: &mut [u64]) {
        for slot in out {
            *slot = self.next_index();
        }
    }

    /// Record index that has Zipf rank `rank` (0 = hottest). For the uniform
    /// distribution this is the identity.
    pub fn index_of_rank(&self, rank: u64) -> u64 {
        match self.sampler {
            Sampler::Uniform => rank,
            Sampler::Zipf(_) => self.scramble.apply(rank),
        }
    }
}

impl Iterator for KeyGen {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        Some(self.next_index())
    }
}

/// Read/write operation kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    Read,
    Write,
}

/// Read/write mix.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Mix {
    /// Fraction of operations that are reads, in `0.0..=1.0`.
    pub read_fraction: f64,
}

impl Mix {
    pub const READ_ONLY: Mix = Mix { read_fraction: 1.0 };
    pub const WRITE_ONLY: Mix = Mix { read_fraction: 0.0 };
    /// YCSB-B style 95% reads.
    pub const READ_MOSTLY: Mix = Mix {
        read_fraction: 0.95,
    };
    /// YCSB-A style 50% reads.
    pub const BALANCED: Mix = Mix { read_fraction: 0.5 };

    /// `read_fraction` clamped to `0..=1`.
    pub fn new(read_fraction: f64) -> Self {
        Mix {
            read_fraction: read_fraction.clamp(0.0, 1.0),
        }
    }

    /// Draws one operation.
    #[inline]
    pub fn pick<R: Rng + ?Sized>(&self, rng: &mut R) -> Op {
        if self.read_fraction >= 1.0
            || (self.read_fraction > 0.0 && rng.gen_bool(self.read_fraction))
        {
            Op::Read
        } else {
            Op::Write
        }
    }
}

/// One generated access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub op: Op,
    pub index: u64,
    /// `index * record_size`.
    pub offset: u64,
}

/// Seeded stream of accesses: a [`KeyGen`] plus a [`Mix`].
#[derive(Debug, Clone)]
pub struct WorkloadGen {
    keys: KeyGen,
    mix: Mix,
    rng: StdRng,
}

impl WorkloadGen {
    pub fn new(
        dist: KeyDistribution,
        records: u64,
        record_size: usize,
        mix: Mix,
        seed: u64,
    ) -> Result<Self> {
        Ok(WorkloadGen {
            keys: KeyGen::new(dist, records, record_size, seed)?,
            mix,
            rng: StdRng::seed_from_u64(splitmix64(seed ^ 0x006d_6978)),
        })
    }

    pub fn keys(&self) -> &KeyGen {
        &self.keys
    }
    pub fn mix(&self) -> Mix {
        self.mix
    }

    #[inline]
    pub fn next_access(&mut self) -> Access {
        let op = self.mix.pick(&mut self.rng);
        let index = self.keys.next_index();
        Access {
            op,
            index,
            offset: index * self.keys.record_size() as u64,
        }
    }
}

impl Iterator for WorkloadGen {
    type Item = Access;
    fn next(&mut self) -> Option<Access> {
        Some(self.next_access())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scramble_is_a_permutation() {
        for n in [1u64, 2, 7, 64, 1000, 4096, 99_991] {
            let s = Scramble::new(n, 42);
            let mut seen = vec![false; n as usize];
            for r in 0..n {
                let i = s.apply(r) as usize;
                assert!(!seen[i], "n={n} collision at {r}");
                seen[i] = true;
            }
        }
    }

    #[test]
    fn uniform_in_range_and_deterministic() {
        let a: Vec<u64> = KeyGen::uniform(1000, 64, 7)
            .expect("gen")
            .take(10_000)
            .collect();
        let b: Vec<u64> = KeyGen::uniform(1000, 64, 7)
            .expect("gen")
            .take(10_000)
            .collect();
        assert_eq!(a, b);
        assert!(a.iter().all(|&i| i < 1000));
        let mut counts = [0u32; 10];
        for &i in &a {
            counts[(i / 100) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
        let mut g = KeyGen::uniform(1000, 64, 7).expect("gen");
        assert_eq!(g.next_offset() % 64, 0);
    }

    #[test]
    fn zipf_is_skewed_and_scrambled() {
        let n = 100_000u64;
        let mut g = KeyGen::zipf(n, 128, DEFAULT_ZIPF_THETA, 1).expect("gen");
        let samples = 400_000;
        let mut counts = vec![0u32; n as usize];
        for _ in 0..samples {
            let i = g.next_index();
            assert!(i < n);
            counts[i as usize] += 1;
        }
        let mut sorted = counts.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let top1: u64 = sorted[..(n / 100) as usize]
            .iter()
            .map(|&c| u64::from(c))
            .sum();
        let share = top1 as f64 / samples as f64;
        // Analytically ~0.57 for theta 0.99 over 100k records.
        assert!(share > 0.45, "top 1% share only {share}");
        // Hottest record is where the scramble maps rank 0, not index 0.
        let hottest = counts
            .iter()
            .enumerate()
            .max_by_key(|&(_, c)| *c)
            .map(|(i, _)| i as u64)
            .expect("non-empty");
        assert_eq!(hottest, g.index_of_rank(0));
        // The 10 hottest records are not adjacent to each other.
        let mut hot: Vec<u64> = (0..10).map(|r| g.index_of_rank(r)).collect();
        hot.sort_unstable();
        assert!(hot.windows(2).all(|w| w[1] - w[0] > 1), "{hot:?}");
        // Deterministic.
        let a: Vec<u64> = KeyGen::zipf(n, 128, 0.99, 5)
            .expect("gen")
            .take(100)
            .collect();
        let b: Vec<u64> = KeyGen::zipf(n, 128, 0.99, 5)
            .expect("gen")
            .take(100)
            .collect();
        assert_eq!(a, b);
    }

    #[test]
    fn mix_fraction() {
        let mut w =
            WorkloadGen::new(KeyDistribution::Uniform, 10, 8, Mix::READ_MOSTLY, 3).expect("gen");
        let reads = (0..100_000)
            .filter(|_| w.next_access().op == Op::Read)
            .count();
        assert!((94_000..96_000).contains(&reads), "{reads}");
        let mut rng = StdRng::seed_from_u64(0);
        assert_eq!(Mix::READ_ONLY.pick(&mut rng), Op::Read);
        assert_eq!(Mix::WRITE_ONLY.pick(&mut rng), Op::Write);
        assert_eq!(Mix::new(3.0).read_fraction, 1.0);
    }

    #[test]
    fn invalid_args() {
        assert!(KeyGen::uniform(0, 8, 0).is_err());
        assert!(KeyGen::zipf(10, 8, -1.0, 0).is_err());
        assert_eq!(KeyDistribution::ZIPF.to_string(), "zipf0.99");
    }
}
