//! A study with hypotheses fixed before running (`[[campaign.hypothesis]]`): per condition
//! (every combination of the axes other than the compared one), each option's accuracy loss and
//! simulated overhead with 95% intervals (runs that completed; failed runs are their own class);
//! each hypothesis tested in every condition, Holm-adjusted over exactly that family; a Pareto
//! plot per condition; and the generated "which strategy when" table (its rule in `choice.rs`).
//!
//! Where the hypothesis's axis is paired (`campaign.paired`), the runs of a condition that share
//! a training seed and a repetition met the same faults: a's and b's runs are matched by (seed,
//! rep) and the differences tested, means by the paired t test (the Wilcoxon signed-rank p
//! beside it as a check), rates by the exact McNemar test with Newcombe's paired interval.
//! Otherwise means by Welch's t test, rates by the two-proportion test with Newcombe's interval.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use resilab_campaign::{Campaign, Hypothesis, HypothesisMetric, Row, Status};
use serde::Serialize;

pub use crate::choice::{Choice, Needed, Rules};
use crate::md::md_table;
pub use crate::measures::{HypothesisTest, StudyCell};
use crate::measures::{
    acc_points, catastrophic, failed, final_acc_pct, means, overhead_pct, paired_means, paired_rates, pairs, rates, reached,
    time_to_acc_pct,
};
use crate::rows::{CHOICE_TABLE, ChoiceRow};
use crate::stats::{ALPHA, clopper_pearson, holm, holm_first_level, mean_interval, wilson};
use crate::{Error, Pareto, ParetoPoint, Result};

/// What the study wrote.
pub struct Study {
    /// Per option and condition.
    pub cells: Vec<StudyCell>,
    /// Every test of the family.
    pub tests: Vec<HypothesisTest>,
    /// The "which strategy when" table.
    pub choices: Vec<Choice>,
}

/// The condition of run `r`: its coordinates on every axis but `axis`.
pub(crate) fn condition(r: &Row, axis: &str) -> String {
    let parts: Vec<String> = r.coords.iter().filter(|(k, _)| k.as_str() != axis).map(|(k, v)| format!("{k}={v}")).collect();
    if parts.is_empty() { "all".to_string() } else { parts.join(", ") }
}

/// The value a mean hypothesis compares, or the event a rate hypothesis counts.
enum Measure {
    Mean(fn(&Row) -> Option<f64>),
    Rate(fn(&Row) -> bool),
}

fn measure(m: HypothesisMetric) -> Measure {
    match m {
        HypothesisMetric::SimOverhead => Measure::Mean(overhead_pct),
        HypothesisMetric::AccLoss => Measure::Mean(acc_points),
        HypothesisMetric::TimeToAcc => Measure::Mean(time_to_acc_pct),
        HypothesisMetric::Failed => Measure::Rate(failed),
        HypothesisMetric::Reached => Measure::Rate(reached),
    }
}

/// Rows of the study, grouped: condition -> option -> rows, conditions and options in grid order.
pub(crate) type Groups<'a> = Vec<(String, Vec<(String, Vec<&'a Row>)>)>;

pub(crate) fn group<'a>(campaign: &Campaign, rows: &'a [Row], axis: &str) -> Groups<'a> {
    let options: Vec<String> =
        campaign.axes.iter().find(|a| a.key == axis).map(|a| a.options.iter().map(|o| o.0.clone()).collect()).unwrap_or_default();
    let mut ordered: Vec<&Row> = rows.iter().filter(|r| r.status == Status::Ok).collect();
    ordered.sort_by_key(|r| r.index);
    let mut out: Groups = Vec::new();
    let mut at: BTreeMap<String, usize> = BTreeMap::new();
    for r in ordered {
        let c = condition(r, axis);
        let i = *at.entry(c.clone()).or_insert_with(|| {
            out.push((c, options.iter().map(|o| (o.clone(), Vec::new())).collect()));
            out.len() - 1
        });
        if let Some(slot) = out[i].1.iter_mut().find(|(o, _)| Some(o) == r.coords.get(axis)) {
            slot.1.push(r);
        }
    }
    out
}

/// `k` of `n` as a share in % with its two-sided 95% Clopper–Pearson interval; all `None` for
/// `n = 0`.
fn exact_share(k: usize, n: usize) -> (Option<f64>, Option<f64>, Option<f64>) {
    let cp = clopper_pearson(k as u64, n as u64);
    ((n > 0).then(|| 100.0 * k as f64 / n as f64), cp.map(|x| 100.0 * x.0), cp.map(|x| 100.0 * x.1))
}

