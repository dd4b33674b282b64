//! The report of one campaign directory (`resilab report DIR`): its cells, comparisons,
//! tables and plots.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use resilab_campaign::{Campaign, Kind, Row, Status};
use resilab_recovery::job::Job;

use crate::compare::{Comparison, comparisons};
use crate::detectors::DetectorOptions;
use crate::error::{Error, Result};
use crate::files::{Written, write};
use crate::format::{label, share_point};
use crate::md::{MdColumn, md_table};
use crate::metrics::{ACC_EPS, Cell, Share, cells};
use crate::plots::{Bars, Interval, LineChart, Scatter, Series, save};
use crate::{compare, figures, metrics, price, rows, stats, study};

/// `cells.csv`: the grid's axes, then each cell's [`rows::CellRow`].
fn cells_csv(axes: &[String], cells: &[Cell]) -> Result<String> {
    let values = |c: &Cell| axes.iter().map(|a| c.coords.get(a).cloned().unwrap_or_default()).collect();
    rows::table::<rows::CellRow, _>(axes, cells.iter().map(|c| (values(c), rows::CellRow::of(c))))
}

/// `comparisons.csv` of a campaign without hypotheses: one [`Comparison`] a line.
fn comparisons_csv(cs: &[Comparison]) -> Result<String> {
    rows::table::<Comparison, _>(&[], cs.iter().map(|c| (Vec::new(), c)))
}

fn comparisons_md(md: &mut String, cs: &[Comparison]) {
    let shown: Vec<&Comparison> = cs.iter().filter(|c| c.verdict == "shown").collect();
    let _ = writeln!(md, "\n## Differences\n\n{}\n", compare::rules(cs.len()));
    let _ = writeln!(
        md,
        "{} differences tested, {} shown. All of them, with intervals and what each could detect, in `comparisons.csv`; `resilab report --power D` gives the runs each needs to detect D.\n",
        cs.len(),
        shown.len(),
    );
    detectable_md(md, cs);
    if shown.is_empty() {
        return;
    }
    md_table(md, &[], &DIFFERENCE_TABLE.iter().collect::<Vec<_>>(), shown.into_iter().map(|c| (Vec::new(), c)));
}

/// `report.md`'s table of the differences shown: what each column shows of the comparison's
/// `comparisons.csv` row.
const DIFFERENCE_TABLE: &[MdColumn<Comparison>] = &[
    ("axis", |c| resilab_text::markdown(&c.axis)),
    ("fixed", |c| resilab_text::markdown(&c.fixed)),
    ("a", |c| resilab_text::markdown(&c.a)),
    ("b", |c| resilab_text::markdown(&c.b)),
    ("metric", |c| c.metric.to_string()),
    ("a", |c| format!("{:.2} (n={})", c.value_a, c.n_a)),
    ("b", |c| format!("{:.2} (n={})", c.value_b, c.n_b)),
    ("b - a [95% CI]", |c| format!("{:+.2} [{:+.2}, {:+.2}]", c.diff, c.ci_lo, c.ci_hi)),
    ("p (Holm)", |c| format!("{:.2e}", c.p_holm)),
];

/// Per metric, the smallest differences the comparisons could detect at 80% power (median and
/// range), so that "not shown" reads as what it is.
fn detectable_md(md: &mut String, cs: &[Comparison]) {
    let mut by: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for c in cs.iter().filter(|c| c.detectable.is_finite()) {
        by.entry(c.metric).or_default().push(c.detectable);
    }
    if by.is_empty() {
        return;
    }
    let _ = writeln!(md, "| metric | comparisons | detectable at 80% power: median | smallest | largest | unit |");
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    for (metric, mut v) in by {
        v.sort_by(f64::total_cmp);
        let unit = stats::difference_unit(metric);
        let _ = writeln!(md, "| {metric} | {} | {:.2} | {:.2} | {:.2} | {unit} |", v.len(), v[v.len() / 2], v[0], v[v.len() - 1]);
    }
    let _ = writeln!(md);
}

/// What the single-flip runs of one layer or one bit position gave.
#[derive(Default)]
struct Tally {
    /// Runs.
    runs: u64,
    /// Of those, with N-EV.
    nev: u64,
    /// Of those, whose loss or weights became NaN/Inf.
    nan: u64,
    /// Sum (points) and count of the accuracy losses of the runs that did not collapse.
    loss_sum: f64,
    losses: u64,
}

