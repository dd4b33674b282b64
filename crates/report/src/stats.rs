//! The statistics a report's claims rest on: Wilson intervals for proportions, a two-proportion
//! z test with Newcombe's interval for a difference of rates, the exact McNemar test and
//! Newcombe's paired interval for paired rates, Welch's t test for a difference of means, the
//! paired t test with the Wilcoxon signed-rank test as its check for paired means, one-sided
//! upper bounds of a mean (non-inferiority), exact Clopper–Pearson bounds of a rate (the tail
//! risk of a study), the groups a paired test needs (t-based), and Holm's adjustment for the
//! many comparisons of one report. Distributions come from `statrs`.

use statrs::distribution::{Beta, ContinuousCDF, DiscreteCDF, Normal, StudentsT};

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

/// The exact (Clopper–Pearson) lower confidence bound at level `1 - alpha` of a rate seen `k`
/// times in `n` trials, as a fraction: the `alpha` quantile of Beta(k, n - k + 1), 0 for
/// `k = 0`. `k` may be fractional (an observed rate carried to another `n`). `None` unless
/// `0 <= k <= n`, `n > 0` and `alpha` lies in (0, 1).
pub fn clopper_pearson_lower(k: f64, n: f64, alpha: f64) -> Option<f64> {
    if !(n > 0.0 && (0.0..=n).contains(&k) && alpha > 0.0 && alpha < 1.0) {
        return None;
    }
    if k == 0.0 {
        return Some(0.0);
    }
    Beta::new(k, n - k + 1.0).ok().map(|b| b.inverse_cdf(alpha))
}

/// The exact (Clopper–Pearson) upper confidence bound at level `1 - alpha` of a rate seen `k`
/// times in `n` trials, as a fraction: the `1 - alpha` quantile of Beta(k + 1, n - k), 1 for
/// `k = n`; for `k = 0` it is `1 - alpha^(1/n)`. `None` as for [`clopper_pearson_lower`].
pub fn clopper_pearson_upper(k: f64, n: f64, alpha: f64) -> Option<f64> {
    if !(n > 0.0 && (0.0..=n).contains(&k) && alpha > 0.0 && alpha < 1.0) {
        return None;
    }
    if k == n {
        return Some(1.0);
    }
    Beta::new(k + 1.0, n - k).ok().map(|b| b.inverse_cdf(1.0 - alpha))
}

/// The two-sided 95% Clopper–Pearson interval of `k` events in `n` runs, as fractions (each
/// end at 0.025); `None` for `n = 0` or `k > n`.
pub fn clopper_pearson(k: u64, n: u64) -> Option<(f64, f64)> {
    let (k, n) = (k as f64, n as f64);
    Some((clopper_pearson_lower(k, n, ALPHA / 2.0)?, clopper_pearson_upper(k, n, ALPHA / 2.0)?))
}

/// The one-sided 95% Clopper–Pearson upper bound of `k` events in `n` runs, a fraction (the
/// catastrophe-rate rule of a study); `None` for `n = 0` or `k > n`.
pub fn rate_upper(k: u64, n: u64) -> Option<f64> {
    clopper_pearson_upper(k as f64, n as f64, ALPHA)
}

/// The runs at which a rate's one-sided 95% Clopper–Pearson upper bound falls below `budget`
/// (a fraction), when the rate observed is `k` of `n`: with `k = 0`, the fewest runs whose 0
/// events bound it there, `floor(ln 0.05 / ln(1 - budget)) + 1` (59 for 5%); else the fewest
/// runs at which the same observed rate `k/n` (events carried as a fraction) is bounded under
/// it, searched by doubling from `n` and bisecting, up to [`MAX_GROUPS`]. `None` when the rate
/// is at or above the budget (no number of runs reaches it), beyond the search, or for a
/// budget outside (0, 1].
pub fn runs_under_rate(k: u64, n: u64, budget: f64) -> Option<u64> {
    if !(budget > 0.0 && budget <= 1.0) || n == 0 || k > n {
        return None;
    }
    if k == 0 {
        if budget >= 1.0 {
            return Some(1);
        }
        let x = ALPHA.ln() / (1.0 - budget).ln();
        return (x < MAX_GROUPS as f64).then(|| x.floor() as u64 + 1);
    }
    let p = k as f64 / n as f64;
    if p >= budget {
        return None;
    }
    smallest_from(n, |m| clopper_pearson_upper(p * m as f64, m as f64, ALPHA).is_some_and(|u| u < budget))
}

/// The smallest `n >= start` for which `enough` holds, where `enough` turns true once and stays
/// so: `start` itself, or found by doubling from it and bisecting; `None` beyond
/// [`MAX_GROUPS`].
fn smallest_from(start: u64, enough: impl Fn(u64) -> bool) -> Option<u64> {
    if enough(start) {
        return Some(start);
    }
    let (mut lo, mut hi) = (start, start);
    while !enough(hi) {
        if hi >= MAX_GROUPS {
            return None;
        }
        lo = hi;
        hi = hi.saturating_mul(2).min(MAX_GROUPS);
    }
    // Not enough at lo, enough at hi.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if enough(mid) { hi = mid } else { lo = mid }
    }
    Some(hi)
}

