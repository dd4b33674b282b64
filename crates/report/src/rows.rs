//! The rows of the report's CSV files, one `#[derive(Serialize)]` struct per file: a file's
//! header is its struct's field names as serde gives them ([`columns`]; in `cells.csv` after
//! the grid's axes, which vary per campaign), and each line is one struct serialized, so a
//! column's name and its value cannot drift apart. `report.md`'s table of cells reads the same
//! rows ([`CELL_TABLE`]); docs/metrics.md documents every column, and `tests/columns.rs` holds
//! the two to each other.
//!
//! A number is kept as the value the report computed and written with a fixed number of
//! decimals ([`fixed`]) or in scientific notation ([`sci`]); one the cell cannot have is an
//! empty field, never `NaN` or `inf`.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use resilab_runner::outcome::Outcome;
use serde::{Serialize, Serializer};

use crate::choice::Choice;
use crate::error::{csv_error, csv_text};
use crate::format::f;
use crate::md::MdColumn;
use crate::measures::{HypothesisTest, StudyCell};
use crate::{Cell, Comparison, Error, Result, Share};

/// One row of `cells.csv` after the grid's axes: one cell's metrics (docs/metrics.md, "Per-cell
/// metrics"). A share is four columns: the count, its percentage and the two ends of its
/// Wilson 95% interval (percent); a share a cell cannot have (no replicas) is four empty fields.
#[derive(Debug, Default, Serialize)]
pub(crate) struct CellRow {
    /// Runs recorded.
    runs: u64,
    /// Runs with a result (`ok`): the base of every share.
    ok: u64,
    /// Runs without: `status:count` pairs, `;`-separated.
    #[serde(serialize_with = "statuses")]
    not_ok: BTreeMap<String, u64>,
    /// Training seeds among the `ok` runs.
    seeds: u64,
    /// ACC: mean final test accuracy of the runs that did not collapse, %.
    #[serde(serialize_with = "fixed::<3, _>")]
    acc_pct: Option<f64>,
    /// STD: its sample standard deviation, points.
    #[serde(serialize_with = "fixed::<3, _>", rename = "std_pts")]
    std: Option<f64>,
    /// CV: STD / ACC.
    #[serde(serialize_with = "fixed::<4, _>")]
    cv: Option<f64>,
    /// ACC all: mean over every `ok` run, a collapsed run at chance, %.
    #[serde(serialize_with = "fixed::<3, _>")]
    acc_all_pct: Option<f64>,
    /// Mean golden accuracy, %.
    #[serde(serialize_with = "fixed::<3, _>")]
    golden_acc_pct: Option<f64>,
    /// Data parallel: mean accuracy of the replica hit, %.
    #[serde(serialize_with = "fixed::<3, _>")]
    hit_acc_pct: Option<f64>,
    /// Data parallel: mean lowest replica accuracy, %.
    #[serde(serialize_with = "fixed::<3, _>")]
    replica_acc_min_pct: Option<f64>,
    /// Data parallel: mean largest replica distance from rank 0.
    #[serde(serialize_with = "fixed::<4, _>")]
    replica_divergence: Option<f64>,
    /// Data parallel: runs whose replicas differ from rank 0's (a share; empty without replicas).
    diverged: Option<u64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    diverged_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    diverged_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    diverged_hi: Option<f64>,
    /// NaN: collapsed runs (a share).
    nan: u64,
    #[serde(serialize_with = "fixed::<2, _>")]
    nan_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    nan_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    nan_hi: Option<f64>,
    /// N-EV by the outcome (a share).
    nev: u64,
    #[serde(serialize_with = "fixed::<2, _>")]
    nev_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    nev_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    nev_hi: Option<f64>,
    /// EV injected (a share).
    ev_injected: u64,
    #[serde(serialize_with = "fixed::<2, _>")]
    ev_injected_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    ev_injected_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    ev_injected_hi: Option<f64>,
    /// `train` runs: the outcome classes' counts, `class:count` pairs `;`-separated (their
    /// shares with exact intervals in `outcomes.csv`).
    outcomes: String,
    /// RWC: restart without change (a share).
    rwc: u64,
    #[serde(serialize_with = "fixed::<2, _>")]
    rwc_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    rwc_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    rwc_hi: Option<f64>,
    /// AccR: accuracy reduced (a share).
    accr: u64,
    #[serde(serialize_with = "fixed::<2, _>")]
    accr_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    accr_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    accr_hi: Option<f64>,
    /// TF: training failed (a share).
    tf: u64,
    #[serde(serialize_with = "fixed::<2, _>")]
    tf_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    tf_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    tf_hi: Option<f64>,
    /// Data parallel: RWC on every replica (a share; empty without replica evaluations).
    rwc_all: Option<u64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    rwc_all_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    rwc_all_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    rwc_all_hi: Option<f64>,
    /// Data parallel: the worst replica's accuracy reduced (a share, as `rwc_all`).
    accr_all: Option<u64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    accr_all_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    accr_all_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    accr_all_hi: Option<f64>,
    /// Data parallel: the worst replica at chance (a share, as `rwc_all`).
    tf_all: Option<u64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    tf_all_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    tf_all_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    tf_all_hi: Option<f64>,
    /// Runs whose altered checkpoint restarted at another step than its base (a share).
    step_altered: u64,
    #[serde(serialize_with = "fixed::<2, _>")]
    step_altered_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    step_altered_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    step_altered_hi: Option<f64>,
    /// Mean steps those runs trained.
    #[serde(serialize_with = "fixed::<2, _>")]
    step_altered_steps: Option<f64>,
    /// Altered checkpoints that could not be loaded (a share of `ok + corrupt_file`).
    load_failed: u64,
    #[serde(serialize_with = "fixed::<2, _>")]
    load_failed_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    load_failed_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    load_failed_hi: Option<f64>,
    /// Exact McNemar test of N-EV against EV injected: two-sided p.
    #[serde(serialize_with = "sci::<4, _>")]
    nev_vs_ev_p: Option<f64>,
    /// Its Holm adjustment over the report's cells.
    #[serde(serialize_with = "sci::<4, _>")]
    nev_vs_ev_p_holm: Option<f64>,
    /// `agree`, `training added` or `training removed`.
    nev_vs_ev: String,
    /// Worst-case normal margin of any share of the cell (p = 0.5), points.
    #[serde(serialize_with = "fixed::<2, _>", rename = "worst_margin_pts")]
    worst_margin: Option<f64>,
    /// Mean accuracy loss against the golden run, points (`metrics::acc_loss_pts`: the runs
    /// that completed, collapsed ones included).
    #[serde(serialize_with = "fixed::<3, _>")]
    acc_loss_pts: Option<f64>,
    /// Mean wall-time overhead against the golden run, %.
    #[serde(serialize_with = "fixed::<2, _>")]
    time_overhead_pct: Option<f64>,
    /// Mean overhead in simulated time against the golden run, %.
    #[serde(serialize_with = "fixed::<2, _>")]
    sim_overhead_pct: Option<f64>,
    /// Mean steps lost.
    #[serde(serialize_with = "fixed::<2, _>")]
    steps_lost: Option<f64>,
    /// Mean steps recomputed.
    #[serde(serialize_with = "fixed::<2, _>")]
    steps_recomputed: Option<f64>,
    /// Mean detection latency, steps.
    #[serde(serialize_with = "fixed::<2, _>", rename = "detection_latency_steps")]
    detection_latency: Option<f64>,
    /// Mean steps after the restart at which the state first held a NaN/Inf.
    #[serde(serialize_with = "fixed::<2, _>", rename = "collapse_after_steps")]
    collapse_step: Option<f64>,
}