/// One option's cell; a run losing more than `catastrophe_points` (or failing) is a catastrophe.
fn cell(condition: &str, option: &str, rows: &[&Row], catastrophe_points: f64) -> StudyCell {
    let of = |f: fn(&Row) -> Option<f64>| mean_interval(&rows.iter().filter_map(|r| f(r)).collect::<Vec<f64>>());
    let (a, o, fa, tt) = (of(acc_points), of(overhead_pct), of(final_acc_pct), of(time_to_acc_pct));
    let seeds: std::collections::BTreeSet<u64> = rows.iter().map(|r| r.seed).collect();
    let k = rows.iter().filter(|r| reached(r)).count();
    let w = wilson(k as u64, rows.len() as u64);
    let nf = rows.iter().filter(|r| failed(r)).count();
    let wf = wilson(nf as u64, rows.len() as u64);
    let losses: Vec<f64> = rows.iter().filter_map(|r| acc_points(r)).collect();
    let over = losses.iter().filter(|&&l| l > 1.0).count();
    let (over_pct, over_lo, over_hi) = exact_share(over, losses.len());
    let cat = rows.iter().filter(|r| catastrophic(r, catastrophe_points)).count();
    let (cat_pct, cat_lo, cat_hi) = exact_share(cat, rows.len());
    StudyCell {
        condition: condition.to_string(),
        option: option.to_string(),
        runs: rows.len(),
        seeds: seeds.len(),
        failed: nf,
        failed_pct: (!rows.is_empty()).then(|| 100.0 * nf as f64 / rows.len() as f64),
        failed_lo: wf.map(|x| 100.0 * x.0),
        failed_hi: wf.map(|x| 100.0 * x.1),
        acc_loss: a.map(|x| x.0),
        acc_loss_lo: a.map(|x| x.1.0),
        acc_loss_hi: a.map(|x| x.1.1),
        loss_over_1pt: over,
        loss_over_1pt_pct: over_pct,
        loss_over_1pt_lo: over_lo,
        loss_over_1pt_hi: over_hi,
        catastrophic: cat,
        catastrophic_pct: cat_pct,
        catastrophic_lo: cat_lo,
        catastrophic_hi: cat_hi,
        sim_overhead: o.map(|x| x.0),
        sim_overhead_lo: o.map(|x| x.1.0),
        sim_overhead_hi: o.map(|x| x.1.1),
        final_acc: fa.map(|x| x.0),
        // A t interval of a mean accuracy can pass 0 or 100% (a few collapsed runs widen it):
        // cut to what an accuracy can be.
        final_acc_lo: fa.map(|x| x.1.0.max(0.0)),
        final_acc_hi: fa.map(|x| x.1.1.min(100.0)),
        reached: k,
        reached_pct: (!rows.is_empty()).then(|| 100.0 * k as f64 / rows.len() as f64),
        reached_lo: w.map(|x| 100.0 * x.0),
        reached_hi: w.map(|x| 100.0 * x.1),
        time_to_acc: tt.map(|x| x.0),
        time_to_acc_lo: tt.map(|x| x.1.0),
        time_to_acc_hi: tt.map(|x| x.1.1),
    }
}

/// One hypothesis in one condition, before Holm: paired where its axis is, else unpaired;
/// `None` when a side has too few values.
fn test(h: &Hypothesis, condition: &str, a: &[&Row], b: &[&Row], paired: bool) -> Option<HypothesisTest> {
    let mut t = match (measure(h.metric), paired) {
        (Measure::Rate(event), false) => rates(event, a, b)?,
        (Measure::Rate(event), true) => paired_rates(event, &pairs(a, b))?,
        (Measure::Mean(get), false) => means(get, a, b)?,
        (Measure::Mean(get), true) => paired_means(get, &pairs(a, b))?,
    };
    t.hypothesis = h.name.clone();
    t.condition = condition.to_string();
    t.metric = h.metric.column();
    (t.ci_lo, t.ci_hi) = crate::stats::within_bounds(t.metric, (t.ci_lo, t.ci_hi));
    t.a = h.a.clone();
    t.b = h.b.clone();
    Some(t)
}

/// The study of `rows` under `campaign`'s hypotheses; `None` when it states none.
pub fn study(campaign: &Campaign, rows: &[Row]) -> Option<Study> {
    let hs = &campaign.settings.hypotheses;
    let axis = hs.first()?.axis.clone();
    let groups = group(campaign, rows, &axis);
    let rules = Rules::of(&campaign.settings);
    let cells: Vec<StudyCell> =
        groups.iter().flat_map(|(c, opts)| opts.iter().map(move |(o, rs)| cell(c, o, rs, rules.catastrophe_points))).collect();
    let paired = campaign.settings.paired_axes();
    let mut tests = Vec::new();
    for h in hs {
        for (cond, opts) in &groups {
            let side = |o: &str| opts.iter().find(|(x, _)| x == o).map(|x| x.1.clone()).unwrap_or_default();
            tests.extend(test(h, cond, &side(&h.a), &side(&h.b), paired.contains(&h.axis)));
        }
    }
    let adjusted = holm(&tests.iter().map(|t| t.p).collect::<Vec<_>>());
    let level = holm_first_level(tests.len());
    for (t, p) in tests.iter_mut().zip(adjusted) {
        t.p_holm = p;
        t.detectable = t.spread.detectable(level);
        t.verdict = match (p < ALPHA, t.diff < 0.0) {
            (true, true) => "b lower",
            (true, false) => "b higher",
            (false, _) => "not shown",
        }
        .to_string();
    }
    let choices = groups.iter().map(|(c, opts)| crate::choice::choose(c, opts, &rules, paired.contains(&axis))).collect();
    Some(Study { cells, tests, choices })
}

