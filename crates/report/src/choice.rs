//! The "which strategy when" rule of a study, the same whatever the compared axis (recovery
//! strategies, permanent-loss policies), per condition:
//!
//! - *admissible*: an option that passes both budgets of [`Rules`]:
//!   - the mean rule: the one-sided 95% upper bound (Student t) of its mean accuracy loss
//!     against the golden run (runs that completed, points) lies below the campaign's
//!     `accuracy_budget_points` (non-inferiority);
//!   - the catastrophe-rate rule: the one-sided 95% Clopper–Pearson upper bound of its rate of
//!     catastrophes (runs that failed or lost more than `catastrophe_points`) lies below
//!     `catastrophe_budget_pct`. A mean with a bound is the wrong instrument for a rare
//!     catastrophe; this rule states the tail risk. Failed runs no longer rule an option out by
//!     themselves: they count as catastrophes in this rate (0 of 30 bounds it at 9.5%, 1 of 30
//!     at 14.9%);
//! - *cheaper*: among the admissible options, ordered by mean simulated overhead, an option is
//!   shown costlier than the cheapest when the paired t test of the per-group overhead
//!   differences (where the axis is paired; else Welch's t test) gives p < 0.05 after Holm over
//!   the condition's cost comparisons (the cheapest against each other admissible option);
//! - the chosen set is the cheapest and every admissible option not shown costlier; one member
//!   is the choice; options identical to the cheapest in every group (runs matched by training
//!   seed and repetition, each difference of overhead and accuracy loss exactly 0, whether or not
//!   the axis is paired) are `equal`, never picked by grid order; any other member left in the
//!   set leaves the condition *undecided*;
//! - an undecided condition states the groups that would decide it: with nothing admissible,
//!   the groups the most promising option needs for both rules to pass, the larger of the mean
//!   rule's (80% power from the observed standard deviation, [`crate::stats::groups_under_size`])
//!   and the rate rule's (the runs at which the same observed rate is bounded under its budget,
//!   [`crate::stats::runs_under_rate`]), `not reachable` when no option can reach both; with
//!   costs not separated, the groups the cost test of the cheapest two needs at Holm's strictest
//!   level of the condition ([`crate::stats::Spread::runs_needed`]);
//! - a condition whose lowest golden accuracy lies below `golden_min_pct` is `undecided: golden
//!   run at X%`, whatever its runs: a reference that did not learn decides nothing.

use std::collections::BTreeSet;

use resilab_campaign::{Row, Settings};

use crate::measures::{HypothesisTest, acc_points, catastrophic, group_key, mean, means, overhead_pct, paired_means, pairs};
use crate::stats::{ALPHA, Size, groups_under_size, holm, holm_first_level, rate_upper, runs_under_rate, sd, upper_bound};

/// The budgets a choice is held to: the campaign's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rules {
    /// The mean rule's budget: accuracy points (`accuracy_budget_points`).
    pub budget_points: f64,
    /// A run losing more than this many points (or failing) is a catastrophe.
    pub catastrophe_points: f64,
    /// The catastrophe-rate rule's budget, % of runs.
    pub catastrophe_budget_pct: f64,
    /// A condition whose lowest golden accuracy lies below this (%) is undecided.
    pub golden_min_pct: f64,
}

impl Rules {
    /// The rules of a campaign's settings.
    pub fn of(s: &Settings) -> Self {
        Rules {
            budget_points: s.accuracy_budget_points,
            catastrophe_points: s.catastrophe_points,
            catastrophe_budget_pct: s.catastrophe_budget_pct,
            golden_min_pct: s.golden_min_pct,
        }
    }

    /// Catastrophes among `rows` and the one-sided 95% Clopper–Pearson upper bound of their
    /// rate, %; `None` without runs.
    pub(crate) fn catastrophes(&self, rows: &[&Row]) -> Option<(u64, f64)> {
        let k = rows.iter().filter(|r| catastrophic(r, self.catastrophe_points)).count() as u64;
        Some((k, 100.0 * rate_upper(k, rows.len() as u64)?))
    }
}

/// What would decide a condition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Needed {
    /// Nothing: the condition is decided.
    #[default]
    Decided,
    /// This many groups in all (a group: one training seed and repetition, one run of every
    /// option).
    Groups(u64),
    /// No number of groups: the mean accuracy loss or the catastrophe rate is at or above its
    /// budget, the costs observed do not differ at all, or a golden run is under the floor.
    NotReachable,
    /// The runs give no spread to compute it from (fewer than two values on a side).
    Unknown,
}

