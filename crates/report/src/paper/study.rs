//! A study's section, from its report's own files: each option's accuracy loss and overhead
//! per condition (`cells_study.csv`), each stated hypothesis's verdicts (`comparisons.csv`,
//! Holm over the hypotheses' tests) and the generated "which strategy when" table
//! (`which_strategy.csv`).

use std::path::Path;

use serde::Deserialize;

use super::fmt::{num, num_opt};
use super::presets::Preset;
use super::read::{self, bad};
use super::section::{Section, Summary};
use crate::Result;

/// A row of a study's `comparisons.csv`: one hypothesis tested in one condition.
#[derive(Deserialize)]
struct Tested {
    hypothesis: String,
    metric: String,
    a: String,
    b: String,
    verdict: String,
}

/// A row of `cells_study.csv`. A mean's column names its unit (`acc_loss_pts`); its
/// interval's ends follow it (`acc_loss_lo`, `acc_loss_hi`). Reports written since the study
/// recorded the final accuracy and the time to the golden run's accuracy carry those columns
/// too.
#[derive(Default, Deserialize)]
#[serde(default)]
struct StudyCell {
    condition: String,
    option: String,
    runs: String,
    seeds: String,
    failed: String,
    acc_loss_pts: Option<String>,
    acc_loss_lo: Option<String>,
    acc_loss_hi: Option<String>,
    sim_overhead_pct: Option<String>,
    sim_overhead_lo: Option<String>,
    sim_overhead_hi: Option<String>,
    final_acc_pct: Option<String>,
    final_acc_lo: Option<String>,
    final_acc_hi: Option<String>,
    reached: Option<String>,
    reached_lo: Option<String>,
    reached_hi: Option<String>,
    time_to_acc_pct: Option<String>,
    time_to_acc_lo: Option<String>,
    time_to_acc_hi: Option<String>,
}

/// A row of `which_strategy.csv`. Reports written since the choice rule became a
/// non-inferiority bound and a tested cost difference also carry `decided`,
/// `acc_loss_upper_pts`, `groups`, `groups_needed` and `needed_for` (and `chosen`, which the
/// README does not show); earlier ones have only the columns without a default.
#[derive(Deserialize)]
struct Choice {
    condition: String,
    choice: Option<String>,
    sim_overhead_pct: Option<String>,
    acc_loss_pts: Option<String>,
    ruled_out: String,
    #[serde(default)]
    decided: Option<String>,
    #[serde(default)]
    acc_loss_upper_pts: Option<String>,
    #[serde(default)]
    groups: Option<String>,
    #[serde(default)]
    groups_needed: Option<String>,
    #[serde(default)]
    needed_for: Option<String>,
}

/// A mean with its 95% interval, two decimals; `n/a` without a mean.
fn ci(mean: &Option<String>, lo: &Option<String>, hi: &Option<String>) -> String {
    match mean.as_deref().filter(|m| !m.is_empty()) {
        Some(m) => format!("{} [{}, {}]", num(m, 2), num_opt(lo.as_deref(), 2), num_opt(hi.as_deref(), 2)),
        None => "n/a".to_string(),
    }
}

/// The section of the study in `dir`, or `None` where its `comparisons.csv` has no rows.
pub(super) fn section(dir: &Path, preset: &Preset) -> Result<Option<Section>> {
    let comps: Vec<Tested> = read::rows(&dir.join("comparisons.csv"))?;
    if comps.is_empty() {
        return Ok(None);
    }
    let cells_path = dir.join("cells_study.csv");
    let cells: Vec<StudyCell> = read::rows(&cells_path)?;
    let timed = !cells.is_empty() && read::has_column(&cells_path, "time_to_acc_pct")?;
    let mut lines = header(dir, preset)?;
    if timed {
        lines.push("| condition | option | runs | seeds | failed | final acc., % [95%] | acc. loss, points [95%] | reached golden acc. [Wilson 95%] | time to it, % of golden [95%] | sim. overhead, % [95%] |".to_string());
        lines.push("|---|---|---|---|---|---|---|---|---|---|".to_string());
    } else {
        lines.push("| condition | strategy | runs | seeds | failed | acc. loss, points [95%] | sim. overhead, % [95%] |".to_string());
        lines.push("|---|---|---|---|---|---|---|".to_string());
    }
    for c in &cells {
        lines.push(cell_row(c, timed));
    }
    lines.push(String::new());
    lines.push(format!(
        "Hypotheses stated in `configs/paper/{}.toml` before the runs, each tested in every condition; Holm over all {} tests:",
        preset.folder,
        comps.len()
    ));
    lines.push(String::new());
    let verdicts = hypotheses(&comps, &mut lines);
    lines.extend(choices(&read::rows(&dir.join("which_strategy.csv"))?));
    lines.push(super::rests::paragraph(dir, preset.folder)?);
    lines.push(String::new());
    let mut runs = 0u64;
    for c in &cells {
        runs += c.runs.trim().parse::<u64>().map_err(|_| bad(&cells_path, format!("column runs: {:?} is not a count", c.runs)))?;
    }
    let summary = Summary { name: preset.folder.to_string(), published: preset.published.to_string(), runs: runs.to_string(), verdicts };
    Ok(Some(Section { text: lines.join("\n"), summary }))
}

