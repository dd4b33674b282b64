//! `resilab report --power D`: for every comparison (or hypothesis test) of a campaign's
//! report, what its runs can detect now and the runs per cell it would need to detect a
//! difference of `D` in the metric's unit ([`difference_unit`]: accuracy points, % of the
//! golden run's time, % of runs), at 80% power and Holm's strictest level for the report's
//! family; for a paired hypothesis test, the groups (seed, rep) it needs, t-based from its
//! per-group differences. For a study, then the admissibility rule's power: for each option a
//! condition rules out or leaves undecided, the groups at which its one-sided 95% upper bound
//! of the accuracy loss would fall under the budget, at its observed mean and spread, and those
//! at which its catastrophe rate's one-sided 95% Clopper–Pearson bound would fall under its
//! budget, at the observed rate; the option needs the larger. Every search is bounded
//! ([`crate::stats::MAX_GROUPS`]), so any `D > 0` answers at once.

use std::fmt::Write as _;
use std::path::Path;

use resilab_campaign::{Campaign, Row};

use crate::choice::{RuleNeed, mean_rule, rate_rule};
use crate::measures::{acc_points, mean};
use crate::stats::{Size, Spread, difference_unit, holm_first_level, sd, upper_bound};
use crate::study::{Choice, Rules, Study};
use crate::{Error, Result};

/// One line of the power table.
struct Line {
    what: String,
    metric: &'static str,
    n: (usize, usize),
    spread: Spread,
}

/// The power table of the campaign in `dir` for a difference of `d`. What each comparison
/// detects now is its report's `detectable`: the same spread at the same level, one family of
/// all the lines. A study adds its admissibility table ([`admissibility`]).
pub fn power(dir: &Path, d: f64) -> Result<String> {
    if !(d.is_finite() && d > 0.0) {
        return Err(Error::Power(d));
    }
    let (campaign, rows) = crate::campaign::load(dir)?;
    Ok(match crate::study::study(&campaign, &rows) {
        Some(s) => {
            let lines: Vec<Line> = s
                .tests
                .iter()
                .map(|t| Line {
                    what: format!("{} [{}]", t.hypothesis, t.condition),
                    metric: t.metric,
                    n: (t.n_a, t.n_b),
                    spread: t.spread,
                })
                .collect();
            table(&lines, d) + "\n" + &admissibility(&campaign, &rows, &s)
        }
        None => {
            let lines: Vec<Line> = crate::campaign::pairwise(&campaign, &rows)
                .iter()
                .map(|c| Line {
                    what: format!("{}: {} vs {} ({})", c.axis, c.a, c.b, c.fixed),
                    metric: c.metric,
                    n: (c.n_a, c.n_b),
                    spread: c.spread,
                })
                .collect();
            table(&lines, d)
        }
    })
}

/// What a count of a spread counts: groups for a paired difference, else runs per cell.
fn count_unit(spread: &Spread) -> &'static str {
    if spread.pairs > 0 { "groups" } else { "runs per cell" }
}

fn table(lines: &[Line], d: f64) -> String {
    let level = holm_first_level(lines.len());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Runs per cell (groups, for a paired test) to detect a difference of {d} in each metric's unit (accuracy points; % of golden time: overhead or time as a share of the golden run's; % of runs: a share of the runs) with 80% power at Holm's strictest level for these {} comparisons (0.05/{} = {level:.2e}; from each comparison's own spread: the normal approximation for an unpaired test, the t-based size from the per-group differences' standard deviation for a paired one, searched up to {} and bounded there):\n",
        lines.len(),
        lines.len(),
        crate::stats::MAX_GROUPS
    );
    let _ = writeln!(out, "| comparison | metric | runs (a, b) | detectable now | needed for {d} |");
    let _ = writeln!(out, "|---|---|---|---|---|");
    for l in lines {
        let unit = difference_unit(l.metric);
        let needed = l.spread.size_needed(d, level).map_or_else(|| "n/a".to_string(), |n| format!("{n} {}", count_unit(&l.spread)));
        let now = l.spread.detectable(level);
        let now = if now.is_finite() { format!("{now:.2} {unit}") } else { "n/a".to_string() };
        let _ = writeln!(out, "| {} | {} | {}, {} | {now} | {needed} ({d} {unit}) |", l.what, l.metric, l.n.0, l.n.1);
    }
    if lines.is_empty() {
        let _ = writeln!(out, "| (no comparison: the grid has no axis with two options that both have runs) | | | | |");
    }
    out
}

