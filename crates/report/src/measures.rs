//! What a study measures in each run and how two options' runs are compared: the per-run
//! values (accuracy loss, overhead, ...), runs matched by group, and the tests of one hypothesis
//! in one condition (paired t with Wilcoxon, exact McNemar; Welch, two proportions), shared by
//! the study and its "which strategy when" rule.

use std::collections::BTreeMap;

use resilab_campaign::Row;
use serde::Serialize;

use crate::stats::{Spread, mcnemar_exact, newcombe, newcombe_paired, paired_t, two_proportions, welch, wilcoxon};

/// One option in one condition.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StudyCell {
    /// The other axes' coordinates, `key=value` joined by `, `.
    pub condition: String,
    /// The compared axis's option (the strategy).
    pub option: String,
    /// Runs recorded (status ok).
    pub runs: usize,
    /// Training seeds among them.
    pub seeds: usize,
    /// Runs that failed (their strategy gave up): their own class, outside the accuracy and
    /// overhead means.
    pub failed: usize,
    /// Their share, %, with its 95% Wilson interval.
    pub failed_pct: Option<f64>,
    /// Lower end.
    pub failed_lo: Option<f64>,
    /// Upper end.
    pub failed_hi: Option<f64>,
    /// Mean accuracy loss against the golden run, points (runs that completed).
    #[serde(rename = "acc_loss_pts")]
    pub acc_loss: Option<f64>,
    /// Its 95% interval.
    pub acc_loss_lo: Option<f64>,
    /// Upper end.
    pub acc_loss_hi: Option<f64>,
    /// Runs that completed and lost more than 1 accuracy point ([`acc_points`] > 1).
    pub loss_over_1pt: usize,
    /// Their share of the runs that completed, %, with its exact (Clopper–Pearson) 95%
    /// interval.
    pub loss_over_1pt_pct: Option<f64>,
    /// Lower end.
    pub loss_over_1pt_lo: Option<f64>,
    /// Upper end.
    pub loss_over_1pt_hi: Option<f64>,
    /// Catastrophes: runs that failed or lost more than the campaign's `catastrophe_points`
    /// ([`catastrophic`]).
    pub catastrophic: usize,
    /// Their share of all runs, %, with its exact (Clopper–Pearson) 95% interval; the
    /// admissibility rule reads the one-sided bound of the same count.
    pub catastrophic_pct: Option<f64>,
    /// Lower end.
    pub catastrophic_lo: Option<f64>,
    /// Upper end.
    pub catastrophic_hi: Option<f64>,
    /// Mean simulated overhead, % (runs that completed; a failed run has none).
    #[serde(rename = "sim_overhead_pct")]
    pub sim_overhead: Option<f64>,
    /// Its 95% interval.
    pub sim_overhead_lo: Option<f64>,
    /// Upper end.
    pub sim_overhead_hi: Option<f64>,
    /// Mean final test accuracy, % (runs that completed).
    #[serde(rename = "final_acc_pct")]
    pub final_acc: Option<f64>,
    /// Its 95% t interval, cut to 0-100%.
    pub final_acc_lo: Option<f64>,
    /// Upper end.
    pub final_acc_hi: Option<f64>,
    /// Runs whose test accuracy reached the golden run's final accuracy at an evaluation.
    pub reached: usize,
    /// Their share, %, with its 95% Wilson interval.
    pub reached_pct: Option<f64>,
    /// Lower end.
    pub reached_lo: Option<f64>,
    /// Upper end.
    pub reached_hi: Option<f64>,
    /// Mean simulated time to the golden run's final accuracy, % of the golden run's simulated
    /// time (runs that reached it).
    #[serde(rename = "time_to_acc_pct")]
    pub time_to_acc: Option<f64>,
    /// Its 95% interval.
    pub time_to_acc_lo: Option<f64>,
    /// Upper end.
    pub time_to_acc_hi: Option<f64>,
}

