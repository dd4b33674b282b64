//! The detectors' part of a report (`report --detectors`): `detectors.csv`,
//! `detector_choice.csv`, `detector_classes.csv`, their section of `report.md` and
//! `plots/detectors.png` ([`crate::detectors`] scores them).

use std::fmt::Write as _;
use std::path::Path;

use resilab_campaign::{Campaign, Row};

use crate::detectors::{DetectorOptions, Scored, any_digests, choose, classes, load, score_all, spike_window, sweep, verify};
use crate::files::{Written, write};
use crate::format::f;
use crate::plots::{LineChart, LineFacets, Series, save};
use crate::rows::{DetectorChoiceRow, DetectorClassRow, DetectorRow, table};
use crate::{Error, Result};

/// Writes the detectors' files for the runs `rows` of the campaign in `dir` into `out`; returns
/// the section of `report.md` and the plot's figure.
pub(crate) fn write_section(
    dir: &Path,
    campaign: &Campaign,
    rows: &[Row],
    out: &Path,
    opts: &DetectorOptions,
    written: &mut Written,
) -> Result<(String, crate::figures::Figure)> {
    let (faulty, golden) = load(dir, campaign, rows)?;
    if faulty.is_empty() {
        return Err(Error::Csv(format!(
            "--detectors: no run of {} recorded its detectors' signals (set detect.record_signals = true and run the campaign again)",
            dir.display()
        )));
    }
    let (runs, detections) = verify(faulty.iter().map(|f| &f.obs).chain(&golden))?;
    let scored = score_all(&sweep(spike_window(&faulty), any_digests(&faulty)), &faulty, &golden);
    let chosen = choose(&scored, opts.budget_per_1000_steps);
    let by_class = classes(&scored, &chosen);
    written.files.push(write(&out.join("detectors.csv"), &table::<DetectorRow, _>(&[], scored.iter().map(|s| (Vec::new(), &s.row)))?)?);
    written
        .files
        .push(write(&out.join("detector_choice.csv"), &table::<DetectorChoiceRow, _>(&[], chosen.iter().map(|c| (Vec::new(), c)))?)?);
    written
        .files
        .push(write(&out.join("detector_classes.csv"), &table::<DetectorClassRow, _>(&[], by_class.iter().map(|c| (Vec::new(), c)))?)?);
    let figure = plot(&scored, opts.budget_per_1000_steps, &out.join("plots"))?;
    let golden_steps = scored.first().map_or(0, |s| s.row.golden_steps);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "\n## Detectors, scored from recorded signals\n\n{runs} runs' detections (their own and {} golden runs') made again from their `signals.csv` at their own `[detect]` settings: all {detections} agree with those the runs recorded.\n\n{}",
        golden.len(),
        RULE
    );
    let _ = writeln!(
        md,
        "Budget: at most {} false alarm(s) per 1,000 fault-free steps, as a one-sided 95% upper bound over the golden runs' {golden_steps} steps.\n",
        opts.budget_per_1000_steps
    );
    md.push_str(&choice_table(&chosen));
    md.push_str(&class_table(&by_class));
    Ok((md, figure))
}

/// How the detectors are scored, for `report.md`.
const RULE: &str = "Each detector alone, at each setting of its sweep (`detectors.csv`): **recall**, the share of harmed runs (outcome failed, immediate NaN, slow, sharp or sharp-slow degrade, low test accuracy) in which it fired between the first fault and the outcome's onset, with its exact 95% interval; **precision**, the share of harmed runs among those with an alarm at or after the first fault; **false alarms** per 1,000 steps in the golden runs (fault-free) and in the runs whose faults were masked; **latency**, steps from the first fault to the first alarm in the runs caught; **cost**, measured seconds per step (every worker). `detector_choice.csv` gives each detector's setting with the highest recall whose golden false alarms' upper bound meets the budget (`undecided`, with the fault-free steps needed, when only their point estimate does); `detector_classes.csv` what it catches of each outcome class there (docs/metrics.md, \"Detectors, scored\").\n\n";

