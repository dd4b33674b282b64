//! `resilab compare`: one configuration under several recovery strategies, as one table
//! (`table.txt`, also printed) and one CSV row per strategy (`strategies.csv`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::golden::Golden;
use crate::{Error, Result, RunConfig, RunOptions, Summary};

/// Trains `config` (with the `set` overrides) once per strategy into `root/<strategy>/`, with
/// the options `options` gives each run and its output directory, then writes the comparison
/// into `root` (`table.txt`, `strategies.csv`) and returns the table. `root` is locked for the
/// whole comparison and may hold nothing but an earlier comparison's files.
pub fn run(
    config: &Path,
    set: &[String],
    strategies: &[String],
    root: &Path,
    options: &dyn Fn(&RunConfig, PathBuf) -> RunOptions,
) -> Result<String> {
    let mut own: Vec<&str> = strategies.iter().map(String::as_str).collect();
    own.extend(["strategies.csv", "table.txt"]);
    let _lock = crate::files::lock_dir(root, "--out")?;
    crate::check_output_dir(root, &own, "--out")?;
    let (mut rows, mut golden, mut test_images) = (Vec::new(), None, 0);
    let mut ensemble: Option<String> = None;
    for strategy in strategies {
        let mut set = set.to_vec();
        set.push(format!("recovery.strategy=\"{strategy}\""));
        let cfg = RunConfig::load(config, &set)?;
        let out = root.join(strategy);
        eprintln!("resilab: {} under strategy {strategy} -> {}", cfg.model.label(), out.display());
        let s = crate::train(&cfg, &options(&cfg, out))?;
        golden = golden.or(s.golden.clone());
        if let (None, Some(accs), Some(mean), Some(sd)) =
            (&ensemble, &s.golden_ensemble_accs_frac, s.golden_ensemble_mean_acc_frac, s.golden_ensemble_sd_frac)
        {
            ensemble = Some(format!(
                "golden ensemble: {} runs differing only in train.reduction_seed, mean test accuracy {:.2}% (SD {:.2} points; the golden run below is its member 0): accuracy losses are against the mean\n",
                accs.len(),
                100.0 * mean,
                100.0 * sd
            ));
        }
        test_images = s.test_images;
        rows.push(StrategyRow::of(strategy, &s));
    }
    let table = ensemble.unwrap_or_default() + &table(&rows, golden.as_ref(), test_images);
    write(root, &rows, &table)?;
    Ok(table)
}

/// One row of the strategy comparison.
#[derive(Clone, Debug, Serialize)]
pub struct StrategyRow {
    /// Recovery strategy.
    pub strategy: String,
    /// `completed` or `failed`.
    pub status: crate::RunStatus,
    /// Final test accuracy, a fraction.
    pub final_test_acc_frac: f64,
    /// Golden final accuracy minus this run's, a fraction: [`acc_loss_frac`], none for a
    /// failed run.
    pub acc_loss_frac: Option<f64>,
    /// Faults that struck.
    pub faults: usize,
    /// Detections.
    pub detections: usize,
    /// Restarts from a checkpoint.
    pub restarts: usize,
    /// Completed steps thrown away.
    pub steps_lost: u64,
    /// Steps computed again.
    pub steps_recomputed: u64,
    /// NaN/Inf in the state or last loss at the end.
    pub collapsed: bool,
    /// The outcome class of the run's curve against the golden run's (docs/metrics.md,
    /// "Outcome classes"); empty without a golden run.
    pub outcome: Option<crate::outcome::Outcome>,
    /// Measured wall time.
    pub wall_s: f64,
    /// Measured wall-time overhead against the golden run, a fraction of its time.
    pub time_overhead_frac: Option<f64>,
    /// Overhead in simulated time against the golden run, a fraction of its time
    /// (deterministic with `parallel.compute.gflops`).
    pub sim_overhead_frac: Option<f64>,
    /// Steps recomputed per step run, a fraction.
    pub step_overhead_frac: f64,
    /// What the strategy did, in order: restarts, rolled-back steps, dropped contributions,
    /// buckets kept after a crash, respawned and re-synchronised ranks.
    pub actions: String,
}