impl Tally {
    fn add(&mut self, nev: bool, nan: bool, loss: Option<f64>) {
        self.runs += 1;
        self.nev += u64::from(nev);
        self.nan += u64::from(nan);
        if let Some(l) = loss {
            self.loss_sum += 100.0 * l;
            self.losses += 1;
        }
    }

    /// `count` as a share of the runs, in %, with its Wilson 95% interval.
    fn pct(&self, count: u64) -> (f64, Interval) {
        share_point(&Share::of(count, self.runs))
    }

    /// Mean accuracy loss (points) of the runs that did not collapse.
    fn mean_loss(&self) -> Option<f64> {
        (self.losses > 0).then(|| self.loss_sum / self.losses as f64)
    }
}

/// Per precision and bit position, the single-flip runs' N-EV share with its Wilson interval,
/// and the two-proportion test of that bit against every other bit of its precision pooled
/// (Holm-adjusted over all bits): which bits are critical, each with its test.
fn bits_csv(by_bit: &BTreeMap<(String, u64), Tally>) -> Result<String> {
    let mut tested = Vec::new();
    for ((p, b), t) in by_bit {
        let (others, others_nev) =
            by_bit.iter().filter(|((q, c), _)| q == p && c != b).fold((0, 0), |(n, k), (_, o)| (n + o.runs, k + o.nev));
        let test = stats::two_proportions(others_nev, others, t.nev, t.runs);
        tested.push((p.clone(), *b, t, others, others_nev, test));
    }
    let adjusted = stats::holm(&tested.iter().map(|r| r.5.map_or(1.0, |t| t.p)).collect::<Vec<_>>());
    let lines = tested.iter().zip(adjusted).map(|((p, b, t, others, others_nev, test), ph)| {
        let s = Share::of(t.nev, t.runs);
        let verdict = match test {
            Some(x) if ph < stats::ALPHA && x.diff > 0.0 => "more N-EV than the other bits (shown)",
            Some(x) if ph < stats::ALPHA && x.diff < 0.0 => "less N-EV than the other bits (shown)",
            _ => "not shown",
        };
        let row = rows::BitRow {
            precision: p.clone(),
            bit: *b,
            runs: t.runs,
            nev: t.nev,
            nev_pct: Some(s.pct),
            nev_lo: Some(s.lo_pct),
            nev_hi: Some(s.hi_pct),
            nan: t.nan,
            others_nev_pct: (*others > 0).then(|| 100.0 * *others_nev as f64 / *others as f64),
            diff_vs_others: test.map(|x| 100.0 * x.diff),
            p: test.map(|x| x.p),
            p_holm: Some(ph),
            verdict,
        };
        (Vec::new(), row)
    });
    rows::table::<rows::BitRow, _>(&[], lines)
}

/// Appends `point` to the series `label` of `map`, creating it.
fn push_point(map: &mut BTreeMap<String, Series>, label: &str, point: (f64, f64, Interval)) {
    map.entry(label.to_string()).or_insert_with(|| Series { label: label.to_string(), ..Series::default() }).points.push(point);
}