impl CellRow {
    /// The row of `c`.
    pub(crate) fn of(c: &Cell) -> Self {
        // Shares the cell cannot have (no replicas) are left empty.
        let some = |s: &Share| (s.of > 0).then_some(*s);
        let (dv, ra, aa, ta) = (some(&c.diverged), some(&c.rwc_all), some(&c.accr_all), some(&c.tf_all));
        CellRow {
            runs: c.runs,
            ok: c.ok,
            not_ok: c.not_ok.clone(),
            seeds: c.seeds,
            acc_pct: c.acc,
            std: c.std,
            cv: c.cv,
            acc_all_pct: c.acc_all,
            golden_acc_pct: c.golden_acc,
            hit_acc_pct: c.hit_acc,
            replica_acc_min_pct: c.replica_acc_min,
            replica_divergence: c.replica_divergence,
            diverged: dv.map(|s| s.count),
            diverged_pct: dv.map(|s| s.pct),
            diverged_lo: dv.map(|s| s.lo_pct),
            diverged_hi: dv.map(|s| s.hi_pct),
            nan: c.nan.count,
            nan_pct: Some(c.nan.pct),
            nan_lo: Some(c.nan.lo_pct),
            nan_hi: Some(c.nan.hi_pct),
            nev: c.nev.count,
            nev_pct: Some(c.nev.pct),
            nev_lo: Some(c.nev.lo_pct),
            nev_hi: Some(c.nev.hi_pct),
            ev_injected: c.ev_injected.count,
            ev_injected_pct: Some(c.ev_injected.pct),
            ev_injected_lo: Some(c.ev_injected.lo_pct),
            ev_injected_hi: Some(c.ev_injected.hi_pct),
            outcomes: outcome_summary(&c.outcomes),
            rwc: c.rwc.count,
            rwc_pct: Some(c.rwc.pct),
            rwc_lo: Some(c.rwc.lo_pct),
            rwc_hi: Some(c.rwc.hi_pct),
            accr: c.accr.count,
            accr_pct: Some(c.accr.pct),
            accr_lo: Some(c.accr.lo_pct),
            accr_hi: Some(c.accr.hi_pct),
            tf: c.tf.count,
            tf_pct: Some(c.tf.pct),
            tf_lo: Some(c.tf.lo_pct),
            tf_hi: Some(c.tf.hi_pct),
            rwc_all: ra.map(|s| s.count),
            rwc_all_pct: ra.map(|s| s.pct),
            rwc_all_lo: ra.map(|s| s.lo_pct),
            rwc_all_hi: ra.map(|s| s.hi_pct),
            accr_all: aa.map(|s| s.count),
            accr_all_pct: aa.map(|s| s.pct),
            accr_all_lo: aa.map(|s| s.lo_pct),
            accr_all_hi: aa.map(|s| s.hi_pct),
            tf_all: ta.map(|s| s.count),
            tf_all_pct: ta.map(|s| s.pct),
            tf_all_lo: ta.map(|s| s.lo_pct),
            tf_all_hi: ta.map(|s| s.hi_pct),
            step_altered: c.step_altered.count,
            step_altered_pct: Some(c.step_altered.pct),
            step_altered_lo: Some(c.step_altered.lo_pct),
            step_altered_hi: Some(c.step_altered.hi_pct),
            step_altered_steps: c.step_altered_steps,
            load_failed: c.load_failed.count,
            load_failed_pct: Some(c.load_failed.pct),
            load_failed_lo: Some(c.load_failed.lo_pct),
            load_failed_hi: Some(c.load_failed.hi_pct),
            nev_vs_ev_p: c.nev_vs_ev_p,
            nev_vs_ev_p_holm: c.nev_vs_ev_p_holm,
            nev_vs_ev: c.nev_vs_ev.clone(),
            worst_margin: Some(c.worst_margin_pct),
            acc_loss_pts: c.acc_loss,
            time_overhead_pct: c.time_overhead_pct,
            sim_overhead_pct: c.sim_overhead_pct,
            steps_lost: c.steps_lost,
            steps_recomputed: c.steps_recomputed,
            detection_latency: c.detection_latency,
            collapse_step: c.collapse_step,
        }
    }
}

