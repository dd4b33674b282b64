//! A study with hypotheses fixed before running (`[[campaign.hypothesis]]`): per condition
//! (every combination of the axes other than the compared one), each option's accuracy loss and
//! simulated overhead with 95% intervals; each hypothesis tested in every condition (Welch's t
//! for means, Newcombe's interval and the two-proportion test for rates), Holm-adjusted over
//! exactly that family; a Pareto plot per condition; and the generated "which strategy when"
//! table: in each condition, the option with the lowest mean overhead among those whose mean
//! accuracy loss is not shown (one-sided 95%) to exceed the campaign's accuracy budget.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use resilab_campaign::{Campaign, Hypothesis, HypothesisMetric, Row, Status};
use serde::Serialize;

use crate::md::{MdColumn, md_table};
use crate::stats::{ALPHA, Spread, holm, holm_first_level, mean_interval, newcombe, shown_above, two_proportions, welch, wilson};
use crate::{Error, Facets, Pareto, ParetoPoint, Result};

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
    /// Runs that failed (their strategy gave up).
    pub failed: usize,
    /// Mean accuracy loss against the golden run, points (every run).
    #[serde(rename = "acc_loss_pts")]
    pub acc_loss: Option<f64>,
    /// Its 95% interval.
    pub acc_loss_lo: Option<f64>,
    /// Upper end.
    pub acc_loss_hi: Option<f64>,
    /// Mean simulated overhead, % (runs that completed; a failed run has none).
    #[serde(rename = "sim_overhead_pct")]
    pub sim_overhead: Option<f64>,
    /// Its 95% interval.
    pub sim_overhead_lo: Option<f64>,
    /// Upper end.
    pub sim_overhead_hi: Option<f64>,
    /// Mean final test accuracy, % (every run).
    #[serde(rename = "final_acc_pct")]
    pub final_acc: Option<f64>,
    /// Its 95% interval.
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
    /// `welch` or `newcombe`.
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
    /// `b - a`.
    pub diff: f64,
    /// 95% interval of the difference (not adjusted).
    pub ci_lo: f64,
    /// Upper end.
    pub ci_hi: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// Holm-adjusted over every test of every hypothesis.
    pub p_holm: f64,
    /// `b lower`, `b higher` or `not shown`.
    pub verdict: String,
    /// The smallest difference (the metric's unit) these runs detect with 80% power at Holm's
    /// strictest level for the family (`0.05 / m`, normal approximation).
    pub detectable: f64,
    /// Its basis, for `report --power`.
    #[serde(skip)]
    pub spread: Spread,
}

/// The generated answer for one condition.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Choice {
    /// The condition.
    pub condition: String,
    /// The option with the lowest mean overhead among those within the accuracy budget
    /// (empty when none is).
    pub choice: String,
    /// Its mean overhead, %.
    #[serde(rename = "sim_overhead_pct")]
    pub sim_overhead: Option<f64>,
    /// Its mean accuracy loss, points.
    #[serde(rename = "acc_loss_pts")]
    pub acc_loss: Option<f64>,
    /// Options ruled out: accuracy loss shown to exceed the budget, or no overhead (failed runs).
    pub ruled_out: String,
}

/// What the study wrote.
pub struct Study {
    /// Per option and condition.
    pub cells: Vec<StudyCell>,
    /// Every test of the family.
    pub tests: Vec<HypothesisTest>,
    /// The "which strategy when" table.
    pub choices: Vec<Choice>,
}

fn condition(r: &Row, axis: &str) -> String {
    let parts: Vec<String> = r.coords.iter().filter(|(k, _)| k.as_str() != axis).map(|(k, v)| format!("{k}={v}")).collect();
    if parts.is_empty() { "all".to_string() } else { parts.join(", ") }
}

fn acc_points(r: &Row) -> Option<f64> {
    r.metrics.acc_loss.map(|x| 100.0 * x)
}

fn overhead_pct(r: &Row) -> Option<f64> {
    r.metrics.sim_overhead.filter(|_| r.metrics.failed != Some(true)).map(|x| 100.0 * x)
}

fn final_acc_pct(r: &Row) -> Option<f64> {
    r.metrics.final_acc.map(|x| 100.0 * x)
}