fn choice_table(chosen: &[DetectorChoiceRow]) -> String {
    let mut md = String::from(
        "| detector | verdict | setting | recall % [95% CI] | false alarms / 1,000 fault-free steps [upper] | latency, median steps | cost per step, µs |\n|---|---|---|---|---|---|---|\n",
    );
    for c in chosen {
        let needed = c.golden_steps_needed.map_or(String::new(), |n| format!(" (needs {n} fault-free steps)"));
        let _ = writeln!(
            md,
            "| {} | {}{needed} | {} | {} [{}, {}] | {} [{}] | {} | {} |",
            c.detector,
            c.verdict,
            c.setting.as_deref().unwrap_or("-"),
            f(c.recall_pct, 1),
            f(c.recall_lo, 1),
            f(c.recall_hi, 1),
            f(c.false_alarms_golden_per_1000_steps, 2),
            f(c.false_alarms_golden_per_1000_steps_hi, 2),
            f(c.latency_median_steps, 1),
            f(c.cost_per_step_s.map(|s| s * 1e6), 1),
        );
    }
    md.push('\n');
    md
}

fn class_table(rows: &[DetectorClassRow]) -> String {
    let mut md = String::from(
        "What each detector catches of each outcome class at that setting (caught / runs; harmed classes: in time):\n\n| detector | setting | outcome | caught | share % [95% CI] |\n|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} / {} | {} [{}, {}] |",
            r.detector,
            r.setting,
            r.outcome.replace('_', " "),
            r.caught,
            r.runs,
            f(r.caught_pct, 1),
            f(r.lo_pct, 1),
            f(r.hi_pct, 1)
        );
    }
    md
}

/// `plots/detectors.png` (and SVG): per detector, recall against the upper bound of its golden
/// false alarms per 1,000 steps (log scale: the bound is never 0; the budget drawn as a
/// reference line), and precision against recall, one point per setting.
fn plot(scored: &[Scored], budget: f64, plots: &Path) -> Result<crate::figures::Figure> {
    std::fs::create_dir_all(plots).map_err(|source| Error::Io { path: plots.to_path_buf(), source })?;
    let detectors: Vec<&str> =
        scored.iter().map(|s| s.row.detector.as_str()).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    let series = |x: &dyn Fn(&DetectorRow) -> Option<f64>, y: &dyn Fn(&DetectorRow) -> Option<f64>| -> Vec<Series> {
        detectors
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let mut points: Vec<(f64, f64, crate::plots::Interval)> =
                    scored.iter().filter(|s| s.row.detector == *d).filter_map(|s| Some((x(&s.row)?, y(&s.row)?, None))).collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
                Series { label: d.replace('_', " "), points, reference: false, color: Some(i) }
            })
            .collect()
    };
    let roc = roc_chart(series(&|r| r.false_alarms_golden_per_1000_steps_hi, &|r| r.recall_pct), budget);
    let pr = LineChart {
        title: "precision against recall".into(),
        x_label: "recall, %".into(),
        y_label: "precision, % of alarmed runs harmed".into(),
        y_range: Some((0.0, 100.0)),
        x_range: Some((0.0, 100.0)),
        series: series(&|r| r.recall_pct, &|r| r.precision_pct),
        ..LineChart::default()
    };
    let title = "Detectors at each setting of their sweep (one point per setting)".to_string();
    let files = save(&LineFacets { title: title.clone(), panels: vec![roc, pr], columns: 2 }, &plots.join("detectors"))?;
    Ok((title, files))
}

/// Recall against the golden false alarms' upper bound, `lines` one per detector, with the budget
/// drawn as a reference line and half a decade of room either side of the points (those at the
/// bound of 0 alarms then stand apart from the budget's line).
fn roc_chart(mut lines: Vec<Series>, budget: f64) -> LineChart {
    lines.push(Series {
        label: format!("budget ({budget})"),
        points: vec![(budget, 0.0, None), (budget, 100.0, None)],
        reference: true,
        color: None,
    });
    let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0)).filter(|x| *x > 0.0);
    let (lo, hi) = xs.fold((f64::INFINITY, 0.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
    LineChart {
        title: "recall against false alarms".into(),
        x_label: "false alarms per 1,000 fault-free steps, 95% upper bound".into(),
        y_label: "recall, % of harmed runs caught in time".into(),
        y_range: Some((0.0, 100.0)),
        log_x: true,
        x_range: (lo <= hi).then(|| (lo.log10() - 0.5, hi.log10() + 0.5)),
        series: lines,
        ..LineChart::default()
    }
}