/// The section's title and the line naming what ran, where, and the files.
fn header(dir: &Path, preset: &Preset) -> Result<Vec<String>> {
    let meta = read::meta(dir)?;
    let wall = read::wall(dir)?;
    let name = preset.folder;
    let timeline = if dir.join("plots").join("accuracy_time.png").exists() { ", `plots/accuracy_time.png`" } else { "" };
    Ok(vec![
        format!("## {name}: {}", preset.what),
        String::new(),
        format!(
            "Published: {}. Run in {wall} s on `{}`, started {}, code revision `{}`. Files: `{name}/report.md`, `cells_study.csv`, \
             `comparisons.csv` (the hypotheses' tests), `which_strategy.csv`, `runs.csv`, `plots/pareto_*.png`{timeline}.",
            preset.published,
            meta.platform.as_deref().unwrap_or("?"),
            meta.started.as_deref().unwrap_or("?"),
            meta.revision.as_deref().unwrap_or("?"),
        ),
        String::new(),
    ])
}

/// One option in one condition.
fn cell_row(c: &StudyCell, timed: bool) -> String {
    let head = format!("| {} | {} | {} | {} | {} | ", c.condition, c.option, c.runs, c.seeds, c.failed);
    let loss = ci(&c.acc_loss_pts, &c.acc_loss_lo, &c.acc_loss_hi);
    let overhead = ci(&c.sim_overhead_pct, &c.sim_overhead_lo, &c.sim_overhead_hi);
    if !timed {
        return format!("{head}{loss} | {overhead} |");
    }
    let reached = if c.reached_lo.as_deref().is_some_and(|v| !v.is_empty()) {
        format!(
            "{}/{} [{}, {}%]",
            c.reached.as_deref().unwrap_or_default(),
            c.runs,
            num_opt(c.reached_lo.as_deref(), 1),
            num_opt(c.reached_hi.as_deref(), 1)
        )
    } else {
        "n/a".to_string()
    };
    let final_acc = ci(&c.final_acc_pct, &c.final_acc_lo, &c.final_acc_hi);
    let time = ci(&c.time_to_acc_pct, &c.time_to_acc_lo, &c.time_to_acc_hi);
    format!("{head}{final_acc} | {loss} | {reached} | {time} | {overhead} |")
}

/// Per hypothesis, in the order the file first names them, how its tests came out: a line
/// each, and the summary's (hypothesis, verdict) pairs.
fn hypotheses(comps: &[Tested], lines: &mut Vec<String>) -> Vec<(String, String)> {
    let mut order: Vec<&str> = Vec::new();
    for c in comps {
        if !order.contains(&c.hypothesis.as_str()) {
            order.push(&c.hypothesis);
        }
    }
    let mut verdicts = Vec::new();
    for h in order {
        let rows: Vec<&Tested> = comps.iter().filter(|c| c.hypothesis == h).collect();
        let count = |v: &str| rows.iter().filter(|c| c.verdict == v).count();
        let first = rows[0];
        let v = format!(
            "{} lower in {}, higher in {}, not shown in {} of {}",
            first.b,
            count("b lower"),
            count("b higher"),
            count("not shown"),
            rows.len()
        );
        lines.push(format!("- **{h}** ({}, {} against {}): {v}.", first.metric, first.b, first.a));
        verdicts.push((h.to_string(), v));
    }
    verdicts
}