/// The detectable differences of a hypothesis's tests, in `unit`: `X unit` when all agree to
/// two decimals, else `X to Y unit`; `n/a` without any.
fn detectable_range(of: &[&HypothesisTest], unit: &str) -> String {
    let v: Vec<f64> = of.iter().map(|t| t.detectable).filter(|d| d.is_finite()).collect();
    let (lo, hi) = (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(f64::NEG_INFINITY, f64::max));
    match v.len() {
        0 => "n/a".into(),
        _ if format!("{lo:.2}") == format!("{hi:.2}") => format!("{lo:.2} {unit}"),
        _ => format!("{lo:.2} to {hi:.2} {unit}"),
    }
}

/// The rules of the "which strategy when" table, as `report.md` states them beside it.
fn choice_rules(rules: &Rules, paired: bool) -> String {
    let cost_test = if paired {
        "the paired t test of the per-group differences (runs that share a training seed and repetition met the same faults)"
    } else {
        "Welch's t test (the runs of different options are not paired)"
    };
    let groups = if paired { "groups (training seed and repetition, one run of every option each)" } else { "runs per option" };
    let (budget, cat, rate, floor) = (rules.budget_points, rules.catastrophe_points, rules.catastrophe_budget_pct, rules.golden_min_pct);
    let zero = crate::stats::runs_under_rate(0, 1, rate / 100.0).map_or_else(|| "no number of".to_string(), |n| n.to_string());
    format!(
        "Generated from the runs (`which_strategy.csv`), in each condition, under two budgets: a mean accuracy loss of {budget} points and a catastrophe rate of {rate}% of runs (a catastrophe: a run that failed or lost more than {cat} points).\n\n\
         - **Admissible**: an option that passes both rules. *Mean rule*: the one-sided 95% upper bound (Student t) of its mean accuracy loss against the golden run (runs that completed, points) is below {budget} points (non-inferiority). *Catastrophe-rate rule*: the one-sided 95% Clopper–Pearson upper bound of its catastrophe rate is below {rate}% ({zero} runs without a catastrophe show it; `cells_study.csv` gives each rate with its exact interval). A failed run (its strategy gave up) has no accuracy loss and no overhead; it counts as a catastrophe, and no longer rules an option out by itself.\n\
         - **Cheaper**: the admissible options are ordered by mean simulated overhead; an option is shown to cost more than the cheapest when {cost_test} gives p < {ALPHA} after Holm's adjustment over that condition's cost comparisons (the cheapest against each other admissible option: that family, per condition).\n\
         - **Choice**: the cheapest together with every admissible option not shown to cost more, joined by `=`. Options identical to the cheapest in every group (runs matched by training seed and repetition, each difference of overhead and accuracy loss exactly 0) read `(equal)`, and the condition is decided; any other option left beside the cheapest leaves it *undecided*. A condition whose lowest golden accuracy (the golden ensemble's mean, with `train.golden_ensemble`) is below {floor}% reads `undecided: golden run at X%`: a reference that did not learn decides nothing.\n\
         - **Golden SD**: beside the budget, the fault-free runs' own run-to-run spread: with `train.golden_ensemble` K > 1 (K golden runs differing only in the order of their all-reduce sums, `train.reduction_order = \"seeded\"`), the largest standard deviation of the members' final test accuracies over the condition's ensembles, points; accuracy losses are measured against the ensemble's mean. `n/a`: no ensemble, one golden run per seed, whose own noise is not measured.\n\
         - **Undecided**: *groups needed* is what would decide it, in {groups}: with nothing admissible, what the most promising option needs for both rules to pass, the larger of the mean rule's (80% power from the observed standard deviation, one-sided 0.05, t-based; `not reachable` when its mean loss is at or above the budget) and the rate rule's (the runs at which the same observed catastrophe rate is bounded under its budget; `not reachable` when the rate is at or above it); with costs not separated, what the cost test of the cheapest two needs at Holm's strictest level of the condition ({ALPHA}/m for m cost comparisons; t-based for a paired test, normal approximation for Welch's), `not reachable` when their overheads do not differ at all.\n"
    )
}

/// The rules of the hypothesis tests, as `report.md` states them above their verdicts.
fn test_rules(campaign: &Campaign, s: &Study) -> String {
    let hs = &campaign.settings.hypotheses;
    let conditions = s.choices.len();
    let paired = campaign.settings.paired_axes();
    let any_paired = hs.iter().any(|h| paired.contains(&h.axis));
    let pairing = if any_paired {
        "Where a hypothesis's axis is paired (`campaign.paired`), a's and b's runs are matched by training seed and repetition (they met the same faults) and the differences tested: means by the paired t test, with the Wilcoxon signed-rank test (zeros dropped; exact without ties up to 50 differences, else the normal approximation with the tie correction) as a check in `comparisons.csv`'s `wilcoxon_p`, rates by the exact McNemar test on the discordant pairs with Newcombe's paired interval. Where it is not, "
    } else {
        "The runs of different options are not paired (each drew its own faults): "
    };
    format!(
        "Rules: each hypothesis is tested in every condition (the other axes' combinations). {pairing}means by Welch's t test, rates by the two-proportion z test with Newcombe's 95% interval. Accuracy loss and overhead are over the runs that completed; `failed_pct` compares completion. The family for Holm's adjustment is the study's stated family: every test of the {h} hypotheses stated before the runs, in each of the {conditions} conditions where both sides have values to test, {m} tests; a test reads `b lower` or `b higher` when its adjusted p is below {ALPHA}, else `not shown`. *Detectable*: the smallest difference a test detects with 80% power at Holm's strictest level ({ALPHA}/{m}): for a paired test from the standard deviation of the per-group differences (t-based), else from the two cells' spread (normal approximation).\n",
        h = hs.len(),
        m = s.tests.len()
    )
}