/// `report.md`'s table of cells, after the grid's axes: every column reads the cell's
/// [`CellRow`], so the table shows what `cells.csv` holds (with fewer decimals, and a share as
/// `count (% [low, high])`); a column empty in every cell is left out.
pub(crate) const CELL_TABLE: &[MdColumn<CellRow>] = &[
    ("runs (ok)", |r| format!("{} ({})", r.runs, r.ok)),
    ("seeds", |r| r.seeds.to_string()),
    ("ACC %", |r| f(r.acc_pct, 2)),
    ("STD (pts)", |r| f(r.std, 3)),
    ("CV", |r| f(r.cv, 4)),
    ("ACC all %", |r| f(r.acc_all_pct, 2)),
    ("golden %", |r| f(r.golden_acc_pct, 2)),
    ("hit replica ACC %", |r| f(r.hit_acc_pct, 2)),
    ("worst replica ACC %", |r| f(r.replica_acc_min_pct, 2)),
    ("replicas diverged", |r| share_md(r.diverged, [r.diverged_pct, r.diverged_lo, r.diverged_hi])),
    ("NaN", |r| share_md(Some(r.nan), [r.nan_pct, r.nan_lo, r.nan_hi])),
    ("N-EV", |r| share_md(Some(r.nev), [r.nev_pct, r.nev_lo, r.nev_hi])),
    ("EV injected", |r| share_md(Some(r.ev_injected), [r.ev_injected_pct, r.ev_injected_lo, r.ev_injected_hi])),
    ("N-EV vs EV injected", |r| r.nev_vs_ev_p_holm.map_or(String::new(), |p| format!("{} (p {p:.2})", r.nev_vs_ev))),
    ("outcomes", |r| outcomes_md(&r.outcomes)),
    ("RWC", |r| share_md(Some(r.rwc), [r.rwc_pct, r.rwc_lo, r.rwc_hi])),
    ("AccR", |r| share_md(Some(r.accr), [r.accr_pct, r.accr_lo, r.accr_hi])),
    ("TF", |r| share_md(Some(r.tf), [r.tf_pct, r.tf_lo, r.tf_hi])),
    ("RWC all replicas", |r| share_md(r.rwc_all, [r.rwc_all_pct, r.rwc_all_lo, r.rwc_all_hi])),
    ("AccR all", |r| share_md(r.accr_all, [r.accr_all_pct, r.accr_all_lo, r.accr_all_hi])),
    ("TF all", |r| share_md(r.tf_all, [r.tf_all_pct, r.tf_all_lo, r.tf_all_hi])),
    ("step counter altered", |r| match r.step_altered {
        0 => String::new(),
        n => {
            let share = share_md(Some(n), [r.step_altered_pct, r.step_altered_lo, r.step_altered_hi]);
            format!("{share} ({} steps)", f(r.step_altered_steps, 0))
        }
    }),
    ("load failed", |r| match r.load_failed {
        0 => String::new(),
        n => share_md(Some(n), [r.load_failed_pct, r.load_failed_lo, r.load_failed_hi]),
    }),
    ("± at p=0.5 (pts)", |r| f(r.worst_margin, 1)),
    ("acc loss (pts)", |r| f(r.acc_loss_pts, 2)),
    ("sim. overhead %", |r| f(r.sim_overhead_pct, 2)),
    ("wall overhead %", |r| f(r.time_overhead_pct, 1)),
    ("steps lost", |r| f(r.steps_lost, 2)),
    ("steps recomputed", |r| f(r.steps_recomputed, 2)),
    ("detection latency (steps)", |r| f(r.detection_latency, 2)),
    ("collapse after (steps)", |r| f(r.collapse_step, 1)),
    ("not ok", |r| r.not_ok.iter().map(|(k, v)| format!("{v} {k}")).collect::<Vec<_>>().join(", ")),
];

/// A share in `report.md`: `count (% [low, high])`, one decimal; empty without a count or a
/// percentage (a share of no runs).
fn share_md(count: Option<u64>, [pct, lo, hi]: [Option<f64>; 3]) -> String {
    let nan = f64::NAN;
    match (count, pct.filter(|p| p.is_finite())) {
        (Some(n), Some(p)) => format!("{n} ({p:.1} [{:.1}, {:.1}])", lo.unwrap_or(nan), hi.unwrap_or(nan)),
        _ => String::new(),
    }
}