fn markdown(c: &Campaign, axes: &[String], cells: &[Cell], runs: usize, by_status: &BTreeMap<String, u64>) -> String {
    let s = &c.settings;
    let mut md = String::new();
    let _ = writeln!(md, "# Campaign {} ({})\n", resilab_text::markdown(&c.name()), s.kind.name());
    let statuses: Vec<String> = by_status.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let _ = writeln!(
        md,
        "{runs} runs recorded of {} in the grid ({}{}); seeds {:?}, {} repetition(s) per cell and seed.\n",
        c.len(),
        statuses.join(", "),
        match c.len().saturating_sub(runs as u64) {
            0 => String::new(),
            n => format!("; {n} not recorded"),
        },
        s.seeds,
        s.repetitions
    );
    let _ = writeln!(
        md,
        "Rules (resilab's, after docs/metrics.md): shares are of the `ok` runs of a cell. **ACC**/**STD** are the mean and sample standard deviation of final test accuracy (%) over runs that did not collapse; **CV** = STD/ACC; **ACC all** is the mean over every run, collapsed runs counted at chance. **NaN**: runs that ended with a NaN/Inf loss or a NaN/Inf in their state (collapsed). **N-EV**, decided by the outcome: {} **EV injected**: runs whose injection itself left a NaN/Inf or a value above {:e} in the state, read from the altered files before any restart broadcast: the rate the injection alone predicts, reported beside N-EV, never instead; **N-EV vs EV injected** compares the two on the same runs (exact McNemar, Holm over the cells): `agree` when no difference is shown, else whether training added or removed N-EV. NaN and N-EV are decided from `runs.csv`'s evidence columns alone (`final_loss`, `final_train_loss`, `param_`/`buffer_`/`optim_non_finite`, `param_`/`buffer_`/`optim_max_abs`, `extreme_threshold`). **Step counter altered**: runs whose altered checkpoint restarted at another step than its base (a flip in the step counter), so their continuation trained another number of steps: their own class, outside N-EV, RWC, AccR and TF. **Load failed**: altered checkpoints that could not be loaded, a share of the runs that ran or met one. Of the other runs without N-EV, on rank 0 (the model a DDP job saves): **TF** final accuracy within 5 points of chance; **AccR** more than 5 points below the golden run's (and not TF); **RWC** within {} points of the golden run's (boundaries compared with a tolerance of {:e}, so 0.5 points above and below are alike). Data parallel, every replica evaluated (under DDP with rank 0's buffers, as its next forward pass would run): **RWC all replicas** every replica within the tolerance, **AccR all** / **TF all** the worst replica's class. Shares read `count (% [low, high])`, with the Wilson 95% interval; the normal-approximation margin at p = 0.5 (Leveugle et al. 2009) is given per cell for planning.\n",
        nev_rule(s.kind, s.extreme_threshold),
        s.extreme_threshold,
        s.rwc_tolerance_points,
        ACC_EPS
    );
    if cells.iter().any(|c| !c.outcomes.is_empty()) {
        md.push_str(crate::outcomes::RULE);
    }
    let cell_rows: Vec<rows::CellRow> = cells.iter().map(rows::CellRow::of).collect();
    // Columns empty in every cell are left out.
    let cols: Vec<_> = rows::CELL_TABLE.iter().filter(|(_, show)| cell_rows.iter().any(|r| !show(r).is_empty())).collect();
    let lead: Vec<String> = axes.iter().map(|a| a.strip_prefix("inject.").unwrap_or(a).to_string()).collect();
    let values = |c: &Cell| axes.iter().map(|a| c.coords.get(a).cloned().unwrap_or_default()).collect();
    md_table(&mut md, &lead, &cols, cells.iter().map(values).zip(&cell_rows));
    md
}

/// The N-EV rule of a campaign kind, in words.
fn nev_rule(kind: Kind, threshold: f64) -> String {
    match kind {
        Kind::Eval => {
            "nothing trains after the injection, so the outcome is the evaluation itself: runs whose test loss is NaN/Inf (NaN/Inf logits)."
                .into()
        }
        _ => format!(
            "runs whose continued training ended (or was stopped, once its state held a NaN/Inf, which no later step removes) with a NaN/Inf loss (the last training step's or the test set's), or with a NaN/Inf or a value above {threshold:e} in magnitude in a parameter, buffer or optimizer value. A NaN/Inf loss that training recovered from, or an injected extreme value it washed out, does not count."
        ),
    }
}

/// What a report directory holds: a directory given as `--out` holding anything else is
/// refused, since a report replaces its directory whole.
pub(crate) const REPORT_ENTRIES: &[&str] = &[
    "report.md",
    "cells.csv",
    "comparisons.csv",
    "bits.csv",
    "fields.csv",
    "cells_study.csv",
    "which_strategy.csv",
    "priced.csv",
    "break_even.csv",
    "which_strategy_jobs.csv",
    "outcomes.csv",
    "detectors.csv",
    "detector_choice.csv",
    "detector_classes.csv",
    "plots",
    resilab_runner::files::LOCK_FILE,
];

/// Reads a campaign directory and writes its report into `out`: `cells.csv`, the comparisons
/// (or the study's tests), the plots, and `report.md` that ties them together.
///
/// All or nothing: the report is written into a directory beside `out`, synced, and put in
/// `out`'s place in one rename, so a failure (a full disk) leaves the earlier report, or
/// nothing, never a part of one. `out` must be new, empty or hold an earlier report.
pub fn report(dir: &Path, out: &Path) -> Result<Written> {
    report_priced(dir, out, &price::Overrides::default())
}

