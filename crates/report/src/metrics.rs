//! The metrics of the soft-error studies per grid cell (docs/metrics.md), with resilab's precise rules.

use std::collections::BTreeMap;

use resilab_campaign::{Metrics, Row, Status};
use serde::Serialize;

pub use crate::stats::Z95;

/// Accuracies closer than this (a fraction) count as equal when a class's boundary is tested,
/// so a run exactly 0.5 points above or below the golden run is treated alike whatever the
/// rounding of its floating-point difference.
pub const ACC_EPS: f64 = 1e-9;

/// How a finished run is classed against its golden run. The classes are disjoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// N-EV by the outcome (see `Metrics::nev`).
    Nev,
    /// Final accuracy at chance level (within 5 points of 1/classes), no N-EV.
    TrainingFailed,
    /// Final accuracy more than 5 points below the golden run's, above chance + 5 points.
    AccuracyReduced,
    /// Final accuracy within the tolerance of the golden run's.
    RestartWithoutChange,
    /// None of the above: changed by more than the tolerance and less than 5 points.
    Other,
}

/// Classes a run from its N-EV flag, final and golden accuracy (fractions), the chance
/// level (1/classes) and the RWC tolerance in points.
pub fn classify(nev: bool, acc: f64, golden: f64, chance: f64, tolerance_points: f64) -> Class {
    if nev {
        Class::Nev
    } else if acc <= chance + 0.05 + ACC_EPS {
        Class::TrainingFailed
    } else if golden - acc > 0.05 + ACC_EPS {
        Class::AccuracyReduced
    } else if (golden - acc).abs() <= tolerance_points / 100.0 + ACC_EPS {
        Class::RestartWithoutChange
    } else {
        Class::Other
    }
}

/// Normal-approximation margin of error at 95% of a proportion `p` estimated from `n` runs
/// (Leveugle et al. 2009, population of possible faults taken as infinite). Used for planning
/// (the worst case, p = 0.5); reported shares use [`crate::stats::wilson`].
pub fn margin(p: f64, n: u64) -> f64 {
    if n == 0 {
        return f64::NAN;
    }
    Z95 * (p * (1.0 - p) / n as f64).sqrt()
}

/// A proportion with its Wilson 95% interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Share {
    /// Runs counted.
    pub count: u64,
    /// Runs it is a share of.
    pub of: u64,
    /// Percent of the runs with a result.
    pub pct: f64,
    /// Lower end of the Wilson 95% interval, percent.
    pub lo_pct: f64,
    /// Upper end, percent.
    pub hi_pct: f64,
}

impl Share {
    /// `count` of `n`.
    pub fn of(count: u64, n: u64) -> Self {
        let p = if n == 0 { f64::NAN } else { count as f64 / n as f64 };
        let (lo, hi) = crate::stats::wilson(count, n).unwrap_or((f64::NAN, f64::NAN));
        Share { count, of: n, pct: 100.0 * p, lo_pct: 100.0 * lo, hi_pct: 100.0 * hi }
    }
}