/// One row of `bits.csv`: the single-flip runs of one bit position of one precision, and the
/// test of that bit against the other bits of the precision pooled.
#[derive(Debug, Default, Serialize)]
pub(crate) struct BitRow {
    /// The float precision altered (`16`, `32`, `64`).
    pub(crate) precision: String,
    /// The bit flipped (0 = sign).
    pub(crate) bit: u64,
    /// Single-flip runs.
    pub(crate) runs: u64,
    /// N-EV runs among them (a share, with its Wilson interval).
    pub(crate) nev: u64,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) nev_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) nev_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) nev_hi: Option<f64>,
    /// Collapsed runs among them.
    pub(crate) nan: u64,
    /// N-EV share of the other bits of the precision pooled, %.
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) others_nev_pct: Option<f64>,
    /// This bit's share minus the others', points.
    #[serde(serialize_with = "fixed::<2, _>", rename = "diff_vs_others_pts")]
    pub(crate) diff_vs_others: Option<f64>,
    /// Two-proportion test: two-sided p.
    #[serde(serialize_with = "sci::<3, _>")]
    pub(crate) p: Option<f64>,
    /// Holm-adjusted over every row.
    #[serde(serialize_with = "sci::<3, _>")]
    pub(crate) p_holm: Option<f64>,
    /// `more N-EV than the other bits (shown)`, `less N-EV than the other bits (shown)` or
    /// `not shown`.
    pub(crate) verdict: &'static str,
}

/// One row of `which_strategy.csv`: a condition's [`Choice`] (docs/metrics.md, "Columns of the
/// report's files"); `report.md`'s table of choices reads the same rows ([`CHOICE_TABLE`]).
#[derive(Debug, Default, Serialize)]
pub(crate) struct ChoiceRow {
    /// The condition: the other axes' coordinates.
    pub(crate) condition: String,
    /// `lossy_forward`, `reinit = respawn (equal)`, `lossy_forward = rollback` (not separated),
    /// `undecided` (nothing admissible) or `undecided: golden run at X%`.
    pub(crate) choice: String,
    /// Whether the data decide the condition.
    pub(crate) decided: bool,
    /// The chosen set, cheapest mean overhead first, `;`-separated.
    pub(crate) chosen: String,
    /// Mean simulated overhead of the cheapest chosen option, %.
    #[serde(serialize_with = "fixed::<3, _>")]
    pub(crate) sim_overhead_pct: Option<f64>,
    /// Its mean accuracy loss against the golden run, points (runs that completed).
    #[serde(serialize_with = "fixed::<3, _>")]
    pub(crate) acc_loss_pts: Option<f64>,
    /// The one-sided 95% upper bound of that loss, points.
    #[serde(serialize_with = "fixed::<3, _>")]
    pub(crate) acc_loss_upper_pts: Option<f64>,
    /// The golden ensembles' spread: the largest standard deviation of their members' final
    /// test accuracies over the condition's ensembles, points; empty without
    /// `train.golden_ensemble`.
    #[serde(serialize_with = "fixed::<3, _>")]
    pub(crate) golden_sd_pts: Option<f64>,
    /// Groups (training seed and repetition) among the condition's runs.
    pub(crate) groups: u64,
    /// Groups a power calculation says would decide an undecided condition: a count, `not
    /// reachable` or `n/a`; empty when decided.
    pub(crate) groups_needed: String,
    /// What those groups would decide; empty when decided.
    pub(crate) needed_for: String,
    /// Options not chosen, each with why, `; `-separated.
    pub(crate) ruled_out: String,
}

impl ChoiceRow {
    /// The row of `c`.
    pub(crate) fn of(c: &Choice) -> Self {
        ChoiceRow {
            condition: c.condition.clone(),
            choice: c.choice.clone(),
            decided: c.decided,
            chosen: c.chosen.join(";"),
            sim_overhead_pct: c.sim_overhead,
            acc_loss_pts: c.acc_loss,
            acc_loss_upper_pts: c.acc_loss_upper,
            golden_sd_pts: c.golden_sd,
            groups: c.groups as u64,
            groups_needed: c.groups_needed.text(),
            needed_for: c.needed_for.clone(),
            ruled_out: c.ruled_out.join("; "),
        }
    }
}

/// `report.md`'s "which strategy when" table: what each column shows of a condition's
/// [`ChoiceRow`].
pub(crate) const CHOICE_TABLE: &[MdColumn<ChoiceRow>] = &[
    ("condition", |r| resilab_text::markdown(&r.condition)),
    ("choice", |r| {
        let choice = resilab_text::markdown(&r.choice);
        if r.decided || r.choice.starts_with("undecided") { choice } else { format!("{choice} (undecided)") }
    }),
    ("sim. overhead %", |r| f(r.sim_overhead_pct, 2)),
    ("acc. loss (points)", |r| f(r.acc_loss_pts, 2)),
    ("upper bound (points)", |r| f(r.acc_loss_upper_pts, 2)),
    ("golden SD (points)", |r| if r.golden_sd_pts.is_some() { f(r.golden_sd_pts, 2) } else { "n/a".into() }),
    ("groups", |r| r.groups.to_string()),
    ("groups needed", |r| if r.groups_needed.is_empty() { String::new() } else { format!("{} ({})", r.groups_needed, r.needed_for) }),
    ("ruled out", |r| resilab_text::markdown(&r.ruled_out)),
];

/// Writes a number with `D` decimals; empty when missing or not finite.
fn fixed<const D: usize, S: Serializer>(v: &Option<f64>, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&f(*v, D))
}

