//! Differences between cells, each with its own test: for every axis, every pair of its
//! options with the other coordinates held fixed. Rates (N-EV, RWC) by the two-proportion z
//! test with Newcombe's interval,
//! mean accuracies by Welch's t test; p-values Holm-adjusted over the whole report. A difference
//! is "shown" when its adjusted p is below [`ALPHA`] and both cells rest on at least
//! [`MIN_SEEDS`] training seeds.

use std::collections::{BTreeMap, BTreeSet};

use resilab_campaign::{Row, Status};
use serde::Serialize;

use crate::metrics::{Class, collapsed, groups, nev, replicas_class, run_class, step_altered, survivor_accs};
use crate::stats::{ALPHA, Test, holm, two_proportions, welch};

/// Training seeds (base models) each side of a difference needs before it can be called shown.
pub const MIN_SEEDS: usize = 3;

/// One tested difference between two cells.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// The axis that differs.
    pub axis: String,
    /// The other coordinates, `key=value` joined by `, ` (`all` when there are none).
    pub fixed: String,
    /// First option (in the grid's order).
    pub a: String,
    /// Second option.
    pub b: String,
    /// `nev_pct` (N-EV share, %), `rwc_pct` (restart-without-change share on rank 0, %),
    /// `rwc_all_pct` (data parallel: every replica within the tolerance, %), `diverged_pct`
    /// (data parallel: share of runs whose replicas differ from rank 0's at the end), `acc` (mean
    /// accuracy of the runs that did not collapse, %), `acc_all` (mean accuracy of every run,
    /// collapsed runs at chance, %) or `sim_overhead_pct` (mean overhead in simulated time, %).
    pub metric: &'static str,
    /// Test used: `two_proportions` (pooled z, Newcombe's interval) or `welch`.
    pub test: &'static str,
    /// Value in cell a.
    pub value_a: f64,
    /// Value in cell b.
    pub value_b: f64,
    /// Runs behind each value.
    pub n_a: usize,
    /// Runs behind the second value.
    pub n_b: usize,
    /// Fewest training seeds of the two cells.
    pub seeds: usize,
    /// `b - a`.
    pub diff: f64,
    /// 95% interval of the difference (not adjusted).
    pub ci_lo: f64,
    /// Upper end.
    pub ci_hi: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// Holm-adjusted over every comparison of the report.
    pub p_holm: f64,
    /// `shown`, `not shown`, or `not shown (fewer than 3 seeds)`.
    pub verdict: String,
}

struct Side<'a> {
    rows: Vec<&'a Row>,
    seeds: usize,
}

fn pct(t: Test) -> Test {
    Test { diff: 100.0 * t.diff, ci: (100.0 * t.ci.0, 100.0 * t.ci.1), p: t.p }
}

/// One test's outcome: metric, test, the two values, the two sample sizes, the test.
type Tested = (&'static str, &'static str, f64, f64, usize, usize, Test);

fn tests(a: &Side, b: &Side, chance: &dyn Fn(&Row) -> f64, tolerance_points: f64) -> Vec<Tested> {
    let mut out = Vec::new();
    let (na, nb) = (a.rows.len(), b.rows.len());
    let rate = |name: &'static str, hit: &dyn Fn(&Row) -> bool, out: &mut Vec<Tested>| {
        let k = |s: &Side| s.rows.iter().filter(|r| hit(r)).count() as u64;
        if let Some(t) = two_proportions(k(a), na as u64, k(b), nb as u64) {
            out.push((name, "two_proportions", 100.0 * k(a) as f64 / na as f64, 100.0 * k(b) as f64 / nb as f64, na, nb, pct(t)));
        }
    };
    rate("nev_pct", &|r| !step_altered(r) && nev(r), &mut out);
    let rwc = |r: &Row| run_class(r, chance(r), tolerance_points) == Some(Class::RestartWithoutChange);
    if a.rows.iter().chain(&b.rows).any(|r| r.metrics.golden_acc.is_some()) {
        rate("rwc_pct", &rwc, &mut out);
    }
    let every_replica = |r: &Row| replicas_class(r, chance(r), tolerance_points) == Some(Class::RestartWithoutChange);
    if a.rows.iter().chain(&b.rows).all(|r| r.metrics.replica_acc_min.is_some()) {
        rate("rwc_all_pct", &every_replica, &mut out);
    }
    if a.rows.iter().chain(&b.rows).all(|r| r.metrics.replicas_diverged.is_some()) {
        rate("diverged_pct", &|r| r.metrics.replicas_diverged.is_some_and(|n| n > 0), &mut out);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (sa, sb) = (survivor_accs(&a.rows), survivor_accs(&b.rows));
    if let Some(t) = welch(&sa, &sb) {
        out.push(("acc", "welch", mean(&sa), mean(&sb), sa.len(), sb.len(), t));
    }
    let all = |s: &Side| -> Vec<f64> {
        s.rows.iter().filter_map(|r| if collapsed(r) { Some(100.0 * chance(r)) } else { r.metrics.final_acc.map(|x| 100.0 * x) }).collect()
    };
    let (aa, ab) = (all(a), all(b));
    if let Some(t) = welch(&aa, &ab) {
        out.push(("acc_all", "welch", mean(&aa), mean(&ab), aa.len(), ab.len(), t));
    }
    let sim = |s: &Side| -> Vec<f64> { s.rows.iter().filter_map(|r| r.metrics.sim_overhead.map(|x| 100.0 * x)).collect() };
    let (sa, sb) = (sim(a), sim(b));
    if let Some(t) = welch(&sa, &sb) {
        out.push(("sim_overhead_pct", "welch", mean(&sa), mean(&sb), sa.len(), sb.len(), t));
    }
    out
}

