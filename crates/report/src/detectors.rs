//! `report --detectors`: every detector scored from the signals the runs recorded
//! (`[detect] record_signals`, each run's `signals.csv`), at a sweep of its thresholds, without
//! training again (docs/metrics.md, "Detectors, scored").
//!
//! First each run's own detections are made again from its signals at its own `[detect]`
//! settings and compared with those it recorded: the report stops at the first run where they
//! differ. Then each detector alone, at each setting of its sweep, is evaluated on every run:
//! - recall: the share of harmed runs (outcome `failed`, `immediate_nan`, `slow_degrade`,
//!   `sharp_slow_degrade`, `sharp_degrade` or `low_test_acc`) in which it fired at a step from the
//!   first fault to the outcome's onset (the step from which the run stayed harmed; its last step
//!   where it has none), with its exact 95% interval;
//! - precision: of the runs with faults in which it fired at or after the first fault, the share
//!   that were harmed;
//! - false alarms per 1,000 steps: steps with an alarm in the golden runs (fault-free), with the
//!   one-sided 95% Clopper–Pearson upper bound, and in the runs whose faults were harmless
//!   (`masked`);
//! - latency: steps from the first fault to the first alarm at or after it, in the harmed runs it
//!   caught;
//! - cost per step: the measured seconds of the device reductions and digests the runs recorded
//!   (per step, every worker), and for the loss checks the seconds this report takes to evaluate
//!   them.
//!
//! Settings are exact for runs whose strategy does not act on a detection (`none`); where a
//! detection made a run redo, re-sync or restart, other settings are evaluated on the trajectory
//! that detection made.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use resilab_campaign::{Campaign, Row};
use resilab_recovery::signals::{SignalCosts, SignalKind, SignalRow, replay, replayable};
use resilab_recovery::{DetectConfig, SpikeConfig};

use crate::rows::{DetectorChoiceRow, DetectorClassRow, DetectorRow};
use crate::{Error, Result};

/// `report --detectors`' settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DetectorOptions {
    /// The false alarms per 1,000 fault-free steps a detector may raise: the chosen setting's
    /// one-sided 95% upper bound must be at or under it.
    pub budget_per_1000_steps: f64,
}

impl Default for DetectorOptions {
    fn default() -> Self {
        Self { budget_per_1000_steps: 1.0 }
    }
}

/// The outcome classes that count as harm.
pub(crate) const HARMED: [&str; 6] = ["failed", "immediate_nan", "slow_degrade", "sharp_slow_degrade", "sharp_degrade", "low_test_acc"];

/// One run's recorded signals and what it detected.
pub(crate) struct Observed {
    /// The run's directory.
    pub(crate) dir: PathBuf,
    detect: DetectConfig,
    pub(crate) rows: Vec<SignalRow>,
    /// `(step, rank, kind)` of each thresholded detection the run recorded.
    detections: Vec<(u64, Option<usize>, String)>,
    costs: Option<SignalCosts>,
    train_s: f64,
}

impl Observed {
    /// Distinct steps with a signal (the steps the run's detectors watched).
    fn steps(&self) -> BTreeSet<u64> {
        self.rows.iter().map(|r| r.step).collect()
    }

    /// Distinct `(step, attempt)` with a signal: the step computations the costs cover.
    fn computations(&self) -> u64 {
        self.rows.iter().map(|r| (r.step, r.attempt)).collect::<BTreeSet<_>>().len() as u64
    }
}

/// A run with faults: its signals and its outcome.
pub(crate) struct Faulty {
    pub(crate) obs: Observed,
    pub(crate) outcome: Option<String>,
    first_fault: Option<u64>,
    onset: Option<u64>,
    last_step: u64,
}

impl Faulty {
    fn harmed(&self) -> bool {
        self.outcome.as_deref().is_some_and(|o| HARMED.contains(&o))
    }
}