/// Writes a number in scientific notation with `D` decimals (`1.0000e0`); empty when missing.
fn sci<const D: usize, S: Serializer>(v: &Option<f64>, s: S) -> std::result::Result<S::Ok, S::Error> {
    let digits = D;
    s.serialize_str(&v.map_or(String::new(), |x| format!("{x:.digits$e}")))
}

/// Writes counts per status as `status:count` pairs, `;`-separated.
fn statuses<S: Serializer>(m: &BTreeMap<String, u64>, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&m.iter().map(|(k, v)| format!("{k}:{v}")).collect::<Vec<_>>().join(";"))
}

/// The columns serde gives `T`, in order: [`resilab_campaign::header`], the one way every CSV
/// file of a campaign and of its report gets its header from its row struct.
pub(crate) fn columns<T: Serialize + Default>() -> Result<Vec<String>> {
    resilab_campaign::header::<T>().map_err(csv_error)
}

/// A CSV table of `T`s: the header `axes` and then `T`'s [`columns`]; each line the row's axis
/// values, then the row serialized. The header is written without rows too.
pub(crate) fn table<T: Serialize + Default, R: Borrow<T>>(
    axes: &[String],
    rows: impl IntoIterator<Item = (Vec<String>, R)>,
) -> Result<String> {
    let mut w = resilab_text::CsvWriter::without_headers(Vec::new());
    w.write_record(axes.iter().cloned().chain(columns::<T>()?)).map_err(csv_error)?;
    for (values, row) in rows {
        if values.len() != axes.len() {
            return Err(Error::Csv(format!("a row has {} axis values for {} axes", values.len(), axes.len())));
        }
        w.serialize((values, row.borrow())).map_err(csv_error)?;
    }
    csv_text(w)
}

/// `cells.csv`'s `outcomes`: `class:count` pairs `;`-separated, in the classes' order
/// ([`Outcome::ALL`]; a name resilab does not know last).
pub(crate) fn outcome_summary(counts: &BTreeMap<String, u64>) -> String {
    ordered_outcomes(counts).map(|(name, n)| format!("{name}:{n}")).collect::<Vec<_>>().join(";")
}

/// `report.md`'s cell column of the classes: `class count` pairs, `, `-separated, names with
/// spaces.
pub(crate) fn outcomes_md(text: &str) -> String {
    text.split(';').filter(|p| !p.is_empty()).map(|p| p.replace([':', '_'], " ")).collect::<Vec<_>>().join(", ")
}

/// `counts` in the classes' order ([`Outcome::ALL`]; names resilab does not know last, by name).
pub(crate) fn ordered_outcomes(counts: &BTreeMap<String, u64>) -> impl Iterator<Item = (&str, u64)> {
    let rank = |name: &str| Outcome::parse(name).and_then(|o| Outcome::ALL.iter().position(|a| *a == o)).unwrap_or(usize::MAX);
    let mut v: Vec<(&str, u64)> = counts.iter().map(|(k, n)| (k.as_str(), *n)).collect();
    v.sort_by_key(|(name, _)| (rank(name), name.to_string()));
    v.into_iter()
}

/// One line of `outcomes.csv` after the grid's axes: an outcome class in a cell
/// ([`crate::outcomes`]).
#[derive(Debug, Default, Serialize)]
pub(crate) struct OutcomeRow {
    /// The class (`masked`, `immediate_nan`, ...).
    pub(crate) outcome: String,
    /// Runs of the cell that have a class: the share's base.
    pub(crate) runs: u64,
    /// Runs of this class.
    pub(crate) count: u64,
    /// Their share, %.
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) count_pct: Option<f64>,
    /// Lower end of its exact (Clopper–Pearson) 95% interval, %.
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) lo_pct: Option<f64>,
    /// Upper end, %.
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) hi_pct: Option<f64>,
}

/// One line of `detectors.csv`: a detector at one setting of its sweep, scored on the runs'
/// recorded signals ([`crate::detectors`]).
#[derive(Debug, Default, Serialize)]
pub(crate) struct DetectorRow {
    /// The detector (`nan_loss`, `loss_spike`, `nan_gradients`, `nan_weights`,
    /// `replica_divergence`).
    pub(crate) detector: String,
    /// Its setting: the threshold, factor or interval.
    pub(crate) setting: String,
    /// Runs whose outcome is harm (the base of the recall).
    pub(crate) harmed: u64,
    /// Harmed runs in which it fired from the first fault to the outcome's onset.
    pub(crate) recall: u64,
    /// Their share of the harmed runs, %.
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) recall_pct: Option<f64>,
    /// Lower end of its exact (Clopper–Pearson) 95% interval, %.
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) recall_lo: Option<f64>,
    /// Upper end, %.
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) recall_hi: Option<f64>,
    /// Runs with faults in which it fired at or after the first fault.
    pub(crate) alarmed: u64,
    /// Of those, the share that were harmed, %.
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) precision_pct: Option<f64>,
    /// Steps of the golden (fault-free) runs.
    pub(crate) golden_steps: u64,
    /// Of those, steps with an alarm.
    pub(crate) golden_alarm_steps: u64,
    /// Golden alarm steps per 1,000 golden steps.
    #[serde(serialize_with = "fixed::<3, _>")]
    pub(crate) false_alarms_golden_per_1000_steps: Option<f64>,
    /// Its one-sided 95% Clopper–Pearson upper bound.
    #[serde(serialize_with = "fixed::<3, _>")]
    pub(crate) false_alarms_golden_per_1000_steps_hi: Option<f64>,
    /// Steps of the runs whose faults were harmless (`masked`).
    pub(crate) harmless_steps: u64,
    /// Of those, steps with an alarm.
    pub(crate) harmless_alarm_steps: u64,
    /// Harmless-run alarm steps per 1,000 of their steps.
    #[serde(serialize_with = "fixed::<3, _>")]
    pub(crate) false_alarms_harmless_per_1000_steps: Option<f64>,
    /// Median steps from the first fault to the first alarm, over the harmed runs it caught.
    #[serde(serialize_with = "fixed::<1, _>")]
    pub(crate) latency_median_steps: Option<f64>,
    /// Mean of the same.
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) latency_mean_steps: Option<f64>,
    /// Measured seconds per step (every worker).
    pub(crate) cost_per_step_s: Option<f64>,
    /// That cost as a share of the runs' measured training seconds per step, %.
    #[serde(serialize_with = "fixed::<3, _>")]
    pub(crate) cost_share_of_step_pct: Option<f64>,
}