/// Every pairwise difference along each of `axes` (option order as in `order`), tested and
/// Holm-adjusted together.
pub fn comparisons(
    rows: &[Row],
    axes: &[String],
    order: &BTreeMap<String, Vec<String>>,
    chance: &dyn Fn(&Row) -> f64,
    tolerance_points: f64,
) -> Vec<Comparison> {
    let cells: BTreeMap<BTreeMap<String, String>, Side> = groups(rows)
        .into_iter()
        .map(|(k, v)| {
            let ok: Vec<&Row> = v.into_iter().filter(|r| r.status == Status::Ok).collect();
            let seeds = ok.iter().map(|r| r.seed).collect::<BTreeSet<_>>().len();
            (k.into_iter().collect(), Side { rows: ok, seeds })
        })
        .collect();
    let mut out = Vec::new();
    for axis in axes {
        let Some(options) = order.get(axis) else { continue };
        // The other coordinates of every cell, each once.
        let fixed: BTreeSet<BTreeMap<String, String>> = cells
            .keys()
            .map(|c| {
                let mut c = c.clone();
                c.remove(axis);
                c
            })
            .collect();
        for f in &fixed {
            let at = |o: &String| {
                let mut c = f.clone();
                c.insert(axis.clone(), o.clone());
                cells.get(&c)
            };
            for (i, oa) in options.iter().enumerate() {
                for ob in &options[i + 1..] {
                    let (Some(a), Some(b)) = (at(oa), at(ob)) else { continue };
                    for (metric, test, va, vb, na, nb, t) in tests(a, b, chance, tolerance_points) {
                        let label = f.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ");
                        out.push(Comparison {
                            axis: axis.clone(),
                            fixed: if label.is_empty() { "all".into() } else { label },
                            a: oa.clone(),
                            b: ob.clone(),
                            metric,
                            test,
                            value_a: va,
                            value_b: vb,
                            n_a: na,
                            n_b: nb,
                            seeds: a.seeds.min(b.seeds),
                            diff: t.diff,
                            ci_lo: t.ci.0,
                            ci_hi: t.ci.1,
                            p: t.p,
                            p_holm: f64::NAN,
                            verdict: String::new(),
                        });
                    }
                }
            }
        }
    }
    let adjusted = holm(&out.iter().map(|c| c.p).collect::<Vec<_>>());
    for (c, p) in out.iter_mut().zip(adjusted) {
        c.p_holm = p;
        c.verdict = match (p < ALPHA, c.seeds >= MIN_SEEDS) {
            (true, true) => "shown".into(),
            (true, false) => format!("not shown (fewer than {MIN_SEEDS} seeds)"),
            _ => "not shown".into(),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use resilab_campaign::Metrics;

    fn row(model: &str, flips: &str, seed: u64, nev: bool, acc: f64) -> Row {
        Row {
            id: format!("{model}-{flips}-{seed}"),
            index: 0,
            coords: [("model".to_string(), model.to_string()), ("flips".to_string(), flips.to_string())].into(),
            seed,
            rep: 0,
            status: Status::Ok,
            message: None,
            metrics: Metrics { final_acc: Some(acc), nev: Some(nev), collapsed: Some(false), ..Metrics::default() },
        }
    }

    #[test]
    fn a_large_difference_on_three_seeds_is_shown_and_a_small_one_is_not() {
        let mut rows = Vec::new();
        for i in 0..60u64 {
            let seed = i % 3;
            rows.push(row("r", "1", seed, i % 20 == 0, 0.80 + 0.001 * (i % 7) as f64));
            rows.push(row("r", "100", seed, i % 5 != 0, 0.70 + 0.001 * (i % 5) as f64));
            rows.push(row("v", "1", seed, i % 20 == 0, 0.80 + 0.001 * (i % 6) as f64));
            rows.push(row("v", "100", seed, i % 19 == 0, 0.80 + 0.001 * (i % 4) as f64));
        }
        let order: BTreeMap<String, Vec<String>> = [
            ("flips".to_string(), vec!["1".to_string(), "100".to_string()]),
            ("model".to_string(), vec!["r".to_string(), "v".to_string()]),
        ]
        .into();
        let cs = comparisons(&rows, &["flips".to_string(), "model".to_string()], &order, &|_| 0.1, 0.5);
        let get =
            |axis: &str, fixed: &str, metric: &str| cs.iter().find(|c| c.axis == axis && c.fixed == fixed && c.metric == metric).unwrap();
        let big = get("flips", "model=r", "nev_pct");
        assert_eq!((big.value_a, big.value_b), (5.0, 80.0));
        assert_eq!(big.verdict, "shown");
        let small = get("flips", "model=v", "nev_pct");
        assert_eq!(small.verdict, "not shown", "{small:?}");
        assert!(small.p_holm >= small.p);
        assert_eq!(get("flips", "model=r", "acc").verdict, "shown");
        // The same data on one seed is never called shown.
        let one: Vec<Row> = rows
            .iter()
            .cloned()
            .map(|mut r| {
                r.seed = 0;
                r
            })
            .collect();
        let cs = comparisons(&one, &["flips".to_string()], &order, &|_| 0.1, 0.5);
        assert!(cs.iter().all(|c| c.verdict != "shown"));
        assert!(cs.iter().any(|c| c.verdict.contains("fewer than 3 seeds")));
    }
}