impl StrategyRow {
    /// The row of a finished run under `strategy`.
    pub fn of(strategy: &str, s: &Summary) -> Self {
        Self {
            strategy: strategy.to_string(),
            status: s.status,
            final_test_acc_frac: s.final_test_acc,
            acc_loss_frac: acc_loss_frac(s),
            faults: s.faults.faults_injected,
            detections: s.detections.len(),
            restarts: s.restarts.len(),
            steps_lost: s.steps_lost,
            steps_recomputed: s.steps_recomputed,
            collapsed: s.collapsed,
            outcome: s.outcome,
            wall_s: s.wall_s,
            time_overhead_frac: s.time_overhead_vs_golden,
            sim_overhead_frac: s.simulated_overhead_vs_golden,
            step_overhead_frac: s.steps_recomputed as f64 / s.steps.max(1) as f64,
            actions: actions(s),
        }
    }
}

/// A run's accuracy loss against its golden run, a fraction (`golden - final`), by the rule of
/// every report (docs/metrics.md, "Accuracy loss"): a run that failed (its strategy gave up)
/// has none and counts as a failure; a run that collapsed but completed keeps its loss.
pub fn acc_loss_frac(s: &Summary) -> Option<f64> {
    s.acc_loss_vs_golden.filter(|_| s.status != crate::RunStatus::Failed)
}

/// Actions listed in full; the rest are counted.
const SHOWN_ACTIONS: usize = 4;

/// What a run's strategy did, from its summary: each restart and each decision that changed
/// something, in words, the first [`SHOWN_ACTIONS`] in full.
pub fn actions(s: &Summary) -> String {
    let mut all: Vec<(u64, String)> =
        s.restarts.iter().map(|r| (r.at_step, format!("restarted from step {} at step {}", r.to_step, r.at_step))).collect();
    for d in &s.detections {
        all.extend(decision_text(&d.decision, d.step, d.buckets).into_iter().map(|t| (d.step, t)));
        if d.decision == resilab_recovery::Decision::Fail {
            all.push((d.step, format!("failed at step {} ({})", d.step, d.kind.name().replace('_', " "))));
        }
    }
    all.sort_by_key(|a| a.0);
    if s.status == crate::RunStatus::Failed && !s.detections.iter().any(|d| d.decision == resilab_recovery::Decision::Fail) {
        all.push((u64::MAX, "the run failed".into()));
    }
    let more = all.len().saturating_sub(SHOWN_ACTIONS);
    let mut text: Vec<String> = all.into_iter().take(SHOWN_ACTIONS).map(|a| a.1).collect();
    if more > 0 {
        text.push(format!("{more} more"));
    }
    if text.is_empty() { "nothing".into() } else { text.join("; ") }
}

fn decision_text(d: &resilab_recovery::Decision, step: u64, buckets: Option<[usize; 2]>) -> Vec<String> {
    use resilab_recovery::Decision as D;
    let ranks = |r: &[usize]| r.iter().map(|r| format!("rank {r}")).collect::<Vec<_>>().join(", ");
    match d {
        D::Continue | D::RestartFromCheckpoint | D::FallBackToOlderCheckpoint | D::Fail => Vec::new(),
        D::DropContribution { ranks: r } => match buckets {
            // A crash: the buckets reduced before it hold the crashed rank's gradient.
            Some([k, n]) => vec![format!("kept {k} of {n} buckets of step {step}, reduced the rest without {}", ranks(r))],
            None => vec![format!("dropped {}'s gradient in step {step}", ranks(r))],
        },
        D::RedoStep { without } if without.is_empty() => vec![format!("rolled back and redid step {step}")],
        D::RedoStep { without } => vec![format!("rolled back step {step} and redid it without {}", ranks(without))],
        D::Resync { ranks: r, from, next_step: true } => vec![format!("respawned {} from rank {from}", ranks(r))],
        D::Resync { ranks: r, from, next_step: false } => vec![format!("re-synchronised {} from rank {from} in step {step}", ranks(r))],
        D::Both { steps } => steps.iter().flat_map(|d| decision_text(d, step, buckets)).collect(),
    }
}