impl DetectorRow {
    /// Fills the shares and rates from the counts, `alarmed_harmed` the harmed runs among the
    /// alarmed ones and `latencies` those of the runs caught.
    pub(crate) fn fill_rates(&mut self, alarmed_harmed: u64, latencies: &[f64]) {
        let pct = |k: u64, n: u64| (n > 0).then(|| 100.0 * k as f64 / n as f64);
        let per_1000 = |k: u64, n: u64| (n > 0).then(|| 1000.0 * k as f64 / n as f64);
        self.recall_pct = pct(self.recall, self.harmed);
        let ci = crate::stats::clopper_pearson(self.recall, self.harmed);
        (self.recall_lo, self.recall_hi) = (ci.map(|c| 100.0 * c.0), ci.map(|c| 100.0 * c.1));
        self.precision_pct = pct(alarmed_harmed, self.alarmed);
        self.false_alarms_golden_per_1000_steps = per_1000(self.golden_alarm_steps, self.golden_steps);
        self.false_alarms_golden_per_1000_steps_hi =
            crate::stats::rate_upper(self.golden_alarm_steps, self.golden_steps).map(|u| 1000.0 * u);
        self.false_alarms_harmless_per_1000_steps = per_1000(self.harmless_alarm_steps, self.harmless_steps);
        let mut sorted = latencies.to_vec();
        sorted.sort_by(f64::total_cmp);
        self.latency_median_steps = match sorted.len() {
            0 => None,
            n if n % 2 == 1 => Some(sorted[n / 2]),
            n => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
        };
        self.latency_mean_steps = (!sorted.is_empty()).then(|| sorted.iter().sum::<f64>() / sorted.len() as f64);
    }
}

/// One line of `detector_choice.csv`: a detector's setting to deploy under the false-alarm
/// budget ([`crate::detectors::choose`]).
#[derive(Debug, Default, Serialize)]
pub(crate) struct DetectorChoiceRow {
    /// The detector.
    pub(crate) detector: String,
    /// `meets` (its golden false alarms' upper bound is within the budget), `undecided` (only
    /// their point estimate is) or `none meets`.
    pub(crate) verdict: String,
    /// The setting chosen (empty when none meets the budget).
    pub(crate) setting: Option<String>,
    /// Undecided: the golden steps at which the same rate's upper bound would be within it.
    pub(crate) golden_steps_needed: Option<u64>,
    /// Its recall, %.
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) recall_pct: Option<f64>,
    /// Lower end of its exact 95% interval, %.
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) recall_lo: Option<f64>,
    /// Upper end, %.
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) recall_hi: Option<f64>,
    /// Its golden false alarms per 1,000 steps.
    #[serde(serialize_with = "fixed::<3, _>")]
    pub(crate) false_alarms_golden_per_1000_steps: Option<f64>,
    /// Their one-sided 95% upper bound.
    #[serde(serialize_with = "fixed::<3, _>")]
    pub(crate) false_alarms_golden_per_1000_steps_hi: Option<f64>,
    /// Median latency, steps.
    #[serde(serialize_with = "fixed::<1, _>")]
    pub(crate) latency_median_steps: Option<f64>,
    /// Measured seconds per step.
    pub(crate) cost_per_step_s: Option<f64>,
}

impl DetectorChoiceRow {
    pub(crate) fn of(detector: &str, verdict: &str, row: Option<&DetectorRow>, needed: Option<u64>) -> Self {
        Self {
            detector: detector.to_string(),
            verdict: verdict.to_string(),
            setting: row.map(|r| r.setting.clone()),
            golden_steps_needed: needed,
            recall_pct: row.and_then(|r| r.recall_pct),
            recall_lo: row.and_then(|r| r.recall_lo),
            recall_hi: row.and_then(|r| r.recall_hi),
            false_alarms_golden_per_1000_steps: row.and_then(|r| r.false_alarms_golden_per_1000_steps),
            false_alarms_golden_per_1000_steps_hi: row.and_then(|r| r.false_alarms_golden_per_1000_steps_hi),
            latency_median_steps: row.and_then(|r| r.latency_median_steps),
            cost_per_step_s: row.and_then(|r| r.cost_per_step_s),
        }
    }
}