/// The mean of `v` and its 95% Student t interval; `None` for fewer than two values or a
/// value that is not finite.
pub fn mean_interval(v: &[f64]) -> Option<(f64, (f64, f64))> {
    if v.len() < 2 || v.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let (m, var) = mean_var(v);
    let half = t_quantile(0.975, v.len() as f64 - 1.0) * (var / v.len() as f64).sqrt();
    Some((m, (m - half, m + half)))
}

/// Whether the mean of `v` is shown to exceed `bound`: the one-sided 95% lower bound of the
/// mean (Student t) lies above it.
pub fn shown_above(v: &[f64], bound: f64) -> bool {
    if v.len() < 2 || v.iter().any(|x| !x.is_finite()) {
        return false;
    }
    let (m, var) = mean_var(v);
    let q = t_quantile(0.95, v.len() as f64 - 1.0);
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
    let q = t_quantile(0.975, df);
    Some(Test { diff, ci: (diff - q * se, diff + q * se), p })
}

/// The paired t test of the differences `d` (in each group, the second option's value minus the
/// first's): their mean, its two-sided 95% Student t interval and the two-sided p with `n - 1`
/// degrees of freedom, `n` the groups with both values. `None` with fewer than two differences
/// or one that is not finite. Differences without any spread give p = 0 when their mean is not
/// 0 and 1 when it is, and an interval of no width.
pub fn paired_t(d: &[f64]) -> Option<Test> {
    if d.len() < 2 || d.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let (m, var) = mean_var(d);
    let se = (var / d.len() as f64).sqrt();
    if se == 0.0 {
        return Some(Test { diff: m, ci: (m, m), p: if m == 0.0 { 1.0 } else { 0.0 } });
    }
    let t = StudentsT::new(0.0, 1.0, d.len() as f64 - 1.0).ok()?;
    let q = t_quantile(0.975, d.len() as f64 - 1.0);
    Some(Test { diff: m, ci: (m - q * se, m + q * se), p: (2.0 * t.sf((m / se).abs())).min(1.0) })
}

/// Most differences (zeros dropped) for which [`wilcoxon`] uses the exact distribution.
pub const WILCOXON_EXACT_MAX: usize = 50;

/// The Wilcoxon signed-rank test of the differences `d`, two-sided p. Zeros are dropped
/// (Wilcoxon's rule, not Pratt's) and the others ranked by absolute value, ties at their mean
/// rank; `T+` is the sum of the positive differences' ranks. Without ties and with at most
/// [`WILCOXON_EXACT_MAX`] differences left, p is exact: `min(1, 2 P(T <= min(T+, T-)))` under
/// the null distribution of the rank sum. Otherwise the normal approximation without continuity
/// correction, its variance corrected for ties: `n(n+1)(2n+1)/24 - sum(t^3 - t)/48`. p = 1
/// when every difference is 0; `None` without differences or with one that is not finite.
pub fn wilcoxon(d: &[f64]) -> Option<f64> {
    if d.is_empty() || d.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let mut nz: Vec<f64> = d.iter().copied().filter(|x| *x != 0.0).collect();
    if nz.is_empty() {
        return Some(1.0);
    }
    nz.sort_by(|a, b| a.abs().total_cmp(&b.abs()));
    let n = nz.len();
    let (mut plus, mut ties, mut i) = (0.0, Vec::new(), 0);
    while i < n {
        let mut j = i;
        while j + 1 < n && nz[j + 1].abs() == nz[i].abs() {
            j += 1;
        }
        let rank = (i + j + 2) as f64 / 2.0;
        plus += nz[i..=j].iter().filter(|x| **x > 0.0).count() as f64 * rank;
        ties.push((j - i + 1) as f64);
        i = j + 1;
    }
    let total = (n * (n + 1)) as f64 / 2.0;
    if ties.len() == n && n <= WILCOXON_EXACT_MAX {
        return Some(wilcoxon_exact(n, plus.min(total - plus) as usize));
    }
    let nf = n as f64;
    let var = nf * (nf + 1.0) * (2.0 * nf + 1.0) / 24.0 - ties.iter().map(|t| t * t * t - t).sum::<f64>() / 48.0;
    if var <= 0.0 {
        return Some(1.0);
    }
    Some(two_sided_normal((plus - total / 2.0) / var.sqrt()).min(1.0))
}

/// `min(1, 2 P(T <= t))` for the signed-rank sum `T` of `n` differences without ties: the
/// number of subsets of the ranks 1..=n by their sum, counted exactly (at most 2^50, exact in
/// an f64), over 2^n.
fn wilcoxon_exact(n: usize, t: usize) -> f64 {
    let max = n * (n + 1) / 2;
    let mut ways = vec![0.0f64; max + 1];
    ways[0] = 1.0;
    for rank in 1..=n {
        for s in (rank..=max).rev() {
            ways[s] += ways[s - rank];
        }
    }
    let below: f64 = ways[..=t.min(max)].iter().sum();
    (2.0 * below / 2f64.powi(n as i32)).min(1.0)
}