/// [`report`] with every `train` run re-priced at the recovery constants `set` changes
/// ([`price::reprice`]): the overheads in simulated time and the study's choices follow the new
/// prices, `report.md` states them against the recorded ones, and `priced.csv` gives each run's
/// simulated seconds both ways. Without a change, [`report`] itself.
pub fn report_priced(dir: &Path, out: &Path, set: &price::Overrides) -> Result<Written> {
    report_with(dir, out, set, None)
}

/// [`report_priced`], with `detectors` the detectors scored from the runs' recorded signals
/// ([`crate::detectors`]): `detectors.csv`, `detector_choice.csv`, `detector_classes.csv`, their
/// section of `report.md` and `plots/detectors.png`.
pub fn report_with(dir: &Path, out: &Path, set: &price::Overrides, detectors: Option<&DetectorOptions>) -> Result<Written> {
    resilab_campaign::output::check_out_dir(out, "--out")?;
    let (campaign, recorded) = load(dir)?;
    let (rows, priced) = if set.is_empty() {
        (recorded, None)
    } else {
        let (rows, pairs, in_use) = price::reprice(&campaign, &recorded, set)?;
        let note = Priced { csv: price::priced_csv(&recorded, &rows)?, md: price::markdown(set, &pairs), in_use, profile: set.profile() };
        (rows, Some(note))
    };
    let jobs = set.jobs().unwrap_or(&campaign.settings.jobs);
    if set.jobs().is_some() && (campaign.settings.hypotheses.is_empty() || campaign.settings.kind != Kind::Train) {
        return Err(Error::Price("--at-jobs prices the \"which strategy when\" table of a `train` study: this campaign states no [[campaign.hypothesis]] or is not `train`".into()));
    }
    let created = !out.exists();
    let lock = resilab_runner::files::lock_dir(out, "--out")?;
    let extras = Extras { priced: priced.as_ref(), jobs, detectors };
    let written = check_report_dir(out).and_then(|()| staged_report(dir, out, &campaign, &rows, &extras));
    if written.is_err() && created {
        resilab_campaign::output::remove_if_bare(out);
    }
    drop(lock);
    written
}

/// What a re-priced report adds: `priced.csv` and its paragraph of `report.md`, and the
/// constants each run is priced at (by grid index).
struct Priced {
    csv: String,
    md: String,
    in_use: BTreeMap<u64, price::Prices>,
    /// `--price`'s profile.
    profile: Option<&'static resilab_recovery::profile::Profile>,
}

/// Fails when `out` holds something a report does not write (the report replaces it whole),
/// or a symbolic link where a report's file goes (in it or in its `plots/`), as every output
/// of resilab does.
fn check_report_dir(out: &Path) -> Result<()> {
    let io = |source| Error::Io { path: out.to_path_buf(), source };
    for e in std::fs::read_dir(out).map_err(io)? {
        let e = e.map_err(io)?;
        let name = e.file_name();
        if !REPORT_ENTRIES.iter().any(|r| name == *r) {
            return Err(Error::NotAReport { out: out.to_path_buf(), name: name.to_string_lossy().into_owned() });
        }
        let kind = e.file_type().map_err(io)?;
        if kind.is_symlink() {
            return Err(Error::Link(e.path()));
        }
        if kind.is_dir() {
            for p in std::fs::read_dir(e.path()).map_err(io)? {
                let p = p.map_err(io)?;
                if p.file_type().map_err(io)?.is_symlink() {
                    return Err(Error::Link(p.path()));
                }
            }
        }
    }
    Ok(())
}

/// Writes the report of `campaign`'s `rows` (from `dir`) beside `out` and puts it in `out`'s
/// place; the files returned are named in `out`.
/// What a report adds to a campaign's own tables: a re-pricing, the jobs its study's table is
/// priced at, the detectors' scores.
struct Extras<'a> {
    priced: Option<&'a Priced>,
    jobs: &'a [Job],
    detectors: Option<&'a DetectorOptions>,
}