impl Needed {
    /// As `which_strategy.csv` writes it: empty when decided, the count, `not reachable` or
    /// `n/a`.
    pub fn text(self) -> String {
        match self {
            Needed::Decided => String::new(),
            Needed::Groups(n) => n.to_string(),
            Needed::NotReachable => "not reachable".into(),
            Needed::Unknown => "n/a".into(),
        }
    }
}

/// The generated answer for one condition (a line of `which_strategy.csv`).
#[derive(Clone, Debug, Default)]
pub struct Choice {
    /// The condition.
    pub condition: String,
    /// `lossy_forward` (one option), `reinit = respawn (equal)` (identical in every group),
    /// `lossy_forward = rollback` (costs not separated: undecided), `undecided` (nothing
    /// admissible) or `undecided: golden run at 40.7%` (a golden run under `golden_min_pct`).
    pub choice: String,
    /// Whether the data decide the condition.
    pub decided: bool,
    /// The chosen set, the cheapest mean overhead first; empty when nothing is admissible.
    pub chosen: Vec<String>,
    /// Mean simulated overhead of the cheapest chosen option, %.
    pub sim_overhead: Option<f64>,
    /// Its mean accuracy loss, points.
    pub acc_loss: Option<f64>,
    /// The one-sided 95% upper bound of that loss, points.
    pub acc_loss_upper: Option<f64>,
    /// The fault-free runs' own spread: the largest standard deviation, points, of the final
    /// test accuracies of the condition's golden ensembles (`train.golden_ensemble`), what the
    /// budget on accuracy loss is to be read against; `None` without ensembles.
    pub golden_sd: Option<f64>,
    /// Groups (seed, rep) among the condition's runs.
    pub groups: usize,
    /// Groups a power calculation says would decide an undecided condition.
    pub groups_needed: Needed,
    /// What those groups would decide: `rollback under both budgets (mean rule: 41; rate rule:
    /// met)`, `rollback against lossy_forward`, `a golden run of at least 80%`; empty when
    /// decided.
    pub needed_for: String,
    /// Options not chosen, each with why: `x (upper bound 2.20 > 0.5 pt)`, `x (catastrophes
    /// 1/30: rate bound 14.9% >= 10%)` (both, `; `-separated, when both rules fail), `x (costs
    /// more than y)`.
    pub ruled_out: Vec<String>,
}

/// An admissible option.
struct Candidate<'a> {
    option: &'a str,
    rows: &'a [&'a Row],
    overhead: f64,
    loss: f64,
    upper: f64,
}

/// The option as a candidate when admissible, else why not (as `ruled_out` lists it: every
/// rule it fails, `; `-separated).
fn admit<'a>(option: &'a str, rows: &'a [&'a Row], rules: &Rules) -> std::result::Result<Candidate<'a>, String> {
    let Some((k, rate)) = rules.catastrophes(rows) else {
        return Err(format!("{option} (no runs)"));
    };
    let loss: Vec<f64> = rows.iter().filter_map(|r| acc_points(r)).collect();
    let budget = rules.budget_points;
    let upper = upper_bound(&loss);
    let mut why = Vec::new();
    match upper {
        None => why.push("fewer than 2 accuracy losses".to_string()),
        Some(u) if u >= budget => why.push(format!("upper bound {u:.2} {} {budget} pt", if u > budget { ">" } else { ">=" })),
        Some(_) => {}
    }
    if rate >= rules.catastrophe_budget_pct {
        why.push(format!("catastrophes {k}/{}: rate bound {rate:.1}% >= {}%", rows.len(), rules.catastrophe_budget_pct));
    }
    let cost: Vec<f64> = rows.iter().filter_map(|r| overhead_pct(r)).collect();
    match (upper, cost.is_empty()) {
        (Some(upper), false) if why.is_empty() => Ok(Candidate { option, rows, overhead: mean(&cost), loss: mean(&loss), upper }),
        _ if why.is_empty() => Err(format!("{option} (no overhead)")),
        _ => Err(format!("{option} ({})", why.join("; "))),
    }
}

/// Whether a's and b's runs are identical in every group: the same groups, and in each the same
/// overhead and accuracy loss (every paired difference exactly 0).
fn identical(a: &[&Row], b: &[&Row]) -> bool {
    let p = pairs(a, b);
    let groups = |s: &[&Row]| s.iter().map(|r| group_key(r)).collect::<BTreeSet<_>>().len();
    !p.is_empty()
        && p.len() == groups(a)
        && p.len() == groups(b)
        && p.iter().all(|(x, y)| overhead_pct(x) == overhead_pct(y) && acc_points(x) == acc_points(y))
}