/// Reads a run's directory (`summary.json` and `signals.csv`), whose detectors ran at `detect`;
/// `None` when it recorded no signals.
fn observe(dir: &Path, detect: DetectConfig) -> Result<Option<(Observed, serde_json::Value)>> {
    let signals = dir.join(resilab_runner::signals::SIGNALS_CSV);
    if !signals.is_file() {
        return Ok(None);
    }
    let summary = read_json(&dir.join("summary.json"))?;
    let rows = resilab_runner::signals::read(&signals).map_err(|e| Error::Csv(format!("{}: {e}", signals.display())))?;
    let detections = summary["detections"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter_map(|d| {
                    let kind: resilab_recovery::Detection = serde_json::from_value(d["kind"].clone()).ok()?;
                    replayable(kind).then(|| (d["step"].as_u64().unwrap_or(0), d["rank"].as_u64().map(|r| r as usize), kind_name(kind)))
                })
                .collect()
        })
        .unwrap_or_default();
    let costs = serde_json::from_value(summary["signal_costs"].clone()).ok();
    let train_s = summary["train_s"].as_f64().unwrap_or(0.0);
    Ok(Some((Observed { dir: dir.to_path_buf(), detect, rows, detections, costs, train_s }, summary)))
}

fn kind_name(kind: resilab_recovery::Detection) -> String {
    serde_json::to_value(kind).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    serde_json::from_str(&text).map_err(|e| Error::Csv(format!("{}: {e}", path.display())))
}

/// The runs of `rows` (in `dir`'s `runs/`) that recorded signals, and their golden runs (each
/// once: a golden run's directory is looked up under `dir/golden/` by its name first, then at
/// the path its run recorded).
pub(crate) fn load(dir: &Path, campaign: &Campaign, rows: &[Row]) -> Result<(Vec<Faulty>, Vec<Observed>)> {
    let mut faulty = Vec::new();
    let mut golden_dirs: BTreeMap<PathBuf, DetectConfig> = BTreeMap::new();
    for r in rows {
        let config = campaign.run(r.index)?.config;
        let Some((obs, summary)) = observe(&dir.join("runs").join(&r.id), config.detect.clone())? else { continue };
        let mut recorded: Vec<PathBuf> = summary["golden_ensemble_dirs"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_str().map(PathBuf::from)).collect())
            .unwrap_or_default();
        recorded.extend(summary["golden"]["dir"].as_str().map(PathBuf::from));
        for g in recorded {
            let local = g.file_name().map(|n| dir.join("golden").join(n));
            golden_dirs.insert(local.filter(|l| l.is_dir()).unwrap_or(g), resilab_runner::golden::golden_config(&config).detect);
        }
        faulty.push(Faulty {
            obs,
            outcome: summary["outcome"].as_str().map(String::from),
            first_fault: summary["first_fault_step"].as_u64(),
            onset: summary["outcome_onset_step"].as_u64(),
            last_step: summary["steps"].as_u64().unwrap_or(0),
        });
    }
    let mut golden = Vec::new();
    for (g, detect) in golden_dirs {
        golden.extend(observe(&g, detect)?.map(|(o, _)| o));
    }
    Ok((faulty, golden))
}

/// Makes every run's thresholded detections again from its signals at its own settings and
/// compares them with those it recorded; returns how many runs (and detections) agreed, or the
/// first run that disagrees.
pub(crate) fn verify<'a>(runs: impl IntoIterator<Item = &'a Observed>) -> Result<(usize, usize)> {
    let (mut n, mut detections) = (0, 0);
    for obs in runs {
        let again: Vec<(u64, Option<usize>, String)> =
            replay(&obs.rows, &obs.detect).into_iter().map(|a| (a.step, a.rank, kind_name(a.kind))).collect();
        if again != obs.detections {
            let first = again.iter().zip(&obs.detections).position(|(a, b)| a != b).unwrap_or(again.len().min(obs.detections.len()));
            return Err(Error::Csv(format!(
                "{}: its signals give {} detection(s) at its own [detect] settings, it recorded {}; the first difference is detection {}: {:?} against {:?}",
                obs.dir.display(),
                again.len(),
                obs.detections.len(),
                first + 1,
                again.get(first),
                obs.detections.get(first)
            )));
        }
        n += 1;
        detections += again.len();
    }
    Ok((n, detections))
}

