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

/// A row of `which_strategy.csv`.
#[derive(Deserialize)]
struct Choice {
    condition: String,
    choice: Option<String>,
    sim_overhead_pct: Option<String>,
    acc_loss_pts: Option<String>,
    ruled_out: String,
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

/// The "which strategy when" table the report generated.
fn choices(choices: &[Choice]) -> Vec<String> {
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
