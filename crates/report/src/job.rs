//! `resilab project` with the accuracy side: the projection for the user's job (resilab-runner),
//! then where the job lies against a committed recovery study (by default
//! `results/paper/recovery`): the study's nearest condition, each strategy's measured accuracy
//! loss and failures there, and each axis on which the job lies outside what the study covered.
//!
//! The study's conditions are its grid: data-parallel workers, the crash rate (each fault
//! label's `system_mtbf_steps`, crashes and weight flips at the same rate) and the rebuild
//! constant. The job's point on the same axes is in its own steps: workers, crashes per step
//! (its step over the system MTBF) and the rebuild in steps. The nearest condition is the one
//! at the least sum of the absolute log-ratios on the three axes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use resilab_runner::RunConfig;
use resilab_runner::project::{self, Request};
use serde::Deserialize;

use crate::paper::read::rows;
use crate::{Error, Result};

/// The projection, then the study section when `study` holds a recovery study.
pub fn answer(cfg: &RunConfig, request: &Request, study: Option<&Path>, json: bool) -> Result<String> {
    let (mut out, projections) = project::report(cfg, request, json)?;
    let (Some(dir), false) = (study, json) else { return Ok(out) };
    if !dir.join("which_strategy.csv").exists() {
        out.push_str(&format!(
            "\n\nNo recovery study in {} (its which_strategy.csv): the accuracy side is not stated; give --study DIR.",
            dir.display()
        ));
        return Ok(out);
    }
    let study = Study::read(dir)?;
    out.push_str(&format!("\n\nThe accuracy side, from the recovery study in {}:\n", dir.display()));
    out.push_str(&study.covered());
    // One point per worker count: its strategies' projections share the step and the MTBF.
    for p in projections.chunk_by(|a, b| a.workers == b.workers).filter_map(|c| c.first()) {
        let point = Point {
            workers: p.workers as f64,
            crashes_per_step: p.step_s / p.system_mtbf_s,
            rebuild_steps: cfg.recovery.rebuild_s / p.step_s,
        };
        out.push_str(&study.against(&point));
    }
    Ok(out.trim_end().to_string())
}

/// A point on the study's axes.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Point {
    workers: f64,
    crashes_per_step: f64,
    rebuild_steps: f64,
}

impl Point {
    /// The sum of absolute log-ratios to `o`.
    fn distance(&self, o: &Point) -> f64 {
        let d = |a: f64, b: f64| (a / b).ln().abs();
        d(self.workers, o.workers) + d(self.crashes_per_step, o.crashes_per_step) + d(self.rebuild_steps, o.rebuild_steps)
    }
}

/// One row of `cells_study.csv`.
#[derive(Clone, Debug, Deserialize)]
struct CellRow {
    condition: String,
    option: String,
    runs: u64,
    failed: u64,
    acc_loss_pts: Option<f64>,
    acc_loss_lo: Option<f64>,
    acc_loss_hi: Option<f64>,
}

/// One row of `which_strategy.csv`.
#[derive(Clone, Debug, Deserialize)]
struct ChoiceRow {
    condition: String,
    choice: String,
    decided: bool,
}

/// A committed recovery study, as its files give it.
struct Study {
    conditions: Vec<(String, Point)>,
    cells: Vec<CellRow>,
    choices: Vec<ChoiceRow>,
    runs: usize,
}

impl Study {
    fn read(dir: &Path) -> Result<Self> {
        let bad = |file: &str, what: String| Error::Paper { path: dir.join(file), what };
        let text = std::fs::read_to_string(dir.join("campaign.toml")).map_err(|e| bad("campaign.toml", e.to_string()))?;
        let campaign: toml::Value = toml::from_str(&text).map_err(|e| bad("campaign.toml", e.to_string()))?;
        let steps = campaign
            .get("base")
            .and_then(|b| b.get("train")?.get("steps")?.as_integer())
            .ok_or_else(|| bad("campaign.toml", "no base.train.steps".into()))?;
        let step_s = study_steps(&dir.join("runs.csv"), steps)?;
        let mtbf = fault_mtbf(&campaign);
        if !dir.join("cells_study.csv").exists() {
            return Err(bad("cells_study.csv", "no such file".into()));
        }
        let cells: Vec<CellRow> = rows(&dir.join("cells_study.csv"))?;
        let choices: Vec<ChoiceRow> = rows(&dir.join("which_strategy.csv"))?;
        // A study without a rebuild axis charges every run its base's rebuild (a cost profile's).
        let campaign = resilab_campaign::Campaign::stored(dir).map_err(|e| bad("campaign.toml", e.to_string()))?;
        let base_rebuild = campaign.run(0).map_err(|e| bad("campaign.toml", e.to_string()))?.config.recovery.rebuild_s;
        let mut conditions: Vec<(String, Point)> = Vec::new();
        for c in &choices {
            let point = condition_point(&c.condition, &mtbf, &step_s, base_rebuild)
                .ok_or_else(|| bad("which_strategy.csv", format!("condition {:?} is not on the study's grid", c.condition)))?;
            conditions.push((c.condition.clone(), point));
        }
        if conditions.is_empty() {
            return Err(bad("which_strategy.csv", "no condition: is this a recovery study?".into()));
        }
        let runs = cells.iter().map(|c| c.runs as usize).sum();
        Ok(Self { conditions, cells, choices, runs })
    }

