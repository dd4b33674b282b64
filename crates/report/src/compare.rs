//! Differences between cells, each with its own test: for every axis, every pair of its
//! options with the other coordinates held fixed. Rates (N-EV, RWC) by the two-proportion z
//! test with Newcombe's interval,
//! mean accuracies by Welch's t test; p-values Holm-adjusted over the whole report. A difference
//! is "shown" when its adjusted p is below [`ALPHA`] and both cells rest on at least
//! [`MIN_SEEDS`] training seeds.

use std::collections::{BTreeMap, BTreeSet};

use resilab_campaign::{Row, Status};
use serde::Serialize;

use crate::measures::failed;
use crate::metrics::{Class, acc_loss_pts, collapsed, groups, nev, replicas_class, run_class, step_altered};
use crate::stats::{ALPHA, Spread, Test, holm, holm_first_level, two_proportions, welch};

/// Training seeds (base models) each side of a difference needs before it can be called shown.
pub const MIN_SEEDS: usize = 3;

/// One tested difference between two cells.
#[derive(Clone, Debug, Default, Serialize)]
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
    /// (data parallel: share of runs whose replicas differ from rank 0's at the end, %), the
    /// accuracy, and `sim_overhead_pct` (mean overhead in simulated time, %). The accuracy is
    /// the loss the faults caused where every run has a golden run: `acc_loss_pts` (mean
    /// `golden - final` of the runs that completed, collapsed ones included, points:
    /// [`acc_loss_pts`]) and `acc_loss_all_pts`
    /// (every run, a collapsed one at chance); else the raw accuracy, `acc_pct` and
    /// `acc_all_pct` (%), which then differs by what the cells trained, not by the faults.
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
    /// The smallest difference (the metric's unit) these runs detect with 80% power at Holm's
    /// strictest level for the report's family (`0.05 / m`, normal approximation): a true
    /// difference below it is likely to read "not shown" however real.
    pub detectable: f64,
    /// Its basis, for `report --power`: the per-run variance of a plus that of b.
    #[serde(skip)]
    pub spread: Spread,
}

struct Side<'a> {
    rows: Vec<&'a Row>,
    seeds: usize,
}

/// One test's outcome, before the family's adjustment.
struct Tested {
    metric: &'static str,
    test: &'static str,
    values: (f64, f64),
    n: (usize, usize),
    t: Test,
    spread: Spread,
}

fn pct(t: Test) -> Test {
    Test { diff: 100.0 * t.diff, ci: (100.0 * t.ci.0, 100.0 * t.ci.1), p: t.p }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Welch's test of two samples as a [`Tested`] named `metric`.
fn means(metric: &'static str, a: &[f64], b: &[f64], out: &mut Vec<Tested>) {
    if let (Some(t), Some(spread)) = (welch(a, b), Spread::of_means(a, b)) {
        out.push(Tested { metric, test: "welch", values: (mean(a), mean(b)), n: (a.len(), b.len()), t, spread });
    }
}

/// The tests of one pair of cells: the rates, the accuracy (the loss the faults caused where
/// every run has a golden run, else the raw accuracy) and the simulated overhead.
fn tests(a: &Side, b: &Side, chance: &dyn Fn(&Row) -> f64, tolerance_points: f64) -> Vec<Tested> {
    let mut out = Vec::new();
    let (na, nb) = (a.rows.len(), b.rows.len());
    let rate = |name: &'static str, hit: &dyn Fn(&Row) -> bool, out: &mut Vec<Tested>| {
        let k = |s: &Side| s.rows.iter().filter(|r| hit(r)).count() as u64;
        let (ka, kb) = (k(a), k(b));
        if let (Some(t), Some(spread)) = (two_proportions(ka, na as u64, kb, nb as u64), Spread::of_rates(ka, na as u64, kb, nb as u64)) {
            let values = (100.0 * ka as f64 / na as f64, 100.0 * kb as f64 / nb as f64);
            out.push(Tested { metric: name, test: "two_proportions", values, n: (na, nb), t: pct(t), spread });
        }
    };
    rate("nev_pct", &|r| !step_altered(r) && nev(r), &mut out);
    let both = || a.rows.iter().chain(&b.rows);
    let rwc = |r: &Row| run_class(r, chance(r), tolerance_points) == Some(Class::RestartWithoutChange);
    if both().any(|r| r.metrics.golden_acc.is_some()) {
        rate("rwc_pct", &rwc, &mut out);
    }
    let every_replica = |r: &Row| replicas_class(r, chance(r), tolerance_points) == Some(Class::RestartWithoutChange);
    if both().all(|r| r.metrics.replica_acc_min.is_some()) {
        rate("rwc_all_pct", &every_replica, &mut out);
    }
    if both().all(|r| r.metrics.replicas_diverged.is_some()) {
        rate("diverged_pct", &|r| r.metrics.replicas_diverged.is_some_and(|n| n > 0), &mut out);
    }
    accuracy(a, b, both().all(|r| r.metrics.golden_acc.is_some()), chance, &mut out);
    // A failed run (its strategy gave up) has no overhead: never a negative one.
    let sim =
        |s: &Side| -> Vec<f64> { s.rows.iter().filter(|r| !failed(r)).filter_map(|r| r.metrics.sim_overhead.map(|x| 100.0 * x)).collect() };
    means("sim_overhead_pct", &sim(a), &sim(b), &mut out);
    out
}