/// Newcombe's 95% interval (his method 10 for paired data, 1998) of the difference `p_b - p_a`
/// of two paired rates, from the counts of the pairs where both outcomes hold, only a's, only
/// b's, and neither: the two marginal Wilson intervals combined with the pairs' correlation
/// (phi, its numerator `AD - BC` reduced by `n/2` when above it, 0 between 0 and `n/2`, and 0
/// when a margin is empty). It stays inside `[-1, 1]` and keeps a width at 0 and 1; Wald's
/// interval is never used. `None` without pairs.
pub fn newcombe_paired(both: u64, a_only: u64, b_only: u64, neither: u64) -> Option<(f64, f64)> {
    let n = both + a_only + b_only + neither;
    let (ka, kb) = (both + a_only, both + b_only);
    let ((la, ua), (lb, ub)) = (wilson(ka, n)?, wilson(kb, n)?);
    let (pa, pb, nf) = (ka as f64 / n as f64, kb as f64 / n as f64, n as f64);
    let margins = [ka, n - ka, kb, n - kb];
    let phi = if margins.contains(&0) {
        0.0
    } else {
        let a = both as f64 * neither as f64 - a_only as f64 * b_only as f64;
        let num = if a > nf / 2.0 {
            a - nf / 2.0
        } else if a >= 0.0 {
            0.0
        } else {
            a
        };
        num / margins.iter().map(|&m| m as f64).product::<f64>().sqrt()
    };
    // Newcombe's interval of pa - pb, turned round for pb - pa.
    let d = pa - pb;
    let lo = d - ((pa - la).powi(2) + (ub - pb).powi(2) - 2.0 * phi * (pa - la) * (ub - pb)).max(0.0).sqrt();
    let hi = d + ((pb - lb).powi(2) + (ua - pa).powi(2) - 2.0 * phi * (pb - lb) * (ua - pa)).max(0.0).sqrt();
    Some(((-hi).max(-1.0), (-lo).min(1.0)))
}

/// The one-sided 95% upper confidence bound of the mean of `v` (Student t):
/// `mean + t(0.95, n-1) s / sqrt(n)`. `None` for fewer than two values or one that is not
/// finite.
pub fn upper_bound(v: &[f64]) -> Option<f64> {
    if v.len() < 2 || v.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let (m, var) = mean_var(v);
    let q = t_quantile(0.95, v.len() as f64 - 1.0);
    Some(m + q * (var / v.len() as f64).sqrt())
}

/// The sample standard deviation of `v`; `None` for fewer than two values or one that is not
/// finite.
pub fn sd(v: &[f64]) -> Option<f64> {
    if v.len() < 2 || v.iter().any(|x| !x.is_finite()) {
        return None;
    }
    Some(mean_var(v).1.sqrt())
}

/// Degrees of freedom up to which [`t_quantile`] inverts Student's t with `statrs`; above, the
/// Cornish–Fisher expansion. statrs' inversion (AS 109's Newton iteration, without a bound on
/// its steps) drifts from about 10^6 degrees of freedom (t(0.95, 2.6e6) = 1.6427, for 1.6449)
/// and never returns at some (t(0.95, 3.5e7)); the two agree within 1e-8 at 1,000.
const T_INVERT_DF: f64 = 1000.0;

/// The `q` quantile of Student's t with `df` degrees of freedom (NaN unless `q` lies in (0, 1)
/// and `df > 0`): statrs' inversion up to [`T_INVERT_DF`], else Abramowitz and Stegun's
/// 26.7.5, the Cornish–Fisher expansion around the normal quantile `x` to `df^-4`, within
/// 1e-10 of the exact quantile from 1,000 degrees of freedom up at the levels a report tests.
/// Closed form above the threshold: it always returns.
pub fn t_quantile(q: f64, df: f64) -> f64 {
    if !(q > 0.0 && q < 1.0 && df > 0.0) {
        return f64::NAN;
    }
    if df <= T_INVERT_DF {
        return StudentsT::new(0.0, 1.0, df).map_or(f64::NAN, |t| t.inverse_cdf(q));
    }
    let x = Normal::standard().inverse_cdf(q);
    let x2 = x * x;
    let g1 = (x2 + 1.0) * x / 4.0;
    let g2 = ((5.0 * x2 + 16.0) * x2 + 3.0) * x / 96.0;
    let g3 = (((3.0 * x2 + 19.0) * x2 + 17.0) * x2 - 15.0) * x / 384.0;
    let g4 = ((((79.0 * x2 + 776.0) * x2 + 1482.0) * x2 - 1920.0) * x2 - 945.0) * x / 92160.0;
    x + (g1 + (g2 + (g3 + g4 / df) / df) / df) / df
}

/// `t(q, n - 1) + t(POWER, n - 1)`: the quantiles whose sum, times `s / sqrt(n)`, a difference
/// must reach to be found with [`POWER`] by a t test whose significance quantile is `q`.
fn t_sum(q: f64, n: u64) -> Option<f64> {
    let df = n.checked_sub(1).filter(|&d| d > 0)? as f64;
    Some(t_quantile(q, df) + t_quantile(POWER, df))
}