/// One line of `detector_classes.csv`: what share of one outcome class a detector caught at its
/// chosen setting (harmed classes: in time; others: any alarm at or after the fault).
#[derive(Debug, Default, Serialize)]
pub(crate) struct DetectorClassRow {
    /// The detector.
    pub(crate) detector: String,
    /// Its setting.
    pub(crate) setting: String,
    /// The outcome class.
    pub(crate) outcome: String,
    /// Runs of the class.
    pub(crate) runs: u64,
    /// Of those, runs in which it fired.
    pub(crate) caught: u64,
    /// Their share, %.
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) caught_pct: Option<f64>,
    /// Lower end of its exact (Clopper–Pearson) 95% interval, %.
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) lo_pct: Option<f64>,
    /// Upper end, %.
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) hi_pct: Option<f64>,
}

impl DetectorClassRow {
    pub(crate) fn of(row: &DetectorRow, outcome: &str, runs: u64, caught: u64) -> Self {
        let ci = crate::stats::clopper_pearson(caught, runs);
        Self {
            detector: row.detector.clone(),
            setting: row.setting.clone(),
            outcome: outcome.to_string(),
            runs,
            caught,
            caught_pct: (runs > 0).then(|| 100.0 * caught as f64 / runs as f64),
            lo_pct: ci.map(|c| 100.0 * c.0),
            hi_pct: ci.map(|c| 100.0 * c.1),
        }
    }
}

/// One row of `break_even.csv` ([`crate::breakeven`]).
#[derive(Debug, Default, Serialize)]
pub(crate) struct BreakEven {
    /// The condition: the other axes' coordinates.
    pub(crate) condition: String,
    /// The constant moved: `recovery.detect_timeout_s`, `recovery.rebuild_s` or
    /// `recovery.relaunch_s`.
    pub(crate) key: String,
    /// The first of the two options, in grid order.
    pub(crate) a: String,
    /// The second.
    pub(crate) b: String,
    /// The constant as the runs are priced (recorded, or as `--price`/`--set` put it), seconds.
    pub(crate) priced_s: Option<f64>,
    /// Where their mean overheads are equal, seconds; empty where the lines are parallel (the
    /// constant moves both alike) or cross only below 0.
    pub(crate) break_even_s: Option<f64>,
    /// The option of lower mean overhead below it (the one that pays the constant more often);
    /// without a crossing at 0 or above, the lower one at every value from 0.
    pub(crate) cheaper_below: String,
    /// The option of lower mean overhead above it (without a crossing, `cheaper_below`).
    pub(crate) cheaper_above: String,
}

/// A row of `priced.csv` (written by `report --set`): one run's simulated time and overhead
/// as recorded and as re-priced.
#[derive(Debug, Default, serde::Serialize)]
pub(crate) struct PricedRow {
    /// The run's id (`runs.csv`'s).
    pub(crate) id: String,
    /// Its simulated seconds as recorded.
    pub(crate) recorded_sim_s: Option<f64>,
    /// Its simulated seconds re-priced.
    pub(crate) sim_s: Option<f64>,
    /// Its overhead in simulated time against its golden run as recorded, a fraction.
    pub(crate) recorded_sim_overhead_frac: Option<f64>,
    /// Its overhead re-priced.
    pub(crate) sim_overhead_frac: Option<f64>,
}

/// A row of `fields.csv`: one word, target and bit field.
#[derive(Debug, Default, Serialize)]
pub(crate) struct FieldRow {
    /// The word flipped (`f32`, `bf16`, `f16`).
    pub(crate) word: String,
    /// The fault's target.
    pub(crate) target: String,
    /// The bit field (`sign`, `exponent-top`, `exponent-rest`, `mantissa`).
    pub(crate) field: String,
    /// Its reference bits.
    pub(crate) bits: String,
    /// Single-flip runs.
    pub(crate) runs: u64,
    /// Runs whose faulty step the loss scaler skipped (empty without a loss scaler), its share
    /// and Wilson interval.
    pub(crate) skipped: Option<u64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) skipped_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) skipped_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) skipped_hi: Option<f64>,
    /// Skipped, and ended without N-EV or NaN: masked by loss scaling.
    pub(crate) masked: Option<u64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) masked_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) masked_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) masked_hi: Option<f64>,
    /// N-EV runs, share and interval.
    pub(crate) nev: u64,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) nev_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) nev_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) nev_hi: Option<f64>,
    /// Collapsed (NaN/Inf) runs, share and interval.
    pub(crate) nan: u64,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) nan_pct: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) nan_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) nan_hi: Option<f64>,
    /// Mean accuracy loss of the runs that did not collapse, points, and its t interval.
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) acc_loss_pts: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) acc_loss_lo: Option<f64>,
    #[serde(serialize_with = "fixed::<2, _>")]
    pub(crate) acc_loss_hi: Option<f64>,
}