/// The metrics of one grid cell (seeds and repetitions pooled).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Cell {
    /// Axis key to option label.
    pub coords: BTreeMap<String, String>,
    /// Runs recorded.
    pub runs: u64,
    /// Runs with a result (`ok`); the base of every share.
    pub ok: u64,
    /// Runs without: count per status.
    pub not_ok: BTreeMap<String, u64>,
    /// Training seeds among the `ok` runs.
    pub seeds: u64,
    /// Mean final test accuracy (%) of the runs that did not collapse (ACC).
    pub acc: Option<f64>,
    /// Its sample standard deviation (STD, points).
    pub std: Option<f64>,
    /// STD / ACC (CV).
    pub cv: Option<f64>,
    /// Mean final test accuracy (%) over every `ok` run, collapsed runs counted at chance.
    pub acc_all: Option<f64>,
    /// Mean golden accuracy (%).
    pub golden_acc: Option<f64>,
    /// Data parallel: mean test accuracy (%) of the replica hit, runs that did not collapse.
    pub hit_acc: Option<f64>,
    /// Data parallel: mean over the runs that did not collapse of the lowest replica accuracy (%).
    pub replica_acc_min: Option<f64>,
    /// Data parallel: runs whose replicas differ from rank 0's at the end.
    pub diverged: Share,
    /// Data parallel: mean of the largest replica distance from rank 0.
    pub replica_divergence: Option<f64>,
    /// Runs whose loss or state was NaN/Inf at the end (collapsed).
    pub nan: Share,
    /// N-EV by the outcome.
    pub nev: Share,
    /// Runs whose injection itself wrote a NaN/Inf or extreme value.
    pub ev_injected: Share,
    /// Restart without change.
    pub rwc: Share,
    /// Accuracy reduced.
    pub accr: Share,
    /// Training failed.
    pub tf: Share,
    /// Data parallel: every replica within the tolerance (RWC, AccR and TF on rank 0 above).
    pub rwc_all: Share,
    /// Data parallel: the worst replica's accuracy reduced.
    pub accr_all: Share,
    /// Data parallel: the worst replica at chance.
    pub tf_all: Share,
    /// Runs whose altered checkpoint restarted at another step than its base (a flip in the
    /// step counter): their own class, outside N-EV, RWC, AccR and TF.
    pub step_altered: Share,
    /// Mean steps those runs trained.
    pub step_altered_steps: Option<f64>,
    /// Runs whose altered checkpoint could not be loaded (`corrupt_file`), of those that ran to
    /// a result or met such a file; every other share is of the `ok` runs.
    pub load_failed: Share,
    /// Exact McNemar test of N-EV against EV injected on the same runs: two-sided p.
    pub nev_vs_ev_p: Option<f64>,
    /// Its Holm adjustment over the report's cells.
    pub nev_vs_ev_p_holm: Option<f64>,
    /// `agree` (not shown to differ), `training added` (N-EV above EV injected, shown) or
    /// `training removed`.
    pub nev_vs_ev: String,
    /// Worst-case normal margin of any share of this cell (p = 0.5), points: for planning.
    pub worst_margin_pct: f64,
    /// Mean accuracy loss vs golden (points), [`acc_loss_pts`] over the runs that have one:
    /// those that completed (a failed run has none), collapsed ones included.
    pub acc_loss: Option<f64>,
    /// Mean time overhead vs golden (%), measured wall time, over runs that completed and took
    /// no cached steps ([`wall_overhead_frac`]), where it stands out of the timing noise
    /// ([`beyond_timing_noise`]); none when every run took some, or within the noise.
    pub time_overhead_pct: Option<f64>,
    /// Mean overhead in simulated time vs golden (%), over runs that completed (a failed run has
    /// none, never a negative one).
    pub sim_overhead_pct: Option<f64>,
    /// Mean steps lost.
    pub steps_lost: Option<f64>,
    /// Mean steps recomputed.
    pub steps_recomputed: Option<f64>,
    /// Mean detection latency (steps).
    pub detection_latency: Option<f64>,
    /// Mean step after the restart at which the state first held a NaN/Inf, over the runs where it did.
    pub collapse_step: Option<f64>,
    /// `train` runs: the `ok` runs of each outcome class, by name (docs/metrics.md, "Outcome
    /// classes"); empty for runs recorded before the class.
    pub outcomes: BTreeMap<String, u64>,
}

pub(crate) fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn std(v: &[f64]) -> Option<f64> {
    let m = mean(v)?;
    (v.len() >= 2).then(|| (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64).sqrt())
}

/// The runs of each cell (all coordinates equal), in coordinate order.
pub fn groups(rows: &[Row]) -> BTreeMap<Vec<(String, String)>, Vec<&Row>> {
    let mut groups: BTreeMap<Vec<(String, String)>, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        groups.entry(r.coords.clone().into_iter().collect()).or_default().push(r);
    }
    groups
}

/// Whether a row carries the evidence columns (`param_non_finite` and the rest). Rows of
/// `train` runs, and rows written before resilab recorded the evidence, carry only the
/// worker's own flags, which the report then reads.
fn has_evidence(m: &Metrics) -> bool {
    m.strategy.is_none() && m.param_non_finite.is_some()
}

fn not_finite(x: Option<f64>) -> bool {
    x.is_some_and(|v| !v.is_finite())
}

/// The NaN column, decided from the row's evidence columns alone: a `restart` run ends with a
/// NaN/Inf loss (its last training step's or the test set's) or with a NaN/Inf value in its
/// state; an `eval` run (no `steps`) evaluates to a NaN/Inf loss on the replica hit
/// (`hit_loss`, else `final_loss`).
pub fn collapsed(r: &Row) -> bool {
    let m = &r.metrics;
    if !has_evidence(m) {
        return m.collapsed.unwrap_or(false);
    }
    if m.steps.is_none() {
        return not_finite(m.hit_loss.or(m.final_loss));
    }
    let counts = [m.param_non_finite, m.buffer_non_finite, m.optim_non_finite];
    not_finite(m.final_loss) || not_finite(m.final_train_loss) || counts.iter().any(|c| c.unwrap_or(0) > 0)
}