/// The "which strategy when" table the report generated, in the form its file has: the rule
/// with the non-inferiority bound and tested costs where the file says which conditions are
/// decided, else the earlier rule.
fn choices(choices: &[Choice]) -> Vec<String> {
    if choices.iter().any(|c| c.decided.is_some()) {
        return decided_choices(choices);
    }
    let mut lines = vec![
        String::new(),
        "Which strategy when (generated by the report: the lowest mean overhead among the strategies whose accuracy loss is not shown to exceed the budget):".to_string(),
        String::new(),
        "| condition | choice | sim. overhead % | acc. loss (points) | ruled out |".to_string(),
        "|---|---|---|---|---|".to_string(),
    ];
    for c in choices {
        lines.push(format!(
            "| {} | {} | {} | {} | {} |",
            c.condition,
            c.choice.as_deref().filter(|s| !s.is_empty()).unwrap_or("none qualifies"),
            num_opt(c.sim_overhead_pct.as_deref(), 2),
            num_opt(c.acc_loss_pts.as_deref(), 2),
            c.ruled_out
        ));
    }
    lines.push(String::new());
    lines
}

/// The "which strategy when" table of a report that decides by a non-inferiority bound and a
/// tested cost difference (`which_strategy.csv` with `decided`).
fn decided_choices(choices: &[Choice]) -> Vec<String> {
    let mut lines = vec![
        String::new(),
        "Which strategy when (generated by the report: among the strategies without failed runs whose one-sided 95% upper bound of the accuracy loss is under the budget, the cheapest, with every one not shown to cost more; `undecided` with the groups a power calculation says would decide it):".to_string(),
        String::new(),
        "| condition | choice | sim. overhead % | acc. loss (points) | upper bound (points) | groups | groups needed | ruled out |".to_string(),
        "|---|---|---|---|---|---|---|---|".to_string(),
    ];
    for c in choices {
        let choice = c.choice.as_deref().unwrap_or_default();
        let decided = c.decided.as_deref() == Some("true");
        let shown = if decided || choice == "undecided" { choice.to_string() } else { format!("{choice} (undecided)") };
        let needed = match (c.groups_needed.as_deref().filter(|s| !s.is_empty()), c.needed_for.as_deref()) {
            (Some(n), Some(f)) if !f.is_empty() => format!("{n} ({f})"),
            (Some(n), _) => n.to_string(),
            (None, _) => String::new(),
        };
        lines.push(format!(
            "| {} | {shown} | {} | {} | {} | {} | {needed} | {} |",
            c.condition,
            num_opt(c.sim_overhead_pct.as_deref(), 2),
            num_opt(c.acc_loss_pts.as_deref(), 2),
            num_opt(c.acc_loss_upper_pts.as_deref(), 2),
            c.groups.as_deref().unwrap_or_default(),
            c.ruled_out
        ));
    }
    lines.push(String::new());
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<Choice> {
        csv::Reader::from_reader(text.as_bytes()).deserialize().collect::<std::result::Result<_, _>>().unwrap()
    }

    #[test]
    fn which_strategy_reads_in_the_old_and_the_new_columns() {
        let old = read("condition,choice,sim_overhead_pct,acc_loss_pts,ruled_out\nall,lossy_forward,5.2366,-0.0651,none (loss > 0.5 pt)\n");
        let lines = choices(&old);
        assert!(lines[1].contains("not shown to exceed the budget"), "{lines:?}");
        assert_eq!(lines[5], "| all | lossy_forward | 5.24 | -0.07 | none (loss > 0.5 pt) |");
        let new = read(
            "condition,choice,decided,chosen,sim_overhead_pct,acc_loss_pts,acc_loss_upper_pts,groups,groups_needed,needed_for,ruled_out\n\
             a,lossy_forward = rollback,false,lossy_forward;rollback,5.237,0.010,0.120,30,84,rollback against lossy_forward,none (failed runs)\n\
             b,undecided,false,,,,,30,not reachable,rollback under the budget,none (failed runs)\n",
        );
        let lines = choices(&new);
        assert!(lines[1].contains("one-sided 95% upper bound"), "{lines:?}");
        assert_eq!(
            lines[5],
            "| a | lossy_forward = rollback (undecided) | 5.24 | 0.01 | 0.12 | 30 | 84 (rollback against lossy_forward) | none (failed runs) |"
        );
        assert_eq!(lines[6], "| b | undecided |  |  |  | 30 | not reachable (rollback under the budget) | none (failed runs) |");
    }
}