/// The study's section of `report.md`.
pub fn markdown(campaign: &Campaign, s: &Study) -> String {
    let mut md = String::new();
    let rules = Rules::of(&campaign.settings);
    let axis = campaign.settings.hypotheses.first().map_or("recovery.strategy", |h| h.axis.as_str());
    let _ = match axis {
        "recovery.strategy" => writeln!(md, "\n## Which strategy when\n"),
        other => writeln!(md, "\n## Which {} option when\n", resilab_text::markdown(other)),
    };
    md.push_str(&choice_rules(&rules, campaign.settings.paired_axes().iter().any(|a| a == axis)));
    md.push('\n');
    let rows: Vec<ChoiceRow> = s.choices.iter().map(ChoiceRow::of).collect();
    md_table(&mut md, &[], &CHOICE_TABLE.iter().collect::<Vec<_>>(), rows.iter().map(|r| (Vec::new(), r)));
    let _ = writeln!(md, "\n## Hypotheses (Holm over {} tests)\n", s.tests.len());
    md.push_str(&test_rules(campaign, s));
    md.push('\n');
    let paired = campaign.settings.paired_axes();
    for h in &campaign.settings.hypotheses {
        let of: Vec<&HypothesisTest> = s.tests.iter().filter(|t| t.hypothesis == h.name).collect();
        let count = |v: &str| of.iter().filter(|t| t.verdict == v).count();
        let kind = if paired.contains(&h.axis) { "paired difference" } else { "difference" };
        let _ = writeln!(
            md,
            "- **{}** ({} of {} against {}): {} lower, {} higher, {} not shown, of {} conditions; smallest {kind} detectable at 80% power: {}.",
            resilab_text::markdown(&h.name),
            h.metric.column(),
            resilab_text::markdown(&h.b),
            resilab_text::markdown(&h.a),
            count("b lower"),
            count("b higher"),
            count("not shown"),
            of.len(),
            detectable_range(&of, crate::stats::difference_unit(h.metric.column()))
        );
    }
    let _ = writeln!(
        md,
        "\nEvery test with its interval, adjusted p and (paired means) Wilcoxon p is in `comparisons.csv`; per option and condition, the failed share, the shares losing more than 1 point and of catastrophes (exact intervals), accuracy loss and overhead with 95% intervals are in `cells_study.csv`; `plots/pareto_*.png` show them per condition, and `plots/accuracy_time*.png` each condition's test accuracy against simulated time."
    );
    md
}

/// Writes `cells_study.csv`, `comparisons.csv`, `which_strategy.csv` and a Pareto plot per
/// condition under `out`; returns the CSV files and the plots, each captioned by its condition.
pub(crate) fn write(s: &Study, out: &Path) -> Result<(Vec<PathBuf>, Vec<crate::figures::Figure>)> {
    let mut files = Vec::new();
    for (name, rows) in
        [("cells_study.csv", csv(&s.cells)?), ("comparisons.csv", csv(&s.tests)?), ("which_strategy.csv", choices_csv(&s.choices)?)]
    {
        files.push(crate::files::write(&out.join(name), &rows)?);
    }
    let plots = out.join("plots");
    std::fs::create_dir_all(&plots).map_err(|source| Error::Io { path: plots.clone(), source })?;
    let conditions: Vec<&String> = s.choices.iter().map(|c| &c.condition).collect();
    let mut figures = Vec::new();
    for (i, cond) in conditions.iter().enumerate() {
        let points = s
            .cells
            .iter()
            .filter(|c| &&c.condition == cond)
            .map(|c| ParetoPoint {
                label: if c.failed > 0 {
                    format!("{} ({} of {} runs completed)", c.option, c.runs - c.failed, c.runs)
                } else {
                    c.option.clone()
                },
                overhead: c.sim_overhead.map(|x| (x, (c.sim_overhead_lo, c.sim_overhead_hi))),
                loss: c.acc_loss.map(|y| (y, (c.acc_loss_lo, c.acc_loss_hi))),
            })
            .collect();
        let plot = Pareto { title: (*cond).clone(), points, ..Pareto::default() };
        let caption = format!(
            "Accuracy loss against simulated overhead, {}: each option's mean over its runs that completed, with 95% intervals",
            resilab_text::markdown(cond)
        );
        figures.push((caption, crate::save(&plot, &plots.join(format!("pareto_{i:02}")))?));
    }
    Ok((files, figures))
}

/// `which_strategy.csv`: a [`ChoiceRow`] per condition.
fn choices_csv(choices: &[Choice]) -> Result<String> {
    crate::rows::table::<ChoiceRow, _>(&[], choices.iter().map(|c| (Vec::new(), ChoiceRow::of(c))))
}