fn staged_report(dir: &Path, out: &Path, campaign: &Campaign, rows: &[Row], extras: &Extras) -> Result<Written> {
    let staging = resilab_campaign::output::staging_dir(out)?;
    let io = |source| Error::Io { path: staging.clone(), source };
    // Left by a report that was killed: ours, since `out` is locked.
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io)?;
    }
    std::fs::create_dir(&staging).map_err(io)?;
    let written = write_report(dir, &staging, campaign, rows, extras).and_then(|w| {
        resilab_campaign::output::sync_tree(&staging)?;
        resilab_campaign::output::replace_dir(&staging, out)?;
        Ok(w)
    });
    match written {
        Ok(mut w) => {
            w.files = w.files.iter().map(|f| f.strip_prefix(&staging).map_or_else(|_| f.clone(), |rel| out.join(rel))).collect();
            Ok(w)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            Err(e)
        }
    }
}

/// Writes the report of `campaign`'s `rows` (from `dir`) into `out`, with what `extras` adds.
fn write_report(dir: &Path, out: &Path, campaign: &Campaign, rows: &[Row], extras: &Extras) -> Result<Written> {
    let (priced, jobs) = (extras.priced, extras.jobs);
    let facts = RunFacts::of(campaign, rows);
    let tol = campaign.settings.rwc_tolerance_points;
    let cells = cells(rows, |r| facts.chance(r), tol);
    let mut written = Written { cells: cells.len(), runs: rows.len(), files: Vec::new() };
    let (mut md, pareto) = tables(campaign, rows, &cells, out, &mut written)?;
    if let Some(p) = priced {
        written.files.push(write(&out.join("priced.csv"), &p.csv)?);
        md.push_str(&p.md);
    }
    let study = pareto.is_some();
    if study && campaign.settings.kind == Kind::Train {
        let prices = match priced {
            Some(p) => p.in_use.clone(),
            None => {
                rows.iter().map(|r| Ok((r.index, price::Prices::of(&campaign.run(r.index)?.config.recovery)))).collect::<Result<_>>()?
            }
        };
        break_even(campaign, rows, &prices, out, &mut md, &mut written)?;
        if !jobs.is_empty() {
            let verdicts = crate::jobs::verdicts(campaign, rows, &prices, priced.and_then(|p| p.profile), jobs)?;
            written.files.push(write(&out.join("which_strategy_jobs.csv"), &crate::jobs::csv(&verdicts)?)?);
            md.push_str(&crate::jobs::markdown(&verdicts));
        }
    }
    let plots = out.join("plots");
    std::fs::create_dir_all(&plots).map_err(|source| Error::Io { path: plots.clone(), source })?;
    // Axes with one option say nothing in a label; the first varying axis picks the colour.
    let fixed: Vec<&str> = campaign.axes.iter().filter(|a| a.options.len() < 2).map(|a| a.key.as_str()).collect();
    let palette = |coords: &BTreeMap<String, String>, skip: &[&str]| {
        let a = campaign.axes.iter().find(|a| a.options.len() > 1 && !skip.contains(&a.key.as_str()))?;
        a.options.iter().position(|o| coords.get(&a.key) == Some(&o.0))
    };
    let train = campaign.settings.kind == Kind::Train && !study;
    let mut figures: Vec<figures::Figure> = Vec::new();
    if study {
        let curves = crate::curves::accuracy_time(campaign, dir, rows, &plots)?;
        if curves.is_empty() && !dir.join("runs").is_dir() {
            let _ = writeln!(
                md,
                "\nNo plot of test accuracy against simulated time: it is drawn from each run's `runs/<id>/metrics.csv`, and the campaign directory has no `runs/` (a study's committed form keeps `runs.csv` only)."
            );
        }
        figures.extend(curves);
    }
    figures.extend(pareto.unwrap_or_default());
    figures.extend(figures::nev_vs_flips(campaign, &cells, &fixed, &palette, &plots)?);
    if train {
        figures.extend(figures::acc_vs_step(campaign, dir, rows, &cells, &fixed, &palette, &plots)?);
        figures.extend(loss_vs_overhead(campaign, &cells, &fixed, &palette, &plots)?);
    }
    let (by_layer, by_bit) = single_flip_tallies(rows, &facts);
    figures.extend(layer_figures(campaign, &by_layer, &plots)?);
    figures.extend(bit_figures(campaign, &by_bit, &plots, out, &mut written)?);
    if let Some((section, field_figures)) = crate::fields::section(rows, &campaign.name(), &plots, out, &mut written)? {
        md.push_str(&section);
        figures.extend(field_figures);
    }
    if let Some(o) = extras.detectors {
        let (section, figure) = crate::detector_report::write_section(dir, campaign, rows, out, o, &mut written)?;
        md.push_str(&section);
        figures.push(figure);
    }
    plots_markdown(&mut md, &figures, out, &mut written);
    written.files.push(write(&out.join("report.md"), &md)?);
    Ok(written)
}