/// The most groups (or runs per cell) a power calculation searches: a need beyond it reads
/// "more than" it ([`Size::MoreThan`]).
pub const MAX_GROUPS: u64 = 1_000_000_000;

/// Groups (or runs per cell) a power calculation finds: exactly, or more than it searched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// This many.
    Exactly(u64),
    /// More than this many ([`MAX_GROUPS`]).
    MoreThan(u64),
}

impl Size {
    /// The count when found, `None` beyond the search.
    pub fn exactly(self) -> Option<u64> {
        match self {
            Size::Exactly(n) => Some(n),
            Size::MoreThan(_) => None,
        }
    }

    /// A count from a real number of runs: its ceiling, at least 2, or more than
    /// [`MAX_GROUPS`] above it (and when it is not a number).
    fn of(n: f64) -> Self {
        if n <= MAX_GROUPS as f64 { Size::Exactly((n.ceil() as u64).max(2)) } else { Size::MoreThan(MAX_GROUPS) }
    }
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Size::Exactly(n) => write!(f, "{n}"),
            Size::MoreThan(n) => write!(f, "more than {n}"),
        }
    }
}

/// The fewest groups `n >= 2` with `n >= ((t(q, n-1) + t(POWER, n-1)) s / margin)^2`, the
/// t-based iteration of the sample size of a paired t test. Its right side falls as `n` grows,
/// so the sizes that satisfy it are all those from the answer up: the search starts at the
/// normal approximation's size (which the answer never undercuts), doubles until a size
/// satisfies it, then bisects, at most about 60 quantile pairs in all; beyond [`MAX_GROUPS`]
/// it answers [`Size::MoreThan`]. `None` unless `margin > 0` and `s >= 0` are finite.
fn t_groups(q: f64, s: f64, margin: f64) -> Option<Size> {
    if !(margin > 0.0 && margin.is_finite() && s >= 0.0 && s.is_finite()) {
        return None;
    }
    let z = Normal::standard();
    let normal = ((z.inverse_cdf(q) + z.inverse_cdf(POWER)) * s / margin).powi(2);
    let Size::Exactly(start) = Size::of(normal) else { return Some(Size::MoreThan(MAX_GROUPS)) };
    let enough = |n: u64| t_sum(q, n).is_some_and(|t| n as f64 >= (t * s / margin).powi(2));
    Some(smallest_from(start, enough).map_or(Size::MoreThan(MAX_GROUPS), Size::Exactly))
}

/// Groups a paired t test at two-sided level `alpha` needs to find a mean difference `d` with
/// [`POWER`], given the standard deviation `s` of the per-group differences (the t-based
/// iteration of `t_groups`, bounded). `None` unless `|d| > 0`.
pub fn groups_to_detect(d: f64, s: f64, alpha: f64) -> Option<Size> {
    t_groups(1.0 - alpha / 2.0, s, d.abs())
}

/// The smallest mean difference a paired t test at two-sided level `alpha` finds with
/// [`POWER`] with `n` groups whose differences have standard deviation `s`:
/// `(t(1 - alpha/2, n-1) + t(POWER, n-1)) s / sqrt(n)`. `None` for fewer than two groups.
pub fn detectable_in(n: u64, s: f64, alpha: f64) -> Option<f64> {
    Some(t_sum(1.0 - alpha / 2.0, n)? * s / (n as f64).sqrt())
}

/// Groups needed for the one-sided 95% upper bound of a mean ([`upper_bound`]) to fall below
/// `budget` with [`POWER`], when the mean is `m` and the standard deviation `s`: the t-based
/// iteration with `t(0.95, n-1) + t(POWER, n-1)` and the margin `budget - m`. `None` when `m`
/// is at or above the budget (no number of groups reaches it) or beyond [`MAX_GROUPS`];
/// [`groups_under_size`] tells the two apart.
pub fn groups_under(m: f64, s: f64, budget: f64) -> Option<u64> {
    groups_under_size(m, s, budget)?.exactly()
}

/// [`groups_under`], with a need beyond [`MAX_GROUPS`] as [`Size::MoreThan`]; `None` only when
/// `m` is at or above the budget.
pub fn groups_under_size(m: f64, s: f64, budget: f64) -> Option<Size> {
    t_groups(0.95, s, budget - m)
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
    /// each cell is `sqrt(unit_var / n)`. For a paired difference, the variance of the
    /// per-group differences.
    pub unit_var: f64,
    /// The groups behind a paired difference (0: unpaired). A paired spread's figures are
    /// t-based ([`detectable_in`], [`groups_to_detect`]) with the differences' standard
    /// deviation; an unpaired one's use the normal approximation.
    pub pairs: u64,
}

impl Spread {
    /// The spread of a difference of means (Welch): `None` with fewer than two values in a
    /// group or a value that is not finite.
    pub fn of_means(a: &[f64], b: &[f64]) -> Option<Self> {
        if a.len() < 2 || b.len() < 2 || a.iter().chain(b).any(|x| !x.is_finite()) {
            return None;
        }
        let ((_, va), (_, vb)) = (mean_var(a), mean_var(b));
        Some(Self { se: (va / a.len() as f64 + vb / b.len() as f64).sqrt(), unit_var: va + vb, pairs: 0 })
    }

