//! `campaign --dry-run`: the runs still to do and the time they will take, from the costs of
//! each model set-up measured here: building the trainer, a training step, the state scan a
//! `restart` run makes after each step, the evaluations a run makes, and writing and reading
//! the checkpoint an altered run copies, alters and restores.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use resilab_checkpoint::OnMismatch;
use resilab_models::Compute;
use resilab_recovery::detect::workers_scan;
use resilab_runner::{RunConfig, build_trainer};
use serde::Serialize;

use crate::exec::{bases_to_prepare, pending};
use crate::spec::{Campaign, Kind};
use crate::store::read_rows;
use crate::{Error, RUNS_JSONL, Result};

/// What one model set-up costs, in seconds, measured on this machine.
#[derive(Clone, Debug, Serialize)]
pub struct SetupCost {
    /// The model and its workers, in words.
    pub label: String,
    /// Loading the data (once per worker process).
    pub data_s: f64,
    /// Building the trainer (once per run).
    pub build_s: f64,
    /// One training step.
    pub step_s: f64,
    /// The state scan after a `restart` run's step.
    pub scan_s: f64,
    /// Evaluating the test set as a run does (every distinct replica).
    pub eval_s: f64,
    /// Writing the checkpoint.
    pub save_s: f64,
    /// Reading the checkpoint back and restoring it.
    pub load_s: f64,
}

/// A dry run's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Estimate {
    /// Runs in this shard.
    pub runs: u64,
    /// Of those, still to do.
    pub todo: u64,
    /// Base (or golden) runs to train first.
    pub bases: u64,
    /// The measured costs, per distinct model set-up.
    pub setups: Vec<SetupCost>,
    /// Estimated seconds for the whole shard with the given worker processes: the bases first
    /// (side by side, as many at once as there are processes), then the runs.
    pub eta_s: f64,
    /// The same if every `restart` run stopped after its first step (`stop_at_collapse`: a run
    /// whose state holds a NaN/Inf stops there). Equal to `eta_s` for other kinds.
    pub eta_min_s: f64,
}

/// Counts the runs still to do in `out` and estimates their time on `compute` with `jobs`
/// worker processes, from costs measured now (one warm-up step, then three timed).
pub fn estimate(
    campaign: &Campaign,
    out: &Path,
    shard: Option<(u64, u64)>,
    jobs: usize,
    platform: &str,
    compute: &Compute,
) -> Result<Estimate> {
    let done: HashSet<String> = read_rows(&out.join(RUNS_JSONL), campaign, false)?.into_iter().map(|r| r.id).collect();
    let (runs, todo) = pending(campaign, shard, &done)?;
    let preps: HashSet<u64> = bases_to_prepare(campaign, out, &todo, platform).iter().map(|s| s.index).collect();
    let mut costs: HashMap<String, SetupCost> = HashMap::new();
    let (mut runs_s, mut runs_min_s, mut bases_s, mut data_s) = (0.0, 0.0, 0.0, 0.0);
    for spec in &todo {
        let c = &spec.config;
        let setup =
            [toml::to_string(&c.model), toml::to_string(&c.data), toml::to_string(&c.parallel)].map(|t| t.unwrap_or_default()).join("|")
                + &c.train.batch_size.to_string();
        if !costs.contains_key(&setup) {
            let cost = measure(campaign, c, compute)?;
            data_s += cost.data_s * jobs.min(todo.len()) as f64;
            costs.insert(setup.clone(), cost);
        }
        let cost = &costs[&setup];
        runs_s += run_s(campaign, c, cost, campaign.settings.steps.unwrap_or(0));
        let first_only = if campaign.settings.stop_at_collapse { 1 } else { campaign.settings.steps.unwrap_or(0) };
        runs_min_s += run_s(campaign, c, cost, first_only.min(campaign.settings.steps.unwrap_or(0)));
        if preps.contains(&spec.index) {
            bases_s += base_s(campaign, c, cost);
        }
    }
    let mut setups: Vec<SetupCost> = costs.into_values().collect();
    setups.sort_by(|a, b| a.label.cmp(&b.label));
    let jobs = jobs.max(1) as f64;
    let fixed = data_s / jobs + bases_s / jobs.min(preps.len().max(1) as f64);
    let (eta_s, eta_min_s) = (fixed + runs_s / jobs, fixed + runs_min_s / jobs);
    Ok(Estimate { runs, todo: todo.len() as u64, bases: preps.len() as u64, setups, eta_s, eta_min_s })
}