/// The one-screen table of `rows` against `golden`, on a test set of `test_images`, with the
/// line that says what this one run suggests and what it cannot decide.
pub fn table(rows: &[StrategyRow], golden: Option<&Golden>, test_images: usize) -> String {
    // Accuracies in percent, losses in points: the units of cells.csv and the reports.
    let pts = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{:+.2}", 100.0 * x));
    // A failed run's overhead is no cost of recovery: n/a.
    let pct = |v: Option<f64>, digits: usize| v.map_or("n/a".to_string(), |x| format!("{:+.digits$}%", 100.0 * x));
    let mut t = String::new();
    if let Some(g) = golden {
        let sim = g.simulated_s.map_or(String::new(), |s| format!(", simulated {s:.3} s"));
        let _ =
            writeln!(t, "golden run: test accuracy {:.2}%, wall {:.1} s{sim} ({})", 100.0 * g.final_test_acc, g.wall_s, g.dir.display());
    }
    let _ = writeln!(
        t,
        "{:<20} {:<9} {:>10} {:>12} {:>6} {:>6} {:>8} {:>5} {:>7} {:>9} {:<18} {:>10} {:>9} {:>7} {:>9}  what it did",
        "strategy",
        "status",
        "test acc %",
        "acc loss pts",
        "faults",
        "detect",
        "restarts",
        "lost",
        "recomp",
        "collapsed",
        "outcome",
        "sim ovh",
        "steps ovh",
        "wall s",
        "wall ovh"
    );
    for r in rows {
        let _ = writeln!(
            t,
            "{:<20} {:<9} {:>10.2} {:>12} {:>6} {:>6} {:>8} {:>5} {:>7} {:>9} {:<18} {:>10} {:>8.1}% {:>7.1} {:>9}  {}",
            r.strategy,
            r.status,
            100.0 * r.final_test_acc_frac,
            pts(r.acc_loss_frac),
            r.faults,
            r.detections,
            r.restarts,
            r.steps_lost,
            r.steps_recomputed,
            r.collapsed,
            r.outcome.map_or("-", |o| o.name()),
            pct(r.sim_overhead_frac, 2),
            100.0 * r.step_overhead_frac,
            r.wall_s,
            pct(r.time_overhead_frac, 1),
            r.actions,
        );
    }
    t + &verdict(rows, test_images)
}

/// The accuracy loss, in points, within which a strategy counts as harmless: the studies'
/// default budget (docs/recovery.md).
pub const BUDGET_POINTS: f64 = 0.5;

/// The cheapest strategy (simulated overhead, else wall overhead) whose run completed with an
/// accuracy loss within [`BUDGET_POINTS`], said as what it is: one run, which decides nothing.
fn verdict(rows: &[StrategyRow], test_images: usize) -> String {
    let cost = |r: &StrategyRow| r.sim_overhead_frac.or(r.time_overhead_frac);
    let within = rows.iter().filter(|r| {
        r.status == crate::RunStatus::Completed && r.acc_loss_frac.is_some_and(|l| 100.0 * l <= BUDGET_POINTS) && cost(r).is_some()
    });
    let image = 100.0 / test_images.max(1) as f64;
    let caveat = format!(
        "One run decides nothing: one test image is {image:.2} points here, and another fault seed strikes elsewhere. To choose, compare them over seeds and faults in a campaign, as configs/paper/recovery.toml does (docs/recovery.md)."
    );
    match within.min_by(|a, b| cost(a).unwrap_or(f64::MAX).total_cmp(&cost(b).unwrap_or(f64::MAX))) {
        Some(r) => format!(
            "On this run, the cheapest strategy within {BUDGET_POINTS} points of the golden accuracy is {} ({} overhead, {} points lost). {caveat}\n",
            r.strategy,
            cost(r).map_or("n/a".into(), |c| format!("{:+.2}%", 100.0 * c)),
            r.acc_loss_frac.map_or("-".into(), |l| format!("{:+.2}", 100.0 * l))
        ),
        None => format!("On this run, no strategy completed within {BUDGET_POINTS} points of the golden accuracy. {caveat}\n"),
    }
}

/// Writes `strategies.csv` and `table.txt` into `dir`.
pub fn write(dir: &Path, rows: &[StrategyRow], table: &str) -> Result<()> {
    let path = dir.join("strategies.csv");
    let csv_err = |e: csv::Error| Error::Csv { path: path.clone(), source: e };
    let file = std::fs::File::create(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
    let mut w = resilab_text::CsvWriter::from_writer(file);
    for r in rows {
        w.serialize(r).map_err(csv_err)?;
    }
    w.flush().map_err(|source| Error::Io { path: path.clone(), source })?;
    crate::write_atomic(&dir.join("table.txt"), table.as_bytes())
}