    /// The least and the greatest of `f` over the study's conditions.
    fn range(&self, f: fn(&Point) -> f64) -> (f64, f64) {
        self.conditions.iter().map(|(_, p)| f(p)).fold((f64::INFINITY, 0.0), |(lo, hi), v| (lo.min(v), hi.max(v)))
    }

    /// What the study covered, in one line.
    fn covered(&self) -> String {
        let (w, c, r) = (self.range(|p| p.workers), self.range(|p| p.crashes_per_step), self.range(|p| p.rebuild_steps));
        format!(
            "  it covered {} runs: {}-{} workers, a crash every {:.0}-{:.0} steps (and as many weight flips), a rebuild of {:.3}-{:.0} steps;\n  its runs meet many faults each, so that accuracy effects show: the losses below are those measured at the nearest condition, not scaled to the job\n",
            self.runs,
            w.0,
            w.1,
            1.0 / c.1,
            1.0 / c.0,
            r.0,
            r.1
        )
    }

    /// The job at `point` against the study: its axes outside the study, the nearest
    /// condition, and each strategy's accuracy there.
    fn against(&self, point: &Point) -> String {
        let mut out = format!(
            "  {} workers: a crash every {:.0} steps, a rebuild of {:.3} steps\n",
            point.workers,
            1.0 / point.crashes_per_step,
            point.rebuild_steps
        );
        for what in self.outside(point) {
            let _ = writeln!(out, "    outside the study: {what}");
        }
        let Some((name, _)) = self.conditions.iter().min_by(|a, b| point.distance(&a.1).total_cmp(&point.distance(&b.1))) else {
            return out;
        };
        let choice = self.choices.iter().find(|c| &c.condition == name);
        let verdict = choice.map_or_else(String::new, |c| format!(": chose {}{}", c.choice, if c.decided { "" } else { " (undecided)" }));
        let _ = writeln!(out, "    nearest condition {name}{verdict}");
        for c in self.cells.iter().filter(|c| &c.condition == name) {
            let loss = match (c.acc_loss_pts, c.acc_loss_lo, c.acc_loss_hi) {
                (Some(m), Some(lo), Some(hi)) => format!("accuracy loss {m:.2} pts [{lo:.2}, {hi:.2}]"),
                _ => "no accuracy loss (every run failed)".into(),
            };
            let _ = writeln!(out, "      {:<19} {loss}, {} of {} runs failed", c.option, c.failed, c.runs);
        }
        out
    }

    /// The axes on which `point` lies outside the study's range, with the factor.
    fn outside(&self, point: &Point) -> Vec<String> {
        let mut out = Vec::new();
        let (lo, hi) = self.range(|p| p.workers);
        if point.workers > hi {
            out.push(format!("{} workers, {:.1}x the most studied ({hi})", point.workers, point.workers / hi));
        } else if point.workers < lo {
            out.push(format!("{} workers, fewer than the fewest studied ({lo})", point.workers));
        }
        let (lo, hi) = self.range(|p| p.crashes_per_step);
        let every = 1.0 / point.crashes_per_step;
        if point.crashes_per_step < lo {
            out.push(format!(
                "a crash every {every:.0} steps, {:.1}x rarer than the rarest studied (every {:.0})",
                lo / point.crashes_per_step,
                1.0 / lo
            ));
        } else if point.crashes_per_step > hi {
            out.push(format!(
                "a crash every {every:.0} steps, {:.1}x more often than the most often studied (every {:.0})",
                point.crashes_per_step / hi,
                1.0 / hi
            ));
        }
        let (lo, hi) = self.range(|p| p.rebuild_steps);
        if point.rebuild_steps > hi || point.rebuild_steps < lo {
            out.push(format!("a rebuild of {} steps, outside the studied {}-{} steps", fmt(point.rebuild_steps), fmt(lo), fmt(hi)));
        }
        out
    }
}