/// One option of one condition that the study does not settle as its choice, with what its
/// admissibility rests on (accuracy losses of its runs that completed, points; catastrophes and
/// their rate's one-sided 95% Clopper–Pearson bound, %).
struct Unsettled<'a> {
    condition: &'a str,
    option: &'a str,
    why: String,
    runs: usize,
    catastrophes: u64,
    rate_bound: f64,
    loss: Vec<f64>,
}

/// The admissibility rule's power: for each option a condition rules out or leaves undecided,
/// its mean accuracy loss, standard deviation and one-sided 95% upper bound, its catastrophes
/// and their rate's bound, and the groups (runs per option, where the axis is not paired) at
/// which both rules pass: the mean rule's with 80% power at the observed mean and spread
/// ([`groups_under_size`]), the rate rule's at the observed rate ([`runs_under_rate`]), the
/// larger of the two.
fn admissibility(campaign: &Campaign, rows: &[Row], s: &Study) -> String {
    let rules = Rules::of(&campaign.settings);
    let (budget, rate) = (rules.budget_points, rules.catastrophe_budget_pct);
    let axis = campaign.settings.hypotheses.first().map_or("recovery.strategy", |h| h.axis.as_str());
    let count = if campaign.settings.paired_axes().iter().any(|a| a == axis) { "groups" } else { "runs per option" };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Admissibility (an option is admissible when the one-sided 95% upper bound of its mean accuracy loss is under the budget of {budget} accuracy points and the one-sided 95% Clopper–Pearson upper bound of its catastrophe rate, runs that failed or lost more than {} points, is under {rate}% of runs; a failed run counts as a catastrophe): for each option a condition rules out or leaves undecided, the {count} at which both pass: the mean rule's with 80% power (one-sided 0.05, t-based) at the option's observed mean and standard deviation, searched up to {}, the rate rule's at the option's observed catastrophe rate, the larger of the two:\n",
        rules.catastrophe_points,
        crate::stats::MAX_GROUPS
    );
    let _ = writeln!(
        out,
        "| condition | option | why not chosen | runs | mean loss (accuracy points) | sd (accuracy points) | upper bound (accuracy points) | catastrophes | rate bound (% of runs) | {count} for upper bound < {budget} accuracy points and rate bound < {rate}% |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    let groups = crate::study::group(campaign, rows, axis);
    let mut any = false;
    for (condition, options) in &groups {
        let Some(choice) = s.choices.iter().find(|c| &c.condition == condition) else { continue };
        for (option, runs) in options {
            let Some(why) = why_not_chosen(choice, option) else { continue };
            let Some((catastrophes, rate_bound)) = rules.catastrophes(runs) else { continue };
            let loss: Vec<f64> = runs.iter().filter_map(|r| acc_points(r)).collect();
            let u = Unsettled { condition, option, why, runs: runs.len(), catastrophes, rate_bound, loss };
            let _ = writeln!(out, "{}", admission_line(&u, &rules, count));
            any = true;
        }
    }
    if !any {
        let _ = writeln!(out, "| (every condition decided: no option is ruled out or undecided) | | | | | | | | | |");
    }
    out
}

/// Why `option` is not the decided choice of its condition: its `ruled_out` reason, or
/// `undecided` when it is in an undecided chosen set; `None` when the condition's choice is
/// decided and holds it.
fn why_not_chosen(choice: &Choice, option: &str) -> Option<String> {
    if choice.chosen.iter().any(|c| c == option) {
        return (!choice.decided).then(|| "undecided: costs not separated".to_string());
    }
    let prefix = format!("{option} (");
    let reason = choice.ruled_out.iter().find_map(|r| r.strip_prefix(&prefix)).map(|r| r.trim_end_matches(')').to_string());
    Some(reason.unwrap_or_else(|| "ruled out".to_string()))
}