/// One detector at one setting of its sweep.
pub(crate) struct Setting {
    pub(crate) detector: &'static str,
    pub(crate) label: String,
    config: DetectConfig,
    /// The recorded costs it pays (`signal_costs` keys) and how many steps share one.
    cost: Option<(&'static [&'static str], f64)>,
}

/// Thresholds of the NaN/Inf-and-magnitude checks (loss, gradients, weights): powers of ten, the
/// default extreme threshold 1e10 among them, and infinity (NaN/Inf only).
const MAGNITUDES: [f64; 8] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e6, 1e10, f64::INFINITY];
/// Loss-spike factors, over a window of [`SPIKE_WINDOW`] losses (or the runs' own window).
const SPIKE_FACTORS: [f64; 7] = [1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0];
const SPIKE_WINDOW: usize = 10;
/// Digest comparison intervals, steps.
const DIGEST_EVERY: [u64; 6] = [1, 2, 4, 8, 16, 32];

/// Every detector's sweep: the loss, gradient and weight checks at [`MAGNITUDES`], the loss spike
/// at [`SPIKE_FACTORS`] over `window` losses, and with digests recorded the divergence check at
/// [`DIGEST_EVERY`].
pub(crate) fn sweep(window: usize, digests: bool) -> Vec<Setting> {
    let off = DetectConfig { nan_loss: false, nan_gradients: false, nan_weights: false, ..DetectConfig::default() };
    let threshold = |t: f64| if t.is_infinite() { "NaN/Inf only".to_string() } else { format!("magnitude > {t:e}") };
    let mut out = Vec::new();
    for t in MAGNITUDES {
        let at = DetectConfig { extreme_threshold: t, ..off.clone() };
        out.push(Setting { detector: "nan_loss", label: threshold(t), config: DetectConfig { nan_loss: true, ..at.clone() }, cost: None });
        let cost = Some((&["gradients"][..], 1.0));
        out.push(Setting {
            detector: "nan_gradients",
            label: threshold(t),
            config: DetectConfig { nan_gradients: true, ..at.clone() },
            cost,
        });
        let cost = Some((&["weights", "optimizer"][..], 1.0));
        out.push(Setting { detector: "nan_weights", label: threshold(t), config: DetectConfig { nan_weights: true, ..at }, cost });
    }
    for f in SPIKE_FACTORS {
        let config = DetectConfig { loss_spike: Some(SpikeConfig { window, factor: f }), ..off.clone() };
        out.push(Setting { detector: "loss_spike", label: format!("loss > {f} x mean of {window}"), config, cost: None });
    }
    if digests {
        for k in DIGEST_EVERY {
            let config = DetectConfig { divergence_every: Some(k), ..off.clone() };
            let cost = Some((&["digests"][..], k as f64));
            out.push(Setting { detector: "replica_divergence", label: format!("every {k} step(s)"), config, cost });
        }
    }
    out.sort_by_key(|s| s.detector);
    out
}

/// The steps at which `setting` fires on `obs`.
fn alarms(obs: &Observed, setting: &Setting) -> BTreeSet<u64> {
    replay(&obs.rows, &setting.config).into_iter().map(|a| a.step).collect()
}

/// What one setting scored, beside its row: per outcome class, the runs and those it caught
/// (harmed: in time; others: any alarm at or after the fault).
pub(crate) struct Scored {
    pub(crate) row: DetectorRow,
    pub(crate) classes: BTreeMap<String, (u64, u64)>,
}

