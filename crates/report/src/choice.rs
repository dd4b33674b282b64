//! The "which strategy when" rule of a study, the same whatever the compared axis (recovery
//! strategies, permanent-loss policies), per condition:
//!
//! - *admissible*: an option with no failed run whose one-sided 95% upper bound (Student t) of
//!   the mean accuracy loss against the golden run (runs that completed, points) lies below the
//!   campaign's `accuracy_budget_points` (non-inferiority);
//! - *cheaper*: among the admissible options, ordered by mean simulated overhead, an option is
//!   shown costlier than the cheapest when the paired t test of the per-group overhead
//!   differences (where the axis is paired; else Welch's t test) gives p < 0.05 after Holm over
//!   the condition's cost comparisons (the cheapest against each other admissible option);
//! - the chosen set is the cheapest and every admissible option not shown costlier; one member
//!   is the choice; options identical to the cheapest in every group (runs matched by training
//!   seed and repetition, each difference of overhead and accuracy loss exactly 0, whether or not
//!   the axis is paired) are `equal`, never picked by grid order; any other member left in the
//!   set leaves the condition *undecided*;
//! - an undecided condition states the groups a power calculation (80% power, from the observed
//!   standard deviations) says would decide it: with nothing admissible, the groups the most
//!   promising option (no failed run, the fewest groups) needs for its upper bound to fall under
//!   the budget ([`crate::stats::groups_under`]), `not reachable` when every such option's mean
//!   loss is at or above it; with costs not separated, the groups the cost test of the cheapest
//!   two needs at Holm's strictest level of the condition ([`crate::stats::Spread::runs_needed`]).

use std::collections::BTreeSet;

use resilab_campaign::Row;

use crate::measures::{HypothesisTest, acc_points, failed, group_key, mean, means, overhead_pct, paired_means, pairs};
use crate::stats::{ALPHA, groups_under, holm, holm_first_level, sd, upper_bound};

/// What would decide a condition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Needed {
    /// Nothing: the condition is decided.
    #[default]
    Decided,
    /// This many groups in all (a group: one training seed and repetition, one run of every
    /// option).
    Groups(u64),
    /// No number of groups: the mean accuracy loss is at or above the budget, or the costs
    /// observed do not differ at all.
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
    /// `lossy_forward = rollback` (costs not separated: undecided) or `undecided` (nothing
    /// admissible).
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
    /// Groups (seed, rep) among the condition's runs.
    pub groups: usize,
    /// Groups a power calculation says would decide an undecided condition.
    pub groups_needed: Needed,
    /// What those groups would decide: `rollback under the budget`, `rollback against
    /// lossy_forward`; empty when decided.
    pub needed_for: String,
    /// Options not chosen, each with why: `none (failed runs)`, `x (upper bound 2.20 > 0.5 pt)`,
    /// `x (costs more than y)`.
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

/// The option as a candidate when admissible, else why not (as `ruled_out` lists it).
fn admit<'a>(option: &'a str, rows: &'a [&'a Row], budget: f64) -> std::result::Result<Candidate<'a>, String> {
    if rows.is_empty() {
        return Err(format!("{option} (no runs)"));
    }
    if rows.iter().any(|r| failed(r)) {
        return Err(format!("{option} (failed runs)"));
    }
    let loss: Vec<f64> = rows.iter().filter_map(|r| acc_points(r)).collect();
    let Some(upper) = upper_bound(&loss) else {
        return Err(format!("{option} (fewer than 2 accuracy losses)"));
    };
    if upper >= budget {
        let rel = if upper > budget { ">" } else { ">=" };
        return Err(format!("{option} (upper bound {upper:.2} {rel} {budget} pt)"));
    }
    let cost: Vec<f64> = rows.iter().filter_map(|r| overhead_pct(r)).collect();
    if cost.is_empty() {
        return Err(format!("{option} (no overhead)"));
    }
    Ok(Candidate { option, rows, overhead: mean(&cost), loss: mean(&loss), upper })
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

/// The choice in one condition, from its options' runs (grid order), under the accuracy
/// `budget` in points; `paired` when the compared axis is.
pub(crate) fn choose(condition: &str, options: &[(String, Vec<&Row>)], budget: f64, paired: bool) -> Choice {
    let mut ruled_out = Vec::new();
    let mut admissible = Vec::new();
    for (option, rows) in options {
        match admit(option, rows, budget) {
            Ok(c) => admissible.push(c),
            Err(why) => ruled_out.push(why),
        }
    }
    let groups = options.iter().flat_map(|(_, rs)| rs.iter().map(|r| group_key(r))).collect::<BTreeSet<_>>().len();
    let mut c = Choice { condition: condition.to_string(), groups, ruled_out, ..Choice::default() };
    if admissible.is_empty() {
        nothing_admissible(&mut c, options, budget);
    } else {
        admissible.sort_by(|x, y| x.overhead.total_cmp(&y.overhead));
        separate(&mut c, &admissible, paired);
    }
    c
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

/// Nothing admissible: the groups the most promising option needs for its upper bound to fall
/// under the budget (among the options without failed runs, the fewest), or `not reachable`.
fn nothing_admissible(c: &mut Choice, options: &[(String, Vec<&Row>)], budget: f64) {
    c.choice = "undecided".into();
    let mut best: Option<(u64, &str)> = None;
    let mut nearest: Option<(f64, &str)> = None;
    for (option, rows) in options.iter().filter(|(_, rs)| !rs.is_empty() && !rs.iter().any(|r| failed(r))) {
        let loss: Vec<f64> = rows.iter().filter_map(|r| acc_points(r)).collect();
        let Some(s) = sd(&loss) else { continue };
        let m = mean(&loss);
        if nearest.is_none_or(|(x, _)| m < x) {
            nearest = Some((m, option));
        }
        if let Some(n) = groups_under(m, s, budget)
            && best.is_none_or(|(x, _)| n < x)
        {
            best = Some((n, option));
        }
    }
    (c.groups_needed, c.needed_for) = match (best, nearest) {
        (Some((n, o)), _) => (Needed::Groups(n), format!("{o} under the budget")),
        (None, Some((_, o))) => (Needed::NotReachable, format!("{o} under the budget")),
        (None, None) => (Needed::Unknown, "an option without failed runs".into()),
    };
}
