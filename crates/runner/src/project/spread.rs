//! How much a job of finite length pays around the projection's expected overhead.
//!
//! The projection's overhead is an expectation. A job of `L` seconds of useful work meets a
//! Poisson number of failures (mean `L / M`), and each failure costs its fixed part plus what
//! depends on when in the step or checkpoint interval it came: checkpoint-restart loses a
//! uniform share of its interval (or nothing more when the profile's relaunch already covers
//! the recomputation), rollback a uniform share of a step, lossy forward the re-reduce's delay
//! at a uniform crash time. [`interval`] draws jobs of that length and returns the 2.5% and
//! 97.5% quantiles of their overhead: "95 of 100 such jobs pay between these" (beyond 1,000
//! expected failures, the normal approximation of that compound Poisson sum). It does not
//! contain the uncertainty of the constants themselves; the turning points state that.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Jobs drawn per interval.
const DRAWS: usize = 4000;

/// Above this many expected failures per job, the interval is the normal approximation of the
/// compound Poisson sum (its mean and variance are exact; drawing would cost DRAWS times this
/// many draws).
const DRAWN_UP_TO: f64 = 1000.0;

/// The 97.5% quantile of the standard normal distribution.
const Z975: f64 = 1.959_963_984_540_054;

/// The draw's seed: the interval is the same on every run.
const SEED: u64 = 0x5eed;

/// What one failure costs: `fixed` seconds, plus `uniform` seconds times a uniform draw, plus
/// one of `at_times` (seconds, by a uniform crash time) when not empty.
#[derive(Clone, Debug, Default)]
pub(super) struct PerFailure {
    pub fixed: f64,
    pub uniform: f64,
    pub at_times: Vec<f64>,
}

impl PerFailure {
    /// The expected cost of one failure.
    pub fn mean(&self) -> f64 {
        let at = if self.at_times.is_empty() { 0.0 } else { self.at_times.iter().sum::<f64>() / self.at_times.len() as f64 };
        self.fixed + self.uniform / 2.0 + at
    }

    /// The variance of one failure's cost: the uniform part's and the crash time's, which are
    /// independent.
    fn variance(&self) -> f64 {
        let n = self.at_times.len() as f64;
        let at = if self.at_times.is_empty() {
            0.0
        } else {
            let m = self.at_times.iter().sum::<f64>() / n;
            self.at_times.iter().map(|t| (t - m).powi(2)).sum::<f64>() / n
        };
        self.uniform * self.uniform / 12.0 + at
    }

    fn draw(&self, rng: &mut ChaCha8Rng) -> f64 {
        let at = if self.at_times.is_empty() { 0.0 } else { self.at_times[rng.random_range(0..self.at_times.len())] };
        self.fixed + self.uniform * rng.random::<f64>() + at
    }
}

/// The 2.5% and 97.5% quantiles of the overhead (a share of the useful time) of jobs with
/// `useful_s` seconds of useful work, a steady overhead `steady`, failures every `mtbf_s`
/// seconds on average, each costing as `cost` says.
pub(super) fn interval(steady: f64, cost: &PerFailure, mtbf_s: f64, useful_s: f64) -> (f64, f64) {
    let mean_failures = useful_s / mtbf_s;
    if mean_failures > DRAWN_UP_TO {
        // A compound Poisson sum: mean m E[c], variance m E[c^2].
        let (mean, second) = (cost.mean(), cost.variance() + cost.mean().powi(2));
        let (centre, half) = (mean_failures * mean, Z975 * (mean_failures * second).sqrt());
        return (steady + (centre - half).max(0.0) / useful_s, steady + (centre + half) / useful_s);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let mut overheads: Vec<f64> = (0..DRAWS)
        .map(|_| {
            let n = poisson(mean_failures, &mut rng);
            let lost: f64 = (0..n).map(|_| cost.draw(&mut rng)).sum();
            steady + lost / useful_s
        })
        .collect();
    overheads.sort_by(f64::total_cmp);
    let at = |q: f64| overheads[((q * (DRAWS - 1) as f64).round() as usize).min(DRAWS - 1)];
    (at(0.025), at(0.975))
}

/// A Poisson draw of mean `m`: by inversion below 50, else the normal approximation (rounded,
/// at least 0), whose error there is far below the quantiles' own.
fn poisson(m: f64, rng: &mut ChaCha8Rng) -> u64 {
    if m < 50.0 {
        let (mut k, mut p, u) = (0u64, (-m).exp(), rng.random::<f64>());
        let mut cdf = p;
        while u > cdf && k < 10_000 {
            k += 1;
            p *= m / k as f64;
            cdf += p;
        }
        return k;
    }
    // Box-Muller.
    let (u1, u2) = (rng.random::<f64>().max(f64::MIN_POSITIVE), rng.random::<f64>());
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    (m + m.sqrt() * z).round().max(0.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_draws_have_the_mean_and_variance_asked_for() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for m in [0.3, 4.0, 49.0, 200.0] {
            let d: Vec<f64> = (0..20_000).map(|_| poisson(m, &mut rng) as f64).collect();
            let mean = d.iter().sum::<f64>() / d.len() as f64;
            let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (d.len() - 1) as f64;
            assert!((mean - m).abs() < 0.05 * m.max(1.0), "{m}: mean {mean}");
            assert!((var - m).abs() < 0.1 * m.max(1.0), "{m}: variance {var}");
        }
    }

    #[test]
    fn the_interval_holds_the_expectation_and_narrows_with_the_job_length() {
        let cost = PerFailure { fixed: 100.0, uniform: 50.0, at_times: vec![0.0, 2.0] };
        let (steady, mtbf) = (0.01, 3600.0);
        let expected = steady + cost.mean() / mtbf;
        let short = interval(steady, &cost, mtbf, 10.0 * 86_400.0);
        let long = interval(steady, &cost, mtbf, 1000.0 * 86_400.0);
        for (lo, hi) in [short, long] {
            assert!(lo < expected && expected < hi, "{lo} {expected} {hi}");
        }
        assert!(long.1 - long.0 < 0.2 * (short.1 - short.0), "{short:?} {long:?}");
        // A job shorter than the MTBF mostly meets no failure: its lower end is the steady cost.
        let (lo, _) = interval(steady, &cost, mtbf, 60.0);
        assert_eq!(lo, steady);
        assert_eq!(interval(steady, &cost, mtbf, 86_400.0), interval(steady, &cost, mtbf, 86_400.0));
    }

    #[test]
    fn many_failures_take_the_normal_approximation_at_once_and_agree_with_drawing() {
        let cost = PerFailure { fixed: 10.0, uniform: 30.0, at_times: vec![0.0, 1.0, 5.0] };
        // Just below and above the switch: the drawn and the approximated intervals agree.
        let mtbf = 100.0;
        let (drawn, approximated) = (interval(0.0, &cost, mtbf, 999.0 * mtbf), interval(0.0, &cost, mtbf, 1001.0 * mtbf));
        for (a, b) in [(drawn.0, approximated.0), (drawn.1, approximated.1)] {
            assert!((a - b).abs() < 0.02 * b, "{drawn:?} {approximated:?}");
        }
        // A billion failures per job answers at once.
        let t = std::time::Instant::now();
        let (lo, hi) = interval(0.0, &cost, 0.005, 54.0 * 86_400.0);
        assert!(lo < cost.mean() / 0.005 && cost.mean() / 0.005 < hi, "{lo} {hi}");
        assert!(t.elapsed().as_secs_f64() < 0.1);
    }
}