/// b's overhead against a's: paired t where the axis is paired, else Welch.
fn cost(a: &Candidate, b: &Candidate, paired: bool) -> Option<HypothesisTest> {
    if paired { paired_means(overhead_pct, &pairs(a.rows, b.rows)) } else { means(overhead_pct, a.rows, b.rows) }
}

/// The choice in one condition, from its options' runs (grid order), under `rules`; `paired`
/// when the compared axis is.
pub(crate) fn choose(condition: &str, options: &[(String, Vec<&Row>)], rules: &Rules, paired: bool) -> Choice {
    let mut ruled_out = Vec::new();
    let mut admissible = Vec::new();
    for (option, rows) in options {
        match admit(option, rows, rules) {
            Ok(c) => admissible.push(c),
            Err(why) => ruled_out.push(why),
        }
    }
    let groups = options.iter().flat_map(|(_, rs)| rs.iter().map(|r| group_key(r))).collect::<BTreeSet<_>>().len();
    let mut c = Choice { condition: condition.to_string(), groups, ruled_out, ..Choice::default() };
    if admissible.is_empty() {
        nothing_admissible(&mut c, options, rules);
    } else {
        admissible.sort_by(|x, y| x.overhead.total_cmp(&y.overhead));
        separate(&mut c, &admissible, paired);
    }
    let all = || options.iter().flat_map(|(_, rs)| rs.iter());
    c.golden_sd = all().filter_map(|r| r.metrics.golden_ensemble_sd).map(|sd| 100.0 * sd).reduce(f64::max);
    // The reference the losses are measured against: the ensemble's mean where there is one.
    let golden = all().filter_map(|r| r.metrics.golden_ensemble_mean_acc.or(r.metrics.golden_acc)).fold(f64::INFINITY, f64::min);
    if 100.0 * golden < rules.golden_min_pct {
        golden_too_low(&mut c, 100.0 * golden, rules.golden_min_pct);
    }
    c
}

/// A condition whose golden run reached only `golden` % (under `floor`): undecided whatever
/// its runs say, with nothing chosen; no number of groups decides it.
fn golden_too_low(c: &mut Choice, golden: f64, floor: f64) {
    c.choice = format!("undecided: golden run at {golden:.1}%");
    c.decided = false;
    c.chosen.clear();
    (c.sim_overhead, c.acc_loss, c.acc_loss_upper) = (None, None, None);
    c.groups_needed = Needed::NotReachable;
    c.needed_for = format!("a golden run of at least {floor}%");
}

/// The chosen set among the admissible options (cheapest mean overhead first): the cheapest,
/// the options equal to it, and those not shown costlier than it.
fn separate(c: &mut Choice, adm: &[Candidate], paired: bool) {
    let (first, rest) = (&adm[0], &adm[1..]);
    // Identity is observed, not inferred: it holds for runs matched by group whether or not the
    // axis was paired (a condition without faults gives every option the same runs).
    let equal: Vec<bool> = rest.iter().map(|o| identical(first.rows, o.rows)).collect();
    let tests: Vec<(usize, HypothesisTest)> =
        rest.iter().enumerate().filter(|(i, _)| !equal[*i]).filter_map(|(i, o)| Some((i, cost(first, o, paired)?))).collect();
    let adjusted = holm(&tests.iter().map(|(_, t)| t.p).collect::<Vec<_>>());
    let mut costlier = vec![false; rest.len()];
    for ((i, t), p) in tests.iter().zip(&adjusted) {
        if *p < ALPHA && t.diff > 0.0 {
            costlier[*i] = true;
            c.ruled_out.push(format!("{} (costs more than {})", rest[*i].option, first.option));
        }
    }
    let kept: Vec<usize> = (0..rest.len()).filter(|i| !costlier[*i]).collect();
    c.chosen = std::iter::once(first.option).chain(kept.iter().map(|&i| rest[i].option)).map(String::from).collect();
    (c.sim_overhead, c.acc_loss, c.acc_loss_upper) = (Some(first.overhead), Some(first.loss), Some(first.upper));
    let open: Vec<usize> = kept.iter().copied().filter(|&i| !equal[i]).collect();
    c.decided = open.is_empty();
    c.choice = match (c.chosen.len(), c.decided) {
        (1, _) => first.option.to_string(),
        (_, true) => format!("{} (equal)", c.chosen.join(" = ")),
        (_, false) => c.chosen.join(" = "),
    };
    if let Some(&next) = open.first() {
        let level = holm_first_level(tests.len());
        c.groups_needed = match tests.iter().find(|(i, _)| *i == next) {
            Some((_, t)) => t.spread.runs_needed(t.diff.abs(), level).map_or(Needed::NotReachable, Needed::Groups),
            None => Needed::Unknown,
        };
        c.needed_for = format!("{} against {}", rest[next].option, first.option);
    }
}

