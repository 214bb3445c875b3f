//! Measured points at power-of-two settings, and linear interpolation between them
//! (Redy's: `f(1,1,1,3)` is the mean of `f(1,1,1,2)` and `f(1,1,1,4)`; with several
//! settings between powers, multilinear over the surrounding corners).
//!
//! A setting whose surrounding corners were not all measured (calibration stopped
//! raising that knob because it stopped paying) is outside the model: `predict` says
//! `None` rather than guessing.

use farcache_proto::slo::{Percentile, Transport};

use crate::error::SloError;
use crate::point::{Perf, Point};

/// Levels of each knob, in the order `s, c, b, q`: level `i` is the value `2^i`.
const DIMS: usize = 4;

/// Best figures over a block of cells: an upper bound on throughput and lower
/// bounds on latency for every setting interpolated from them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Bound {
    pub max_throughput: f64,
    pub min_p50_us: f64,
    pub min_p99_us: f64,
}

impl Bound {
    const EMPTY: Bound = Bound {
        max_throughput: f64::NEG_INFINITY,
        min_p50_us: f64::INFINITY,
        min_p99_us: f64::INFINITY,
    };

    fn add(&mut self, p: &Perf) {
        self.max_throughput = self.max_throughput.max(p.throughput);
        self.min_p50_us = self.min_p50_us.min(p.p50_us);
        self.min_p99_us = self.min_p99_us.min(p.p99_us);
    }

    fn join(&mut self, o: &Bound) {
        self.max_throughput = self.max_throughput.max(o.max_throughput);
        self.min_p50_us = self.min_p50_us.min(o.min_p50_us);
        self.min_p99_us = self.min_p99_us.min(o.min_p99_us);
    }