/// N-EV by the outcome, decided from the row's evidence columns alone (docs/metrics.md): collapsed
/// (see [`collapsed`]), or, for a `restart` run, a finite parameter, buffer or optimizer value
/// above `extreme_threshold` in magnitude at the end.
pub fn nev(r: &Row) -> bool {
    let m = &r.metrics;
    if !has_evidence(m) {
        return m.nev.unwrap_or(false);
    }
    let threshold = m.extreme_threshold.unwrap_or(1e10);
    let largest = [m.param_max_abs, m.buffer_max_abs, m.optim_max_abs].iter().map(|v| v.unwrap_or(0.0)).fold(0.0, f64::max);
    collapsed(r) || (m.steps.is_some() && largest > threshold)
}

/// A flip hit the checkpoint's step counter: the run restarted at another step than its base
/// was written at, so its continuation trained another number of steps (`steps`).
pub fn step_altered(r: &Row) -> bool {
    matches!((r.metrics.base_step, r.metrics.restart_step), (Some(a), Some(b)) if a != b)
}

/// [`classify`] for every replica of a data-parallel run at once, from the lowest and highest
/// replica accuracy: the class of the worst replica, and restart without change only when
/// every replica is within the tolerance.
pub fn classify_replicas(nev: bool, min: f64, max: f64, golden: f64, chance: f64, tolerance_points: f64) -> Class {
    match classify(nev, min, golden, chance, tolerance_points) {
        Class::RestartWithoutChange if (max - golden).abs() > tolerance_points / 100.0 + ACC_EPS => Class::Other,
        k => k,
    }
}

/// The run failed: its strategy gave up (`none` at a crash, a checkpoint-restart with no
/// checkpoint to restart from) or a worker was lost for good. A failed run has no accuracy
/// loss and no overhead; it is counted as a failure (`failed_pct`).
pub fn failed(r: &Row) -> bool {
    r.metrics.failed == Some(true)
}

/// A run's wall-time overhead against its golden run, a fraction (`time_overhead_frac`); none
/// for a run that took cached fault-free steps (`shortcut_prefix_steps` or
/// `shortcut_remainder_steps` above 0: docs/campaigns.md, "Shortcuts"), whose wall time lacks
/// steps the golden run's includes, so that the difference would reflect the cache and not a
/// cost. The report applies it to every row, so re-reporting runs recorded before the runner
/// left it out gives none too, never a negative overhead made by the cache.
///
/// None either where the record cannot say that the run computed what its golden run did: a
/// row recorded before `shortcut_remainder_steps` existed (its prefix column present), whose
/// run may have rejoined the golden trajectory and taken the rest from the cache; and a
/// `restart` run stopped at its collapse (`collapse_step`), whose wall time covers fewer steps
/// than its golden run's.
pub fn wall_overhead_frac(r: &Row) -> Option<f64> {
    let m = &r.metrics;
    let unknown = m.shortcut_prefix_steps.is_some() && m.shortcut_remainder_steps.is_none();
    let cached = m.shortcut_prefix_steps.unwrap_or(0) + m.shortcut_remainder_steps.unwrap_or(0);
    m.time_overhead.filter(|_| cached == 0 && !unknown && m.collapse_step.is_none())
}