/// Simulated time to the golden run's final accuracy, % of the golden run's simulated time.
fn time_to_acc_pct(r: &Row) -> Option<f64> {
    let (t, g) = (r.metrics.time_to_golden_acc_s?, r.metrics.golden_sim_s?);
    (g > 0.0).then(|| 100.0 * t / g)
}

fn failed(r: &Row) -> bool {
    r.metrics.failed == Some(true)
}

fn reached(r: &Row) -> bool {
    r.metrics.time_to_golden_acc_s.is_some()
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
type Groups<'a> = Vec<(String, Vec<(String, Vec<&'a Row>)>)>;

fn group<'a>(campaign: &Campaign, rows: &'a [Row], axis: &str) -> Groups<'a> {
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

fn cell(condition: &str, option: &str, rows: &[&Row]) -> StudyCell {
    let of = |f: fn(&Row) -> Option<f64>| mean_interval(&rows.iter().filter_map(|r| f(r)).collect::<Vec<f64>>());
    let (a, o, fa, tt) = (of(acc_points), of(overhead_pct), of(final_acc_pct), of(time_to_acc_pct));
    let seeds: std::collections::BTreeSet<u64> = rows.iter().map(|r| r.seed).collect();
    let k = rows.iter().filter(|r| reached(r)).count();
    let w = wilson(k as u64, rows.len() as u64);
    StudyCell {
        condition: condition.to_string(),
        option: option.to_string(),
        runs: rows.len(),
        seeds: seeds.len(),
        failed: rows.iter().filter(|r| r.metrics.failed == Some(true)).count(),
        acc_loss: a.map(|x| x.0),
        acc_loss_lo: a.map(|x| x.1.0),
        acc_loss_hi: a.map(|x| x.1.1),
        sim_overhead: o.map(|x| x.0),
        sim_overhead_lo: o.map(|x| x.1.0),
        sim_overhead_hi: o.map(|x| x.1.1),
        final_acc: fa.map(|x| x.0),
        final_acc_lo: fa.map(|x| x.1.0),
        final_acc_hi: fa.map(|x| x.1.1),
        reached: k,
        reached_pct: (!rows.is_empty()).then(|| 100.0 * k as f64 / rows.len() as f64),
        reached_lo: w.map(|x| 100.0 * x.0),
        reached_hi: w.map(|x| 100.0 * x.1),
        time_to_acc: tt.map(|x| x.0),
        time_to_acc_lo: tt.map(|x| x.1.0),
        time_to_acc_hi: tt.map(|x| x.1.1),
    }
}

/// One hypothesis in one condition, before Holm; `None` when a side has too few values.
fn test(h: &Hypothesis, condition: &str, a: &[&Row], b: &[&Row]) -> Option<HypothesisTest> {
    let base = |metric, test, va: f64, vb: f64, na, nb, ci: (f64, f64), p, spread| HypothesisTest {
        hypothesis: h.name.clone(),
        condition: condition.to_string(),
        metric,
        test,
        a: h.a.clone(),
        b: h.b.clone(),
        value_a: va,
        value_b: vb,
        n_a: na,
        n_b: nb,
        diff: vb - va,
        ci_lo: ci.0,
        ci_hi: ci.1,
        p,
        p_holm: p,
        verdict: String::new(),
        detectable: f64::NAN,
        spread,
    };
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let name = h.metric.column();
    match measure(h.metric) {
        Measure::Rate(event) => {
            let k = |s: &[&Row]| s.iter().filter(|r| event(r)).count() as u64;
            let (na, nb) = (a.len() as u64, b.len() as u64);
            let ci = newcombe(k(a), na, k(b), nb)?;
            let p = two_proportions(k(a), na, k(b), nb)?.p;
            let spread = Spread::of_rates(k(a), na, k(b), nb)?;
            Some(base(
                name,
                "newcombe",
                100.0 * k(a) as f64 / na as f64,
                100.0 * k(b) as f64 / nb as f64,
                a.len(),
                b.len(),
                (100.0 * ci.0, 100.0 * ci.1),
                p,
                spread,
            ))
        }
        Measure::Mean(get) => {
            let (va, vb): (Vec<f64>, Vec<f64>) = (a.iter().filter_map(|r| get(r)).collect(), b.iter().filter_map(|r| get(r)).collect());
            let t = welch(&va, &vb)?;
            let spread = Spread::of_means(&va, &vb)?;
            Some(base(name, "welch", mean(&va), mean(&vb), va.len(), vb.len(), t.ci, t.p, spread))
        }
    }
}

