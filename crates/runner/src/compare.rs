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
    let (mut rows, mut golden) = (Vec::new(), None);
    for strategy in strategies {
        let mut set = set.to_vec();
        set.push(format!("recovery.strategy=\"{strategy}\""));
        let cfg = RunConfig::load(config, &set)?;
        let out = root.join(strategy);
        eprintln!("resilab: {} under strategy {strategy} -> {}", cfg.model.label(), out.display());
        let s = crate::train(&cfg, &options(&cfg, out))?;
        golden = golden.or(s.golden.clone());
        rows.push(StrategyRow::of(strategy, &s));
    }
    let table = table(&rows, golden.as_ref());
    write(root, &rows, &table)?;
    Ok(table)
}

/// One row of the strategy comparison.
#[derive(Clone, Debug, Serialize)]
pub struct StrategyRow {
    /// Recovery strategy.
    pub strategy: String,
    /// `completed` or `failed`.
    pub status: String,
    /// Final test accuracy.
    pub final_test_acc: f64,
    /// Golden final accuracy minus this run's.
    pub acc_loss_vs_golden: Option<f64>,
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
    /// Measured wall time.
    pub wall_s: f64,
    /// Measured wall-time overhead against the golden run.
    pub time_overhead_vs_golden: Option<f64>,
    /// Overhead in simulated time against the golden run (deterministic with
    /// `parallel.compute.gflops`).
    pub simulated_overhead_vs_golden: Option<f64>,
    /// Steps recomputed per step run.
    pub step_overhead: f64,
}

impl StrategyRow {
    /// The row of a finished run under `strategy`.
    pub fn of(strategy: &str, s: &Summary) -> Self {
        Self {
            strategy: strategy.to_string(),
            status: s.status.clone(),
            final_test_acc: s.final_test_acc,
            acc_loss_vs_golden: s.acc_loss_vs_golden,
            faults: s.faults_injected,
            detections: s.detections.len(),
            restarts: s.restarts.len(),
            steps_lost: s.steps_lost,
            steps_recomputed: s.steps_recomputed,
            collapsed: s.collapsed,
            wall_s: s.wall_s,
            time_overhead_vs_golden: s.time_overhead_vs_golden,
            simulated_overhead_vs_golden: s.simulated_overhead_vs_golden,
            step_overhead: s.steps_recomputed as f64 / s.steps.max(1) as f64,
        }
    }
}

/// The one-screen table of `rows` against `golden`.
pub fn table(rows: &[StrategyRow], golden: Option<&Golden>) -> String {
    let opt = |v: Option<f64>, scale: f64, digits: usize| v.map_or("-".to_string(), |x| format!("{:+.digits$}", x * scale));
    // A failed run's overhead is no cost of recovery: n/a.
    let pct = |v: Option<f64>, digits: usize| v.map_or("n/a".to_string(), |x| format!("{:+.digits$}%", 100.0 * x));
    let mut t = String::new();
    if let Some(g) = golden {
        let sim = g.simulated_s.map_or(String::new(), |s| format!(", simulated {s:.3} s"));
        let _ = writeln!(t, "golden run: test accuracy {:.4}, wall {:.1} s{sim} ({})", g.final_test_acc, g.wall_s, g.dir.display());
    }
    let _ = writeln!(
        t,
        "{:<20} {:<9} {:>8} {:>9} {:>6} {:>6} {:>8} {:>5} {:>7} {:>9} {:>10} {:>9} {:>7} {:>9}",
        "strategy",
        "status",
        "test acc",
        "acc loss",
        "faults",
        "detect",
        "restarts",
        "lost",
        "recomp",
        "collapsed",
        "sim ovh",
        "steps ovh",
        "wall s",
        "wall ovh"
    );
    for r in rows {
        let _ = writeln!(
            t,
            "{:<20} {:<9} {:>8.4} {:>9} {:>6} {:>6} {:>8} {:>5} {:>7} {:>9} {:>10} {:>8.1}% {:>7.1} {:>9}",
            r.strategy,
            r.status,
            r.final_test_acc,
            opt(r.acc_loss_vs_golden, 1.0, 3),
            r.faults,
            r.detections,
            r.restarts,
            r.steps_lost,
            r.steps_recomputed,
            r.collapsed,
            pct(r.simulated_overhead_vs_golden, 2),
            100.0 * r.step_overhead,
            r.wall_s,
            pct(r.time_overhead_vs_golden, 1),
        );
    }
    t
}

/// Writes `strategies.csv` and `table.txt` into `dir`.
pub fn write(dir: &Path, rows: &[StrategyRow], table: &str) -> Result<()> {
    let path = dir.join("strategies.csv");
    let csv_err = |e: csv::Error| Error::Csv { path: path.clone(), source: e };
    let mut w = csv::Writer::from_path(&path).map_err(csv_err)?;
    for r in rows {
        w.serialize(r).map_err(csv_err)?;
    }
    w.flush().map_err(|source| Error::Io { path: path.clone(), source })?;
    crate::write_atomic(&dir.join("table.txt"), table.as_bytes())
}