/// One hypothesis tested in one condition.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HypothesisTest {
    /// The hypothesis's name.
    pub hypothesis: String,
    /// The condition.
    pub condition: String,
    /// `sim_overhead_pct`, `acc_loss_pts`, `failed_pct`, `time_to_acc_pct` or `reached_pct`
    /// ([`HypothesisMetric::column`]).
    pub metric: &'static str,
    /// `paired_t` or `mcnemar_exact` where the axis is paired, else `welch` or
    /// `two_proportions`.
    pub test: &'static str,
    /// The option compared against.
    pub a: String,
    /// The option compared.
    pub b: String,
    /// Value of a.
    pub value_a: f64,
    /// Value of b.
    pub value_b: f64,
    /// Runs behind a.
    pub n_a: usize,
    /// Runs behind b.
    pub n_b: usize,
    /// Groups (seed, rep) with a run of each behind a paired test; empty for an unpaired one.
    pub n_pairs: Option<usize>,
    /// `b - a`.
    pub diff: f64,
    /// 95% interval of the difference (not adjusted).
    pub ci_lo: f64,
    /// Upper end.
    pub ci_hi: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// A paired t test's check: the Wilcoxon signed-rank test's two-sided p on the same
    /// differences ([`crate::stats::wilcoxon`]); empty for the other tests.
    pub wilcoxon_p: Option<f64>,
    /// Holm-adjusted over every test of every hypothesis.
    pub p_holm: f64,
    /// `b lower`, `b higher` or `not shown`.
    pub verdict: String,
    /// The smallest difference (the metric's unit) these runs detect with 80% power at Holm's
    /// strictest level for the family (`0.05 / m`): t-based from the differences' standard
    /// deviation for a paired test, the normal approximation for an unpaired one.
    pub detectable: f64,
    /// Its basis, for `report --power`.
    #[serde(skip)]
    pub spread: Spread,
}

/// Accuracy loss against the golden run, points: [`crate::metrics::acc_loss_pts`], the one
/// definition (none for a failed run, which did not complete).
pub(crate) use crate::metrics::acc_loss_pts as acc_points;

/// Simulated overhead, %; none for a failed run (never a negative overhead).
pub(crate) fn overhead_pct(r: &Row) -> Option<f64> {
    r.metrics.sim_overhead.filter(|_| !failed(r)).map(|x| 100.0 * x)
}

/// A catastrophe: the run failed, or lost more than `points` accuracy points.
pub(crate) fn catastrophic(r: &Row, points: f64) -> bool {
    failed(r) || acc_points(r).is_some_and(|l| l > points)
}

pub(crate) fn final_acc_pct(r: &Row) -> Option<f64> {
    r.metrics.final_acc.filter(|_| !failed(r)).map(|x| 100.0 * x)
}

/// Simulated time to the golden run's final accuracy, % of the golden run's simulated time.
pub(crate) fn time_to_acc_pct(r: &Row) -> Option<f64> {
    let (t, g) = (r.metrics.time_to_golden_acc_s?, r.metrics.golden_sim_s?);
    (g > 0.0).then(|| 100.0 * t / g)
}

pub(crate) use crate::metrics::failed;

pub(crate) fn reached(r: &Row) -> bool {
    r.metrics.time_to_golden_acc_s.is_some()
}

/// A run's group within its condition: its training seed and repetition. Where the compared
/// axis is paired, the runs of one group met the same faults.
pub(crate) fn group_key(r: &Row) -> (u64, u64) {
    (r.seed, r.rep)
}

/// a's and b's runs of one condition matched by group, in b's order; a group with a run on one
/// side only is left out (the first run of a group counts where one side has two).
pub(crate) fn pairs<'a>(a: &[&'a Row], b: &[&'a Row]) -> Vec<(&'a Row, &'a Row)> {
    let mut by: BTreeMap<(u64, u64), &Row> = BTreeMap::new();
    for r in a {
        by.entry(group_key(r)).or_insert(r);
    }
    let mut seen = std::collections::BTreeSet::new();
    b.iter().filter(|r| seen.insert(group_key(r))).filter_map(|r| by.get(&group_key(r)).map(|x| (*x, *r))).collect()
}