/// The option with the lowest mean overhead among those whose accuracy loss is not shown to
/// exceed `budget` points.
fn choose(condition: &str, options: &[(String, Vec<&Row>)], cells: &[StudyCell], budget: f64) -> Choice {
    let mut ruled = Vec::new();
    let mut best: Option<&StudyCell> = None;
    for (option, rows) in options {
        let Some(c) = cells.iter().find(|c| c.condition == condition && &c.option == option) else { continue };
        let acc: Vec<f64> = rows.iter().filter_map(|r| acc_points(r)).collect();
        if shown_above(&acc, budget) {
            ruled.push(format!("{option} (loss > {budget} pt)"));
        } else if c.sim_overhead.is_none() || c.failed > 0 {
            ruled.push(format!("{option} (failed runs)"));
        } else if best.is_none_or(|b| c.sim_overhead < b.sim_overhead) {
            best = Some(c);
        }
    }
    Choice {
        condition: condition.to_string(),
        choice: best.map_or_else(String::new, |b| b.option.clone()),
        sim_overhead: best.and_then(|b| b.sim_overhead),
        acc_loss: best.and_then(|b| b.acc_loss),
        ruled_out: ruled.join("; "),
    }
}

/// The study of `rows` under `campaign`'s hypotheses; `None` when it states none.
pub fn study(campaign: &Campaign, rows: &[Row]) -> Option<Study> {
    let hs = &campaign.settings.hypotheses;
    let axis = hs.first()?.axis.clone();
    let groups = group(campaign, rows, &axis);
    let cells: Vec<StudyCell> = groups.iter().flat_map(|(c, opts)| opts.iter().map(move |(o, rs)| cell(c, o, rs))).collect();
    let mut tests = Vec::new();
    for h in hs {
        for (cond, opts) in &groups {
            let side = |o: &str| opts.iter().find(|(x, _)| x == o).map(|x| x.1.clone()).unwrap_or_default();
            tests.extend(test(h, cond, &side(&h.a), &side(&h.b)));
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
    let budget = campaign.settings.accuracy_budget_points;
    let choices = groups.iter().map(|(c, opts)| choose(c, opts, &cells, budget)).collect();
    Some(Study { cells, tests, choices })
}

/// The detectable differences of a hypothesis's tests: `X` when all agree to two decimals, else
/// `X to Y`; `n/a` without any.
fn detectable_range(of: &[&HypothesisTest]) -> String {
    let v: Vec<f64> = of.iter().map(|t| t.detectable).filter(|d| d.is_finite()).collect();
    let (lo, hi) = (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(f64::NEG_INFINITY, f64::max));
    match v.len() {
        0 => "n/a".into(),
        _ if format!("{lo:.2}") == format!("{hi:.2}") => format!("{lo:.2}"),
        _ => format!("{lo:.2} to {hi:.2}"),
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| format!("{x:.digits$}"))
}

/// `report.md`'s "which strategy when" table: what each column shows of a condition's
/// `which_strategy.csv` row.
const CHOICE_TABLE: &[MdColumn<Choice>] = &[
    ("condition", |c| c.condition.clone()),
    ("choice", |c| if c.choice.is_empty() { "none qualifies".into() } else { c.choice.clone() }),
    ("sim. overhead %", |c| opt(c.sim_overhead, 2)),
    ("acc. loss (points)", |c| opt(c.acc_loss, 2)),
    ("ruled out", |c| c.ruled_out.clone()),
];

/// The study's section of `report.md`.
pub fn markdown(campaign: &Campaign, s: &Study) -> String {
    let mut md = String::new();
    let budget = campaign.settings.accuracy_budget_points;
    let axis = campaign.settings.hypotheses.first().map_or("recovery.strategy", |h| h.axis.as_str());
    let _ = match axis {
        "recovery.strategy" => writeln!(md, "\n## Which strategy when\n"),
        other => writeln!(md, "\n## Which `{other}` option when\n"),
    };
    let _ = writeln!(
        md,
        "Generated from `cells_study.csv`: in each condition, the option with the lowest mean simulated overhead among those whose mean accuracy loss is not shown (one-sided 95% t bound) to exceed {budget} points; options with failed runs have no overhead and are ruled out.\n"
    );
    md_table(&mut md, &[], &CHOICE_TABLE.iter().collect::<Vec<_>>(), s.choices.iter().map(|c| (Vec::new(), c)));
    let _ = writeln!(md, "\n## Hypotheses (Holm over {} tests)\n", s.tests.len());
    let _ = writeln!(
        md,
        "Rules: each hypothesis is tested in every condition (the other axes' combinations): means by Welch's t test, rates by the two-proportion z test with Newcombe's 95% interval. The family for Holm's adjustment is all {m} tests of all hypotheses; a test reads `b lower` or `b higher` when its adjusted p is below {ALPHA}, else `not shown`. *Detectable*: the smallest difference a test's runs detect with 80% power at Holm's strictest level ({ALPHA}/{m}, normal approximation).\n",
        m = s.tests.len()
    );
    for h in &campaign.settings.hypotheses {
        let of: Vec<&HypothesisTest> = s.tests.iter().filter(|t| t.hypothesis == h.name).collect();
        let count = |v: &str| of.iter().filter(|t| t.verdict == v).count();
        let _ = writeln!(
            md,
            "- **{}** ({} of {} against {}): {} lower, {} higher, {} not shown, of {} conditions; detectable at 80% power: {}.",
            h.name,
            h.metric.column(),
            h.b,
            h.a,
            count("b lower"),
            count("b higher"),
            count("not shown"),
            of.len(),
            detectable_range(&of)
        );
    }
    let _ = writeln!(
        md,
        "\nEvery test with its interval and adjusted p is in `comparisons.csv`; per option and condition, accuracy loss and overhead with 95% intervals are in `cells_study.csv`; `plots/pareto_*.png` show them per condition, and `plots/accuracy_time.png` every condition side by side (up to 9)."
    );
    md
}

/// Writes `cells_study.csv`, `comparisons.csv`, `which_strategy.csv` and a Pareto plot per
/// condition under `out`; returns the files.
pub fn write(s: &Study, out: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for (name, rows) in [("cells_study.csv", csv(&s.cells)?), ("comparisons.csv", csv(&s.tests)?), ("which_strategy.csv", csv(&s.choices)?)]
    {
        files.push(crate::files::write(&out.join(name), &rows)?);
    }
    let plots = out.join("plots");
    std::fs::create_dir_all(&plots).map_err(|source| Error::Io { path: plots.clone(), source })?;
    let conditions: Vec<&String> = s.choices.iter().map(|c| &c.condition).collect();
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
        files.extend(crate::save(&plot, &plots.join(format!("pareto_{i:02}")))?);
    }
    if (2..=MAX_FACETS).contains(&conditions.len()) {
        files.extend(crate::save(&accuracy_time(s, &conditions), &plots.join("accuracy_time"))?);
    }
    Ok(files)
}

/// Most conditions drawn as facets of one figure.
const MAX_FACETS: usize = 9;

/// Accuracy lost against simulated overhead, one point per option with both intervals, one
/// panel per condition on shared axes. The loss is each run's against its own seed's golden
/// run, so the seeds' spread of final accuracy does not widen the intervals.
fn accuracy_time(s: &Study, conditions: &[&String]) -> Facets {
    let panels: Vec<Pareto> = conditions
        .iter()
        .map(|cond| Pareto {
            title: (*cond).clone(),
            points: s
                .cells
                .iter()
                .filter(|c| &&c.condition == cond)
                .map(|c| ParetoPoint {
                    label: c.option.clone(),
                    overhead: c.sim_overhead.map(|x| (x, (c.sim_overhead_lo, c.sim_overhead_hi))),
                    loss: c.acc_loss.map(|y| (y, (c.acc_loss_lo, c.acc_loss_hi))),
                })
                .collect(),
            axes: Some((
                "simulated overhead, % of the golden run (95% interval)".into(),
                "accuracy lost against the golden run, points (95%)".into(),
            )),
            bounds: None,
        })
        .collect();
    Facets::shared("Accuracy lost against simulated time, per option and condition".into(), panels, conditions.len().min(2))
}

fn csv<T: Serialize>(rows: &[T]) -> Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in rows {
        w.serialize(r).map_err(|e| Error::Csv(e.to_string()))?;
    }
    let bytes = w.into_inner().map_err(|e| Error::Csv(e.to_string()))?;
    String::from_utf8(bytes).map_err(|e| Error::Csv(e.to_string()))
}