/// The mean of a cell's wall-time overheads (%) where it stands out of the timing noise, else
/// `None`. Each overhead compares a run's wall time with its golden run's single timing, taken
/// on a machine shared with the campaign's other worker process: that one timing is a draw from
/// the same noise as the runs'. So the mean is shown only when the golden timing lies outside
/// the 95% prediction interval of one more run drawn as the runs were:
/// `|mean| > t(0.975, n-1) s sqrt(1 + 1/n)`, `s` the runs' standard deviation. With fewer than
/// 2 runs the noise is unknown and nothing is shown. A cell of runs that did the golden run's work (a restart or an
/// eval of the same steps) then reads empty instead of a negative overhead that only the noise
/// made.
///
/// A mean below zero beyond the noise is not shown either: a run that computed every step its
/// golden run did (the rows [`wall_overhead_frac`] keeps) cannot take less time than it, so runs
/// faster than their golden run's one timing say that timing was not taken as theirs were (it ran
/// first, on a cold machine), not that faults saved time.
pub fn beyond_timing_noise(overheads: &[f64]) -> Option<f64> {
    let n = overheads.len();
    let m = mean(overheads)?;
    if n < 2 {
        return None;
    }
    let s = (overheads.iter().map(|o| (o - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
    let half = crate::stats::t_quantile(0.975, (n - 1) as f64) * s * (1.0 + 1.0 / n as f64).sqrt();
    (m > half).then_some(m)
}

/// The accuracy loss of one run against its golden run, in points (`golden - final`): the one
/// definition behind every accuracy loss of a report (`cells.csv`, `report.md`,
/// `cells_study.csv`, `which_strategy.csv`, `comparisons.csv`, the plots) and of `compare`
/// (docs/metrics.md, "Accuracy loss"). Only `ok` runs that completed have one: a failed run has
/// none (it is counted as a failure instead). A run that collapsed but completed keeps its
/// loss, measured at the accuracy it ended with: a collapse is a loss of accuracy, never a
/// reason to leave a run out.
pub fn acc_loss_pts(r: &Row) -> Option<f64> {
    r.metrics.acc_loss.filter(|l| r.status == Status::Ok && !failed(r) && l.is_finite()).map(|l| 100.0 * l)
}

/// Final accuracies (%) of the `ok` runs that did not collapse.
pub fn survivor_accs(rows: &[&Row]) -> Vec<f64> {
    rows.iter().filter(|r| r.status == Status::Ok && !collapsed(r)).filter_map(|r| r.metrics.final_acc).map(|a| 100.0 * a).collect()
}

/// The class counts of one cell's `ok` runs: on rank 0 and, for data-parallel runs, on every
/// replica.
#[derive(Default)]
struct Classes {
    nev: u64,
    rwc: u64,
    accr: u64,
    tf: u64,
    step_altered: u64,
    replicas: u64,
    rwc_all: u64,
    accr_all: u64,
    tf_all: u64,
}

/// A run's class on rank 0 ([`classify`]); `None` when its step counter was altered (a class
/// of its own) or it has no final or golden accuracy.
pub fn run_class(r: &Row, chance: f64, tolerance_points: f64) -> Option<Class> {
    match (r.metrics.final_acc, r.metrics.golden_acc) {
        (Some(acc), Some(golden)) if !step_altered(r) => Some(classify(nev(r), acc, golden, chance, tolerance_points)),
        _ => None,
    }
}

/// A data-parallel run's class on every replica: each replica against the same replica of the
/// fault-free reference ([`classify_each_replica`]) where the row carries both lists, else (rows
/// of earlier revisions) against rank 0's golden accuracy ([`classify_replicas`]); `None` as for
/// [`run_class`], or when its replicas were not evaluated.
pub fn replicas_class(r: &Row, chance: f64, tolerance_points: f64) -> Option<Class> {
    if step_altered(r) {
        return None;
    }
    let m = &r.metrics;
    if let (Some(accs), Some(golden)) = (accs_list(m.replica_accs.as_deref()), accs_list(m.golden_replica_accs.as_deref()))
        && accs.len() == golden.len()
        && !accs.is_empty()
    {
        return Some(classify_each_replica(nev(r), &accs, &golden, chance, tolerance_points));
    }
    match (m.replica_acc_min, m.replica_acc_max, m.golden_acc) {
        (Some(min), Some(max), Some(golden)) => Some(classify_replicas(nev(r), min, max, golden, chance, tolerance_points)),
        _ => None,
    }
}

/// A `;`-list of accuracies; `None` when absent, empty or not all numbers.
fn accs_list(text: Option<&str>) -> Option<Vec<f64>> {
    text.filter(|t| !t.is_empty())?.split(';').map(|x| x.trim().parse::<f64>().ok()).collect()
}

/// The class of a data-parallel run over its replicas, each compared with the same replica of
/// the fault-free reference (`golden`, in rank order): N-EV; training failed when a replica is
/// at chance; accuracy reduced when a replica lost more than 5 points against its own
/// reference; restart without change when every replica is within the tolerance of its own;
/// else other.
pub fn classify_each_replica(nev: bool, accs: &[f64], golden: &[f64], chance: f64, tolerance_points: f64) -> Class {
    let worst = accs.iter().copied().fold(f64::INFINITY, f64::min);
    let drop = accs.iter().zip(golden).map(|(a, g)| g - a).fold(f64::NEG_INFINITY, f64::max);
    let gap = accs.iter().zip(golden).map(|(a, g)| (a - g).abs()).fold(0.0, f64::max);
    if nev {
        Class::Nev
    } else if worst <= chance + 0.05 + ACC_EPS {
        Class::TrainingFailed
    } else if drop > 0.05 + ACC_EPS {
        Class::AccuracyReduced
    } else if gap <= tolerance_points / 100.0 + ACC_EPS {
        Class::RestartWithoutChange
    } else {
        Class::Other
    }
}

fn count_classes(ok: &[&Row], chance: &impl Fn(&Row) -> f64, tolerance_points: f64) -> Classes {
    let mut k = Classes::default();
    for r in ok {
        if step_altered(r) {
            k.step_altered += 1;
            continue;
        }
        match run_class(r, chance(r), tolerance_points) {
            Some(Class::Nev) => k.nev += 1,
            Some(Class::TrainingFailed) => k.tf += 1,
            Some(Class::AccuracyReduced) => k.accr += 1,
            Some(Class::RestartWithoutChange) => k.rwc += 1,
            Some(Class::Other) => {}
            None => k.nev += u64::from(nev(r)),
        }
        match replicas_class(r, chance(r), tolerance_points) {
            Some(Class::TrainingFailed) => k.tf_all += 1,
            Some(Class::AccuracyReduced) => k.accr_all += 1,
            Some(Class::RestartWithoutChange) => k.rwc_all += 1,
            Some(_) => {}
            None => continue,
        }
        k.replicas += 1;
    }
    k
}

/// Groups rows by all their coordinates and computes each cell's metrics. `chance` gives
/// 1/classes of a row's run.
pub fn cells(rows: &[Row], chance: impl Fn(&Row) -> f64, tolerance_points: f64) -> Vec<Cell> {
    let mut out: Vec<Cell> = groups(rows).into_iter().map(|(coords, rows)| cell(coords, &rows, &chance, tolerance_points)).collect();
    let tested: Vec<usize> = (0..out.len()).filter(|&i| out[i].nev_vs_ev_p.is_some()).collect();
    let adjusted = crate::stats::holm(&tested.iter().map(|&i| out[i].nev_vs_ev_p.unwrap_or(1.0)).collect::<Vec<_>>());
    for (&i, p) in tested.iter().zip(adjusted) {
        let c = &mut out[i];
        c.nev_vs_ev_p_holm = Some(p);
        c.nev_vs_ev = match (p < crate::stats::ALPHA, c.nev.count > c.ev_injected.count) {
            (false, _) => "agree".into(),
            (true, true) => "training added".into(),
            (true, false) => "training removed".into(),
        };
    }
    out
}

/// N-EV against EV injected on the same runs: the exact McNemar p of the discordant pairs.
fn nev_vs_ev(ok: &[&Row]) -> Option<f64> {
    let pairs: Vec<(bool, bool)> = ok.iter().filter_map(|r| r.metrics.ev_injected.map(|ev| (nev(r), ev))).collect();
    if pairs.is_empty() {
        return None;
    }
    let only_nev = pairs.iter().filter(|(n, e)| *n && !*e).count() as u64;
    let only_ev = pairs.iter().filter(|(n, e)| !*n && *e).count() as u64;
    Some(crate::stats::mcnemar_exact(only_nev, only_ev))
}

fn cell(coords: Vec<(String, String)>, rows: &[&Row], chance: &impl Fn(&Row) -> f64, tolerance_points: f64) -> Cell {
    let ok: Vec<&Row> = rows.iter().copied().filter(|r| r.status == Status::Ok).collect();
    let mut not_ok = BTreeMap::new();
    for r in rows.iter().filter(|r| r.status != Status::Ok) {
        *not_ok.entry(r.status.name().to_string()).or_insert(0) += 1;
    }
    let n = ok.len() as u64;
    let survivors = survivor_accs(&ok);
    let all: Vec<f64> =
        ok.iter().filter_map(|r| if collapsed(r) { Some(100.0 * chance(r)) } else { r.metrics.final_acc.map(|a| 100.0 * a) }).collect();
    let k = count_classes(&ok, chance, tolerance_points);
    let vals = |f: &dyn Fn(&Row) -> Option<f64>, all: bool| -> Vec<f64> {
        ok.iter().filter(|r| all || !collapsed(r)).filter_map(|r| f(r)).collect()
    };
    let completed = |f: &dyn Fn(&Row) -> Option<f64>| -> Vec<f64> { ok.iter().filter(|r| !failed(r)).filter_map(|r| f(r)).collect() };
    let (acc, sd) = (mean(&survivors), std(&survivors));
    let count = |f: &dyn Fn(&Row) -> bool| ok.iter().filter(|r| f(r)).count() as u64;
    let corrupt = rows.iter().filter(|r| r.status == Status::CorruptFile).count() as u64;
    let step_altered_steps: Vec<f64> = ok.iter().filter(|r| step_altered(r)).filter_map(|r| r.metrics.steps.map(|s| s as f64)).collect();
    Cell {
        coords: coords.into_iter().collect(),
        runs: rows.len() as u64,
        ok: n,
        not_ok,
        seeds: ok.iter().map(|r| r.seed).collect::<std::collections::BTreeSet<_>>().len() as u64,
        acc,
        std: sd,
        cv: match (sd, acc) {
            (Some(s), Some(a)) if a > 0.0 => Some(s / a),
            _ => None,
        },
        acc_all: mean(&all),
        golden_acc: mean(&vals(&|r| r.metrics.golden_acc.map(|g| 100.0 * g), true)),
        hit_acc: mean(&vals(&|r| r.metrics.hit_acc.map(|a| 100.0 * a), false)),
        replica_acc_min: mean(&vals(&|r| r.metrics.replica_acc_min.map(|a| 100.0 * a), false)),
        diverged: Share::of(
            count(&|r| r.metrics.replicas_diverged.is_some_and(|n| n > 0)),
            ok.iter().filter(|r| r.metrics.replicas_diverged.is_some()).count() as u64,
        ),
        replica_divergence: mean(&vals(&|r| r.metrics.replica_divergence.filter(|d| d.is_finite()), false)),
        // Step-altered runs are a class of their own in every numerator (N-EV, RWC, ...), NaN
        // included, so that NaN <= N-EV holds in every cell.
        nan: Share::of(count(&|r| collapsed(r) && !step_altered(r)), n),
        nev: Share::of(k.nev, n),
        ev_injected: Share::of(count(&|r| r.metrics.ev_injected.unwrap_or(false)), n),
        rwc: Share::of(k.rwc, n),
        accr: Share::of(k.accr, n),
        tf: Share::of(k.tf, n),
        rwc_all: Share::of(k.rwc_all, k.replicas),
        accr_all: Share::of(k.accr_all, k.replicas),
        tf_all: Share::of(k.tf_all, k.replicas),
        step_altered: Share::of(k.step_altered, n),
        step_altered_steps: mean(&step_altered_steps),
        load_failed: Share::of(corrupt, n + corrupt),
        nev_vs_ev_p: nev_vs_ev(&ok),
        nev_vs_ev_p_holm: None,
        nev_vs_ev: String::new(),
        worst_margin_pct: 100.0 * margin(0.5, n),
        acc_loss: mean(&ok.iter().filter_map(|r| acc_loss_pts(r)).collect::<Vec<_>>()),
        time_overhead_pct: beyond_timing_noise(&completed(&|r| wall_overhead_frac(r).map(|t| 100.0 * t))),
        sim_overhead_pct: mean(&completed(&|r| r.metrics.sim_overhead.map(|t| 100.0 * t))),
        steps_lost: mean(&vals(&|r| r.metrics.steps_lost.map(|s| s as f64), true)),
        steps_recomputed: mean(&vals(&|r| r.metrics.steps_recomputed.map(|s| s as f64), true)),
        detection_latency: mean(&vals(&|r| r.metrics.detection_latency, true)),
        collapse_step: mean(&vals(&|r| r.metrics.collapse_step.map(|s| s as f64), true)),
        outcomes: outcome_counts(&ok),
    }
}

/// The `ok` runs of each outcome class, by name (runs recorded before the column have none and
/// are not counted).
fn outcome_counts(ok: &[&Row]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for o in ok.iter().filter_map(|r| r.metrics.outcome.as_ref()) {
        *counts.entry(o.clone()).or_insert(0) += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn margins_match_leveugle_planning_figures() {
        // 385 runs give about 5% at p = 0.5, 9,604 about 1%.
        assert!((margin(0.5, 385) - 0.0499).abs() < 2e-4, "{}", margin(0.5, 385));
        assert!((margin(0.5, 9604) - 0.0100).abs() < 1e-4);
        assert_eq!(margin(0.0, 10), 0.0);
    }

    #[test]
    fn classes_follow_the_stated_rules() {
        let c = |nev, acc, golden| classify(nev, acc, golden, 0.1, 0.5);
        assert_eq!(c(true, 0.9, 0.9), Class::Nev);
        assert_eq!(c(false, 0.12, 0.9), Class::TrainingFailed);
        assert_eq!(c(false, 0.16, 0.9), Class::AccuracyReduced);
        assert_eq!(c(false, 0.897, 0.9), Class::RestartWithoutChange);
        assert_eq!(c(false, 0.903, 0.9), Class::RestartWithoutChange);
        assert_eq!(c(false, 0.88, 0.9), Class::Other);
        // 0.5 points below and above are alike, whatever the float difference rounds to.
        let (golden, below, above) = (0.7, 0.7 - 0.005, 0.7 + 0.005);
        assert!((golden - below) > 0.005 || (above - golden) > 0.005, "the boundary case this guards against");
        assert_eq!(c(false, below, golden), Class::RestartWithoutChange);
        assert_eq!(c(false, above, golden), Class::RestartWithoutChange);
    }

    proptest! {
        #[test]
        fn classes_are_disjoint_and_cover(nev: bool, acc in 0.0f64..1.0, golden in 0.0f64..1.0) {
            // Exactly one class, and each class's own condition holds.
            let k = classify(nev, acc, golden, 0.1, 0.5);
            match k {
                Class::Nev => prop_assert!(nev),
                Class::TrainingFailed => prop_assert!(!nev && acc <= 0.15),
                Class::AccuracyReduced => prop_assert!(!nev && acc > 0.15 && golden - acc > 0.05),
                Class::RestartWithoutChange => prop_assert!(!nev && (golden - acc).abs() <= 0.005 + ACC_EPS),
                Class::Other => prop_assert!(!nev && acc > 0.15 && golden - acc <= 0.05 + ACC_EPS && (golden - acc).abs() > 0.005),
            }
        }
    }

    fn row(id: &str, model: &str, status: Status, acc: f64, nev: bool, collapsed: bool) -> Row {
        Row {
            id: id.into(),
            index: 0,
            coords: [("model".to_string(), model.to_string())].into(),
            seed: 1,
            rep: 0,
            status,
            message: None,
            metrics: Metrics {
                final_acc: Some(acc),
                golden_acc: Some(0.8),
                acc_loss: Some(0.8 - acc),
                nev: Some(nev),
                collapsed: Some(collapsed),
                ..Metrics::default()
            },
        }
    }

    #[test]
    fn a_run_that_took_cached_steps_has_no_wall_overhead() {
        let timed = |prefix: u64, remainder: u64, overhead: f64| {
            let mut r = row("a", "r", Status::Ok, 0.8, false, false);
            (r.metrics.shortcut_prefix_steps, r.metrics.shortcut_remainder_steps) = (Some(prefix), Some(remainder));
            r.metrics.time_overhead = Some(overhead);
            r
        };
        // The cache made these runs 60% faster than their golden run: no overhead, not -60%.
        for r in [timed(12, 0, -0.6), timed(0, 3, -0.6)] {
            assert_eq!(wall_overhead_frac(&r), None, "{:?}", r.metrics);
            assert_eq!(cells(&[r], |_| 0.1, 0.5)[0].time_overhead_pct, None);
        }
        // Without cached steps (or rows without the columns) the measured overhead stands.
        let c = cells(&[timed(0, 0, 0.25), timed(0, 0, 0.26), timed(0, 0, 0.24), timed(12, 0, -0.6)], |_| 0.1, 0.5);
        assert!(c[0].time_overhead_pct.is_some_and(|t| (t - 25.0).abs() < 1e-9), "{:?}", c[0].time_overhead_pct);
        let mut old = timed(0, 0, 0.1);
        (old.metrics.shortcut_prefix_steps, old.metrics.shortcut_remainder_steps) = (None, None);
        assert_eq!(wall_overhead_frac(&old), Some(0.1));
        // A prefix column without the remainder's: whether the run took cached steps at its
        // end is unknown, so no overhead.
        let mut unknown = timed(0, 0, -0.6);
        unknown.metrics.shortcut_remainder_steps = None;
        assert_eq!(wall_overhead_frac(&unknown), None);
        // A restart run stopped at its collapse computed fewer steps than its golden run.
        let mut stopped = timed(0, 0, -0.7);
        stopped.metrics.collapse_step = Some(2);
        assert_eq!(wall_overhead_frac(&stopped), None);
    }

    #[test]
    fn cells_pool_runs_and_leave_out_failures_and_collapses() {
        let rows = vec![
            row("a", "r", Status::Ok, 0.8, false, false),
            row("b", "r", Status::Ok, 0.7, false, false),
            row("c", "r", Status::Ok, 0.1, true, true),
            row("d", "r", Status::Timeout, 0.0, false, false),
            row("e", "v", Status::Ok, 0.5, false, false),
        ];
        let cs = cells(&rows, |_| 0.1, 0.5);
        assert_eq!(cs.len(), 2);
        let r = &cs[0];
        assert_eq!((r.runs, r.ok), (4, 3));
        assert_eq!(r.not_ok["timeout"], 1);
        assert!((r.acc.unwrap() - 75.0).abs() < 1e-9);
        assert!((r.std.unwrap() - 50f64.sqrt()).abs() < 1e-9);
        assert_eq!((r.nan.count, r.nev.count, r.rwc.count, r.accr.count), (1, 1, 1, 1));
        assert!((r.nev.pct - 100.0 / 3.0).abs() < 1e-9);
        assert!(r.nev.lo_pct < r.nev.pct && r.nev.hi_pct > r.nev.pct);
        // Over all runs, the collapsed one at chance (10%): (80 + 70 + 10) / 3.
        assert!((r.acc_all.unwrap() - 160.0 / 3.0).abs() < 1e-9);
        // The accuracy loss counts the collapsed run at the accuracy it ended with:
        // (0 + 10 + 70) / 3; the timed-out run has none.
        assert!((r.acc_loss.unwrap() - 80.0 / 3.0).abs() < 1e-9, "{:?}", r.acc_loss);
        assert_eq!(cs[1].accr.count, 1);
    }

    #[test]
    fn a_failed_run_has_no_accuracy_loss_and_a_collapsed_one_that_completed_keeps_its_own() {
        let mut failed_run = row("f", "r", Status::Ok, 0.4, false, true);
        failed_run.metrics.failed = Some(true);
        let collapsed_run = row("c", "r", Status::Ok, 0.25, true, true);
        let mut done = row("d", "r", Status::Ok, 0.8, false, false);
        done.metrics.failed = Some(false);
        assert_eq!(acc_loss_pts(&failed_run), None, "a failed run is a failure, not a loss");
        assert!((acc_loss_pts(&collapsed_run).unwrap() - 55.0).abs() < 1e-9);
        assert_eq!(acc_loss_pts(&done), Some(0.0));
        assert_eq!(acc_loss_pts(&row("t", "r", Status::Timeout, 0.1, false, false)), None);
        let cs = cells(&[failed_run, collapsed_run, done], |_| 0.25, 0.5);
        // (55 + 0) / 2: the cell's loss is the mean of its runs' losses, the failed run left out.
        assert!((cs[0].acc_loss.unwrap() - 27.5).abs() < 1e-9, "{:?}", cs[0].acc_loss);
    }

    #[test]
    fn each_replica_is_judged_against_its_own_reference() {
        let c = |accs: &[f64], golden: &[f64]| classify_each_replica(false, accs, golden, 0.1, 0.5);
        // Replicas with their own BatchNorm statistics sit apart already without a fault: each
        // within 0.5 points of its own reference is a restart without change, though replica 1
        // is 8 points below rank 0's.
        assert_eq!(c(&[0.80, 0.72], &[0.80, 0.722]), Class::RestartWithoutChange);
        assert_eq!(classify_replicas(false, 0.72, 0.80, 0.80, 0.1, 0.5), Class::AccuracyReduced, "rank 0's reference would say otherwise");
        assert_eq!(c(&[0.80, 0.70], &[0.80, 0.76]), Class::AccuracyReduced);
        assert_eq!(c(&[0.80, 0.74], &[0.80, 0.76]), Class::Other);
        assert_eq!(c(&[0.80, 0.12], &[0.80, 0.76]), Class::TrainingFailed);
        assert_eq!(classify_each_replica(true, &[0.8, 0.8], &[0.8, 0.8], 0.1, 0.5), Class::Nev);
        let mut r = row("a", "r", Status::Ok, 0.8, false, false);
        r.metrics.replica_acc_min = Some(0.72);
        r.metrics.replica_acc_max = Some(0.8);
        assert_eq!(replicas_class(&r, 0.1, 0.5), Some(Class::AccuracyReduced), "a row of an earlier revision: rank 0's reference");
        r.metrics.replica_accs = Some("0.8;0.72".into());
        r.metrics.golden_replica_accs = Some("0.8;0.722".into());
        assert_eq!(replicas_class(&r, 0.1, 0.5), Some(Class::RestartWithoutChange));
    }

    #[test]
    fn nan_never_exceeds_nev_because_step_altered_runs_leave_both() {
        let mut rows = vec![row("a", "r", Status::Ok, 0.1, true, true), row("b", "r", Status::Ok, 0.1, true, true)];
        // Run b's flip hit the step counter: a class of its own, counted in neither numerator.
        rows[1].metrics.base_step = Some(10);
        rows[1].metrics.restart_step = Some(4106);
        let c = &cells(&rows, |_| 0.1, 0.5)[0];
        assert_eq!((c.ok, c.nan.count, c.nev.count, c.step_altered.count), (2, 1, 1, 1));
    }

    #[test]
    fn a_wall_overhead_within_the_runs_own_timing_noise_is_not_shown() {
        // Runs spread 20 points around -5%: the golden run's one timing lies inside their noise.
        assert_eq!(beyond_timing_noise(&[-25.0, 15.0, -10.0, 0.0]), None);
        // Runs spread 2 points around 30%: it does not. t(0.975, 3) = 3.182, s = 1.826,
        // sqrt(1 + 1/4) = 1.118: half-width 6.5 points.
        assert_eq!(beyond_timing_noise(&[28.0, 30.0, 32.0, 30.0]), Some(30.0));
        assert_eq!(beyond_timing_noise(&[-28.0, -30.0, -32.0, -30.0]), None, "faster than the golden run's work: its timing is off");
        assert_eq!(beyond_timing_noise(&[30.0]), None, "one run: no noise to judge by");
        assert_eq!(beyond_timing_noise(&[]), None);
    }
}