/// `break_even.csv` of a `train` study ([`crate::breakeven`]), each run priced at `prices` (by
/// grid index: as recorded or re-priced), and its sentence in `report.md`; nothing for runs
/// recorded before the counts of priced events.
fn break_even(
    campaign: &Campaign,
    rows: &[Row],
    prices: &BTreeMap<u64, price::Prices>,
    out: &Path,
    md: &mut String,
    written: &mut Written,
) -> Result<()> {
    let axis = campaign.settings.hypotheses.first().map_or("recovery.strategy", |h| h.axis.as_str());
    let lines = crate::breakeven::rows(&study::group(campaign, rows, axis), prices);
    if lines.is_empty() {
        // Runs recorded before the counts of priced events: no line to read.
        return Ok(());
    }
    let csv = crate::rows::table::<crate::rows::BreakEven, _>(&[], lines.iter().map(|l| (Vec::new(), l)))?;
    written.files.push(write(&out.join("break_even.csv"), &csv)?);
    let _ = writeln!(
        md,
        "
`break_even.csv` gives, per condition and pair of options, the value of each recovery constant at which their mean overheads in simulated time would be equal, the others held: read from the runs' own events (each run's overhead is a line in each constant), not from a cost model, and empty where the constant moves both alike."
    );
    Ok(())
}

/// Every pairwise comparison of a campaign without hypotheses, as its report tests them.
pub(crate) fn pairwise(campaign: &Campaign, rows: &[Row]) -> Vec<Comparison> {
    let facts = RunFacts::of(campaign, rows);
    let order: BTreeMap<String, Vec<String>> =
        campaign.axes.iter().map(|a| (a.key.clone(), a.options.iter().map(|o| o.0.clone()).collect())).collect();
    comparisons(rows, &campaign.axis_keys(), &order, &|r: &Row| facts.chance(r), campaign.settings.rwc_tolerance_points)
}

/// A campaign directory's campaign and recorded runs (`runs.jsonl`, or `runs.csv` alone: the
/// committed form of a study), each checked against the grid and one per grid index (an error
/// if none are recorded yet).
pub(crate) fn load(dir: &Path) -> Result<(Campaign, Vec<Row>)> {
    let campaign = Campaign::stored(dir)?;
    let rows = resilab_campaign::read_record(dir, &campaign)?;
    if rows.is_empty() {
        return Err(Error::Empty(format!("{}: no runs recorded yet", resilab_campaign::record_path(dir).display())));
    }
    Ok((campaign, rows))
}

/// What each run's grid point says beyond its row: chance accuracy and the float precision
/// its injector altered.
struct RunFacts {
    chance_of: BTreeMap<u64, f64>,
    precision_of: BTreeMap<u64, String>,
}

impl RunFacts {
    fn of(campaign: &Campaign, rows: &[Row]) -> Self {
        let (mut chance_of, mut precision_of) = (BTreeMap::new(), BTreeMap::new());
        for r in rows {
            if let Ok(spec) = campaign.run(r.index) {
                chance_of.insert(r.index, 1.0 / spec.config.data.classes.max(1) as f64);
                let p =
                    spec.inject.get("float_precision").map_or("32".to_string(), |v| v.to_string().trim_matches('"').replace("auto", "32"));
                precision_of.insert(r.index, p);
            }
        }
        Self { chance_of, precision_of }
    }

    /// Chance accuracy of the run's data (0.1 when its grid point is unknown).
    fn chance(&self, r: &Row) -> f64 {
        self.chance_of.get(&r.index).copied().unwrap_or(0.1)
    }

    /// The float precision the run altered (`32` when unknown).
    fn precision(&self, r: &Row) -> String {
        self.precision_of.get(&r.index).cloned().unwrap_or_else(|| "32".into())
    }
}

