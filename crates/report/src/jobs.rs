//! The "which strategy when" table priced at real jobs (`[[campaign.job]]`, docs/recovery.md,
//! "Priced at real jobs"). A study's runs meet many faults each, so that accuracy effects show;
//! a real job fails every few thousand steps. Each job keeps the accuracy side of the runs and
//! prices the cost side at the job:
//!
//! - each run is re-priced ([`crate::price`], exact) at the runs' cost profile scaled to the
//!   job's step: a constant of X s costs X / `step_s` of the job's steps, and the same number of
//!   the run's own fault-free steps (scale = the run's fault-free step over the job's step,
//!   the golden run's simulated seconds per step);
//! - its overhead is then scaled by the job's failures per step over the run's crashes per
//!   step (its random crash arrivals): the run's cost per fault at the job's fault rate, each
//!   crash with the study's own mix of other faults (silent flips).
//!
//! What stays the study's: the costs paid without faults (checkpoint writes at the condition's
//! interval, rollback's copy), which scale with the faults here (`resilab project` prices a job's
//! own), and the work a reload in place loses, at the condition's checkpoint interval. The
//! choice is then the study's own rule on these overheads, so its tests and "undecided" carry
//! the runs' spread.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use resilab_campaign::{Campaign, Row};
use resilab_faults::FaultTarget;
use resilab_recovery::job::Job;
use resilab_recovery::profile::{self, Profile};
use resilab_runner::RunConfig;

use crate::choice::{Choice, Rules, choose};
use crate::error::{Error, Result};
use crate::price::{Prices, reprice_row};
use crate::rows::{CHOICE_TABLE, ChoiceRow};

/// One job's verdict, a choice per condition.
pub(crate) struct AtJob<'a> {
    pub(crate) job: &'a Job,
    pub(crate) choices: Vec<Choice>,
}

/// The verdicts at the jobs, beside the study's own (its runs at their prices).
pub(crate) struct Verdicts<'a> {
    /// The profile the jobs are priced at.
    pub(crate) profile: &'static Profile,
    /// The study's choices, per condition.
    pub(crate) study: Vec<Choice>,
    /// Each job's.
    pub(crate) jobs: Vec<AtJob<'a>>,
}

/// Crashes per step that `cfg`'s random arrivals bring (`system_mtbf_steps`: one a mean time;
/// `mtbf_steps`: one per rank it may hit).
pub(crate) fn crashes_per_step(cfg: &RunConfig) -> f64 {
    let ranks = cfg.parallel.world().max(1) as f64;
    let entries = cfg.faults.entries().iter().filter(|e| e.target == FaultTarget::Crash);
    entries
        .map(|e| match (e.mtbf_steps, e.system_mtbf_steps) {
            (Some(m), _) if m > 0.0 => (if e.worker.is_some() { 1.0 } else { ranks }) / m,
            (None, Some(m)) if m > 0.0 => 1.0 / m,
            _ => 0.0,
        })
        .sum()
}

/// `row` (priced at `recorded`) at `job`: re-priced at `p` scaled to the job's step, its
/// overhead times the job's failures per step over the run's crashes per step.
fn at_job(row: &Row, cfg: &RunConfig, recorded: Prices, p: &Profile, job: &Job) -> Result<Row> {
    let (Some(golden_s), Some(steps)) = (row.metrics.golden_sim_s.filter(|g| *g > 0.0), cfg.train.steps) else {
        let mut out = row.clone();
        out.metrics.sim_overhead = None;
        return Ok(out);
    };
    let rate = crashes_per_step(cfg);
    if rate <= 0.0 {
        return Err(Error::Price(format!(
            "campaign.job {:?}: run {} meets no random crashes (a crash fault with system_mtbf_steps or mtbf_steps), so no job's failure rate scales its costs",
            job.name, row.id
        )));
    }
    let scale = golden_s / steps as f64 / job.step_s;
    let [detect_timeout_s, rebuild_s, relaunch_s] = p.scaled(scale);
    let at = Prices { detect_timeout_s, rebuild_s, relaunch_s, covers_redo: p.relaunch_covers_redo };
    let mut out = reprice_row(row, recorded, at)?;
    out.metrics.sim_overhead = out.metrics.sim_overhead.map(|o| o * job.failures_per_step() / rate);
    Ok(out)
}