    pub fn min_latency(&self, p: Percentile) -> f64 {
        match p {
            Percentile::P50 => self.min_p50_us,
            Percentile::P99 => self.min_p99_us,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Grid {
    /// Levels per knob (`s, c, b, q`).
    levels: [usize; DIMS],
    cells: Vec<Option<Perf>>,
    /// Per `(s, c)` level pair: bound over all its `b, q` cells.
    sc: Vec<Bound>,
    /// Per `(s, c, b)` level triple: bound over its `q` cells.
    scb: Vec<Bound>,
}

fn level_of(v: u32) -> Option<usize> {
    v.is_power_of_two().then(|| v.trailing_zeros() as usize)
}

/// `(lower level, upper level, weight of the upper)` for value `x`, or `None`
/// outside `levels`.
#[inline]
fn bracket(x: u32, levels: usize) -> Option<(usize, usize, f64)> {
    if x == 0 {
        return None;
    }
    let lo = (31 - x.leading_zeros()) as usize;
    if lo >= levels {
        return None;
    }
    let base = 1u32 << lo;
    if x == base {
        return Some((lo, lo, 0.0));
    }
    if lo + 1 >= levels {
        return None;
    }
    Some((lo, lo + 1, f64::from(x - base) / f64::from(base)))
}

fn knobs(t: Transport) -> [u32; DIMS] {
    [t.s, t.c, t.b, t.q]
}

impl Grid {
    pub fn build(points: &[Point]) -> Result<Self, SloError> {
        if points.is_empty() {
            return Err(SloError::Malformed("a section with no points".into()));
        }
        let mut levels = [0usize; DIMS];
        let mut at = Vec::with_capacity(points.len());
        for p in points {
            let mut idx = [0usize; DIMS];
            for (d, v) in knobs(p.transport).into_iter().enumerate() {
                let l = level_of(v).ok_or_else(|| {
                    SloError::Malformed(format!(
                        "measured point {} has a knob that is not a power of two",
                        p.transport
                    ))
                })?;
                idx[d] = l;
                levels[d] = levels[d].max(l + 1);
            }
            let f = &p.perf;
            let ok = |x: f64| x.is_finite() && x > 0.0;
            if !(ok(f.p50_us) && ok(f.p99_us) && ok(f.throughput)) {
                return Err(SloError::Malformed(format!(
                    "point {} has a non-positive figure",
                    p.transport
                )));
            }
            at.push((idx, *f));
        }
        let size: usize = levels.iter().product();
        let mut g = Grid {
            levels,
            cells: vec![None; size],
            sc: vec![Bound::EMPTY; levels[0] * levels[1]],
            scb: vec![Bound::EMPTY; levels[0] * levels[1] * levels[2]],
        };
        for (idx, f) in at {
            let i = g.index(idx);
            if g.cells[i].is_some() {
                return Err(SloError::Malformed(format!(
                    "configuration s={} c={} b={} q={} measured twice",
                    1u32 << idx[0],
                    1u32 << idx[1],
                    1u32 << idx[2],
                    1u32 << idx[3]
                )));
            }
            g.cells[i] = Some(f);
            g.sc[idx[0] * levels[1] + idx[1]].add(&f);
            g.scb[(idx[0] * levels[1] + idx[1]) * levels[2] + idx[2]].add(&f);
        }
        Ok(g)
    }

    #[inline]
    fn index(&self, i: [usize; DIMS]) -> usize {
        ((i[0] * self.levels[1] + i[1]) * self.levels[2] + i[2]) * self.levels[3] + i[3]
    }

    /// The largest value of each knob the grid reaches (`s, c, b, q`).
    pub fn max(&self) -> [u32; DIMS] {
        self.levels.map(|l| 1u32 << (l.max(1) - 1))
    }

    /// Interpolated figures at `t`, or `None` outside what was measured.
    pub fn predict(&self, t: Transport) -> Option<Perf> {
        let k = knobs(t);
        let mut br = [(0usize, 0usize, 0f64); DIMS];
        for d in 0..DIMS {
            br[d] = bracket(k[d], self.levels[d])?;
        }
        let mut out = Perf {
            p50_us: 0.0,
            p99_us: 0.0,
            throughput: 0.0,
        };
        for corner in 0..(1usize << DIMS) {
            let mut w = 1.0;
            let mut idx = [0usize; DIMS];
            let mut skip = false;
            for d in 0..DIMS {
                let (lo, hi, wh) = br[d];
                let up = corner >> d & 1 == 1;
                if up && lo == hi {
                    skip = true;
                    break;
                }
                idx[d] = if up { hi } else { lo };
                w *= if up { wh } else { 1.0 - wh };
            }
            if skip || w == 0.0 {
                continue;
            }
            let c = self.cells[self.index(idx)].as_ref()?;
            out.p50_us += w * c.p50_us;
            out.p99_us += w * c.p99_us;
            out.throughput += w * c.throughput;
        }
        Some(out)
    }

    /// Bound over every setting with `s` and `c` (any `b`, `q`).
    pub fn bound_sc(&self, s: u32, c: u32) -> Option<Bound> {
        let (s0, s1, _) = bracket(s, self.levels[0])?;
        let (c0, c1, _) = bracket(c, self.levels[1])?;
        let mut b = Bound::EMPTY;
        for si in [s0, s1] {
            for ci in [c0, c1] {
                b.join(&self.sc[si * self.levels[1] + ci]);
            }
        }
        Some(b)
    }

    /// Bound over every setting with `s`, `c` and `b` (any `q`).
    pub fn bound_scb(&self, s: u32, c: u32, b: u32) -> Option<Bound> {
        let (s0, s1, _) = bracket(s, self.levels[0])?;
        let (c0, c1, _) = bracket(c, self.levels[1])?;
        let (b0, b1, _) = bracket(b, self.levels[2])?;
        let mut out = Bound::EMPTY;
        for si in [s0, s1] {
            for ci in [c0, c1] {
                for bi in [b0, b1] {
                    out.join(&self.scb[(si * self.levels[1] + ci) * self.levels[2] + bi]);
                }
            }
        }
        Some(out)
    }
}

/// The range of `b` values sharing `b`'s bracket, so a failed bound skips them all:
/// a power of two is its own bracket, values strictly between powers share one.
pub(crate) fn bracket_end(b: u32) -> u32 {
    if b.is_power_of_two() {
        b
    } else {
        let lo = 1u32 << (31 - b.leading_zeros());
        lo.saturating_mul(2) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: u32, c: u32, b: u32, q: u32) -> Transport {
        Transport { s, c, b, q }
    }

    fn pt(tr: Transport, lat: f64, tput: f64) -> Point {
        Point {
            transport: tr,
            perf: Perf {
                p50_us: lat,
                p99_us: lat * 2.0,
                throughput: tput,
            },
        }
    }

    #[test]
    fn interpolates_linearly_between_powers() {
        let g = Grid::build(&[
            pt(t(1, 1, 1, 2), 10.0, 100.0),
            pt(t(1, 1, 1, 4), 20.0, 300.0),
        ])
        .unwrap();
        let p = g.predict(t(1, 1, 1, 3)).unwrap();
        assert!((p.p50_us - 15.0).abs() < 1e-9 && (p.throughput - 200.0).abs() < 1e-9);
        assert_eq!(g.predict(t(1, 1, 1, 2)).unwrap().throughput, 100.0);
        // q=1 was never measured, q=5 lies past the largest level.
        assert!(g.predict(t(1, 1, 1, 1)).is_none());
        assert!(g.predict(t(1, 1, 1, 5)).is_none());
        assert!(g.predict(t(0, 1, 1, 2)).is_none());
    }

    #[test]
    fn missing_corner_means_outside_the_model() {
        // b=2 measured only at q=1: (b=3, q=1) has both corners, (b=3, q=2) lacks one.
        let g = Grid::build(&[
            pt(t(1, 1, 1, 1), 5.0, 10.0),
            pt(t(1, 1, 2, 1), 6.0, 20.0),
            pt(t(1, 1, 4, 1), 8.0, 40.0),
            pt(t(1, 1, 1, 2), 7.0, 15.0),
        ])
        .unwrap();
        assert!(g.predict(t(1, 1, 3, 1)).is_some());
        assert!(g.predict(t(1, 1, 2, 2)).is_none());
    }

    #[test]
    fn bounds_cover_interpolated_points() {
        let g = Grid::build(&[
            pt(t(1, 1, 1, 1), 5.0, 10.0),
            pt(t(1, 1, 2, 1), 6.0, 20.0),
            pt(t(1, 2, 1, 1), 4.0, 30.0),
            pt(t(1, 2, 2, 1), 9.0, 50.0),
        ])
        .unwrap();
        let b = g.bound_sc(1, 2).unwrap();
        assert_eq!(b.max_throughput, 50.0);
        assert_eq!(b.min_p50_us, 4.0);
        let b = g.bound_scb(1, 1, 2).unwrap();
        assert_eq!((b.max_throughput, b.min_p50_us), (20.0, 6.0));
        assert_eq!(bracket_end(5), 7);
        assert_eq!(bracket_end(4), 4);
    }

    #[test]
    fn refuses_bad_points() {
        assert!(Grid::build(&[pt(t(1, 3, 1, 1), 1.0, 1.0)]).is_err());
        assert!(Grid::build(&[pt(t(1, 1, 1, 1), f64::NAN, 1.0)]).is_err());
        assert!(Grid::build(&[pt(t(1, 1, 1, 1), 1.0, 1.0), pt(t(1, 1, 1, 1), 2.0, 2.0)]).is_err());
        assert!(Grid::build(&[]).is_err());
    }
}
