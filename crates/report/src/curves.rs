//! A study's test accuracy against simulated time: one panel per condition, one line per option
//! of the hypotheses' axis (at each evaluation, the mean over its runs that evaluated it, drawn
//! at their mean simulated time then: every run, a failed one until it stopped), and the
//! condition's golden runs dashed beneath. A strategy that pays more time shows as a line
//! shifted right; one that loses accuracy, as a line below. Lines identical to another are
//! named in the legend and the caption, since one hides the other.

use std::collections::BTreeMap;
use std::path::Path;

use resilab_campaign::{Campaign, Row};

use crate::Result;
use crate::figures::Figure;
use crate::measures::failed;
use crate::plots::{Interval, LineChart, LineFacets, Series, save};

/// Most panels in one figure (four to a row): more would shrink each below reading size.
const PANELS: usize = 8;

/// A run's evaluations by step: `(simulated seconds, test accuracy)`, the last record of each
/// step (a restart evaluates a step again, later).
type Evaluations = BTreeMap<u64, (f64, f64)>;

/// The evaluations in a run's `metrics.csv`; `None` when it does not read.
fn evaluations(path: &Path) -> Option<Evaluations> {
    let mut rd = csv::Reader::from_path(path).ok()?;
    let h = rd.headers().ok()?.clone();
    let col = |name: &str| h.iter().position(|x| x == name);
    let (s, a, t) = (col("step")?, col("test_acc")?, col("sim_s")?);
    let mut out = Evaluations::new();
    for rec in rd.records().flatten() {
        let num = |i: usize| rec.get(i).and_then(|v| v.parse::<f64>().ok());
        if let (Some(step), Some(acc), Some(sim)) = (rec.get(s).and_then(|v| v.parse::<u64>().ok()), num(a), num(t)) {
            out.insert(step, (sim, acc));
        }
    }
    Some(out)
}

/// The mean curve of `runs`: at each step that any of them evaluated, the mean simulated time
/// and mean accuracy (%) of those that did. A run that failed stops contributing where it
/// stopped, so the line goes on over the runs still training.
fn mean_curve(runs: &[Evaluations]) -> Vec<(f64, f64, Interval)> {
    let mut sum: BTreeMap<u64, (f64, f64, usize)> = BTreeMap::new();
    for r in runs {
        for (step, (t, a)) in r {
            let e = sum.entry(*step).or_default();
            *e = (e.0 + t, e.1 + a, e.2 + 1);
        }
    }
    sum.values().map(|(t, a, n)| (t / *n as f64, 100.0 * a / *n as f64, None)).collect()
}

/// One option's runs in a panel: its name, its position on the axis, its runs' evaluations and
/// how many of those runs failed.
struct Line {
    name: String,
    index: usize,
    runs: Vec<Evaluations>,
    failed: usize,
}

/// One condition's runs: its golden runs' keys and, per option, its runs.
#[derive(Default)]
struct Panel {
    golden: Vec<String>,
    options: Vec<Line>,
}

/// The panels of a study's runs, conditions and options in grid order ([`crate::study::group`]),
/// and how many runs were left out (without a `metrics.csv` that reads).
fn panels(campaign: &Campaign, dir: &Path, rows: &[Row], axis: &str) -> (Vec<(String, Panel)>, usize) {
    let mut kept = 0;
    let mut out = Vec::new();
    for (cond, options) in crate::study::group(campaign, rows, axis) {
        let mut panel = Panel::default();
        for (index, (name, runs)) in options.into_iter().enumerate() {
            let (mut evals, mut failures) = (Vec::new(), 0);
            for r in runs {
                let Some(e) = evaluations(&dir.join("runs").join(&r.id).join("metrics.csv")) else { continue };
                if let Some(k) = r.metrics.golden_key.as_ref().filter(|k| !panel.golden.contains(k)) {
                    panel.golden.push(k.clone());
                }
                failures += usize::from(failed(r));
                evals.push(e);
            }
            kept += evals.len();
            if !evals.is_empty() {
                panel.options.push(Line { name, index, runs: evals, failed: failures });
            }
        }
        out.push((cond, panel));
    }
    (out, rows.len() - kept)
}

/// The chart of one condition.
fn chart(dir: &Path, cond: &str, panel: &Panel) -> LineChart {
    let golden: Vec<Evaluations> =
        panel.golden.iter().filter_map(|k| evaluations(&dir.join("golden").join(k).join("metrics.csv"))).collect();
    let mut series = vec![Series { label: "golden (fault-free)".into(), points: mean_curve(&golden), reference: true, color: None }];
    for line in &panel.options {
        let label = match line.failed {
            0 => line.name.clone(),
            n => format!("{} ({n} of {} failed)", line.name, line.runs.len()),
        };
        series.push(Series { label, points: mean_curve(&line.runs), reference: false, color: Some(line.index) });
    }
    LineChart {
        title: cond.to_string(),
        x_label: "simulated time (s)".into(),
        y_label: "test accuracy (%)".into(),
        series,
        ..LineChart::default()
    }
}