/// Per CSV file a report writes, its columns in order, named as docs/metrics.md's tables of
/// them ("Columns of the report's files") are: `cells.csv` (after the grid's axes, one column
/// per axis key), `comparisons.csv` (a campaign without hypotheses), `comparisons.csv of a
/// study`, `bits.csv`, `fields.csv`, `cells_study.csv` and `which_strategy.csv`.
pub fn csv_columns() -> Result<Vec<(&'static str, Vec<String>)>> {
    Ok(vec![
        ("cells.csv", columns::<CellRow>()?),
        ("comparisons.csv", columns::<Comparison>()?),
        ("comparisons.csv of a study", columns::<HypothesisTest>()?),
        ("bits.csv", columns::<BitRow>()?),
        ("fields.csv", columns::<FieldRow>()?),
        ("cells_study.csv", columns::<StudyCell>()?),
        ("which_strategy.csv", columns::<ChoiceRow>()?),
        ("priced.csv", columns::<PricedRow>()?),
        ("break_even.csv", columns::<BreakEven>()?),
        ("outcomes.csv", columns::<OutcomeRow>()?),
        ("detectors.csv", columns::<DetectorRow>()?),
        ("detector_choice.csv", columns::<DetectorChoiceRow>()?),
        ("detector_classes.csv", columns::<DetectorClassRow>()?),
        ("which_strategy_jobs.csv", std::iter::once("job".to_string()).chain(columns::<ChoiceRow>()?).collect()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Share;
    use crate::md::md_table;

    fn cell() -> Cell {
        Cell {
            coords: [("model".to_string(), "resnet".to_string())].into(),
            runs: 5,
            ok: 4,
            not_ok: [("timeout".to_string(), 1)].into(),
            seeds: 2,
            acc: Some(81.23456),
            nev: Share::of(1, 4),
            nan: Share::of(0, 4),
            nev_vs_ev_p_holm: Some(1.0),
            nev_vs_ev: "agree".into(),
            worst_margin_pct: 49.0,
            ..Cell::default()
        }
    }

    #[test]
    fn a_cell_row_is_written_under_the_axes_and_its_field_names() {
        let text = table::<CellRow, _>(&["model".to_string()], [(vec!["resnet".to_string()], CellRow::of(&cell()))]).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let row: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(header.len(), 1 + 73);
        assert_eq!(header[..5], ["model", "runs", "ok", "not_ok", "seeds"]);
        assert_eq!(header.last(), Some(&"collapse_after_steps"));
        assert_eq!(row.len(), header.len());
        let at = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
        assert_eq!((at("model"), at("runs"), at("ok"), at("not_ok")), ("resnet", "5", "4", "timeout:1"));
        // Three decimals for an accuracy, two for a share; a value the cell lacks is empty.
        assert_eq!((at("acc_pct"), at("std_pts"), at("nev"), at("nev_pct"), at("nev_lo")), ("81.235", "", "1", "25.00", "4.56"));
        // A share of replicas the cell does not have is four empty fields, not a zero count.
        assert_eq!((at("diverged"), at("diverged_pct"), at("rwc_all"), at("tf_all_hi")), ("", "", "", ""));
        assert_eq!((at("nev_vs_ev_p"), at("nev_vs_ev_p_holm"), at("worst_margin_pts")), ("", "1.0000e0", "49.00"));
        assert!(lines.next().is_none());
    }

    #[test]
    fn a_table_writes_its_header_without_rows_and_refuses_a_row_without_its_axes() {
        let empty: [(Vec<String>, &BitRow); 0] = [];
        assert_eq!(
            table::<BitRow, _>(&[], empty).unwrap(),
            "precision,bit,runs,nev,nev_pct,nev_lo,nev_hi,nan,others_nev_pct,diff_vs_others_pts,p,p_holm,verdict\n"
        );
        assert!(table::<CellRow, _>(&["model".to_string()], [(Vec::new(), CellRow::default())]).is_err());
    }

    #[test]
    fn the_markdown_table_shows_the_rows_values() {
        let row = CellRow::of(&cell());
        let show = |heading: &str| CELL_TABLE.iter().find(|(h, _)| *h == heading).map(|(_, s)| s(&row)).unwrap();
        assert_eq!(show("runs (ok)"), "5 (4)");
        assert_eq!(show("ACC %"), "81.23");
        assert_eq!(show("N-EV"), "1 (25.0 [4.6, 69.9])");
        assert_eq!(show("N-EV vs EV injected"), "agree (p 1.00)");
        assert_eq!(
            (show("replicas diverged"), show("step counter altered"), show("STD (pts)")),
            (String::new(), String::new(), String::new())
        );
        assert_eq!(show("not ok"), "1 timeout");
        let mut md = String::new();
        md_table(&mut md, &["model".to_string()], &CELL_TABLE[..2].iter().collect::<Vec<_>>(), [(vec!["resnet".to_string()], &row)]);
        assert_eq!(md, "| model | runs (ok) | seeds |\n|---|---|---|\n| resnet | 5 (4) | 2 |\n");
    }

    #[test]
    fn numbers_are_written_with_their_decimals_and_never_as_nan() {
        #[derive(Default, Serialize)]
        struct R {
            #[serde(serialize_with = "fixed::<2, _>")]
            a: Option<f64>,
            #[serde(serialize_with = "fixed::<2, _>")]
            b: Option<f64>,
            #[serde(serialize_with = "sci::<3, _>")]
            c: Option<f64>,
            #[serde(serialize_with = "sci::<3, _>")]
            d: Option<f64>,
        }
        let r = R { a: Some(1.005_1), b: Some(f64::NAN), c: Some(0.000_123_46), d: None };
        assert_eq!(table::<R, _>(&[], [(Vec::new(), r)]).unwrap(), "a,b,c,d\n1.01,,1.235e-4,\n");
    }

    #[test]
    fn every_csv_file_of_a_report_has_its_columns() {
        let files: Vec<&str> = csv_columns().unwrap().iter().map(|(f, _)| f.split(' ').next().unwrap_or(f)).collect();
        for entry in crate::campaign::REPORT_ENTRIES.iter().filter(|e| e.ends_with(".csv")) {
            assert!(files.contains(entry), "{entry} has no row struct in csv_columns");
        }
    }
}
