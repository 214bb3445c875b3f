//! Which configurations calibration measures: powers of two of `s, c, b, q` with
//! `s ≤ c`, walked in Redy's pre-order (`s`, then `c`, then `b`, then `q`), and early
//! termination: once raising a knob stops raising throughput by the threshold, that
//! knob is not raised further in that subtree.

use farcache_proto::slo::Transport;

use crate::point::{Perf, Point};

/// `1, 2, 4, …` up to `max` (at least `[1]`).
pub fn powers(max: u32) -> Vec<u32> {
    let mut v = vec![1u32];
    while let Some(&last) = v.last()
        && let Some(next) = last.checked_mul(2)
        && next <= max
    {
        v.push(next);
    }
    v
}

/// The largest value each knob reaches in one section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Smallest `s` measured (a cluster calibrated where it runs has one `s`).
    pub min_s: u32,
    pub max_s: u32,
    pub max_c: u32,
    pub max_b: u32,
    pub max_q: u32,
}

impl Plan {
    fn cs(&self, s: u32) -> Vec<u32> {
        powers(self.max_c).into_iter().filter(|&c| c >= s).collect()
    }

    fn bq(&self) -> u64 {
        (powers(self.max_b).len() * powers(self.max_q).len()) as u64
    }

    /// Configurations in the subtree of `s`.
    fn subtree(&self, s: u32) -> u64 {
        self.cs(s).len() as u64 * self.bq()
    }

    /// Every power-of-two configuration with `s ≤ c`: what calibration would measure
    /// without early termination.
    pub fn grid_size(&self) -> u64 {
        self.s_values().iter().map(|&s| self.subtree(s)).sum()
    }

    /// The `s` values measured, increasing.
    pub fn s_values(&self) -> Vec<u32> {
        powers(self.max_s)
            .into_iter()
            .filter(|&s| s >= self.min_s)
            .collect()
    }
}

/// Whether `new` beats `old` by at least `threshold` (0.05: 5 %).
fn pays(old: f64, new: f64, threshold: f64) -> bool {
    new >= old * (1.0 + threshold)
}

/// One section's walk: the points measured so far and whether `s` still pays.
#[derive(Debug, Clone)]
pub struct Walk {
    pub plan: Plan,
    threshold: f64,
    pub points: Vec<Point>,
    /// Best throughput of the last `s` subtree measured.
    last_s_best: Option<f64>,
    s_stopped: bool,
}

impl Walk {
    pub fn new(plan: Plan, threshold: f64) -> Self {
        Self {
            plan,
            threshold,
            points: Vec::new(),
            last_s_best: None,
            s_stopped: false,
        }
    }

    /// Whether the subtree of `s` is still to be measured.
    pub fn wants(&self, s: u32) -> bool {
        !self.s_stopped
            && (self.plan.min_s..=self.plan.max_s).contains(&s)
            && !self.plan.cs(s).is_empty()
    }

    /// Measures the subtree of `s` (called with increasing `s`). Returns how many grid
    /// configurations early termination skipped, this subtree and, when `s` stopped
    /// paying, every larger `s`.
    pub fn measure_s<E>(
        &mut self,
        s: u32,
        measure: &mut dyn FnMut(Transport) -> Result<Perf, E>,
    ) -> Result<u64, E> {
        let cs = self.plan.cs(s);
        let mut skipped = 0;
        let (mut prev, mut best) = (None, 0f64);
        for (i, &c) in cs.iter().enumerate() {
            let here = self.measure_c(s, c, measure, &mut skipped)?;
            best = best.max(here);
            if prev.is_some_and(|p| !pays(p, here, self.threshold)) {
                skipped += (cs.len() - i - 1) as u64 * self.plan.bq();
                break;
            }
            prev = Some(here);
        }
        if self
            .last_s_best
            .is_some_and(|p| !pays(p, best, self.threshold))
        {
            self.s_stopped = true;
            skipped += self
                .plan
                .s_values()
                .into_iter()
                .filter(|&x| x > s)
                .map(|x| self.plan.subtree(x))
                .sum::<u64>();
        }
        self.last_s_best = Some(best);
        Ok(skipped)
    }

