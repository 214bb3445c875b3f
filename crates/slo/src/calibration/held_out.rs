//! The model's error where it interpolates: configurations it covers but did not
//! measure, drawn at random (seeded), measured the same way and compared with the
//! prediction. They check the model; they are not added to it.

use std::collections::HashSet;

use farcache_proto::slo::Transport;

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::error::SloError;
use crate::model::Model;
use crate::point::Perf;
use crate::search::{SearchLimits, settings};

/// Up to `n` configurations of the section that the model predicts and that were not
/// measured, with the prediction.
pub fn choose(
    model: &Model,
    record_size: u32,
    read_fraction: f64,
    measured: &HashSet<Transport>,
    n: usize,
    seed: u64,
) -> Result<Vec<(Transport, Perf)>, SloError> {
    let mut candidates: Vec<(Transport, Perf)> =
        settings(model, record_size, read_fraction, &SearchLimits::default())?
            .into_iter()
            .filter(|(t, _)| !measured.contains(t))
            .collect();
    let mut rng = StdRng::seed_from_u64(seed);
    candidates.shuffle(&mut rng);
    candidates.truncate(n);
    Ok(candidates)
}

/// Median and largest relative error |predicted − measured| / measured, of p50
/// latency and of throughput.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Errors {
    pub latency_median: f64,
    pub latency_max: f64,
    pub throughput_median: f64,
    pub throughput_max: f64,
}

/// `(predicted, measured)` pairs; `None` when there are none.
pub fn errors(pairs: &[(Perf, Perf)]) -> Option<Errors> {
    if pairs.is_empty() {
        return None;
    }
    let rel = |p: f64, m: f64| (p - m).abs() / m;
    let lat: Vec<f64> = pairs.iter().map(|(p, m)| rel(p.p50_us, m.p50_us)).collect();
    let tput: Vec<f64> = pairs
        .iter()
        .map(|(p, m)| rel(p.throughput, m.throughput))
        .collect();
    Some(Errors {
        latency_median: median(lat.clone()),
        latency_max: lat.iter().copied().fold(0.0, f64::max),
        throughput_median: median(tput.clone()),
        throughput_max: tput.iter().copied().fold(0.0, f64::max),
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use crate::{Machine, ModelFile, Point, Section};

    use super::*;

    fn perf(lat: f64, tput: f64) -> Perf {
        Perf {
            p50_us: lat,
            p99_us: lat * 2.0,
            throughput: tput,
        }
    }

    #[test]
    fn chooses_only_unmeasured_covered_configurations() {
        let mut points = Vec::new();
        let mut measured = HashSet::new();
        for b in [1, 2, 4] {
            for q in [1, 2] {
                let transport = Transport { s: 1, c: 1, b, q };
                measured.insert(transport);
                points.push(Point {
                    transport,
                    perf: perf(f64::from(b), f64::from(b * q)),
                });
            }
        }
        let mut file = ModelFile::new(Machine::detect(), 0);
        file.sections.push(Section {
            record_size: 8,
            read_fraction: 1.0,
            points,
        });
        let model = Model::from_file(file).expect("model");
        let all = choose(&model, 8, 1.0, &measured, 100, 1).expect("choose");
        // b ∈ 1..=4, q ∈ 1..=2: 8 configurations, 6 measured.
        let mut got: Vec<Transport> = all.iter().map(|x| x.0).collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                Transport {
                    s: 1,
                    c: 1,
                    b: 3,
                    q: 1
                },
                Transport {
                    s: 1,
                    c: 1,
                    b: 3,
                    q: 2
                }
            ]
        );
        assert_eq!(all[0].1.throughput, 3.0 * f64::from(all[0].0.q));
        let one = choose(&model, 8, 1.0, &measured, 1, 7).expect("choose");
        assert_eq!(one.len(), 1);
        assert_eq!(
            one,
            choose(&model, 8, 1.0, &measured, 1, 7).expect("choose")
        );
    }

    #[test]
    fn relative_errors() {
        assert!(errors(&[]).is_none());
        let e = errors(&[
            (perf(11.0, 90.0), perf(10.0, 100.0)),
            (perf(10.0, 100.0), perf(10.0, 100.0)),
            (perf(5.0, 150.0), perf(10.0, 100.0)),
        ])
        .expect("errors");
        assert!((e.latency_median - 0.1).abs() < 1e-12);
        assert!((e.latency_max - 0.5).abs() < 1e-12);
        assert!((e.throughput_median - 0.1).abs() < 1e-12);
        assert!((e.throughput_max - 0.5).abs() < 1e-12);
    }
}