/// The larger of two sizes.
fn larger(a: Size, b: Size) -> Size {
    match (a, b) {
        (Size::Exactly(x), Size::Exactly(y)) => Size::Exactly(x.max(y)),
        (m @ Size::MoreThan(_), _) | (_, m @ Size::MoreThan(_)) => m,
    }
}

/// One line of the admissibility table.
fn admission_line(u: &Unsettled, rules: &Rules, count: &str) -> String {
    let fmt = |x: Option<f64>| x.map_or_else(|| "n/a".to_string(), |x| format!("{x:.2}"));
    let (m, s, upper) = ((!u.loss.is_empty()).then(|| mean(&u.loss)), sd(&u.loss), upper_bound(&u.loss));
    let rate = rate_rule(u.catastrophes, u.runs as u64, u.rate_bound, rules);
    let needed = match mean_rule(&u.loss, rules.budget_points) {
        // Too few losses for the mean rule: the rate rule can still say that nothing will do.
        None => match &rate {
            RuleNeed::Never(_) => format!("not reachable (mean rule: fewer than 2 accuracy losses; rate rule: {})", rate.text()),
            _ => "n/a: fewer than 2 accuracy losses".to_string(),
        },
        Some(RuleNeed::Met) if matches!(rate, RuleNeed::Met) => "admissible now".to_string(),
        Some(mean) => {
            let both = format!("mean rule: {}; rate rule: {}", mean.text(), rate.text());
            match (&mean, &rate) {
                (RuleNeed::Never(_), _) | (_, RuleNeed::Never(_)) => format!("not reachable ({both})"),
                (RuleNeed::Size(a), RuleNeed::Size(b)) => format!("{} {count} ({both})", larger(*a, *b)),
                (RuleNeed::Size(n), RuleNeed::Met) | (RuleNeed::Met, RuleNeed::Size(n)) => format!("{n} {count} ({both})"),
                (RuleNeed::Met, RuleNeed::Met) => "admissible now".to_string(),
            }
        }
    };
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} of {} | {:.1} | {needed} |",
        resilab_text::markdown(u.condition),
        resilab_text::markdown(u.option),
        u.why.replace('|', "\\|"),
        u.runs,
        fmt(m),
        fmt(s),
        fmt(upper),
        u.catastrophes,
        u.runs,
        u.rate_bound
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_asks_four_times_the_runs_for_half_the_difference() {
        let a: Vec<f64> = (0..20).map(|i| f64::from(i % 4)).collect();
        let spread = Spread::of_means(&a, &a).unwrap();
        let line = Line { what: "x".into(), metric: "acc_loss_pts", n: (20, 20), spread };
        let t = table(std::slice::from_ref(&line), 1.0);
        let half = table(&[line], 0.5);
        let runs = |t: &str| {
            let cell = t.lines().last().unwrap().rsplit('|').nth(1).unwrap().trim().to_string();
            assert!(cell.contains(" runs per cell (") && cell.ends_with(" accuracy points)"), "{cell}");
            cell.split(' ').next().unwrap().parse::<u64>().unwrap()
        };
        let (n1, n2) = (runs(&t), runs(&half));
        assert!(n2 >= 4 * n1 - 4 && n2 <= 4 * n1 + 1, "{n1} {n2}\n{t}\n{half}");
        assert!(t.contains("0.05/1") && t.contains(" accuracy points | "), "{t}");
    }

    #[test]
    fn a_tiny_difference_reads_more_than_the_cap_with_its_unit() {
        let d: Vec<f64> = (0..30).map(|i| f64::from(i % 7) * 10.0).collect();
        let line = Line { what: "x".into(), metric: "sim_overhead_pct", n: (30, 30), spread: Spread::of_pairs(&d).unwrap() };
        let t = table(&[line], 1e-9);
        assert!(t.contains("| more than 1000000000 groups (0.000000001 % of golden time) |"), "{t}");
        assert!(t.contains(" % of golden time | more than"), "{t}");
    }

    #[test]
    fn why_an_option_is_not_chosen_comes_from_the_choice() {
        let c = Choice {
            chosen: vec!["rollback".into(), "lossy_forward".into()],
            decided: false,
            ruled_out: vec!["none (failed runs)".into(), "reinit (upper bound 2.20 > 0.5 pt)".into()],
            ..Choice::default()
        };
        assert_eq!(why_not_chosen(&c, "none").unwrap(), "failed runs");
        assert_eq!(why_not_chosen(&c, "reinit").unwrap(), "upper bound 2.20 > 0.5 pt");
        assert_eq!(why_not_chosen(&c, "rollback").unwrap(), "undecided: costs not separated");
        let decided = Choice { decided: true, ..c };
        assert_eq!(why_not_chosen(&decided, "rollback"), None);
    }

    #[test]
    fn an_admission_line_gives_the_groups_under_both_budgets_or_why_none() {
        let rules = Rules { budget_points: 0.5, catastrophe_points: 10.0, catastrophe_budget_pct: 10.0, golden_min_pct: 80.0 };
        let u = |loss: Vec<f64>, runs: usize, k: u64| Unsettled {
            condition: "c",
            option: "o",
            why: "w".into(),
            runs,
            catastrophes: k,
            rate_bound: 100.0 * crate::stats::rate_upper(k, runs as u64).unwrap(),
            loss,
        };
        let needed = |line: &str| line.rsplit('|').nth(1).unwrap().trim().to_string();
        // Mean 0.3, sd 1, 9 runs: its bound above 0.5 now; (1.645 + 0.842)^2 / 0.2^2 = 155 by the
        // normal approximation, a little more t-based. 0 of 9 catastrophes bound the rate at
        // 28%: the rate rule needs 29 runs, fewer than the mean rule.
        let spread: Vec<f64> = (0..9).map(|i| 0.3 + if i % 2 == 0 { 1.0 } else { -1.0 } * if i == 8 { 0.0 } else { 1.0 }).collect();
        let line = admission_line(&u(spread.clone(), 9, 0), &rules, "groups");
        let n: u64 = needed(&line).split(' ').next().unwrap().parse().unwrap();
        assert!(
            (155..165).contains(&n)
                && needed(&line).ends_with(" groups (mean rule: {n}; rate rule: 29)".replace("{n}", &n.to_string()).as_str()),
            "{line}"
        );
        assert!(line.contains("| 0 of 9 | 28.3 |"), "{line}");
        // A failed run no longer rules out by itself: 1 catastrophe in 9 is a rate of 11%, at or
        // above the budget: no number of runs brings its bound under 10%.
        let line = admission_line(&u(spread, 9, 1), &rules, "groups");
        assert!(
            needed(&line).starts_with("not reachable (mean rule: ") && line.contains("rate rule: not reachable (1 of 9 runs catastrophic"),
            "{line}"
        );
        // A small mean, a rare catastrophe: the rate rule alone sets the runs needed.
        let line = admission_line(&u(vec![0.1; 30], 30, 1), &rules, "groups");
        let n = crate::stats::runs_under_rate(1, 30, 0.10).unwrap();
        assert_eq!(needed(&line), format!("{n} groups (mean rule: met; rate rule: {n})"), "{line}");
        assert!(admission_line(&u(vec![0.7, 0.8, 0.6], 30, 0), &rules, "groups").contains("mean 0.70 accuracy points is not under"));
        assert_eq!(needed(&admission_line(&u(vec![0.1, 0.1, 0.1], 30, 0), &rules, "groups")), "admissible now");
        assert!(admission_line(&u(vec![0.1], 30, 0), &rules, "groups").contains("n/a: fewer than 2"));
        // Every run failed: no loss for the mean rule, and a rate no number of runs brings under.
        let all_failed = admission_line(&u(Vec::new(), 30, 30), &rules, "groups");
        assert!(
            needed(&all_failed).starts_with("not reachable (mean rule: fewer than 2 accuracy losses; rate rule: not reachable"),
            "{all_failed}"
        );
    }
}