fn csv<T: Serialize>(rows: &[T]) -> Result<String> {
    let mut w = resilab_text::CsvWriter::from_writer(Vec::new());
    for r in rows {
        w.serialize(r)?;
    }
    crate::error::csv_text(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_csv_cannot_hold_is_a_csv_error() {
        #[derive(Serialize)]
        struct Nested {
            v: Vec<u32>,
        }
        let e = csv(&[Nested { v: vec![1, 2] }]).unwrap_err();
        assert!(matches!(e, Error::Table(_)), "{e:?}");
    }
    use crate::stats::mcnemar_exact;
    use resilab_campaign::Metrics;

    /// A one-axis study of the four strategies, 3 seeds x 10 repetitions, budget 0.5 points;
    /// `paired` is its `[campaign] paired` line (empty: the hypotheses' axis is paired).
    fn campaign(paired: &str) -> Campaign {
        let text = r#"
[campaign]
kind = "train"
seeds = [1, 2, 3]
repetitions = 10
accuracy_budget_points = 0.5
PAIRED

[[campaign.hypothesis]]
name = "rollback costs less than checkpoint-restart"
metric = "sim_overhead"
a = "checkpoint_restart"
b = "rollback"

[[campaign.hypothesis]]
name = "rollback fails less than none"
metric = "failed"
a = "none"
b = "rollback"

[base]
data = { source = "synthetic", train_size = 128, test_size = 64, image_size = 8, classes = 4 }
model = { arch = "resnet", depth = 8, width = 0.25 }
train = { steps = 16, batch_size = 32 }
parallel = { workers = 4, compute = { gflops = 50.0 } }

[[base.fault]]
target = "crash"
system_mtbf_steps = 5

[grid]
"recovery.strategy" = ["none", "checkpoint_restart", "rollback", "lossy_forward"]
"#;
        Campaign::parse(&text.replace("PAIRED", paired), &[], "test").unwrap()
    }

    /// A completed run of `strategy` in group (seed, rep) with overhead and loss in percent
    /// (points); `failed` marks it failed.
    fn run(strategy: &str, g: u64, overhead: f64, loss: f64, failed: bool) -> Row {
        Row {
            id: format!("{strategy}-{g}"),
            index: g,
            coords: [("recovery.strategy".to_string(), strategy.to_string())].into(),
            seed: 1 + g % 3,
            rep: g / 3,
            status: Status::Ok,
            message: None,
            metrics: Metrics {
                failed: Some(failed),
                sim_overhead: Some(overhead / 100.0),
                acc_loss: Some(loss / 100.0),
                final_acc: Some(0.8 - loss / 100.0),
                ..Metrics::default()
            },
        }
    }

    /// A deterministic spread in [-0.5, 0.5) for group `g` and stream `k`.
    fn noise(g: u64, k: u64) -> f64 {
        ((g * 7919 + k * 104_729) % 101) as f64 / 101.0 - 0.5
    }

    /// 30 groups; in each, the overheads (%) and losses (points) `f` gives the four strategies
    /// (none fails in every third group).
    fn rows(f: impl Fn(u64) -> [(f64, f64); 4]) -> Vec<Row> {
        let mut out = Vec::new();
        for g in 0..30 {
            let v = f(g);
            out.push(run("none", g, v[0].0, v[0].1, g % 3 == 0));
            for (s, (o, l)) in ["checkpoint_restart", "rollback", "lossy_forward"].iter().zip(&v[1..]) {
                out.push(run(s, g, *o, *l, false));
            }
        }
        out
    }

    /// Group effects 40 times the strategies' difference: only pairing shows it.
    fn noisy_groups() -> Vec<Row> {
        rows(|g| {
            let base = 20.0 * noise(g, 1);
            let acc = 0.05 * noise(g, 2);
            [(base - 1.0, 3.0), (base + 30.5, acc), (base + 30.0 + 0.1 * noise(g, 3), acc), (base + 5.0, acc)]
        })
    }

    #[test]
    fn paired_tests_are_used_only_where_the_axis_is_paired() {
        let rows = noisy_groups();
        let paired = study(&campaign(""), &rows).unwrap();
        let cost = paired.tests.iter().find(|t| t.metric == "sim_overhead_pct").unwrap();
        assert_eq!((cost.test, cost.n_pairs), ("paired_t", Some(30)), "{cost:?}");
        assert!(cost.wilcoxon_p.is_some_and(|p| p < 0.001), "{cost:?}");
        assert_eq!(cost.verdict, "b lower", "the paired test sees through the groups' spread: {cost:?}");
        let fails = paired.tests.iter().find(|t| t.metric == "failed_pct").unwrap();
        assert_eq!((fails.test, fails.n_pairs, fails.wilcoxon_p), ("mcnemar_exact", Some(30), None), "{fails:?}");
        // none failed in 10 of 30 groups, rollback in none: McNemar on 10 discordant pairs.
        assert!((fails.p - mcnemar_exact(10, 0)).abs() < 1e-15 && fails.diff < 0.0, "{fails:?}");
        assert!(fails.detectable.is_finite() && cost.detectable < 0.5, "the paired SD is small: {cost:?}");

        let unpaired = study(&campaign("paired = []"), &rows).unwrap();
        let cost = unpaired.tests.iter().find(|t| t.metric == "sim_overhead_pct").unwrap();
        assert_eq!((cost.test, cost.n_pairs, cost.wilcoxon_p), ("welch", None, None), "{cost:?}");
        assert_eq!(cost.verdict, "not shown", "{cost:?}");
        assert!(cost.detectable > 4.0, "the groups' spread is the noise: {cost:?}");
        let fails = unpaired.tests.iter().find(|t| t.metric == "failed_pct").unwrap();
        assert_eq!(fails.test, "two_proportions");
        // comparisons.csv writes the new columns, empty where they do not apply.
        let text = csv(&unpaired.tests).unwrap();
        let header = text.lines().next().unwrap();
        assert!(header.contains(",n_b,n_pairs,diff,") && header.contains(",p,wilcoxon_p,p_holm,"), "{header}");
        assert!(text.lines().nth(1).unwrap().contains(",30,30,,"), "{text}");
    }

    #[test]
    fn a_failed_runs_overhead_is_empty_and_its_accuracy_left_out() {
        let mut r = run("none", 0, -40.0, 60.0, true);
        assert_eq!((overhead_pct(&r), acc_points(&r), final_acc_pct(&r)), (None, None, None));
        r.metrics.failed = Some(false);
        assert!(overhead_pct(&r).is_some_and(|o| (o + 40.0).abs() < 1e-9) && acc_points(&r).is_some());
        // none: failed runs at -40% overhead and 60 points of loss, completed ones at 5% and 3.
        let rows = rows(|g| {
            let none = if g % 3 == 0 { (-40.0, 60.0) } else { (5.0, 3.0) };
            [none, (30.0, 0.0), (10.0, 0.0), (8.0, 0.01 * noise(g, 1))]
        });
        let s = study(&campaign(""), &rows).unwrap();
        let none = s.cells.iter().find(|c| c.option == "none").unwrap();
        assert_eq!((none.runs, none.failed), (30, 10));
        assert!((none.failed_pct.unwrap() - 100.0 / 3.0).abs() < 1e-9 && none.failed_lo.unwrap() > 0.0);
        assert!((none.sim_overhead.unwrap() - 5.0).abs() < 1e-9, "{none:?}");
        assert!((none.acc_loss.unwrap() - 3.0).abs() < 1e-9, "{none:?}");
        // Its failed runs count as catastrophes (10 of 30), beside its mean loss.
        assert!(
            s.choices[0].ruled_out.iter().any(|r| r.starts_with("none (upper bound 3.00 > 0.5 pt; catastrophes 10/30: rate bound ")),
            "{:?}",
            s.choices[0]
        );
        // cells.csv's cell means leave the failed runs out too.
        let owned: Vec<Row> = rows.iter().filter(|r| r.coords["recovery.strategy"] == "none").cloned().collect();
        let cell = crate::metrics::cells(&owned, |_| 0.25, 0.5);
        assert!((cell[0].sim_overhead_pct.unwrap() - 5.0).abs() < 1e-9, "{:?}", cell[0].sim_overhead_pct);
        assert!((cell[0].acc_loss.unwrap() - 3.0).abs() < 1e-9, "{:?}", cell[0].acc_loss);
    }

    #[test]
    fn an_option_whose_upper_bound_exceeds_the_budget_is_not_chosen_though_its_mean_is_under_it() {
        // lossy forward is cheapest, its mean loss 0.3 points, but spread: upper bound > 0.5.
        let rows = rows(|g| [(1.0, 5.0), (30.0, 0.0), (10.0, 0.02 * noise(g, 1)), (5.0, 0.3 + 4.0 * noise(g, 2))]);
        let s = study(&campaign(""), &rows).unwrap();
        let c = &s.choices[0];
        let lossy = s.cells.iter().find(|c| c.option == "lossy_forward").unwrap();
        assert!(lossy.acc_loss.unwrap() < 0.5, "{lossy:?}");
        assert_eq!((c.choice.as_str(), c.decided, c.groups), ("rollback", true, 30), "{c:?}");
        assert!(c.ruled_out.iter().any(|r| r.starts_with("lossy_forward (upper bound ") && r.ends_with(" > 0.5 pt)")), "{c:?}");
        assert!(c.ruled_out.contains(&"checkpoint_restart (costs more than rollback)".to_string()), "{c:?}");
        assert!(c.acc_loss_upper.unwrap() < 0.5 && c.groups_needed == Needed::Decided, "{c:?}");
    }

    #[test]
    fn rows_identical_in_every_group_are_equal_never_picked_by_grid_order() {
        let rows = rows(|g| {
            let same = (10.0 + noise(g, 1), 0.01 * noise(g, 2));
            [(1.0, 5.0), (30.0 + noise(g, 3), 0.0), same, same]
        });
        let c = &study(&campaign(""), &rows).unwrap().choices[0];
        assert_eq!(c.choice, "rollback = lossy_forward (equal)", "{c:?}");
        assert!(c.decided && c.chosen == ["rollback", "lossy_forward"], "{c:?}");
        assert_eq!(ChoiceRow::of(c).chosen, "rollback;lossy_forward");
        // Identity is observed, not inferred: the same where the axis is not paired (as in a
        // condition without faults).
        let c = &study(&campaign("paired = []"), &rows).unwrap().choices[0];
        assert_eq!((c.choice.as_str(), c.decided), ("rollback = lossy_forward (equal)", true), "{c:?}");
        // One group apart: not identical, and costs this close are not separated.
        let mut rows = rows;
        let last = rows.iter_mut().rfind(|r| r.coords["recovery.strategy"] == "lossy_forward").unwrap();
        last.metrics.acc_loss = last.metrics.acc_loss.map(|l| l + 1e-4);
        let c = &study(&campaign(""), &rows).unwrap().choices[0];
        assert_eq!((c.choice.as_str(), c.decided), ("rollback = lossy_forward", false), "{c:?}");
        assert_eq!(c.groups_needed, Needed::NotReachable, "their overheads do not differ at all: {c:?}");
    }

    #[test]
    fn costs_within_their_noise_are_listed_together_and_undecided_with_the_groups_needed() {
        let rows = rows(|g| [(1.0, 5.0), (30.0, 0.0), (10.0 + noise(g, 1), 0.0), (10.05 + noise(g, 2), 0.0)]);
        let c = &study(&campaign(""), &rows).unwrap().choices[0];
        assert_eq!((c.choice.as_str(), c.decided), ("rollback = lossy_forward", false), "{c:?}");
        assert_eq!(c.needed_for, "lossy_forward against rollback");
        let Needed::Groups(n) = c.groups_needed else { panic!("{c:?}") };
        assert!(n > 30, "more groups than were run: {n}");
        let row = ChoiceRow::of(c);
        assert_eq!(row.groups_needed, n.to_string());
        let shown = CHOICE_TABLE.iter().find(|(h, _)| *h == "choice").map(|(_, f)| f(&row)).unwrap();
        assert_eq!(shown, "rollback = lossy_forward (undecided)");
        // The same costs with no difference at all can never be separated.
        let rows = super::tests::rows(|g| [(1.0, 5.0), (30.0, 0.0), (10.0 + noise(g, 1), 0.0), (10.0 + noise(g, 1), 0.01 * noise(g, 2))]);
        let c = &study(&campaign(""), &rows).unwrap().choices[0];
        assert_eq!((c.decided, c.groups_needed), (false, Needed::NotReachable), "{c:?}");
    }

    #[test]
    fn nothing_admissible_is_undecided_with_the_groups_the_most_promising_option_needs() {
        let rows = rows(|g| [(1.0, 5.0), (30.0, 0.48 + 0.5 * noise(g, 1)), (10.0, 0.3 + 2.0 * noise(g, 2)), (5.0, 2.0)]);
        let s = study(&campaign(""), &rows).unwrap();
        let c = &s.choices[0];
        assert_eq!((c.choice.as_str(), c.decided, c.chosen.len()), ("undecided", false, 0), "{c:?}");
        assert!(
            c.needed_for.starts_with("rollback under both budgets (mean rule: ") && c.needed_for.ends_with("; rate rule: met)"),
            "{c:?}"
        );
        assert!(matches!(c.groups_needed, Needed::Groups(n) if n > 30), "{c:?}");
        assert_eq!(c.ruled_out.len(), 4, "{c:?}");
        // Every mean loss at or above the budget: not reachable.
        let rows = super::tests::rows(|g| [(1.0, 5.0), (30.0, 0.6 + noise(g, 1)), (10.0, 0.7), (5.0, 2.0 + noise(g, 2))]);
        let c = &study(&campaign(""), &rows).unwrap().choices[0];
        assert_eq!((c.choice.as_str(), c.groups_needed), ("undecided", Needed::NotReachable), "{c:?}");
        let row = ChoiceRow::of(c);
        assert_eq!((row.groups_needed.as_str(), row.decided), ("not reachable", false));
        // The report states the rules beside the table.
        let md = markdown(&campaign(""), &study(&campaign(""), &rows).unwrap());
        for rule in [
            "**Admissible**",
            "a mean accuracy loss of 0.5 points and a catastrophe rate of 10% of runs",
            "lost more than 10 points",
            "Clopper–Pearson upper bound of its catastrophe rate is below 10% (29 runs without a catastrophe show it",
            "below 80% reads `undecided: golden run at X%`",
            "one-sided 95% upper bound",
            "**Cheaper**",
            "paired t test",
            "**Undecided**",
            "80% power",
            "study's stated family",
        ] {
            assert!(md.contains(rule), "{rule}: {md}");
        }
        assert!(md.contains("smallest paired difference detectable at 80% power"), "{md}");
        // Each detectable figure with its unit: overheads in % of the golden run's time, rates
        // in % of runs.
        let line = |name: &str| md.lines().find(|l| l.starts_with(&format!("- **{name}**"))).unwrap().to_string();
        let cost = line("rollback costs less than checkpoint-restart");
        assert!(cost.ends_with(" % of golden time."), "{cost}");
        assert!(line("rollback fails less than none").ends_with(" % of runs."), "{md}");
    }

    /// Rows where lossy forward is cheapest and every option's loss is small; `f` alters them.
    fn calm(f: impl Fn(&mut Row)) -> Vec<Row> {
        let mut rows =
            rows(|g| [(1.0, 5.0), (30.0, 0.0), (10.0 + noise(g, 1), 0.01 * noise(g, 2)), (5.0 + noise(g, 3), 0.01 * noise(g, 4))]);
        for r in &mut rows {
            r.metrics.failed = Some(false);
            f(r);
        }
        rows
    }

    fn lossy_group(r: &Row, g: u64) -> bool {
        r.coords["recovery.strategy"] == "lossy_forward" && r.index == g
    }

    #[test]
    fn no_catastrophe_in_30_is_admissible_at_10_pct_and_one_is_not() {
        let c = &study(&campaign(""), &calm(|_| ())).unwrap().choices[0];
        assert_eq!((c.choice.as_str(), c.decided), ("lossy_forward", true), "0 of 30: bound 9.5% < 10%: {c:?}");
        let s = study(&campaign(""), &calm(|r| r.metrics.failed = Some(lossy_group(r, 7)))).unwrap();
        let c = &s.choices[0];
        assert_eq!(c.choice, "rollback", "{c:?}");
        assert!(c.ruled_out.contains(&"lossy_forward (catastrophes 1/30: rate bound 14.9% >= 10%)".to_string()), "{c:?}");
        let cell = s.cells.iter().find(|c| c.option == "lossy_forward").unwrap();
        assert_eq!((cell.catastrophic, cell.loss_over_1pt), (1, 0), "{cell:?}");
        assert!((cell.catastrophic_pct.unwrap() - 100.0 / 30.0).abs() < 1e-9 && cell.catastrophic_lo.unwrap() > 0.0, "{cell:?}");
        // Two-sided, 1 of 30: 0.084% to 17.2% (the binomial tails solved by bisection).
        assert!((cell.catastrophic_hi.unwrap() - 17.2169).abs() < 1e-3, "{cell:?}");
    }

    #[test]
    fn a_rare_catastrophe_with_a_small_mean_rules_out_by_its_rate() {
        // Catastrophes above 2 points: one run of lossy forward loses 2.5, the mean stays under
        // the budget with its bound (0.23 < 0.5), the rate bound does not (14.9%).
        let rows = calm(|r| {
            if lossy_group(r, 4) {
                r.metrics.acc_loss = Some(0.025);
            }
        });
        let s = study(&campaign("catastrophe_points = 2"), &rows).unwrap();
        let lossy = s.cells.iter().find(|c| c.option == "lossy_forward").unwrap();
        assert!(lossy.acc_loss_hi.unwrap() < 0.5 && lossy.loss_over_1pt == 1 && lossy.catastrophic == 1, "{lossy:?}");
        let c = &s.choices[0];
        assert_eq!(c.choice, "rollback", "{c:?}");
        assert!(c.ruled_out.contains(&"lossy_forward (catastrophes 1/30: rate bound 14.9% >= 10%)".to_string()), "{c:?}");
    }

    #[test]
    fn a_rate_budget_of_5_pct_needs_59_groups_without_a_catastrophe() {
        let s = study(&campaign("catastrophe_budget_pct = 5"), &calm(|_| ())).unwrap();
        let c = &s.choices[0];
        assert_eq!((c.choice.as_str(), c.decided, c.groups_needed), ("undecided", false, Needed::Groups(59)), "{c:?}");
        assert!(c.needed_for.ends_with("under both budgets (mean rule: met; rate rule: 59)"), "{c:?}");
        assert!(c.ruled_out.iter().all(|r| r.contains("catastrophes 0/30: rate bound 9.5% >= 5%")), "{c:?}");
    }

    #[test]
    fn a_condition_whose_golden_run_did_not_learn_is_undecided() {
        let rows = calm(|r| r.metrics.golden_acc = Some(if r.index == 3 { 0.407 } else { 0.9 }));
        let s = study(&campaign(""), &rows).unwrap();
        let c = &s.choices[0];
        assert_eq!((c.choice.as_str(), c.decided, c.chosen.len()), ("undecided: golden run at 40.7%", false, 0), "{c:?}");
        assert_eq!((c.groups_needed, c.needed_for.as_str()), (Needed::NotReachable, "a golden run of at least 80%"), "{c:?}");
        let md = markdown(&campaign(""), &s);
        assert!(md.contains("| undecided: golden run at 40.7% |"), "{md}");
        // At or above the floor, the runs decide.
        let rows = calm(|r| r.metrics.golden_acc = Some(0.8));
        assert_eq!(study(&campaign(""), &rows).unwrap().choices[0].choice, "lossy_forward");
    }

    #[test]
    fn the_golden_ensembles_spread_stands_beside_the_budget_and_its_mean_is_the_floors_reference() {
        let md = markdown(&campaign(""), &study(&campaign(""), &calm(|_| ())).unwrap());
        assert!(md.contains("| golden SD (points) |") && md.contains("| 30 |") && md.contains("| n/a |"), "{md}");
        let rows = calm(|r| {
            r.metrics.golden_ensemble_sd = Some(if r.index == 2 { 0.004 } else { 0.0015 });
            // Member 0 learned, the ensemble's mean did not: the mean is the reference.
            r.metrics.golden_ensemble_mean_acc = Some(if r.index == 5 { 0.62 } else { 0.9 });
        });
        let s = study(&campaign(""), &rows).unwrap();
        let c = &s.choices[0];
        assert_eq!((c.golden_sd, c.choice.as_str()), (Some(0.4), "undecided: golden run at 62.0%"), "{c:?}");
        assert!(markdown(&campaign(""), &s).contains("| 0.40 |"));
    }
}