    /// The spread of a paired difference of means, from the per-group differences `d`: `None`
    /// with fewer than two or one that is not finite.
    pub fn of_pairs(d: &[f64]) -> Option<Self> {
        let var = sd(d)?.powi(2);
        Some(Self { se: (var / d.len() as f64).sqrt(), unit_var: var, pairs: d.len() as u64 })
    }

    /// The spread of a difference of paired rates, in percent points, from `n` pairs of which
    /// `a_only` had only a's outcome and `b_only` only b's: the variance of the per-pair
    /// differences (-100, 0 or 100 points), `10^4 (p_disc - delta^2)`, taken at least
    /// `10^4 e (1 - e)` with `e = 0.5 / n` (half a pair from the edge), so that rates never seen
    /// to differ still need pairs to tell apart. `None` with fewer than two pairs.
    pub fn of_paired_rates(a_only: u64, b_only: u64, n: u64) -> Option<Self> {
        if n < 2 || a_only + b_only > n {
            return None;
        }
        let nf = n as f64;
        let edge = 0.5 / nf;
        let (disc, delta) = ((a_only + b_only) as f64 / nf, (b_only as f64 - a_only as f64) / nf);
        let var = 1e4 * (disc - delta * delta).max(edge * (1.0 - edge));
        Some(Self { se: (var / nf).sqrt(), unit_var: var, pairs: n })
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
        Some(Self { se: (var * (1.0 / n1 as f64 + 1.0 / n2 as f64)).sqrt(), unit_var: 2.0 * var, pairs: 0 })
    }

    /// The smallest difference a two-sided test at level `alpha` detects with [`POWER`]:
    /// unpaired, the normal approximation `(z(1 - alpha / 2) + z(POWER)) * se`; paired,
    /// [`detectable_in`] with the groups and the differences' standard deviation.
    pub fn detectable(&self, alpha: f64) -> f64 {
        if self.pairs >= 2 {
            return detectable_in(self.pairs, self.unit_var.sqrt(), alpha).unwrap_or(f64::NAN);
        }
        z_sum(alpha) * self.se
    }

    /// Runs per cell (groups, for a paired difference) needed to detect a difference of `d`
    /// (same unit) at level `alpha` with [`POWER`]: unpaired, `ceil((z(1 - alpha / 2) +
    /// z(POWER))^2 * unit_var / d^2)`, at least 2; paired, [`groups_to_detect`]. `None` for
    /// `d <= 0` or a need beyond [`MAX_GROUPS`] ([`Spread::size_needed`] tells them apart).
    pub fn runs_needed(&self, d: f64, alpha: f64) -> Option<u64> {
        self.size_needed(d, alpha)?.exactly()
    }

    /// [`Spread::runs_needed`], with a need beyond [`MAX_GROUPS`] as [`Size::MoreThan`];
    /// `None` only for `d <= 0` (or not a number).
    pub fn size_needed(&self, d: f64, alpha: f64) -> Option<Size> {
        if d.is_nan() || d <= 0.0 {
            return None;
        }
        if self.pairs > 0 {
            return groups_to_detect(d, self.unit_var.sqrt(), alpha);
        }
        Some(Size::of((z_sum(alpha) / d).powi(2) * self.unit_var))
    }
}

/// The interval `ci` of a difference in `metric`, cut to the values such a difference can take:
/// a difference of two accuracies (or accuracy losses) or of two shares of runs lies within
/// [-100, 100] (points or %), so an interval past that (Welch's on a few runs) is cut there;
/// the cut interval keeps every value the difference can have, and so its coverage. Overheads,
/// seconds and steps are left as they are.
pub fn within_bounds(metric: &str, ci: (f64, f64)) -> (f64, f64) {
    let bounded = matches!(difference_unit(metric), "accuracy points" | "% of runs");
    if bounded { (ci.0.clamp(-100.0, 100.0), ci.1.clamp(-100.0, 100.0)) } else { ci }
}

