//! Random SLOs as Redy draws them (§5.7.3): latency and throughput each uniform
//! between the lowest and highest figure the model can promise, independently. What
//! it can promise is its figures with the search's headroom applied (latency × (1+h),
//! throughput / (1+h)); otherwise the fastest setting could never meet an SLO drawn
//! at the model's lowest latency. A pair no configuration can meet (fast *and* more
//! throughput than any setting has) is drawn again; how many were is reported.

use farcache_proto::slo::{Percentile, Slo};
use farcache_slo::{CorePrices, Model, SearchLimits, SloError, search, settings};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::error::{BenchError, Result};

/// Most draws per SLO kept before giving up (a model with almost no feasible pair).
const MAX_TRIES: u32 = 10_000;

pub struct Drawn {
    pub slos: Vec<Slo>,
    /// Draws the model could not meet, drawn again.
    pub redrawn: u64,
}

/// The model's figure ranges for one section and percentile.
struct Range {
    record_size: u32,
    read_fraction: f64,
    percentile: Percentile,
    lat: (f64, f64),
    tput: (f64, f64),
}

pub fn draw_slos(
    model: &Model,
    n: usize,
    seed: u64,
    limits: &SearchLimits,
    prices: &CorePrices,
) -> Result<Drawn> {
    let h = 1.0 + limits.headroom.max(0.0);
    let mut ranges = Vec::new();
    for s in &model.file.sections {
        let all = settings(model, s.record_size, s.read_fraction, limits)?;
        for p in [Percentile::P50, Percentile::P99] {
            let lat = all.iter().map(|(_, f)| f.latency(p));
            let tput = all.iter().map(|(_, f)| f.throughput);
            let min_max = |it: &mut dyn Iterator<Item = f64>| {
                it.fold((f64::INFINITY, 0f64), |(a, b), v| (a.min(v), b.max(v)))
            };
            let (l0, l1) = min_max(&mut { lat });
            let (t0, t1) = min_max(&mut { tput });
            ranges.push(Range {
                record_size: s.record_size,
                read_fraction: s.read_fraction,
                percentile: p,
                lat: (l0 * h, l1 * h),
                tput: (t0 / h, t1 / h),
            });
        }
    }
    if ranges.is_empty() {
        return Err(BenchError::InvalidArgument(
            "the model has no sections".into(),
        ));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Drawn {
        slos: Vec::with_capacity(n),
        redrawn: 0,
    };
    while out.slos.len() < n {
        if ranges.is_empty() {
            return Err(BenchError::InvalidArgument(format!(
                "no feasible SLO in {MAX_TRIES} draws for any section: the model's \
                 figures leave no room for the headroom"
            )));
        }
        let k = rng.gen_range(0..ranges.len());
        let r = &ranges[k];
        let mut found = None;
        for _ in 0..MAX_TRIES {
            let slo = Slo {
                record_size: r.record_size,
                read_fraction: r.read_fraction,
                throughput: rng.gen_range(r.tput.0..=r.tput.1),
                latency_us: rng.gen_range(r.lat.0..=r.lat.1),
                percentile: r.percentile,
                replicas: 0,
                duration_s: None,
            };
            match search(model, &slo, limits, prices) {
                Ok(_) => {
                    found = Some(slo);
                    break;
                }
                Err(SloError::Infeasible { .. }) => out.redrawn += 1,
                Err(e) => return Err(e.into()),
            }
        }
        match found {
            Some(slo) => out.slos.push(slo),
            // A section with no room: drawn from the others.
            None => {
                ranges.swap_remove(k);
            }
        }
    }
    Ok(out)
}