/// `plots/accuracy_time.png` (with more than [`PANELS`] conditions, `accuracy_time_01.png`
/// and on, the conditions shared evenly): the study's test accuracy against simulated time, a panel per condition.
pub(crate) fn accuracy_time(campaign: &Campaign, dir: &Path, rows: &[Row], plots: &Path) -> Result<Vec<Figure>> {
    let Some(axis) = campaign.settings.hypotheses.first().map(|h| h.axis.clone()) else { return Ok(Vec::new()) };
    let (panels, left_out) = panels(campaign, dir, rows, &axis);
    let mut charts: Vec<LineChart> = panels.iter().map(|(c, p)| chart(dir, c, p)).collect();
    charts.retain(|c| c.series.iter().any(|s| !s.reference && !s.points.is_empty()));
    // One accuracy scale for every panel, so that their heights compare.
    let ys = charts.iter().flat_map(|c| c.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
    let y_range = crate::plots::span(ys).map(|(lo, hi)| ((lo - 2.0).max(0.0), (hi + 2.0).min(100.0)));
    for c in &mut charts {
        c.y_range = y_range;
    }
    // As many figures as PANELS requires, the conditions shared evenly among them.
    let per = charts.len().div_ceil(charts.len().div_ceil(PANELS).max(1)).max(1);
    let chunks: Vec<&[LineChart]> = charts.chunks(per).collect();
    let left = match left_out {
        0 => String::new(),
        n => format!("; {n} run(s) left out: not ok, or without metrics.csv"),
    };
    let mut figures = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let stem = if chunks.len() == 1 { "accuracy_time".to_string() } else { format!("accuracy_time_{:02}", i + 1) };
        let part = if chunks.len() == 1 {
            String::new()
        } else {
            format!(" (conditions {}-{} of {})", i * per + 1, i * per + chunk.len(), charts.len())
        };
        let title = format!("Test accuracy against simulated time{part}");
        let columns = if chunk.len() > 6 { 4 } else { chunk.len().min(3) };
        let facets = LineFacets { title, panels: chunk.to_vec(), columns };
        let caption = format!(
            "Test accuracy against simulated time{part}: a panel per condition, each option's mean over its runs at each evaluation they reached (a failed run until it stopped; the legend says how many failed), drawn at their mean simulated time then, the golden runs dashed beneath; each option has its own marker and dashes{left}{}",
            identical_note(chunk)
        );
        figures.push((caption, save(&facets, &plots.join(stem))?));
    }
    Ok(figures)
}

/// The caption's note on lines that lie exactly on another (one hides the other), per panel;
/// empty when none do.
fn identical_note(panels: &[LineChart]) -> String {
    let pairs: Vec<String> = panels
        .iter()
        .flat_map(|c| {
            c.identical_lines().into_iter().map(move |(later, first)| resilab_text::markdown(&format!("{later} = {first} ({})", c.title)))
        })
        .collect();
    match pairs.is_empty() {
        true => String::new(),
        false => format!(". Identical lines, drawn over each other: {}", pairs.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restarted_step_keeps_its_last_evaluation_and_a_run_that_stopped_leaves_the_mean_there() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("metrics.csv");
        std::fs::write(&p, "step,epoch,loss,train_acc,test_acc,test_loss,lr,wall_s,sim_s\n4,0,1,0.5,0.25,1,0.1,0,2\n8,0,1,0.5,,1,0.1,0,4\n4,0,1,0.5,0.5,1,0.1,0,7\n")
            .unwrap();
        let e = evaluations(&p).unwrap();
        assert_eq!(e, Evaluations::from([(4, (7.0, 0.5))]), "the replayed step 4 replaces the first; step 8 has no evaluation");
        let other = Evaluations::from([(4, (3.0, 0.7)), (12, (9.0, 0.9))]);
        let curve = mean_curve(&[e, other]);
        assert_eq!(curve.len(), 2, "step 12 is the other run's, the first stopped before: {curve:?}");
        assert!((curve[0].0 - 5.0).abs() < 1e-12 && (curve[0].1 - 60.0).abs() < 1e-9, "{curve:?}");
        assert!((curve[1].0 - 9.0).abs() < 1e-12 && (curve[1].1 - 90.0).abs() < 1e-9, "{curve:?}");
        assert!(evaluations(&d.path().join("missing.csv")).is_none());
    }
}