/// The unit of a difference of `metric` (a report's column name) in which every "detectable"
/// and "needed" figure is stated: accuracy in points (`acc_loss_pts`, `acc_pct`), overheads
/// and times to accuracy in % of the golden run's time (`sim_overhead_pct`,
/// `time_to_acc_pct`), the other `_pct` shares in % of runs (`nev_pct`, `failed_pct`); seconds
/// and steps for `_s` and `_steps`.
pub fn difference_unit(metric: &str) -> &'static str {
    if metric.starts_with("acc") {
        "accuracy points"
    } else if metric.contains("overhead") || metric.starts_with("time_to") {
        "% of golden time"
    } else if metric.ends_with("_pct") {
        "% of runs"
    } else if metric.ends_with("_steps") {
        "steps"
    } else if metric.ends_with("_s") {
        "s"
    } else {
        "(the metric's unit)"
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
    fn clopper_pearson_matches_published_and_closed_form_values() {
        // Newcombe (1998), table I, method 5 (exact): 81/263 gives 0.2527 to 0.3676.
        let (lo, hi) = clopper_pearson(81, 263).unwrap();
        assert!(close(lo, 0.2527, 5e-5) && close(hi, 0.3676, 5e-5), "{lo} {hi}");
        // 0 of 30: the one-sided 95% upper bound is 1 - 0.05^(1/30) = 9.503%; two-sided, the
        // upper end is 1 - 0.025^(1/30) and the lower 0. n of n mirrors it.
        assert!(close(rate_upper(0, 30).unwrap(), 1.0 - 0.05f64.powf(1.0 / 30.0), 1e-12));
        let (lo, hi) = clopper_pearson(0, 30).unwrap();
        assert!(lo == 0.0 && close(hi, 1.0 - 0.025f64.powf(1.0 / 30.0), 1e-12), "{hi}");
        let (lo, hi) = clopper_pearson(30, 30).unwrap();
        assert!(close(lo, 0.025f64.powf(1.0 / 30.0), 1e-12) && hi == 1.0, "{lo}");
        // 1 of 30 and 5 of 20: the binomial tails solved by bisection (exact sums in Python):
        // one-sided upper 0.148596; two-sided 0.086571 to 0.491046.
        assert!(close(rate_upper(1, 30).unwrap(), 0.148596, 1e-6), "{:?}", rate_upper(1, 30));
        let (lo, hi) = clopper_pearson(5, 20).unwrap();
        assert!(close(lo, 0.086571, 1e-6) && close(hi, 0.491046, 1e-6), "{lo} {hi}");
        assert!(close(clopper_pearson_lower(5.0, 20.0, 0.05).unwrap(), 0.104081, 1e-6));
        assert_eq!((clopper_pearson(1, 0), rate_upper(4, 3)), (None, None));
        // Exact bounds are wider than Wilson's at the ends.
        assert!(rate_upper(0, 30).unwrap() > 0.0 && clopper_pearson(0, 30).unwrap().1 > wilson(0, 30).unwrap().1);
    }

    #[test]
    fn the_runs_a_rate_needs_under_its_budget() {
        // 0 events bound a rate under 5% from 59 runs (ln 0.05 / ln 0.95 = 58.4), under 10%
        // from 29 (28.4): 0 of 30 shows 10%, 0 of 28 does not.
        assert_eq!(runs_under_rate(0, 30, 0.05), Some(59));
        assert_eq!(runs_under_rate(0, 30, 0.10), Some(29));
        assert!(rate_upper(0, 29).unwrap() < 0.10 && rate_upper(0, 28).unwrap() >= 0.10);
        // 1 of 30 (3.3%) under 10%: the fewest runs at which the same rate is bounded there,
        // and one fewer is not.
        let n = runs_under_rate(1, 30, 0.10).unwrap();
        let at = |m: u64| clopper_pearson_upper(m as f64 / 30.0, m as f64, ALPHA).unwrap();
        assert!(n > 30 && at(n) < 0.10 && at(n - 1) >= 0.10, "{n}");
        // Already under: the runs at hand; at or above the budget: none.
        assert_eq!(runs_under_rate(1, 100, 0.10), Some(100));
        assert_eq!((runs_under_rate(3, 30, 0.10), runs_under_rate(4, 30, 0.10)), (None, None));
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
    fn a_difference_of_accuracies_or_shares_keeps_within_its_bounds() {
        assert_eq!(within_bounds("acc_loss_pts", (-137.5, 15.5)), (-100.0, 15.5));
        assert_eq!(within_bounds("acc_all_pct", (20.0, 104.9)), (20.0, 100.0));
        assert_eq!(within_bounds("failed_pct", (-101.0, 3.0)), (-100.0, 3.0));
        assert_eq!(within_bounds("sim_overhead_pct", (-130.0, 400.0)), (-130.0, 400.0), "an overhead has no upper bound");
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
    fn paired_t_matches_a_reference_computation() {
        // scipy 1.17 stats.ttest_rel(b, a) with these a and b: t = -2.864939, p = 0.0241663,
        // confidence_interval(0.95) = -1.026769 to -0.098231, mean difference -0.5625.
        let a = [12.1, 9.8, 11.4, 10.2, 13.0, 10.9, 11.7, 9.5];
        let b = [11.2, 9.9, 10.1, 9.6, 12.1, 10.3, 11.0, 9.9];
        let d: Vec<f64> = a.iter().zip(&b).map(|(x, y)| y - x).collect();
        let t = paired_t(&d).unwrap();
        assert!(close(t.diff, -0.5625, 1e-12), "{t:?}");
        assert!(close(t.p, 0.0241663, 1e-6), "{t:?}");
        assert!(close(t.ci.0, -1.026769, 1e-5) && close(t.ci.1, -0.098231, 1e-5), "{t:?}");
        // No spread: shown when the mean is not 0, never when it is.
        assert_eq!(paired_t(&[0.5, 0.5, 0.5]).unwrap().p, 0.0);
        assert_eq!(paired_t(&[0.0, 0.0]).unwrap().p, 1.0);
        assert_eq!(paired_t(&[1.0]), None);
        assert_eq!(paired_t(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn wilcoxon_matches_scipy_exact_and_approximate() {
        // scipy 1.17 stats.wilcoxon(d, method="exact").pvalue: 9 differences without ties,
        // T- = 1 + 3 = 4, p = 0.01953125 (= 2 * 5 / 512).
        let d = [1.83, -0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, -1.30];
        assert!(close(wilcoxon(&d).unwrap(), 0.01953125, 1e-12));
        // 12 differences without ties: p = 0.00927734375.
        let d = [0.5, -1.1, 2.2, 0.3, 1.7, 0.9, 1.4, -0.2, 2.6, 1.9, 0.8, 1.2];
        assert!(close(wilcoxon(&d).unwrap(), 0.00927734375, 1e-12));
        // Zeros and ties: stats.wilcoxon(d, zero_method="wilcox", correction=False,
        // method="approx").pvalue = 0.0355644 (zeros dropped, tie-corrected variance).
        let d = [0.0, 1.0, -1.0, 2.0, 2.0, 3.0, -2.0, 4.0, 0.0, 5.0, 1.0, 3.0];
        assert!(close(wilcoxon(&d).unwrap(), 0.0355644, 1e-6), "{:?}", wilcoxon(&d));
        // Nothing differs: no evidence. Nothing at all: no test.
        assert_eq!(wilcoxon(&[0.0, 0.0, 0.0]), Some(1.0));
        assert_eq!(wilcoxon(&[]), None);
        // One difference: the exact p of one sign is 1.
        assert_eq!(wilcoxon(&[2.0]), Some(1.0));
    }

    #[test]
    fn newcombe_paired_matches_the_published_example() {
        // Fagerland, Lydersen & Laake (2017), chapter 8, the Cavo et al. (2012) table 59, 6, 16,
        // 80 (R package contingencytables, Newcombe_square_and_add_CI_paired_2x2): p1 - p2 =
        // -0.0621, 95% CI -0.1186 to -0.0046. Here the difference is second minus first.
        let (lo, hi) = newcombe_paired(59, 6, 16, 80).unwrap();
        assert!(close(lo, 0.0046, 5e-5) && close(hi, 0.1186, 5e-5), "{lo} {hi}");
        // Every pair agrees at 0: an interval with width around 0, inside [-1, 1].
        let (lo, hi) = newcombe_paired(0, 0, 0, 20).unwrap();
        assert!(lo < 0.0 && hi > 0.0 && lo >= -1.0 && hi <= 1.0, "{lo} {hi}");
        assert_eq!(newcombe_paired(0, 0, 0, 0), None);
    }

    #[test]
    fn the_one_sided_upper_bound_matches_a_reference_computation() {
        // scipy 1.17: mean + stats.t.ppf(0.95, 6) * s / sqrt(7) = 0.394318 (the upper end of
        // stats.t.interval(0.90, ...)).
        let v = [0.1, 0.4, -0.2, 0.3, 0.6, 0.0, 0.2];
        assert!(close(upper_bound(&v).unwrap(), 0.394318, 1e-6), "{:?}", upper_bound(&v));
        assert_eq!(upper_bound(&[0.3, 0.3]), Some(0.3));
        assert_eq!(upper_bound(&[0.3]), None);
    }

    #[test]
    fn paired_power_follows_the_t_based_iteration() {
        // The smallest n >= 2 with n >= ((t.ppf(q, n-1) + t.ppf(0.8, n-1)) s / d)^2, scipy 1.17:
        // d = 0.5, s = 1, alpha 0.05: 34 groups (statsmodels' exact noncentral-t power,
        // TTestPower().solve_power(0.5, alpha=0.05, power=0.8), gives 33.37).
        assert_eq!(groups_to_detect(0.5, 1.0, 0.05), Some(Size::Exactly(34)));
        assert_eq!(groups_to_detect(-0.5, 1.0, 0.05), Some(Size::Exactly(34)), "either sign");
        // d = 1, s = 2.5, alpha 0.01: 77 groups.
        assert_eq!(groups_to_detect(1.0, 2.5, 0.01), Some(Size::Exactly(77)));
        assert_eq!(groups_to_detect(0.0, 1.0, 0.05), None);
        // Without spread, the fewest groups a t bound needs.
        assert_eq!(groups_to_detect(0.1, 0.0, 0.05), Some(Size::Exactly(2)));
        // Non-inferiority, mean 0.2, s 0.6, budget 0.5: 27 groups (one-sided 0.05; statsmodels'
        // exact one-sided power gives 26.14); none reach it from a mean at the budget.
        assert_eq!(groups_under(0.2, 0.6, 0.5), Some(27));
        assert_eq!(groups_under(0.5, 0.6, 0.5), None);
        assert_eq!(groups_under(0.7, 0.0, 0.5), None);
        // Detectable with 30 groups, s = 1.2: 0.635231 at 0.05 and 1.051703 at 0.05 / 108.
        assert!(close(detectable_in(30, 1.2, 0.05).unwrap(), 0.635231, 1e-5));
        assert!(close(detectable_in(30, 1.2, 0.05 / 108.0).unwrap(), 1.051703, 1e-5));
        assert_eq!(detectable_in(1, 1.2, 0.05), None);
        // A paired spread uses the same functions: what it detects with its groups needs its
        // groups again.
        let d: Vec<f64> = (0..30).map(|i| f64::from(i % 5) - 2.0).collect();
        let s = Spread::of_pairs(&d).unwrap();
        assert_eq!(s.pairs, 30);
        assert!(close(s.detectable(0.05), detectable_in(30, sd(&d).unwrap(), 0.05).unwrap(), 1e-12));
        assert_eq!(s.runs_needed(s.detectable(0.05), 0.05), Some(30));
        // Paired rates never seen to differ still need pairs.
        assert!(Spread::of_paired_rates(0, 0, 20).unwrap().detectable(0.05) > 0.0);
        assert!(Spread::of_paired_rates(0, 0, 1).is_none());
    }

    #[test]
    fn t_quantiles_are_statrs_up_to_1000_degrees_and_the_expansion_above() {
        // mpmath 1.3 (40 digits), the root of the regularized incomplete beta's t cdf.
        let mp = [
            (0.95, 1000.0, 1.646_378_817_285_46),
            (0.975, 1000.0, 1.962_339_080_826_41),
            (0.8, 1000.0, 0.841_980_822_162_429),
            (0.95, 1001.0, 1.646_377_292_199_47),
            (0.95, 3.5e7, 1.644_853_670_487_73),
            (0.975, 2.5e6, 1.959_964_933_449),
            (1.0 - 0.025 / 108.0, 5000.0, 3.503_640_684_822_71),
            (0.8, 1e6, 0.841_621_593_013_984),
        ];
        for (q, df, want) in mp {
            // statrs' own inversion is within 1e-8 at 1,000; the expansion within 1e-10 above.
            let tol = if df <= T_INVERT_DF { 1e-8 } else { 1e-10 };
            assert!(close(t_quantile(q, df), want, tol), "t({q}, {df}) = {} for {want}", t_quantile(q, df));
        }
        // At the switch the two agree, for the levels a report tests (Holm's strictest of 216).
        for q in [0.8, 0.95, 0.975, 1.0 - 0.025 / 216.0] {
            let statrs = StudentsT::new(0.0, 1.0, T_INVERT_DF).unwrap().inverse_cdf(q);
            let expansion = t_quantile(q, T_INVERT_DF + 1e-9);
            assert!(close(statrs, expansion, 1e-8), "{q}: {statrs} {expansion}");
        }
        assert!(t_quantile(1.0, 5.0).is_nan() && t_quantile(0.5, 0.0).is_nan());
    }

    #[test]
    fn a_huge_need_is_found_or_capped_at_once() {
        // Normal approximation 4e7 groups, where statrs' t inversion never returned: the t-based
        // size lies a few groups above it.
        let d = z_sum(0.05) / 4e7f64.sqrt();
        let started = std::time::Instant::now();
        let Some(Size::Exactly(n)) = groups_to_detect(d, 1.0, 0.05) else { panic!("{:?}", groups_to_detect(d, 1.0, 0.05)) };
        assert!((40_000_000..40_000_010).contains(&n), "{n}");
        // Beyond the cap: "more than", for a paired and an unpaired spread alike.
        assert_eq!(groups_to_detect(1e-9, 1.0, 0.05), Some(Size::MoreThan(MAX_GROUPS)));
        assert_eq!(groups_under_size(0.5 - 1e-9, 1.0, 0.5), Some(Size::MoreThan(MAX_GROUPS)));
        assert_eq!(groups_under(0.5 - 1e-9, 1.0, 0.5), None);
        let unpaired = Spread { se: 1.0, unit_var: 2.0, pairs: 0 };
        assert_eq!(unpaired.size_needed(1e-9, 0.05), Some(Size::MoreThan(MAX_GROUPS)));
        assert_eq!(Size::MoreThan(MAX_GROUPS).to_string(), "more than 1000000000");
        assert!(started.elapsed().as_secs_f64() < 1.0, "{:?}", started.elapsed());
    }

    proptest! {
        #[test]
        fn groups_needed_fall_as_the_difference_grows_and_detect_it(s in 0.01f64..50.0, e in -4.0f64..1.0, k in 1.0f64..3.0, m in 1usize..300) {
            let alpha = holm_first_level(m);
            let (small, large) = (10f64.powf(e), 10f64.powf(e) * k);
            let (a, b) = (groups_to_detect(small, s, alpha).unwrap(), groups_to_detect(large, s, alpha).unwrap());
            match (a, b) {
                (Size::Exactly(a), Size::Exactly(b)) => {
                    prop_assert!(b <= a, "{small} needs {a}, {large} needs {b}");
                    // The size found detects the difference, one group fewer does not.
                    prop_assert!(detectable_in(a, s, alpha).unwrap() <= small * (1.0 + 1e-12));
                    prop_assert!(a == 2 || detectable_in(a - 1, s, alpha).unwrap() > small);
                }
                (Size::MoreThan(_), _) => {}
                (Size::Exactly(_), Size::MoreThan(_)) => prop_assert!(false, "{a:?} {b:?}"),
            }
        }
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
