//! `resilab report --power D`: for every comparison (or hypothesis test) of a campaign's
//! report, what its runs can detect now and the runs per cell it would need to detect a
//! difference of `D` (the metric's unit: points for rates and accuracy losses, % for
//! overheads), at 80% power and Holm's strictest level for the report's family; for a paired
//! hypothesis test, the groups (seed, rep) it needs, t-based from its per-group differences.

use std::fmt::Write as _;
use std::path::Path;

use crate::stats::{Spread, holm_first_level};
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
/// all the lines.
pub fn power(dir: &Path, d: f64) -> Result<String> {
    if !(d.is_finite() && d > 0.0) {
        return Err(Error::Power(d));
    }
    let (campaign, rows) = crate::campaign::load(dir)?;
    let lines: Vec<Line> = match crate::study::study(&campaign, &rows) {
        Some(s) => s
            .tests
            .iter()
            .map(|t| Line { what: format!("{} [{}]", t.hypothesis, t.condition), metric: t.metric, n: (t.n_a, t.n_b), spread: t.spread })
            .collect(),
        None => crate::campaign::pairwise(&campaign, &rows)
            .iter()
            .map(|c| Line {
                what: format!("{}: {} vs {} ({})", c.axis, c.a, c.b, c.fixed),
                metric: c.metric,
                n: (c.n_a, c.n_b),
                spread: c.spread,
            })
            .collect(),
    };
    Ok(table(&lines, d))
}

fn table(lines: &[Line], d: f64) -> String {
    let level = holm_first_level(lines.len());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Runs per cell (groups, for a paired test) to detect a difference of {d} (the metric's unit) with 80% power at Holm's strictest level for these {} comparisons (0.05/{} = {level:.2e}; from each comparison's own spread: the normal approximation for an unpaired test, the t-based iteration from the per-group differences' standard deviation for a paired one):\n",
        lines.len(),
        lines.len()
    );
    let _ = writeln!(out, "| comparison | metric | runs (a, b) | detectable now | runs per cell for {d} |");
    let _ = writeln!(out, "|---|---|---|---|---|");
    for l in lines {
        let needed = l.spread.runs_needed(d, level).map_or_else(|| "n/a".to_string(), |n| n.to_string());
        let now = l.spread.detectable(level);
        let _ = writeln!(out, "| {} | {} | {}, {} | {now:.2} | {needed} |", l.what, l.metric, l.n.0, l.n.1);
    }
    if lines.is_empty() {
        let _ = writeln!(out, "| (no comparison: the grid has no axis with two options that both have runs) | | | | |");
    }
    out
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
        let runs = |t: &str| t.lines().last().unwrap().rsplit('|').nth(1).unwrap().trim().parse::<u64>().unwrap();
        let (n1, n2) = (runs(&t), runs(&half));
        assert!(n2 >= 4 * n1 - 4 && n2 <= 4 * n1 + 1, "{n1} {n2}\n{t}\n{half}");
        assert!(t.contains("0.05/1"), "{t}");
    }
}