/// Four significant digits.
fn fmt(v: f64) -> String {
    format!("{v:.4}").trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Each fault label's crash MTBF in steps (`grid.fault.<label>`'s crash entry).
fn fault_mtbf(campaign: &toml::Value) -> BTreeMap<String, f64> {
    let Some(faults) = campaign.get("grid").and_then(|g| g.get("fault")).and_then(|f| f.as_table()) else { return BTreeMap::new() };
    faults
        .iter()
        .filter_map(|(label, entries)| {
            let crash = entries.as_array()?.iter().find(|e| e.get("target").and_then(|t| t.as_str()) == Some("crash"))?;
            let m = crash.get("system_mtbf_steps")?;
            Some((label.clone(), m.as_float().or_else(|| m.as_integer().map(|i| i as f64))?))
        })
        .collect()
}

/// The study's fault-free step at each worker count: the golden runs' simulated seconds over
/// their `steps` (checkpoint writes included), from its `runs.csv`.
fn study_steps(runs: &Path, steps: i64) -> Result<BTreeMap<u64, f64>> {
    #[derive(Deserialize)]
    struct Run {
        #[serde(rename = "parallel.workers")]
        workers: u64,
        golden_sim_s: Option<f64>,
    }
    if !runs.exists() {
        return Err(Error::Paper { path: runs.to_path_buf(), what: "no such file: the study's steps come from its golden runs".into() });
    }
    let mut sums: BTreeMap<u64, (f64, u64)> = BTreeMap::new();
    for r in rows::<Run>(runs)? {
        if let Some(g) = r.golden_sim_s {
            let e = sums.entry(r.workers).or_default();
            (e.0, e.1) = (e.0 + g, e.1 + 1);
        }
    }
    Ok(sums.into_iter().map(|(w, (s, n))| (w, s / n as f64 / steps as f64)).collect())
}

/// The point of a condition such as `fault=mtbf 20, parallel.workers=4, recovery.rebuild_s=0.911`;
/// `base_rebuild` where the condition names no rebuild.
fn condition_point(condition: &str, mtbf: &BTreeMap<String, f64>, step_s: &BTreeMap<u64, f64>, base_rebuild: f64) -> Option<Point> {
    let mut parts = BTreeMap::new();
    for part in condition.split(", ") {
        let (k, v) = part.split_once('=')?;
        parts.insert(k, v);
    }
    let workers: u64 = parts.get("parallel.workers")?.parse().ok()?;
    let step = *step_s.get(&workers)?;
    let rebuild: f64 = parts.get("recovery.rebuild_s").map_or(Some(base_rebuild), |r| r.parse().ok())?;
    let m = *mtbf.get(*parts.get("fault")?)?;
    Some(Point { workers: workers as f64, crashes_per_step: 1.0 / m, rebuild_steps: rebuild / step })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_are_read_onto_the_study_axes() {
        let mtbf = BTreeMap::from([("mtbf 20".to_string(), 20.0)]);
        let steps = BTreeMap::from([(4u64, 0.002)]);
        let p = condition_point("fault=mtbf 20, parallel.workers=4, recovery.rebuild_s=0.911", &mtbf, &steps, 1.0);
        assert_eq!(p, Some(Point { workers: 4.0, crashes_per_step: 0.05, rebuild_steps: 455.5 }));
        assert_eq!(condition_point("fault=mtbf 80, parallel.workers=4, recovery.rebuild_s=0.911", &mtbf, &steps, 1.0), None);
        let base = condition_point("fault=mtbf 20, parallel.workers=4", &mtbf, &steps, 0.0261);
        assert_eq!(base.map(|p| p.rebuild_steps), Some(13.05), "the base's rebuild where the grid has none");
        let near = Point { workers: 8.0, crashes_per_step: 0.05, rebuild_steps: 455.5 };
        assert!((near.distance(&p.unwrap_or(near)) - 2f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn the_committed_recovery_study_places_a_large_job_outside_it() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../results/paper/recovery");
        let s = Study::read(&dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.conditions.len(), 9);
        let job = Point { workers: 1024.0, crashes_per_step: 1.0 / 10_000.0, rebuild_steps: 30.0 };
        let text = s.against(&job);
        assert!(text.contains("outside the study: 1024 workers, 64.0x the most studied (16)"), "{text}");
        assert!(text.contains("outside the study: a crash every 10000 steps, 31.2x rarer than the rarest studied (every 320)"), "{text}");
        assert!(text.contains("nearest condition fault=mtbf 320, parallel.workers=16"), "{text}");
        assert!(text.contains("checkpoint_restart") && text.contains("of 30 runs failed"), "{text}");
    }
}