/// What one rule needs of an option: met now, this many groups (or more than the search,
/// [`crate::stats::MAX_GROUPS`]), or never, with why. The one reading of both rules' needs:
/// `which_strategy.csv`'s "groups needed" and `report --power`'s admissibility table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RuleNeed {
    Met,
    Size(Size),
    Never(String),
}

impl RuleNeed {
    /// As `needed_for` says it: `met`, the count, or `not reachable`.
    fn short(&self) -> String {
        match self {
            RuleNeed::Met => "met".into(),
            RuleNeed::Size(n) => n.to_string(),
            RuleNeed::Never(_) => "not reachable".into(),
        }
    }

    /// The same, with why a rule is never met.
    pub(crate) fn text(&self) -> String {
        match self {
            RuleNeed::Never(why) => format!("not reachable ({why})"),
            other => other.short(),
        }
    }

    /// The groups at which this rule passes: 0 when met now; `None` never or beyond the search.
    fn groups(&self) -> Option<u64> {
        match self {
            RuleNeed::Met => Some(0),
            RuleNeed::Size(n) => n.exactly(),
            RuleNeed::Never(_) => None,
        }
    }
}

/// The mean rule's need of the accuracy losses `loss`: met, the groups at which the upper bound
/// falls under `budget` (80% power at the observed mean and spread), or never (the mean at or
/// above it); `None` with fewer than 2 losses.
pub(crate) fn mean_rule(loss: &[f64], budget: f64) -> Option<RuleNeed> {
    if upper_bound(loss)? < budget {
        return Some(RuleNeed::Met);
    }
    let m = mean(loss);
    Some(match groups_under_size(m, sd(loss)?, budget) {
        Some(n) => RuleNeed::Size(n),
        None => RuleNeed::Never(format!("mean {m:.2} accuracy points is not under the budget")),
    })
}

/// The rate rule's need of `runs` runs with `catastrophes` of them, their rate bounded at
/// `bound` %: met, the runs at which the same observed rate is bounded under its budget, or
/// never (the rate at or above it).
pub(crate) fn rate_rule(catastrophes: u64, runs: u64, bound: f64, rules: &Rules) -> RuleNeed {
    if bound < rules.catastrophe_budget_pct {
        return RuleNeed::Met;
    }
    match runs_under_rate(catastrophes, runs, rules.catastrophe_budget_pct / 100.0) {
        Some(n) => RuleNeed::Size(Size::Exactly(n)),
        None => RuleNeed::Never(format!("{catastrophes} of {runs} runs catastrophic is not under {}%", rules.catastrophe_budget_pct)),
    }
}

/// Nothing admissible: the groups the most promising option needs for both rules to pass (the
/// larger of the two rules' needs; among the options, the fewest), or `not reachable`, naming
/// what each rule needs.
fn nothing_admissible(c: &mut Choice, options: &[(String, Vec<&Row>)], rules: &Rules) {
    c.choice = "undecided".into();
    let mut best: Option<(u64, &str, RuleNeed, RuleNeed)> = None;
    let mut nearest: Option<(f64, &str, RuleNeed, RuleNeed)> = None;
    for (option, rows) in options {
        let loss: Vec<f64> = rows.iter().filter_map(|r| acc_points(r)).collect();
        let (Some((k, bound)), Some(m)) = (rules.catastrophes(rows), mean_rule(&loss, rules.budget_points)) else { continue };
        let r = rate_rule(k, rows.len() as u64, bound, rules);
        if nearest.as_ref().is_none_or(|(x, ..)| mean(&loss) < *x) {
            nearest = Some((mean(&loss), option, m.clone(), r.clone()));
        }
        if let (Some(a), Some(b)) = (m.groups(), r.groups())
            && best.as_ref().is_none_or(|(x, ..)| a.max(b) < *x)
        {
            best = Some((a.max(b), option, m, r));
        }
    }
    let what = |o: &str, m: RuleNeed, r: RuleNeed| format!("{o} under both budgets (mean rule: {}; rate rule: {})", m.short(), r.short());
    (c.groups_needed, c.needed_for) = match (best, nearest) {
        (Some((n, o, m, r)), _) => (Needed::Groups(n), what(o, m, r)),
        (None, Some((_, o, m, r))) => (Needed::NotReachable, what(o, m, r)),
        (None, None) => (Needed::Unknown, "an option with 2 accuracy losses".into()),
    };
}