/// Writes `cells.csv` and the comparisons (the study's tests when the campaign states
/// hypotheses, else every pair of options), and returns the report's markdown so far and
/// for a study, its Pareto plots (one per condition), which the plots section embeds.
fn tables(
    campaign: &Campaign,
    rows: &[Row],
    cells: &[Cell],
    out: &Path,
    written: &mut Written,
) -> Result<(String, Option<Vec<figures::Figure>>)> {
    let axes = campaign.axis_keys();
    let mut by_status = BTreeMap::new();
    for r in rows {
        *by_status.entry(r.status.name().to_string()).or_insert(0u64) += 1;
    }
    written.files.push(write(&out.join("cells.csv"), &cells_csv(&axes, cells)?)?);
    if let Some(text) = crate::outcomes::csv(&axes, cells)? {
        written.files.push(write(&out.join("outcomes.csv"), &text)?);
    }
    let mut md = markdown(campaign, &axes, cells, rows.len(), &by_status);
    let Some(s) = study::study(campaign, rows) else {
        let diffs = pairwise(campaign, rows);
        written.files.push(write(&out.join("comparisons.csv"), &comparisons_csv(&diffs)?)?);
        comparisons_md(&mut md, &diffs);
        return Ok((md, None));
    };
    let (files, pareto) = study::write(&s, out)?;
    written.files.extend(files);
    md.push_str(&study::markdown(campaign, &s));
    Ok((md, Some(pareto)))
}

/// Accuracy loss against overhead in simulated time, one point per cell that has both.
fn loss_vs_overhead(
    campaign: &Campaign,
    cells: &[Cell],
    fixed: &[&str],
    palette: &figures::Palette<'_>,
    plots: &Path,
) -> Result<Option<figures::Figure>> {
    let shown: Vec<&Cell> = cells.iter().filter(|c| c.sim_overhead_pct.is_some() && c.acc_loss.is_some()).collect();
    let points: Vec<(String, f64, f64)> =
        shown.iter().filter_map(|c| Some((label(&c.coords, fixed), c.sim_overhead_pct?, c.acc_loss?))).collect();
    if points.is_empty() {
        return Ok(None);
    }
    let chart = Scatter {
        title: format!("Accuracy loss vs simulated overhead ({})", campaign.name()),
        x_label: "overhead in simulated time vs golden run (%)".into(),
        y_label: "accuracy loss vs golden run (points)".into(),
        points,
        colors: shown.iter().enumerate().map(|(i, c)| palette(&c.coords, fixed).unwrap_or(i)).collect(),
    };
    let caption = "Accuracy loss vs overhead in simulated time per cell (means; wall time in the table)";
    Ok(Some((caption.to_string(), save(&chart, &plots.join("loss_vs_overhead"))?)))
}

/// The runs that ended with exactly one value altered, tallied per layer (prefixed by the
/// model when the grid varies it) and per (precision, bit position).
fn single_flip_tallies(rows: &[Row], facts: &RunFacts) -> (BTreeMap<String, Tally>, BTreeMap<(String, u64), Tally>) {
    let mut by_layer: BTreeMap<String, Tally> = BTreeMap::new();
    let mut by_bit: BTreeMap<(String, u64), Tally> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.status == Status::Ok && r.metrics.values_corrupted == Some(1)) {
        let nev = metrics::nev(r);
        let nan = metrics::collapsed(r);
        let loss = r.metrics.acc_loss.filter(|l| l.is_finite() && !nan);
        if let Some(l) = crate::format::single(r.metrics.layers.as_deref()) {
            let model = r.coords.get("model").map_or(String::new(), |m| format!("{m}: "));
            by_layer.entry(format!("{model}{}", resilab_campaign::layers::layer(l))).or_default().add(nev, nan, loss);
        }
        if let Some(b) = r.metrics.bits.as_deref().and_then(|b| b.parse::<u64>().ok()) {
            // A `train` run names the word it flipped (`bf16` and `f16` are both 16 bits).
            let word = crate::format::single(r.metrics.words.as_deref()).map(str::to_string);
            by_bit.entry((word.unwrap_or_else(|| facts.precision(r)), b)).or_default().add(nev, nan, loss);
        }
    }
    (by_layer, by_bit)
}