/// The profile a job prices at: `priced`'s (`--price`), else the runs' own `recovery.profile`
/// (one for all `configs`).
fn profile_of(configs: &[RunConfig], priced: Option<&'static Profile>) -> Result<&'static Profile> {
    if let Some(p) = priced {
        return Ok(p);
    }
    let names: std::collections::BTreeSet<&Option<String>> = configs.iter().map(|c| &c.recovery.profile).collect();
    match names.into_iter().collect::<Vec<_>>().as_slice() {
        [Some(name)] => profile::profile(name).ok_or_else(|| Error::Price(format!("recovery.profile = {name:?} is not a cost profile"))),
        _ => Err(Error::Price(
            "campaign.job: a job is priced at a cost profile, and the runs do not share one recovery.profile; give `--price PROFILE`"
                .into(),
        )),
    }
}

/// Every job's verdict (`jobs`: `--at-jobs`' or the campaign's): each run of `rows` (priced at `prices` by grid index, else at its own
/// configuration's constants) at the job, grouped by condition along `axis`, and chosen by the
/// campaign's rules. `priced`: the profile of `--price`.
pub(crate) fn verdicts<'a>(
    campaign: &'a Campaign,
    rows: &[Row],
    prices: &BTreeMap<u64, Prices>,
    priced: Option<&'static Profile>,
    jobs: &'a [Job],
) -> Result<Verdicts<'a>> {
    let settings = &campaign.settings;
    let axis = settings.hypotheses.first().map_or("recovery.strategy", |h| h.axis.as_str());
    // Each run's configuration, built once for every job.
    let configs = rows.iter().map(|r| Ok(campaign.run(r.index)?.config)).collect::<Result<Vec<RunConfig>>>()?;
    let p = profile_of(&configs, priced)?;
    let rules = Rules::of(settings);
    let paired = settings.paired_axes().iter().any(|a| a == axis);
    let study = crate::study::group(campaign, rows, axis).iter().map(|(c, opts)| choose(c, opts, &rules, paired)).collect();
    let mut out = Vec::new();
    for job in jobs {
        let mut at = Vec::with_capacity(rows.len());
        for (r, cfg) in rows.iter().zip(&configs) {
            let recorded = prices.get(&r.index).copied().unwrap_or_else(|| Prices::of(&cfg.recovery));
            at.push(at_job(r, cfg, recorded, p, job)?);
        }
        let groups = crate::study::group(campaign, &at, axis);
        let choices = groups.iter().map(|(c, opts)| choose(c, opts, &rules, paired)).collect();
        out.push(AtJob { job, choices });
    }
    Ok(Verdicts { profile: p, study, jobs: out })
}

/// `which_strategy_jobs.csv`: `which_strategy.csv`'s columns after the job's name.
pub(crate) fn csv(v: &Verdicts) -> Result<String> {
    let lines = v.jobs.iter().flat_map(|v| v.choices.iter().map(|c| (vec![v.job.name.clone()], ChoiceRow::of(c))));
    crate::rows::table::<ChoiceRow, _>(&["job".to_string()], lines)
}

/// A choice in one cell: `lossy_forward (0.37%)`, `a = b (undecided, 0.37%)`, `undecided`.
fn in_brief(c: &Choice) -> String {
    let choice = resilab_text::markdown(&c.choice);
    match (c.sim_overhead, c.decided) {
        (Some(o), true) => format!("{choice} ({o:.2}%)"),
        (Some(o), false) => format!("{choice} (undecided, {o:.2}%)"),
        (None, _) => choice,
    }
}