    /// Best throughput over the `(s, c)` subtree.
    fn measure_c<E>(
        &mut self,
        s: u32,
        c: u32,
        measure: &mut dyn FnMut(Transport) -> Result<Perf, E>,
        skipped: &mut u64,
    ) -> Result<f64, E> {
        let bs = powers(self.plan.max_b);
        let nq = powers(self.plan.max_q).len() as u64;
        let (mut prev, mut best) = (None, 0f64);
        for (i, &b) in bs.iter().enumerate() {
            let here = self.measure_b(s, c, b, measure, skipped)?;
            best = best.max(here);
            if prev.is_some_and(|p| !pays(p, here, self.threshold)) {
                *skipped += (bs.len() - i - 1) as u64 * nq;
                break;
            }
            prev = Some(here);
        }
        Ok(best)
    }

    /// Best throughput over the `(s, c, b)` subtree: `q` raised while it pays.
    fn measure_b<E>(
        &mut self,
        s: u32,
        c: u32,
        b: u32,
        measure: &mut dyn FnMut(Transport) -> Result<Perf, E>,
        skipped: &mut u64,
    ) -> Result<f64, E> {
        let qs = powers(self.plan.max_q);
        let (mut prev, mut best) = (None, 0f64);
        for (i, &q) in qs.iter().enumerate() {
            let transport = Transport { s, c, b, q };
            let perf = measure(transport)?;
            self.points.push(Point { transport, perf });
            best = best.max(perf.throughput);
            if prev.is_some_and(|p| !pays(p, perf.throughput, self.threshold)) {
                *skipped += (qs.len() - i - 1) as u64;
                break;
            }
            prev = Some(perf.throughput);
        }
        Ok(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perf(throughput: f64) -> Perf {
        Perf {
            p50_us: 10.0,
            p99_us: 20.0,
            throughput,
        }
    }

    #[test]
    fn powers_up_to_max() {
        assert_eq!(powers(1), vec![1]);
        assert_eq!(powers(0), vec![1]);
        assert_eq!(powers(12), vec![1, 2, 4, 8]);
        assert_eq!(powers(16), vec![1, 2, 4, 8, 16]);
        assert_eq!(powers(u32::MAX).len(), 32);
    }

    #[test]
    fn grid_size_keeps_s_at_most_c() {
        let p = Plan {
            min_s: 1,
            max_s: 2,
            max_c: 2,
            max_b: 4,
            max_q: 2,
        };
        // (s, c) in {(1,1), (1,2), (2,2)}, 3 b levels, 2 q levels.
        assert_eq!(p.grid_size(), 3 * 3 * 2);
    }

    /// Throughput grows with `b·q` up to a ceiling, then stays: the walk measures up
    /// to the first value that did not pay and counts the rest as skipped.
    #[test]
    fn stops_raising_a_knob_that_does_not_pay() {
        let plan = Plan {
            min_s: 1,
            max_s: 2,
            max_c: 2,
            max_b: 16,
            max_q: 8,
        };
        let mut w = Walk::new(plan, 0.05);
        let mut f = |t: Transport| Ok::<_, ()>(perf(f64::from((t.b * t.q).min(8))));
        let mut skipped = 0;
        for s in powers(plan.max_s) {
            if w.wants(s) {
                skipped += w.measure_s(s, &mut f).expect("measure");
            }
        }
        let at = |s, c, b, q| {
            w.points
                .iter()
                .any(|p| p.transport == Transport { s, c, b, q })
        };
        // b=1: q up to 8 pays each time; the ceiling is reached at q=8.
        assert!(at(1, 1, 1, 8));
        // b=2: q=4 reaches 8, q=8 does not pay (measured), nothing past it.
        assert!(at(1, 1, 2, 8));
        // b=2 did not beat b=1's best (8): b stops after b=2.
        assert!(!at(1, 1, 4, 1));
        // c=2 and s=2 are measured once each and do not pay: nothing larger.
        assert!(at(1, 2, 1, 1));
        assert!(at(2, 2, 1, 1));
        assert_eq!(w.points.len() as u64 + skipped, plan.grid_size());
        assert!(!w.wants(4));
    }
}