/// Scores `setting` on the runs (see the module's description).
pub(crate) fn score(setting: &Setting, faulty: &[Faulty], golden: &[Observed]) -> Scored {
    let mut row = DetectorRow { detector: setting.detector.to_string(), setting: setting.label.clone(), ..DetectorRow::default() };
    let mut classes: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let (mut latencies, mut alarmed_harmed) = (Vec::new(), 0u64);
    for run in faulty {
        let steps = alarms(&run.obs, setting);
        let Some(fault) = run.first_fault else { continue };
        let after = steps.range(fault..).next().copied();
        let class = classes.entry(run.outcome.clone().unwrap_or_else(|| "unclassified".into())).or_default();
        class.0 += 1;
        row.alarmed += u64::from(after.is_some());
        if run.harmed() {
            row.harmed += 1;
            alarmed_harmed += u64::from(after.is_some());
            let deadline = run.onset.unwrap_or(run.last_step);
            if let Some(s) = after.filter(|s| *s <= deadline) {
                row.recall += 1;
                class.1 += 1;
                latencies.push((s - fault) as f64);
            }
        } else {
            class.1 += u64::from(after.is_some());
        }
        if run.outcome.as_deref() == Some("masked") {
            row.harmless_steps += run.obs.steps().len() as u64;
            row.harmless_alarm_steps += steps.len() as u64;
        }
    }
    for g in golden {
        row.golden_steps += g.steps().len() as u64;
        row.golden_alarm_steps += alarms(g, setting).len() as u64;
    }
    row.fill_rates(alarmed_harmed, &latencies);
    Scored { row, classes }
}

/// Every setting of `sweep` scored, with its measured cost per step.
pub(crate) fn score_all(sweep: &[Setting], faulty: &[Faulty], golden: &[Observed]) -> Vec<Scored> {
    let all: Vec<&Observed> = faulty.iter().map(|f| &f.obs).chain(golden).collect();
    let computations: u64 = all.iter().map(|o| o.computations()).sum();
    let step_s = all.iter().map(|o| o.train_s).sum::<f64>() / computations.max(1) as f64;
    let recorded = |keys: &[&str]| -> f64 {
        let seconds: f64 =
            all.iter().filter_map(|o| o.costs.as_ref()).flat_map(|c| keys.iter().filter_map(|k| c.by_signal.get(*k)).map(|v| v.0)).sum();
        seconds / computations.max(1) as f64
    };
    let mut out = Vec::new();
    for s in sweep {
        let start = Instant::now();
        let mut scored = score(s, faulty, golden);
        let cost = match s.cost {
            Some((keys, per)) => recorded(keys) / per,
            // The loss checks: this report's own evaluation of them, per step computation (the
            // replay goes over every row, so this bounds the check's cost from above).
            None => start.elapsed().as_secs_f64() / computations.max(1) as f64,
        };
        scored.row.cost_per_step_s = (computations > 0).then_some(cost);
        scored.row.cost_share_of_step_pct = (computations > 0 && step_s > 0.0).then(|| 100.0 * cost / step_s);
        out.push(scored);
    }
    out
}

/// The setting of each detector to deploy under a budget of false alarms: of the settings whose
/// golden false-alarm rate's one-sided 95% upper bound is within the budget, the one with the
/// highest recall (ties: the fewest golden alarms, then the sweep's order); `undecided` with the
/// fault-free steps needed when only the point estimate is within it; `none meets` otherwise.
pub(crate) fn choose(scored: &[Scored], budget_per_1000_steps: f64) -> Vec<DetectorChoiceRow> {
    let budget = budget_per_1000_steps / 1000.0;
    let mut out = Vec::new();
    let detectors: Vec<&str> = scored.iter().map(|s| s.row.detector.as_str()).collect::<BTreeSet<_>>().into_iter().collect();
    for d in detectors {
        let of: Vec<&DetectorRow> = scored.iter().map(|s| &s.row).filter(|r| r.detector == d).collect();
        let best = |pick: &dyn Fn(&DetectorRow) -> bool| {
            of.iter()
                .copied()
                .filter(|r| pick(r))
                .max_by(|a, b| a.recall.cmp(&b.recall).then(b.golden_alarm_steps.cmp(&a.golden_alarm_steps)))
        };
        let upper = |r: &DetectorRow| crate::stats::rate_upper(r.golden_alarm_steps, r.golden_steps);
        let within = best(&|r| upper(r).is_some_and(|u| u <= budget));
        let point = best(&|r| r.golden_steps > 0 && (r.golden_alarm_steps as f64 / r.golden_steps as f64) <= budget);
        let (verdict, row, needed) = match (within, point) {
            (Some(r), _) => ("meets", Some(r), None),
            (None, Some(r)) => ("undecided", Some(r), crate::stats::runs_under_rate(r.golden_alarm_steps, r.golden_steps, budget)),
            (None, None) => ("none meets", None, None),
        };
        out.push(DetectorChoiceRow::of(d, verdict, row, needed));
    }
    out
}

