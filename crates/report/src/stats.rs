//! The statistics a report's claims rest on: Wilson intervals for proportions, a two-proportion
//! z test with Newcombe's interval for a difference of rates, the exact McNemar test for paired
//! rates, Welch's t test for a difference of means, and Holm's adjustment for the many
//! comparisons of one report. Distributions come from `statrs`.

use statrs::distribution::{ContinuousCDF, DiscreteCDF, Normal, StudentsT};

/// z for 95% confidence.
pub const Z95: f64 = 1.959_963_984_540_054;

/// Significance level of every test in a report.
pub const ALPHA: f64 = 0.05;

/// The Wilson score interval (95%) of a proportion of `k` successes in `n` trials, as
/// fractions `(low, high)`; it stays inside `[0, 1]` and has width at 0 and `n`. `None` for
/// `n = 0`.
pub fn wilson(k: u64, n: u64) -> Option<(f64, f64)> {
    if n == 0 || k > n {
        return None;
    }
    let (n, p, z2) = (n as f64, k as f64 / n as f64, Z95 * Z95);
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z95 / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Some(((centre - half).max(0.0), (centre + half).min(1.0)))
}

fn two_sided_normal(z: f64) -> f64 {
    let n = Normal::standard();
    2.0 * (1.0 - n.cdf(z.abs()))
}

/// The result of a test of a difference between two groups.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Test {
    /// Difference, second group minus first (fractions for rates, the values' unit for means).
    pub diff: f64,
    /// 95% confidence interval of the difference.
    pub ci: (f64, f64),
    /// Two-sided p-value.
    pub p: f64,
}

/// Two-proportion test of `k2/n2 - k1/n1`: the pooled z test for the p-value, and Newcombe's
/// hybrid score interval ([`newcombe`]) for the difference, which stays inside `[-1, 1]` and
/// has width even when both rates are 0 or 1. `None` when a group is empty.
pub fn two_proportions(k1: u64, n1: u64, k2: u64, n2: u64) -> Option<Test> {
    if n1 == 0 || n2 == 0 || k1 > n1 || k2 > n2 {
        return None;
    }
    let (a, b) = (n1 as f64, n2 as f64);
    let diff = k2 as f64 / b - k1 as f64 / a;
    let ci = newcombe(k1, n1, k2, n2)?;
    let pooled = (k1 + k2) as f64 / (a + b);
    if pooled <= 0.0 || pooled >= 1.0 {
        return Some(Test { diff, ci, p: 1.0 });
    }
    let se = (pooled * (1.0 - pooled) * (1.0 / a + 1.0 / b)).sqrt();
    Some(Test { diff, ci, p: two_sided_normal(diff / se) })
}

/// Exact McNemar test of paired binary outcomes from the discordant pairs: `b` pairs where
/// only the first outcome holds, `c` where only the second does. Two-sided p =
/// min(1, 2 P(X <= min(b, c))) with X ~ Binomial(b + c, 1/2); 1 without discordant pairs.
pub fn mcnemar_exact(b: u64, c: u64) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let tail = statrs::distribution::Binomial::new(0.5, n).map_or(1.0, |d| d.cdf(b.min(c)));
    (2.0 * tail).min(1.0)
}

/// Newcombe's hybrid score interval (95%, his method 10) of `k2/n2 - k1/n1`, from the two Wilson
/// intervals: it stays inside `[-1, 1]` and has width even when a rate is 0 or 1. `None` when
/// a group is empty.
pub fn newcombe(k1: u64, n1: u64, k2: u64, n2: u64) -> Option<(f64, f64)> {
    let ((l1, u1), (l2, u2)) = (wilson(k1, n1)?, wilson(k2, n2)?);
    let (p1, p2) = (k1 as f64 / n1 as f64, k2 as f64 / n2 as f64);
    let d = p2 - p1;
    let lo = d - ((p2 - l2).powi(2) + (u1 - p1).powi(2)).sqrt();
    let hi = d + ((u2 - p2).powi(2) + (p1 - l1).powi(2)).sqrt();
    Some((lo.max(-1.0), hi.min(1.0)))
}

/// The mean of `v` and its 95% Student t interval; `None` for fewer than two values or a
/// value that is not finite.
pub fn mean_interval(v: &[f64]) -> Option<(f64, (f64, f64))> {
    if v.len() < 2 || v.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let (m, var) = mean_var(v);
    let half = StudentsT::new(0.0, 1.0, v.len() as f64 - 1.0).ok()?.inverse_cdf(0.975) * (var / v.len() as f64).sqrt();
    Some((m, (m - half, m + half)))
}