/// Per-layer N-EV share and mean accuracy loss, when at least two layers were hit.
fn layer_figures(campaign: &Campaign, by_layer: &BTreeMap<String, Tally>, plots: &Path) -> Result<Vec<figures::Figure>> {
    if by_layer.len() < 2 {
        return Ok(Vec::new());
    }
    let bars = |title: &str, x: &str, v: &dyn Fn(&Tally) -> (f64, Interval)| Bars {
        title: format!("Per-layer vulnerability: {title} ({})", campaign.name()),
        x_label: x.into(),
        bars: by_layer.iter().map(|(l, e)| (format!("{l} (n={})", e.runs), v(e).0, v(e).1)).collect(),
    };
    let nev = bars("N-EV", "runs with N-EV after one flip in the layer (%)", &|e| e.pct(e.nev));
    let loss = bars("accuracy loss", "mean accuracy loss after one flip in the layer (points)", &|e| (e.mean_loss().unwrap_or(0.0), None));
    Ok(vec![
        (
            "Per-layer vulnerability: N-EV share of single-flip runs per layer (Wilson 95% intervals)".to_string(),
            save(&nev, &plots.join("layers_nev"))?,
        ),
        (
            "Per-layer vulnerability: mean accuracy loss of single-flip runs per layer".to_string(),
            save(&loss, &plots.join("layers_acc_loss"))?,
        ),
    ])
}

/// Per-bit N-EV, NaN/Inf share and mean accuracy loss, one series per precision, and
/// `bits.csv`, when at least four bit positions were hit.
fn bit_figures(
    campaign: &Campaign,
    by_bit: &BTreeMap<(String, u64), Tally>,
    plots: &Path,
    out: &Path,
    written: &mut Written,
) -> Result<Vec<figures::Figure>> {
    // Bit positions are categories: only those flipped are shown, none joined by a line.
    let categories: Vec<u64> = by_bit.keys().map(|k| k.1).collect::<std::collections::BTreeSet<u64>>().into_iter().collect();
    if categories.len() < 4 {
        return Ok(Vec::new());
    }
    written.files.push(write(&out.join("bits.csv"), &bits_csv(by_bit)?)?);
    let (mut nev, mut loss, mut nan): (BTreeMap<String, Series>, BTreeMap<String, Series>, BTreeMap<String, Series>) = Default::default();
    for ((p, b), e) in by_bit {
        let x = categories.iter().position(|c| c == b).unwrap_or(0) as f64;
        let l = if p.parse::<u32>().is_ok() { format!("{p}-bit") } else { p.clone() };
        let ((v, m), (w, n)) = (e.pct(e.nev), e.pct(e.nan));
        push_point(&mut nev, &l, (x, v, m));
        push_point(&mut nan, &l, (x, w, n));
        if let Some(mean) = e.mean_loss() {
            push_point(&mut loss, &l, (x, mean, None));
        }
    }
    let pct = Some((-2.0, 102.0));
    let charts = [
        ("N-EV", "runs with NaN/Inf/extreme values (%)", pct, nev, "bits_nev", "N-EV share per bit position (Wilson 95% intervals)"),
        ("NaN/Inf", "runs with NaN/Inf values (%)", pct, nan, "bits_nan", "NaN/Inf share per bit position (Wilson 95% intervals)"),
        (
            "accuracy loss",
            "mean accuracy loss, runs without NaN (points)",
            None,
            loss,
            "bits_acc_loss",
            "mean accuracy loss per bit position",
        ),
    ];
    let mut figures = Vec::new();
    for (what, y_label, y_range, series, stem, caption) in charts {
        let chart = LineChart {
            title: format!("Per-bit sensitivity: {what} ({})", campaign.name()),
            x_label: "bit flipped (0 = sign, then exponent MSB first)".into(),
            y_label: y_label.into(),
            log_x: false,
            y_range,
            x_range: None,
            categories: categories.iter().map(u64::to_string).collect(),
            series: series.into_values().collect(),
        };
        figures.push((format!("Per-bit sensitivity: {caption}"), save(&chart, &plots.join(stem))?));
    }
    Ok(figures)
}

/// The report's plots section: each figure's PNG with its caption; their files join `written`.
fn plots_markdown(md: &mut String, figures: &[figures::Figure], out: &Path, written: &mut Written) {
    if figures.is_empty() {
        return;
    }
    md.push_str("\n## Plots\n\n");
    for (caption, files) in figures {
        if let Some(png) = files.first().and_then(|p| p.strip_prefix(out).ok()) {
            md.push_str(&format!("![{caption}]({})\n\n*{caption}* (also as SVG)\n\n", png.display()));
        }
        written.files.extend(files.iter().cloned());
    }
}