/// `detector_classes.csv`'s lines: per detector, at its chosen setting (or, where none meets the
/// budget, at its least alarming one), the runs of each outcome class and those it caught.
pub(crate) fn classes(scored: &[Scored], chosen: &[DetectorChoiceRow]) -> Vec<DetectorClassRow> {
    let mut out = Vec::new();
    for c in chosen {
        let of = scored.iter().filter(|s| s.row.detector == c.detector);
        let pick = match &c.setting {
            Some(label) => of.clone().find(|s| &s.row.setting == label),
            None => of.clone().min_by_key(|s| s.row.golden_alarm_steps),
        };
        let Some(s) = pick else { continue };
        let runs: BTreeMap<String, u64> = s.classes.iter().map(|(k, v)| (k.clone(), v.0)).collect();
        for (outcome, n) in crate::rows::ordered_outcomes(&runs) {
            let caught = s.classes.get(outcome).map_or(0, |v| v.1);
            out.push(DetectorClassRow::of(&s.row, outcome, n, caught));
        }
    }
    out
}

/// The spike window to sweep: the runs' own where they set one (the first met), else
/// [`SPIKE_WINDOW`].
pub(crate) fn spike_window(faulty: &[Faulty]) -> usize {
    faulty.iter().find_map(|f| f.obs.detect.loss_spike.as_ref().map(|s| s.window)).unwrap_or(SPIKE_WINDOW)
}