/// Whether the mean of `v` is shown to exceed `bound`: the one-sided 95% lower bound of the
/// mean (Student t) lies above it.
pub fn shown_above(v: &[f64], bound: f64) -> bool {
    if v.len() < 2 || v.iter().any(|x| !x.is_finite()) {
        return false;
    }
    let (m, var) = mean_var(v);
    let q = StudentsT::new(0.0, 1.0, v.len() as f64 - 1.0).map_or(f64::INFINITY, |t| t.inverse_cdf(0.95));
    m - q * (var / v.len() as f64).sqrt() > bound
}

fn mean_var(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    (m, v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0))
}

/// Welch's t test of `mean(b) - mean(a)`, with the Welch–Satterthwaite degrees of freedom.
/// `None` with fewer than two values in a group. Two groups without any spread give p = 0
/// when their means differ and 1 when they do not.
pub fn welch(a: &[f64], b: &[f64]) -> Option<Test> {
    if a.len() < 2 || b.len() < 2 || a.iter().chain(b).any(|x| !x.is_finite()) {
        return None;
    }
    let ((ma, va), (mb, vb)) = (mean_var(a), mean_var(b));
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let diff = mb - ma;
    let (sa, sb) = (va / na, vb / nb);
    let se = (sa + sb).sqrt();
    if se == 0.0 {
        return Some(Test { diff, ci: (diff, diff), p: if diff == 0.0 { 1.0 } else { 0.0 } });
    }
    let df = (sa + sb).powi(2) / (sa * sa / (na - 1.0) + sb * sb / (nb - 1.0));
    let t = StudentsT::new(0.0, 1.0, df).ok()?;
    let p = 2.0 * (1.0 - t.cdf((diff / se).abs()));
    let q = t.inverse_cdf(0.975);
    Some(Test { diff, ci: (diff - q * se, diff + q * se), p })
}

/// Holm's step-down adjustment of `p` (family-wise error rate): adjusted p-values in the
/// input's order.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&i, &j| p[i].total_cmp(&p[j]));
    let mut out = vec![1.0; m];
    let mut running: f64 = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(((m - rank) as f64 * p[i]).min(1.0));
        out[i] = running;
    }
    out
}

/// Power at which a report states the smallest difference its runs could detect.
pub const POWER: f64 = 0.8;

/// What the power of one tested difference rests on: its standard error as run, and the
/// summed per-run variance that gives the error at any other number of runs per cell (both in
/// the metric's unit). The same function serves every "detectable" figure and every
/// "undecided" verdict, so the two always agree.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spread {
    /// Standard error of the difference with the runs that were made.
    pub se: f64,
    /// Per-run variance of cell a plus that of cell b: the standard error with `n` runs in
    /// each cell is `sqrt(unit_var / n)`.
    pub unit_var: f64,
}

impl Spread {
    /// The spread of a difference of means (Welch): `None` with fewer than two values in a
    /// group or a value that is not finite.
    pub fn of_means(a: &[f64], b: &[f64]) -> Option<Self> {
        if a.len() < 2 || b.len() < 2 || a.iter().chain(b).any(|x| !x.is_finite()) {
            return None;
        }
        let ((_, va), (_, vb)) = (mean_var(a), mean_var(b));
        Some(Self { se: (va / a.len() as f64 + vb / b.len() as f64).sqrt(), unit_var: va + vb })
    }

    /// The spread of a difference of rates `k1/n1` and `k2/n2`, in percent points, at the
    /// pooled rate; a pooled rate of 0 or 1 is taken as half a run from the edge (`0.5 / (n1 +
    /// n2)`), so that rates never seen to vary still need runs to tell apart. `None` when a
    /// group is empty.
    pub fn of_rates(k1: u64, n1: u64, k2: u64, n2: u64) -> Option<Self> {
        if n1 == 0 || n2 == 0 || k1 > n1 || k2 > n2 {
            return None;
        }
        let n = (n1 + n2) as f64;
        let edge = 0.5 / n;
        let p = ((k1 + k2) as f64 / n).clamp(edge, 1.0 - edge);
        let var = 100.0 * 100.0 * p * (1.0 - p);
        Some(Self { se: (var * (1.0 / n1 as f64 + 1.0 / n2 as f64)).sqrt(), unit_var: 2.0 * var })
    }

    /// The smallest difference a two-sided test at level `alpha` detects with [`POWER`]
    /// (normal approximation): `(z(1 - alpha / 2) + z(POWER)) * se`.
    pub fn detectable(&self, alpha: f64) -> f64 {
        z_sum(alpha) * self.se
    }