/// Seconds one run takes: an altered run copies, alters and restores the base checkpoint
/// (about two writes and a read), then trains `steps` steps with a scan after each (`restart`)
/// and evaluates; a `train` run trains its whole length and evaluates each epoch.
fn run_s(campaign: &Campaign, c: &RunConfig, k: &SetupCost, steps: u64) -> f64 {
    let s = &campaign.settings;
    let altered = k.build_s + 2.0 * k.save_s + k.load_s + k.eval_s;
    match s.kind {
        Kind::Restart => altered + steps as f64 * (k.step_s + k.scan_s),
        // The altered replica differs from the others, so a data-parallel run evaluates two.
        Kind::Eval => altered + if c.parallel.world() > 1 { k.eval_s } else { 0.0 },
        Kind::Train => train_s(c, k),
    }
}

/// Seconds a base takes: `base_steps` steps, the checkpoint, then (`restart`) the golden
/// continuation and an evaluation; a `train` campaign's golden run is a whole run.
fn base_s(campaign: &Campaign, c: &RunConfig, k: &SetupCost) -> f64 {
    let s = &campaign.settings;
    let trained = s.base_steps.unwrap_or(0) + if s.kind == Kind::Restart { s.steps.unwrap_or(0) } else { 0 };
    match s.kind {
        Kind::Train => train_s(c, k),
        _ => k.build_s + trained as f64 * k.step_s + k.save_s + k.eval_s,
    }
}

/// Seconds of a whole training run of `c`: its steps and its evaluations (every
/// `train.eval_every` steps, else each epoch, and at the end).
fn train_s(c: &RunConfig, k: &SetupCost) -> f64 {
    let per_epoch = (c.data.train_size.unwrap_or(resilab_data::DEFAULT_TRAIN_SIZE) / c.train.batch_size.max(1)).max(1) as u64;
    let steps = c.train.total_steps(per_epoch);
    let evals = steps / c.train.eval_every.unwrap_or(per_epoch).max(1) + 1;
    k.build_s + steps as f64 * k.step_s + evals as f64 * k.eval_s
}

/// Measures one set-up's costs on `compute`, writing its checkpoint to a scratch directory.
fn measure(campaign: &Campaign, c: &RunConfig, compute: &Compute) -> Result<SetupCost> {
    let runner = |e: resilab_train::Error| Error::from(resilab_runner::Error::from(e));
    let t = Instant::now();
    let split = Arc::new(resilab_data::load(&c.data).map_err(resilab_runner::Error::from)?);
    let data_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut trainer = build_trainer(c, split, compute)?;
    let build_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    trainer.step().map_err(runner)?;
    let first_s = t.elapsed().as_secs_f64();
    // The checkpoint while the state is still within the run's steps (a restore checks that).
    let (save_s, load_s) = checkpoint_costs(c, &mut trainer)?;
    // At least three steps and a quarter of a second, so that one slow step does not decide;
    // never past the run's last step.
    let (t, mut n) = (Instant::now(), 0u32);
    while !trainer.done() && (n < 3 || (t.elapsed().as_secs_f64() < 0.25 && n < 50)) {
        trainer.step().map_err(runner)?;
        n += 1;
    }
    let step_s = if n == 0 { first_s } else { t.elapsed().as_secs_f64() / f64::from(n) };
    let t = Instant::now();
    let _ = workers_scan(&trainer.workers, campaign.settings.extreme_threshold);
    let scan_s = t.elapsed().as_secs_f64();
    // The first evaluation allocates its buffers: the second is what each run pays.
    let _ = trainer.evaluate_replicas(campaign.settings.kind == Kind::Restart);
    let t = Instant::now();
    let _ = trainer.evaluate_replicas(campaign.settings.kind == Kind::Restart);
    let eval_s = t.elapsed().as_secs_f64();
    let label = format!("{} ({})", c.model.label(), c.parallel.describe());
    Ok(SetupCost { label, data_s, build_s, step_s, scan_s, eval_s, save_s, load_s })
}

/// Seconds to write the trainer's state as a checkpoint in a scratch directory, and to read it
/// back and restore it.
fn checkpoint_costs(c: &RunConfig, trainer: &mut resilab_train::Trainer) -> Result<(f64, f64)> {
    let scratch = std::env::temp_dir().join(format!("resilab-dry-run.{}", std::process::id()));
    let meta = resilab_checkpoint::Meta { seed: c.seed, arch: c.model.label(), config: c.to_toml() };
    let t = Instant::now();
    let saved = resilab_checkpoint::save(&scratch, &trainer.snapshot(), &meta);
    let save_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let loaded = saved.and_then(|dir| resilab_checkpoint::load(&dir, &trainer.snapshot(), OnMismatch::Load, &resilab_checkpoint::no_probe));
    let _ = std::fs::remove_dir_all(&scratch);
    let (state, _) = loaded.map_err(resilab_runner::Error::from)?;
    trainer.restore(&state).map_err(|e| Error::from(resilab_runner::Error::from(e)))?;
    Ok((save_s, t.elapsed().as_secs_f64()))
}