/// The statistics of one test, before it is named (hypothesis, condition, metric, options) and
/// adjusted.
pub(crate) fn tested(test: &'static str, values: (f64, f64), n: (usize, usize), ci: (f64, f64), p: f64, spread: Spread) -> HypothesisTest {
    HypothesisTest {
        test,
        value_a: values.0,
        value_b: values.1,
        n_a: n.0,
        n_b: n.1,
        diff: values.1 - values.0,
        ci_lo: ci.0,
        ci_hi: ci.1,
        p,
        p_holm: p,
        detectable: f64::NAN,
        spread,
        ..HypothesisTest::default()
    }
}

/// The mean of `v` (NaN when empty).
pub(crate) fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// b's mean against a's, unpaired (Welch); `None` with fewer than two values a side.
pub(crate) fn means(get: fn(&Row) -> Option<f64>, a: &[&Row], b: &[&Row]) -> Option<HypothesisTest> {
    let (va, vb): (Vec<f64>, Vec<f64>) = (a.iter().filter_map(|r| get(r)).collect(), b.iter().filter_map(|r| get(r)).collect());
    let t = welch(&va, &vb)?;
    Some(tested("welch", (mean(&va), mean(&vb)), (va.len(), vb.len()), t.ci, t.p, Spread::of_means(&va, &vb)?))
}

/// b's mean against a's over the groups where both have a value: the paired t test of the
/// differences, the Wilcoxon signed-rank p as its check; `None` with fewer than two such groups.
pub(crate) fn paired_means(get: fn(&Row) -> Option<f64>, pairs: &[(&Row, &Row)]) -> Option<HypothesisTest> {
    let both: Vec<(f64, f64)> = pairs.iter().filter_map(|(a, b)| Some((get(a)?, get(b)?))).collect();
    let d: Vec<f64> = both.iter().map(|(a, b)| b - a).collect();
    let t = paired_t(&d)?;
    let (va, vb): (Vec<f64>, Vec<f64>) = both.iter().copied().unzip();
    let mut out = tested("paired_t", (mean(&va), mean(&vb)), (d.len(), d.len()), t.ci, t.p, Spread::of_pairs(&d)?);
    out.n_pairs = Some(d.len());
    out.wilcoxon_p = wilcoxon(&d);
    Some(out)
}

/// b's rate against a's, unpaired: the two-proportion z test and Newcombe's interval.
pub(crate) fn rates(event: fn(&Row) -> bool, a: &[&Row], b: &[&Row]) -> Option<HypothesisTest> {
    let k = |s: &[&Row]| s.iter().filter(|r| event(r)).count() as u64;
    let (na, nb) = (a.len() as u64, b.len() as u64);
    let ci = newcombe(k(a), na, k(b), nb)?;
    let p = two_proportions(k(a), na, k(b), nb)?.p;
    let values = (100.0 * k(a) as f64 / na as f64, 100.0 * k(b) as f64 / nb as f64);
    Some(tested("two_proportions", values, (a.len(), b.len()), (100.0 * ci.0, 100.0 * ci.1), p, Spread::of_rates(k(a), na, k(b), nb)?))
}

/// b's rate against a's on paired runs: the exact McNemar test on the discordant pairs and
/// Newcombe's paired interval; `None` with fewer than two pairs.
pub(crate) fn paired_rates(event: fn(&Row) -> bool, pairs: &[(&Row, &Row)]) -> Option<HypothesisTest> {
    let count = |f: &dyn Fn(bool, bool) -> bool| pairs.iter().filter(|(a, b)| f(event(a), event(b))).count() as u64;
    let (both, a_only, b_only, neither) = (count(&|a, b| a && b), count(&|a, b| a && !b), count(&|a, b| !a && b), count(&|a, b| !a && !b));
    let n = pairs.len() as u64;
    let ci = newcombe_paired(both, a_only, b_only, neither)?;
    let values = (100.0 * (both + a_only) as f64 / n as f64, 100.0 * (both + b_only) as f64 / n as f64);
    let spread = Spread::of_paired_rates(a_only, b_only, n)?;
    let mut out =
        tested("mcnemar_exact", values, (pairs.len(), pairs.len()), (100.0 * ci.0, 100.0 * ci.1), mcnemar_exact(a_only, b_only), spread);
    out.n_pairs = Some(pairs.len());
    Some(out)
}