    /// Runs per cell needed to detect a difference of `d` (same unit) at level `alpha` with
    /// [`POWER`]: `ceil((z(1 - alpha / 2) + z(POWER))^2 * unit_var / d^2)`, at least 2; `None`
    /// for `d <= 0`.
    pub fn runs_needed(&self, d: f64, alpha: f64) -> Option<u64> {
        if d.is_nan() || d <= 0.0 {
            return None;
        }
        let n = (z_sum(alpha) / d).powi(2) * self.unit_var;
        Some((n.ceil() as u64).max(2))
    }
}

/// The level each test of a family of `m` faces at Holm's first step (`ALPHA / m`): a
/// difference detectable at it is shown with [`POWER`] whatever the family's other p-values.
pub fn holm_first_level(m: usize) -> f64 {
    ALPHA / m.max(1) as f64
}

fn z_sum(alpha: f64) -> f64 {
    let n = Normal::standard();
    n.inverse_cdf(1.0 - alpha / 2.0) + n.inverse_cdf(POWER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn newcombe_matches_his_published_examples() {
        // Newcombe (1998), Table II, method 10: 56/70 - 48/80 = 0.2000, interval 0.0524 to 0.3339.
        let (lo, hi) = newcombe(48, 80, 56, 70).unwrap();
        assert!((lo - 0.0524).abs() < 5e-4 && (hi - 0.3339).abs() < 5e-4, "{lo} {hi}");
        // 9/10 - 3/10 = 0.6, interval 0.1705 to 0.8090.
        let (lo, hi) = newcombe(3, 10, 9, 10).unwrap();
        assert!((lo - 0.1705).abs() < 5e-4 && (hi - 0.8090).abs() < 5e-4, "{lo} {hi}");
        // Rates at the ends still give an interval with width, inside [-1, 1].
        let (lo, hi) = newcombe(0, 30, 30, 30).unwrap();
        assert!(lo > 0.8 && lo < 1.0 && hi == 1.0, "{lo} {hi}");
    }

    #[test]
    fn mean_intervals_and_one_sided_bounds() {
        // mean 2, sd 1, n 4: t(0.975, 3) = 3.1824, half width 1.5912.
        let (m, (lo, hi)) = mean_interval(&[1.0, 2.0, 2.0, 3.0]).unwrap();
        assert!((m - 2.0).abs() < 1e-12 && (lo - (2.0 - 3.182446 * (2.0f64 / 3.0).sqrt() / 2.0)).abs() < 1e-5 && hi > 2.0);
        assert!(mean_interval(&[1.0]).is_none());
        assert!(shown_above(&[3.0, 3.1, 2.9, 3.0], 2.0));
        assert!(!shown_above(&[0.0, 4.0, 0.0, 4.0], 1.0), "too spread to show it");
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn wilson_matches_published_values_and_is_wide_at_the_ends() {
        // Newcombe (1998), table I: 81/263 gives 0.2553 to 0.3662.
        let (lo, hi) = wilson(81, 263).unwrap();
        assert!(close(lo, 0.2553, 5e-4) && close(hi, 0.3662, 5e-4), "{lo} {hi}");
        // 0 of 10 and 10 of 10: not a zero-width interval.
        let (lo, hi) = wilson(0, 10).unwrap();
        assert!(close(lo, 0.0, 1e-12) && close(hi, 0.2775, 5e-4), "{hi}");
        let (lo, hi) = wilson(10, 10).unwrap();
        assert!(close(lo, 0.7225, 5e-4) && close(hi, 1.0, 1e-12));
        assert_eq!(wilson(1, 0), None);
    }

    #[test]
    fn two_proportions_match_a_hand_computed_z() {
        // 30/100 vs 45/100: pooled 0.375, se = sqrt(0.375 * 0.625 * 0.02), z = 2.19089,
        // p = 2 * scipy.stats.norm.sf(z) = 0.0284597.
        let t = two_proportions(30, 100, 45, 100).unwrap();
        assert!(close(t.diff, 0.15, 1e-12));
        assert!(close(t.p, 0.0284597, 1e-6), "{}", t.p);
        assert!(t.ci.0 > 0.0 && t.ci.1 > t.diff);
        assert_eq!(Some(t.ci), newcombe(30, 100, 45, 100), "the interval is Newcombe's, not Wald's");
        let same = two_proportions(0, 50, 0, 50).unwrap();
        assert_eq!(same.p, 1.0, "nothing varies");
        assert!(same.ci.0 < 0.0 && same.ci.1 > 0.0, "no zero-width interval: {:?}", same.ci);
        // All against none: the difference is 1 and the interval stays inside [-1, 1].
        let all = two_proportions(0, 3, 3, 3).unwrap();
        assert!(all.ci.0 > 0.0 && all.ci.1 <= 1.0 && all.ci.0 < 1.0, "{:?}", all.ci);
        assert!(two_proportions(5, 0, 1, 3).is_none());
    }

    #[test]
    fn welch_matches_a_reference_computation() {
        // scipy 1.16 stats.ttest_ind(b, a, equal_var=False) with a = [1, 2, 3, 4, 5] and
        // b = [2, 4, 6, 8, 10]: t = 1.89737, df = 5.88235, p = 0.107531, 95% CI of the
        // difference -0.887742 to 6.887742.
        let t = welch(&[1.0, 2.0, 3.0, 4.0, 5.0], &[2.0, 4.0, 6.0, 8.0, 10.0]).unwrap();
        assert!(close(t.diff, 3.0, 1e-12));
        assert!(close(t.p, 0.107531, 1e-5), "{}", t.p);
        assert!(close(t.ci.0, -0.887742, 1e-5) && close(t.ci.1, 6.887742, 1e-5), "{:?}", t.ci);
        assert!(t.ci.0 < 0.0 && t.ci.1 > 0.0, "not shown: the interval holds 0");
        assert_eq!(welch(&[1.0], &[1.0, 2.0]), None);
        assert_eq!(welch(&[1.0, 1.0], &[1.0, 1.0]).unwrap().p, 1.0);
    }

    #[test]
    fn mcnemar_matches_the_binomial_tail() {
        // scipy.stats.binomtest(1, 10, 0.5).pvalue = 0.021484375; statsmodels' mcnemar(exact)
        // gives the same for 1 and 9 discordant pairs.
        assert!(close(mcnemar_exact(1, 9), 0.021484375, 1e-12));
        assert!(close(mcnemar_exact(9, 1), 0.021484375, 1e-12));
        // 5 against 5: no evidence, p = 1; no discordant pairs: 1.
        assert_eq!(mcnemar_exact(5, 5), 1.0);
        assert_eq!(mcnemar_exact(0, 0), 1.0);
        // 0 against 6: 2 / 64.
        assert!(close(mcnemar_exact(0, 6), 0.03125, 1e-12));
    }

    #[test]
    fn holm_adjusts_step_down() {
        let a = holm(&[0.01, 0.04, 0.03, 0.2]);
        // Sorted 0.01, 0.03, 0.04, 0.2 times 4, 3, 2, 1, made monotone.
        let want = [0.04, 0.09, 0.09, 0.2];
        for (x, y) in a.iter().zip(want) {
            assert!(close(*x, y, 1e-12), "{a:?}");
        }
    }

    proptest! {
        #[test]
        fn wilson_holds_the_point_estimate(n in 1u64..2000, k in 0u64..2000) {
            let k = k.min(n);
            let (lo, hi) = wilson(k, n).unwrap();
            let p = k as f64 / n as f64;
            prop_assert!(0.0 <= lo && lo <= p + 1e-12 && p <= hi + 1e-12 && hi <= 1.0);
            prop_assert!(hi - lo > 0.0);
        }
    }
    #[test]
    fn detectable_differences_and_runs_needed_follow_the_textbook_formulas() {
        // Two groups of 10 with variance 1 each: se = sqrt(0.2); z(0.975) + z(0.8) = 2.8016.
        let a: Vec<f64> = (0..10).map(|i| if i % 2 == 0 { 1.0 } else { -1.0 } * (0.9f64).sqrt()).collect();
        let s = Spread::of_means(&a, &a).unwrap();
        assert!((s.unit_var - 2.0).abs() < 1e-12, "{s:?}");
        assert!((s.detectable(0.05) - 2.801_585 * 0.2f64.sqrt()).abs() < 1e-5, "{}", s.detectable(0.05));
        // n = (2.8016 / 0.5)^2 * 2 = 62.79 -> 63 runs per cell for half a unit.
        assert_eq!(s.runs_needed(0.5, 0.05), Some(63));
        assert_eq!(s.runs_needed(0.0, 0.05), None);
        // A stricter level needs a larger difference.
        assert!(s.detectable(holm_first_level(10)) > s.detectable(0.05));
        // Rates of 20% and 40% in 100 runs each, pooled 30%: se = 100 sqrt(0.21 * 0.02) points.
        let r = Spread::of_rates(20, 100, 40, 100).unwrap();
        assert!((r.se - 100.0 * (0.21f64 * 0.02).sqrt()).abs() < 1e-9, "{r:?}");
        // Never seen to vary: still a width, from half a run off the edge.
        assert!(Spread::of_rates(0, 21, 0, 21).unwrap().detectable(0.05) > 0.0);
        assert!(Spread::of_rates(0, 0, 1, 2).is_none() && Spread::of_means(&[1.0], &a).is_none());
    }
}