/// Whether any run recorded its replicas' digests.
pub(crate) fn any_digests(faulty: &[Faulty]) -> bool {
    faulty.iter().any(|f| f.obs.rows.iter().any(|r| r.signal == SignalKind::Digests))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loss(step: u64, value: f64) -> SignalRow {
        SignalRow { step, attempt: 0, rank: 0, micro: None, signal: SignalKind::Loss, value, max_abs: None, scale: None, ranks: None }
    }

    /// A run of `steps` steps whose loss is 1 except `high` at the steps listed.
    fn observed(steps: u64, spikes: &[u64], high: f64) -> Observed {
        let rows = (1..=steps).map(|s| loss(s, if spikes.contains(&s) { high } else { 1.0 })).collect();
        Observed { dir: PathBuf::from("run"), detect: DetectConfig::default(), rows, detections: Vec::new(), costs: None, train_s: 1.0 }
    }

    fn faulty(obs: Observed, outcome: &str, fault: u64, onset: Option<u64>) -> Faulty {
        let last_step = obs.steps().len() as u64;
        Faulty { obs, outcome: Some(outcome.into()), first_fault: Some(fault), onset, last_step }
    }

    fn threshold(t: f64) -> Setting {
        let config = DetectConfig { nan_gradients: false, nan_weights: false, extreme_threshold: t, ..DetectConfig::default() };
        Setting { detector: "nan_loss", label: format!("{t}"), config, cost: None }
    }

    #[test]
    fn recall_counts_alarms_before_the_onset_and_false_alarms_count_steps() {
        let runs = [
            // Caught: an alarm at the fault's step, before the onset.
            faulty(observed(20, &[5], 50.0), "slow_degrade", 5, Some(8)),
            // Too late: the alarm comes after the onset.
            faulty(observed(20, &[12], 50.0), "sharp_degrade", 5, Some(8)),
            // Before the fault: not a detection of it.
            faulty(observed(20, &[2], 50.0), "low_test_acc", 5, None),
            // Harmless, with two alarm steps after its fault.
            faulty(observed(20, &[6, 7], 50.0), "masked", 5, None),
        ];
        let golden = [observed(1000, &[], 0.0), observed(1000, &[300], 50.0)];
        let s = score(&threshold(10.0), &runs, &golden);
        let r = &s.row;
        assert_eq!((r.harmed, r.recall, r.alarmed), (3, 1, 3));
        assert_eq!(r.recall_pct.map(|p| (p * 100.0).round()), Some(3333.0));
        assert_eq!(r.precision_pct.map(|p| (p * 100.0).round()), Some(6667.0), "2 of the 3 alarmed runs were harmed");
        assert_eq!((r.golden_steps, r.golden_alarm_steps, r.harmless_steps, r.harmless_alarm_steps), (2000, 1, 20, 2));
        assert_eq!(r.false_alarms_golden_per_1000_steps, Some(0.5));
        assert_eq!(r.false_alarms_harmless_per_1000_steps, Some(100.0));
        assert_eq!((r.latency_median_steps, r.latency_mean_steps), (Some(0.0), Some(0.0)));
        assert_eq!(s.classes["sharp_degrade"], (1, 0));
        assert_eq!(s.classes["masked"], (1, 1));
        // A threshold above every loss fires nowhere.
        let quiet = score(&threshold(100.0), &runs, &golden);
        assert_eq!((quiet.row.recall, quiet.row.golden_alarm_steps, quiet.row.alarmed), (0, 0, 0));
    }

    #[test]
    fn the_choice_needs_the_upper_bound_within_the_budget() {
        let runs = [faulty(observed(20, &[5], 50.0), "slow_degrade", 5, Some(8))];
        // 0 alarms in 2,000 golden steps: 1.5 per 1,000 bounds the rate, 1 does not.
        let golden = [observed(2000, &[], 0.0)];
        let scored = [score(&threshold(10.0), &runs, &golden), score(&threshold(100.0), &runs, &golden)];
        let loose = choose(&scored, 1.5);
        assert_eq!((loose[0].verdict.as_str(), loose[0].setting.as_deref()), ("meets", Some("10")));
        let tight = choose(&scored, 1.0);
        assert_eq!((tight[0].verdict.as_str(), tight[0].golden_steps_needed), ("undecided", Some(2995)));
        // Every setting alarms at every golden step: none meets any budget under 1,000.
        let noisy = [observed(2000, &(1..=2000).collect::<Vec<_>>(), 50.0)];
        let scored = [score(&threshold(10.0), &runs, &noisy)];
        assert_eq!(choose(&scored, 1.0)[0].verdict, "none meets");
    }

    #[test]
    fn the_sweep_names_each_detector_and_leaves_digests_out_without_them() {
        let names = |d| sweep(10, d).iter().map(|s| s.detector).collect::<BTreeSet<_>>();
        assert_eq!(names(false), ["loss_spike", "nan_gradients", "nan_loss", "nan_weights"].into());
        assert!(names(true).contains("replica_divergence"));
        assert_eq!(sweep(10, true).len(), 3 * MAGNITUDES.len() + SPIKE_FACTORS.len() + DIGEST_EVERY.len());
    }

    #[test]
    fn verify_names_the_run_whose_detections_differ() {
        let mut run = observed(5, &[3], f64::NAN);
        run.detections = vec![(3, Some(0), "non_finite_loss".into())];
        assert_eq!(verify([&run]).unwrap(), (1, 1));
        run.detections.clear();
        let e = verify([&run]).unwrap_err().to_string();
        assert!(e.contains("run") && e.contains("1 detection(s)") && e.contains("it recorded 0"), "{e}");
    }
}