/// The conditions' choices side by side: the study's, then each job's, each with the cheapest
/// chosen option's mean overhead.
fn side_by_side(v: &Verdicts) -> String {
    let mut md = String::new();
    let names: Vec<String> = v.jobs.iter().map(|j| resilab_text::markdown(&j.job.name)).collect();
    let _ = writeln!(md, "| condition | golden SD (points) | the runs' own prices | {} |", names.join(" | "));
    let _ = writeln!(md, "|{}|", vec!["---"; 3 + names.len()].join("|"));
    for (i, c) in v.study.iter().enumerate() {
        let sd = c.golden_sd.map_or_else(|| "n/a".to_string(), |s| format!("{s:.2}"));
        let at: Vec<String> = v.jobs.iter().map(|j| j.choices.get(i).map_or_else(String::new, in_brief)).collect();
        let _ = writeln!(md, "| {} | {sd} | {} | {} |", resilab_text::markdown(&c.condition), in_brief(c), at.join(" | "));
    }
    md
}

/// `report.md`'s section: the rule, the jobs, the choices side by side, and each job's table.
pub(crate) fn markdown(v: &Verdicts) -> String {
    let (p, verdicts) = (v.profile, &v.jobs);
    let mut md = format!(
        "\n## Priced at real jobs\n\nThe table above at each job of `[[campaign.job]]` (`which_strategy_jobs.csv`): the accuracy side from the runs as they are (many faults per run, so that effects show); the cost side at the job. Each run is re-priced at the cost profile `{}` ({}) scaled to the job's step (a constant of X s costs X / step of the job's steps, and as many of the run's own fault-free steps), and its overhead scaled by the job's failures per step over the run's crashes per step: the runs' cost per fault at the job's rate, each crash with the study's own mix of silent flips. The choice is the same rule on these overheads. What stays the study's: the costs paid without faults (checkpoint writes, rollback's copy), which scale with the faults here (`resilab project` prices a job's own), and the work lost per reload in place, at the study's checkpoint interval.\n\n",
        p.name, p.system
    );
    let _ = writeln!(
        md,
        "| job | GPUs | GPUs per node | step (s) | node failures per 1,000 node-days | a failure every (h) | a failure every (steps) | rate's source |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
    for v in verdicts {
        let j = v.job;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {:.1} | {:.0} | {} |",
            resilab_text::markdown(&j.name),
            j.gpus,
            j.gpus_per_node,
            j.step_s,
            j.failures_per_1000_node_days,
            j.mtbf_s() / 3_600.0,
            j.mtbf_steps(),
            resilab_text::markdown(j.source.as_deref().unwrap_or("not given"))
        );
    }
    let _ = writeln!(
        md,
        "\nThe choices side by side (each with the mean overhead of the cheapest chosen option, % of the fault-free time; the accuracy columns are the table above's):\n"
    );
    md.push_str(&side_by_side(v));
    for v in verdicts {
        let _ = writeln!(md, "\n### Which strategy when: {}\n", resilab_text::markdown(&v.job.name));
        let rows: Vec<ChoiceRow> = v.choices.iter().map(ChoiceRow::of).collect();
        crate::md::md_table(&mut md, &[], &CHOICE_TABLE.iter().collect::<Vec<_>>(), rows.iter().map(|r| (Vec::new(), r)));
    }
    md
}

/// An `--at-jobs` file: `[[job]]` tables.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JobsFile {
    job: Vec<Job>,
}

/// Reads an `--at-jobs` file (TOML, `[[job]]` tables with the keys of `[[campaign.job]]`); the
/// error names the file and the key.
pub fn read_jobs(path: &std::path::Path) -> Result<Vec<Job>> {
    let bad = |what: String| Error::Price(format!("--at-jobs {}: {what}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let file: JobsFile = toml::from_str(&text).map_err(|e| bad(e.to_string().trim_end().replace('\n', " ")))?;
    for (i, j) in file.job.iter().enumerate() {
        j.validate(&format!("job[{i}]")).map_err(bad)?;
    }
    if file.job.is_empty() {
        return Err(bad("no [[job]] table".into()));
    }
    Ok(file.job)
}