/// The accuracy tests of a pair of cells: with `golden`, the loss against each run's golden
/// run (points): [`acc_loss_pts`] (the runs that completed, collapsed ones at the accuracy they
/// ended with, as `cells.csv` has it), and over every run with a collapsed one at chance;
/// else the raw accuracy (%): ACC (the runs that completed and did not collapse) and ACC all.
fn accuracy(a: &Side, b: &Side, golden: bool, chance: &dyn Fn(&Row) -> f64, out: &mut Vec<Tested>) {
    // Against the golden ensemble's mean where the run had one, as its `acc_loss` is.
    let reference = |r: &Row| r.metrics.golden_ensemble_mean_acc.or(r.metrics.golden_acc);
    let loss = |r: &Row, acc: f64| if golden { reference(r).map(|g| 100.0 * (g - acc)) } else { Some(100.0 * acc) };
    let survivors = |s: &Side| -> Vec<f64> {
        match golden {
            true => s.rows.iter().filter_map(|r| acc_loss_pts(r)).collect(),
            false => s.rows.iter().filter(|r| !collapsed(r) && !failed(r)).filter_map(|r| r.metrics.final_acc.map(|a| 100.0 * a)).collect(),
        }
    };
    let all = |s: &Side| -> Vec<f64> {
        s.rows
            .iter()
            .filter_map(|r| if collapsed(r) { loss(r, chance(r)) } else { r.metrics.final_acc.and_then(|acc| loss(r, acc)) })
            .collect()
    };
    let names = if golden { ("acc_loss_pts", "acc_loss_all_pts") } else { ("acc_pct", "acc_all_pct") };
    means(names.0, &survivors(a), &survivors(b), out);
    means(names.1, &all(a), &all(b), out);
}

/// The rules that decide "shown" for a report of `m` comparisons, stated above its table.
pub fn rules(m: usize) -> String {
    format!(
        "Rules: each axis, each pair of its options, the other coordinates fixed. Rates (`*_pct` shares) by the two-proportion z test with Newcombe's 95% interval; means by Welch's t test. Accuracy is compared as the loss the faults caused (`acc_loss_pts`: golden minus final, points) wherever every run of both cells has a golden run, else as raw accuracy (`acc_pct`). The family for Holm's adjustment is all {m} comparisons of this report. A difference is *shown* when its Holm-adjusted p is below {ALPHA} and both cells rest on at least {MIN_SEEDS} training seeds. *Detectable*: the smallest difference the runs detect with 80% power at Holm's strictest level ({ALPHA}/{m}), normal approximation: smaller true differences are likely to read \"not shown\"."
    )
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
                    for Tested { metric, test, values: (va, vb), n: (na, nb), t, spread } in tests(a, b, chance, tolerance_points) {
                        let (ci_lo, ci_hi) = crate::stats::within_bounds(metric, t.ci);
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
                            ci_lo,
                            ci_hi,
                            p: t.p,
                            p_holm: f64::NAN,
                            verdict: String::new(),
                            detectable: f64::NAN,
                            spread,
                        });
                    }
                }
            }
        }
    }
    let adjusted = holm(&out.iter().map(|c| c.p).collect::<Vec<_>>());
    let level = holm_first_level(out.len());
    for (c, p) in out.iter_mut().zip(adjusted) {
        c.p_holm = p;
        c.detectable = c.spread.detectable(level);
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
        assert_eq!(get("flips", "model=r", "acc_pct").verdict, "shown");
        // Every comparison states what its runs could detect: more than the small differences,
        // less than the large ones.
        assert!(big.detectable > 0.0 && big.detectable < 75.0, "{big:?}");
        assert!(small.detectable > (small.value_b - small.value_a).abs(), "{small:?}");
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
    #[test]
    fn with_golden_runs_the_models_are_compared_on_the_loss_the_faults_caused_not_on_raw_accuracy() {
        // ResNet's golden run ends at 44.6%, VGG's at 81.1%; the faults cost both about the
        // same. Raw accuracy would call the models different; the loss must not.
        let mut rows = Vec::new();
        for i in 0..30u64 {
            let jitter = 0.002 * (i % 5) as f64;
            for (model, golden) in [("r", 0.446), ("v", 0.811)] {
                let mut r = row(model, "10", i % 3, false, golden - 0.01 - jitter);
                r.metrics.golden_acc = Some(golden);
                r.metrics.acc_loss = Some(0.01 + jitter);
                rows.push(r);
            }
        }
        let order: BTreeMap<String, Vec<String>> = [("model".to_string(), vec!["r".to_string(), "v".to_string()])].into();
        let cs = comparisons(&rows, &["model".to_string()], &order, &|_| 0.1, 0.5);
        assert!(cs.iter().all(|c| c.metric != "acc_pct" && c.metric != "acc_all_pct"), "{cs:?}");
        let loss = cs.iter().find(|c| c.metric == "acc_loss_pts").unwrap();
        assert!((loss.value_a - 1.4).abs() < 1e-9 && (loss.value_b - 1.4).abs() < 1e-9, "{loss:?}");
        assert_eq!(loss.verdict, "not shown");
        // What 30 runs a cell with this spread could have told apart, and what it takes for less.
        assert!(loss.detectable > 0.0 && loss.detectable < 1.0, "{loss:?}");
        let half = loss.spread.runs_needed(loss.detectable / 2.0, holm_first_level(cs.len())).unwrap();
        assert!((115..=125).contains(&half), "four times the runs for half the difference: {half}");
    }
}
