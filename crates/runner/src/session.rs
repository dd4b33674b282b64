//! The training loop of one run and the files it writes as it goes: each step through the
//! rec, restarts from checkpoints, checkpoint writes and checkpoint faults, evaluations,
//! `metrics.csv`, `compare.csv` and `faults.jsonl`, and at the end the [`Summary`].

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use resilab_checkpoint::{Meta, OnMismatch};
use resilab_data::Split;
use resilab_faults::FaultEvent;
use resilab_faults::FaultInjector;
use resilab_recovery::detect::{Health, workers_health};
use resilab_recovery::{CrashCharges, Decision, Detection, Guard, crash_charges};
use resilab_train::{Evaluation, StepOutcome, StepStats, TrainState, Trainer};

use crate::golden::Golden;
use crate::records::{
    CompareRow, FaultCounts, MetricsRow, Restart, ResumeRecord, RunOptions, SimulatedTime, Summary, append_fault_log, open_metrics,
    params_digest, stage_blocks,
};
use crate::{Error, Result, RunConfig, csv_err, io};

mod losses;
pub mod samples;
mod shortcut;

/// What the run's losses came to.
#[derive(Debug, Default)]
pub(crate) struct LossTally {
    permanent_losses: u64,
    spares_used: u64,
    fallbacks: u64,
    reinits: u64,
    /// Steps computed (redone and recomputed ones included) at each number of workers.
    steps_at: BTreeMap<usize, u64>,
}

impl LossTally {
    /// One step computed by `workers` workers.
    pub(crate) fn count_step(&mut self, workers: usize) {
        *self.steps_at.entry(workers).or_default() += 1;
    }
}

/// Counters of the loop that end up in the summary.
#[derive(Default)]
struct Tally {
    restarts: Vec<Restart>,
    /// Steps whose update a loss scaler skipped (any worker's).
    overflow_steps: u64,
    /// Faults that altered values in a step whose update a loss scaler skipped.
    scaler_skipped_faults: u64,
    steps_lost: u64,
    redos: u64,
    failed: bool,
    checkpoints: usize,
    checkpoint_s: f64,
    checkpoint_bytes: u64,
    train_s: f64,
    sim_s: f64,
    comm_s: f64,
    comm_bytes: u64,
    snapshot_s: f64,
    redo_s: f64,
    storage_s: f64,
    crash_lost_s: f64,
    relaunch_s: f64,
    /// Restarts from a checkpoint that relaunched the job (a process had died).
    relaunches: u64,
    /// Restarts from a checkpoint that reloaded it in the running processes.
    in_place_reloads: u64,
    /// Simulated seconds of the checkpoint reads and recomputed steps after relaunches, until
    /// the job was back at the step it had reached: charged, or covered by the relaunch
    /// (`recovery.relaunch_covers_redo`) and so not in `sim_s`.
    relaunch_redo_s: f64,
    /// Failure detection: `recovery.detect_timeout_s` per step with crashes the job went on after.
    detect_s: f64,
    /// Times `recovery.detect_timeout_s` was charged.
    detect_charges: u64,
    /// Communicator rebuilds: `recovery.rebuild_s` per membership change of a job that goes on.
    rebuild_s: f64,
    /// Times `recovery.rebuild_s` was charged.
    rebuilds: u64,
    transfer_s: f64,
    losses: LossTally,
    /// Why the run failed, when it did.
    failure: Option<String>,
    /// Simulated seconds at the first evaluation that reached the golden run's final accuracy.
    time_to_golden_acc_s: Option<f64>,
    /// The first step of the final timeline whose training loss was NaN/Inf.
    first_non_finite_step: Option<u64>,
}

impl Tally {
    /// The simulated time and its parts, as `summary.json` reports them.
    fn simulated_time(&self) -> SimulatedTime {
        SimulatedTime {
            simulated_s: self.sim_s,
            simulated_comm_s: self.comm_s,
            simulated_snapshot_s: self.snapshot_s,
            simulated_redo_s: self.redo_s,
            simulated_storage_s: self.storage_s,
            simulated_crash_lost_s: self.crash_lost_s,
            simulated_relaunch_s: self.relaunch_s,
            relaunches: self.relaunches,
            in_place_reloads: self.in_place_reloads,
            simulated_relaunch_redo_s: self.relaunch_redo_s,
            simulated_detect_s: self.detect_s,
            detect_charges: self.detect_charges,
            simulated_rebuild_s: self.rebuild_s,
            rebuilds: self.rebuilds,
            simulated_transfer_s: self.transfer_s,
        }
    }

    /// A restart went back to `step`: a NaN/Inf loss after it is no longer in the timeline.
    fn went_back_to(&mut self, step: u64) {
        if self.first_non_finite_step.is_some_and(|n| n > step) {
            self.first_non_finite_step = None;
        }
    }
}

/// Training loss and accuracy summed since the last `metrics.csv` row.
#[derive(Default)]
struct Window {
    loss: f64,
    acc: f64,
    steps: u64,
    /// The loss scale of the window's last step (fp16).
    loss_scale: Option<f64>,
    /// Steps of the window whose update a loss scaler skipped.
    overflow_steps: u64,
}

/// A run's faults and its guard: the injector applies the faults (its hooks, checkpoint
/// files, crashes and lost nodes), the guard detects and decides; they meet as training hooks
/// only through [`Guard::supervise`].
pub(crate) struct Recovery {
    pub(crate) guard: Guard,
    pub(crate) faults: FaultInjector,
}

/// Where a run writes checkpoints, and the directories it checks before each write there.
pub(crate) struct Dirs {
    /// The checkpoint root.
    pub(crate) ckpt_root: PathBuf,
    /// The output and checkpoint directories as the run claimed them.
    pub(crate) watch: crate::files::Watch,
}

/// One run's loop and its open files.
pub(crate) struct Session<'a> {
    cfg: &'a RunConfig,
    opts: &'a RunOptions,
    ckpt_root: PathBuf,
    /// The directories written into, checked before each checkpoint, prune and injection.
    watch: crate::files::Watch,
    meta: Meta,
    /// The state before the first step, reloaded by a restart when no checkpoint exists yet.
    initial: TrainState,
    golden: Option<Golden>,
    metrics: resilab_text::CsvWriter<File>,
    compare: Option<resilab_text::CsvWriter<File>>,
    /// `samples.csv`, with `--record-samples`.
    samples: Option<samples::SampleLog>,
    /// `faults.jsonl`, opened at the first fault: a run without faults writes none.
    faults_file: Option<BufWriter<File>>,
    logged_faults: usize,
    /// The guard's detections already charged on the simulated clock.
    charged_detections: usize,
    /// A process died (a crash) in the step just taken: a restart after it relaunches the job.
    crashed: bool,
    /// Whether the last step's detections found damage (anything but a crash), which a restart
    /// that came back to it must look for in the checkpoint it loaded.
    damage_found: bool,
    /// After a relaunch, the step the job had reached before it: the steps up to it are the
    /// relaunch's redo.
    redo_until: u64,
    tally: Tally,
    window: Window,
    last_eval: Option<Evaluation>,
    final_train_loss: f64,
    /// Loss of the last step completed.
    last_loss: f64,
    final_distance: Option<f64>,
    first_step: u64,
    /// The resumed step's `metrics.csv` row is missing and is written again before training.
    missing_row: bool,
    /// The run continues from a checkpoint.
    resumed: bool,
    /// The step cache being recorded (a golden run's, with `record_steps`).
    steps: Option<crate::steps::StepLog>,
    /// Steps taken from the golden run's cache.
    shortcut_prefix: u64,
    /// Why the shortcut was off.
    shortcut_off: Option<String>,
    /// Steps after the last fault taken from the golden run's cache (the remainder shortcut).
    shortcut_remainder: u64,
    /// The golden run's step cache, while the remainder shortcut may still take steps from it.
    cache: Option<crate::steps::StepCache>,
    bar: ProgressBar,
    start: Instant,
}

impl<'a> Session<'a> {
    /// Opens the run's files in `opts.out` (appending to `metrics.csv` and `faults.jsonl` when
    /// `resumed`) and takes the trainer's initial state.
    pub(crate) fn open(
        cfg: &'a RunConfig,
        opts: &'a RunOptions,
        trainer: &Trainer,
        dirs: Dirs,
        golden: Option<Golden>,
        resumed: bool,
    ) -> Result<Self> {
        let Dirs { ckpt_root, watch } = dirs;
        let out = &opts.out;
        let compare = match &golden {
            Some(_) => Some(resilab_text::CsvWriter::from_writer(crate::files::create_output(&out.join("compare.csv"))?)),
            None => None,
        };
        if opts.record_states {
            resilab_checkpoint::claim(&out.join("states"), false)?;
        }
        let samples = match opts.record_samples {
            true => Some(samples::SampleLog::open(&out.join("samples.csv"), trainer.step, resumed)?),
            false => None,
        };
        // A fresh run removes an earlier run's fault log; a resumed one appends to its own.
        if !resumed {
            crate::files::remove_output(&out.join("faults.jsonl"))?;
        }
        let (metrics, last_row) = open_metrics(&out.join("metrics.csv"), resumed.then_some(trainer.step))?;
        // A run killed between its checkpoint and that step's row resumes without the row.
        let missing_row =
            resumed && trainer.step > 0 && last_row != Some(trainer.step) && row_due(trainer, trainer.step, at_epoch_start(trainer));
        let bar = if opts.progress { ProgressBar::new(trainer.total_steps()) } else { ProgressBar::hidden() };
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} steps ({per_sec}, eta {eta}) {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_position(trainer.step);
        let meta = Meta { seed: cfg.seed, arch: cfg.model.label(), config: cfg.to_toml() };
        let steps = match opts.record_steps {
            true => Some(crate::steps::StepLog::open(out, meta.clone())?),
            false => None,
        };
        Ok(Self {
            cfg,
            opts,
            ckpt_root,
            watch,
            meta,
            initial: trainer.snapshot(),
            golden,
            metrics,
            compare,
            samples,
            faults_file: None,
            logged_faults: 0,
            charged_detections: 0,
            crashed: false,
            damage_found: false,
            redo_until: 0,
            tally: Tally::default(),
            window: Window::default(),
            last_eval: None,
            final_train_loss: f64::NAN,
            last_loss: 0.0,
            final_distance: None,
            first_step: trainer.step,
            missing_row,
            resumed,
            steps,
            shortcut_prefix: 0,
            shortcut_off: None,
            shortcut_remainder: 0,
            cache: None,
            bar,
            start: Instant::now(),
        })
    }

    /// Trains until the schedule ends or the guard gives up.
    pub(crate) fn run(&mut self, trainer: &mut Trainer, rec: &mut Recovery) -> Result<()> {
        if self.missing_row {
            self.recreate_row(trainer)?;
        }
        while !trainer.done() {
            if self.take_remainder(trainer, rec)? {
                continue;
            }
            if let Some(log) = &mut self.samples {
                log.record(trainer)?;
            }
            let before = self.steps.as_ref().map(|_| crate::steps::snapshot_bytes(trainer));
            let logged_before = rec.faults.logged().len();
            let t = Instant::now();
            let outcome = trainer.step_with(&mut rec.guard.supervise(&mut rec.faults))?;
            self.tally.train_s += t.elapsed().as_secs_f64();
            self.log_faults(rec)?;
            self.charge_transfers(trainer, rec);
            self.charge_crashes(rec);
            let s = match outcome {
                StepOutcome::Done(s) => s,
                StepOutcome::Restored { .. } => continue,
                StepOutcome::Stopped { lost_s, .. } => match rec.guard.pending.take() {
                    Some(Decision::RestartFromCheckpoint) => {
                        self.tally.crash_lost_s += lost_s;
                        self.tally.sim_s += lost_s;
                        if self.restart(trainer, rec, true)? && self.handle_losses(trainer, rec, true)? {
                            continue;
                        }
                        self.tally.failed = true;
                        break;
                    }
                    _ => {
                        self.tally.failed = true;
                        break;
                    }
                },
            };
            self.tally.losses.count_step(trainer.workers.len());
            if s.overflows > 0 {
                self.tally.scaler_skipped_faults += flips_since(rec, logged_before);
            }
            self.account(&s);
            if !self.handle_losses(trainer, rec, false)? {
                self.tally.failed = true;
                break;
            }
            self.checkpoint_if_due(trainer, &s)?;
            if self.strike_checkpoints(trainer, rec, &s)? {
                self.log_faults(rec)?;
                self.bar.set_position(trainer.step);
                continue;
            }
            let eval = self.log_step(trainer, &s, None)?;
            if let (Some(log), Some(before)) = (&mut self.steps, before) {
                log.record(trainer, &s, before, eval)?;
            }
        }
        self.bar.finish();
        Ok(())
    }

    /// Appends the fault log's new entries to `faults.jsonl`, creating it at the first.
    fn log_faults(&mut self, rec: &Recovery) -> Result<()> {
        if rec.faults.logged().len() <= self.logged_faults {
            return Ok(());
        }
        let path = self.opts.out.join("faults.jsonl");
        if self.faults_file.is_none() {
            self.faults_file = Some(BufWriter::new(crate::files::append_output(&path)?));
        }
        let Some(file) = self.faults_file.as_mut() else { return Ok(()) };
        self.logged_faults = append_fault_log(file, &path, rec.faults.logged(), self.logged_faults)?;
        Ok(())
    }

    /// Charges the state sent to workers respawned from a healthy replica, one message each.
    fn charge_transfers(&mut self, trainer: &Trainer, rec: &mut Recovery) {
        for bytes in rec.guard.take_transfers() {
            let s = trainer.parallel.network.send_s(bytes);
            self.tally.transfer_s += s;
            self.tally.sim_s += s;
        }
    }

    /// Charges what the step's crashes cost beyond its timeline ([`crash_charges`]): one
    /// detection timeout and one communicator rebuild for all the crashes of the step the job
    /// went on after, and one rebuild for the crashed replicas that rejoined at its start.
    fn charge_crashes(&mut self, rec: &mut Recovery) {
        let new = rec.guard.detections.get(self.charged_detections..).unwrap_or_default();
        let charges = new
            .iter()
            .filter(|d| d.kind == Detection::Crash)
            .map(|d| crash_charges(&d.decision))
            .fold(CrashCharges::default(), CrashCharges::or);
        self.crashed = new.iter().any(|d| d.kind == Detection::Crash);
        self.damage_found = new.iter().any(|d| d.kind != Detection::Crash);
        self.charged_detections = rec.guard.detections.len();
        let r = &self.cfg.recovery;
        let detect = if charges.detect { r.detect_timeout_s } else { 0.0 };
        let rebuilds = u32::from(charges.rebuild) + u32::from(rec.guard.take_joins() > 0);
        let rebuild = f64::from(rebuilds) * r.rebuild_s;
        self.tally.detect_s += detect;
        self.tally.detect_charges += u64::from(charges.detect);
        self.tally.rebuild_s += rebuild;
        self.tally.rebuilds += u64::from(rebuilds);
        self.tally.sim_s += detect + rebuild;
    }

    fn account(&mut self, s: &StepStats) {
        let t = &mut self.tally;
        t.redos += u64::from(s.redos);
        self.last_loss = s.loss;
        if !s.loss.is_finite() && t.first_non_finite_step.is_none() {
            t.first_non_finite_step = Some(s.step);
        }
        let redo = s.step <= self.redo_until;
        if redo {
            t.relaunch_redo_s += s.sim_s;
        }
        if !(redo && self.cfg.recovery.relaunch_covers_redo) {
            t.sim_s += s.sim_s;
        }
        t.snapshot_s += s.snapshot_s;
        t.redo_s += s.redo_s;
        t.comm_s += s.comm_s;
        t.comm_bytes += s.comm_bytes;
        self.window.loss += s.loss;
        self.window.acc += s.train_acc;
        self.window.steps += 1;
        self.window.loss_scale = s.loss_scale;
        self.window.overflow_steps += u64::from(s.overflows > 0);
        t.overflow_steps += u64::from(s.overflows > 0);
        self.bar.inc(1);
    }

    /// Carries out the guard's decision to restart: the newest checkpoint that loads (or the
    /// initial state when there is none), and crashed workers come back.
    ///
    /// Damage found again before the run got past the step that found it last time was in the
    /// state that restart loaded (a checkpoint written between a silent fault and its late
    /// detection): this restart goes to a checkpoint older than that one, and so on down to the
    /// initial state. Returns `false`, and restores nothing, when the initial state itself led
    /// back to the damage: restarting cannot clear it. A crash is no such damage (a process
    /// died; the state it left is sound): a restart for crashes alone goes to the newest
    /// checkpoint, however soon after the last restart it comes.
    ///
    /// `damage`: the restart clears damage (the strategy's restart); otherwise it replaces a
    /// worker lost for good (reinit), and always goes to the newest checkpoint. The restart
    /// relaunches the job ([`Self::charge_restart`]) when a process died, and otherwise reloads
    /// in place.
    fn restart(&mut self, trainer: &mut Trainer, rec: &mut Recovery, damage: bool) -> Result<bool> {
        let at_step = trainer.step + 1;
        let t = Instant::now();
        let recurred = self.tally.restarts.last().filter(|r| damage && self.damage_found && at_step <= r.at_step).map(|r| r.to_step);
        let template = trainer.snapshot();
        let probe = self.opts.probe.as_ref();
        let has_any = resilab_checkpoint::list(&self.ckpt_root).is_ok_and(|l| !l.is_empty());
        let before = recurred.unwrap_or(u64::MAX);
        // A job that went on with fewer workers reads their ranks from an older, larger checkpoint.
        let loaded = match (recurred.is_some() || has_any, trainer.batch_rule().is_some()) {
            (false, _) => None,
            (true, false) => resilab_checkpoint::load_before(&self.ckpt_root, before, &template, OnMismatch::Fallback, probe)?,
            (true, true) => resilab_checkpoint::load_replicas_before(&self.ckpt_root, before, &template, OnMismatch::Fallback, probe)?,
        };
        let (state, from) = match loaded {
            Some((state, report)) => (state, Some(report.dir)),
            None if recurred == Some(self.initial.step) => {
                eprintln!("resilab: the damage found at step {at_step} came back after a restart from the initial state; the run fails");
                return Ok(false);
            }
            None => {
                let mut initial = self.initial.clone();
                initial.workers.truncate(trainer.workers.len());
                (initial, None)
            }
        };
        trainer.restore(&state)?;
        self.charge_restart(trainer, at_step, from.is_some(), !damage || self.crashed);
        rec.guard.supervise(&mut rec.faults).respawn_all();
        self.tally.steps_lost += at_step - 1 - trainer.step;
        self.tally.went_back_to(trainer.step);
        self.tally.restarts.push(Restart { at_step, from, to_step: trainer.step, seconds: t.elapsed().as_secs_f64() });
        self.bar.set_position(trainer.step);
        Ok(true)
    }

    /// Charges a restart at `at_step`: the job's relaunch (`recovery.relaunch_s`) when `died`
    /// (a process died: a crash in the step, or a worker lost for good under reinit) or when
    /// the runtime cannot reload in place (`recovery.in_place_reload = false`), and otherwise
    /// nothing for the reload itself; then the checkpoint read at storage bandwidth when `read`
    /// (not the initial state). The steps since the checkpoint are charged as they are computed
    /// again, except after a relaunch whose figure covers them (`recovery.relaunch_covers_redo`).
    fn charge_restart(&mut self, trainer: &Trainer, at_step: u64, read: bool, died: bool) {
        let relaunch = died || !self.cfg.recovery.in_place_reload;
        if relaunch {
            let relaunch = self.cfg.recovery.relaunch_s;
            self.tally.relaunches += 1;
            self.tally.relaunch_s += relaunch;
            self.tally.sim_s += relaunch;
            self.redo_until = self.redo_until.max(at_step - 1);
        } else {
            self.tally.in_place_reloads += 1;
        }
        if read {
            let bytes = trainer.state_bytes();
            if relaunch {
                self.tally.relaunch_redo_s += trainer.parallel.compute.storage_s(bytes);
            }
            if !(relaunch && self.cfg.recovery.relaunch_covers_redo) {
                self.charge_storage(trainer, bytes);
            }
        }
    }

    fn checkpoint_if_due(&mut self, trainer: &Trainer, s: &StepStats) -> Result<()> {
        if !self.cfg.checkpoint.due(s.step, s.epoch_end) {
            return Ok(());
        }
        let t = Instant::now();
        // A directory replaced meanwhile explains any failure here better than the failure.
        let replaced = |e: resilab_checkpoint::Error| self.watch.check().err().unwrap_or(e.into());
        self.watch.check()?;
        resilab_checkpoint::save_claimed(&self.ckpt_root, &trainer.snapshot(), &self.meta).map_err(replaced)?;
        if self.cfg.checkpoint.keep_last > 0 {
            self.watch.check()?;
            resilab_checkpoint::prune(&self.ckpt_root, self.cfg.checkpoint.keep_last).map_err(replaced)?;
        }
        self.tally.checkpoint_s += t.elapsed().as_secs_f64();
        self.charge_checkpoint(trainer, trainer.state_bytes());
        Ok(())
    }

    /// Counts a checkpoint of `state_bytes` and charges its write on the simulated clock.
    fn charge_checkpoint(&mut self, trainer: &Trainer, state_bytes: u64) {
        self.tally.checkpoints += 1;
        self.tally.checkpoint_bytes += state_bytes;
        self.charge_storage(trainer, state_bytes);
    }

    /// Charges moving `bytes` of state to or from storage (a checkpoint's write or read) at the
    /// storage bandwidth on the simulated clock.
    fn charge_storage(&mut self, trainer: &Trainer, bytes: u64) {
        let s = trainer.parallel.compute.storage_s(bytes);
        self.tally.storage_s += s;
        self.tally.sim_s += s;
    }

    /// Checkpoint faults due after step `s`: each corrupts the newest checkpoint's file of its
    /// worker, and training restarts from it as the published method does. Returns whether any
    /// restart happened.
    fn strike_checkpoints(&mut self, trainer: &mut Trainer, rec: &mut Recovery, s: &StepStats) -> Result<bool> {
        let mut restarted = false;
        for event in rec.faults.due_checkpoint(s.step) {
            let Some((_, dir)) = resilab_checkpoint::list(&self.ckpt_root)?.last().cloned() else {
                eprintln!("resilab: checkpoint fault {} at step {}: no checkpoint written yet, skipped", event.entry, s.step);
                continue;
            };
            let file = dir.join(resilab_checkpoint::file_name(event.rank));
            self.watch.check()?;
            rec.faults.strike_checkpoint(event, &file).map_err(|source| Error::Inject {
                entry: event.entry,
                file: file.clone(),
                source,
            })?;
            let t = Instant::now();
            let (state, from) = self.reload_struck(trainer, rec, &dir, &event, s.step)?;
            trainer.restore(&state)?;
            self.tally.steps_lost += s.step - trainer.step;
            self.tally.went_back_to(trainer.step);
            self.tally.restarts.push(Restart { at_step: s.step, from, to_step: trainer.step, seconds: t.elapsed().as_secs_f64() });
            restarted = true;
        }
        Ok(restarted)
    }

    /// The state to continue from after a fault altered checkpoint `dir`: the altered
    /// checkpoint if it verifies, or as the guard decides when its digests no longer match
    /// (load it anyway, or fall back to an older checkpoint or the initial state).
    fn reload_struck(
        &self,
        trainer: &Trainer,
        rec: &mut Recovery,
        dir: &Path,
        event: &FaultEvent,
        step: u64,
    ) -> Result<(TrainState, Option<PathBuf>)> {
        let template = trainer.snapshot();
        let probe = self.opts.probe.as_ref();
        match resilab_checkpoint::load(dir, &template, OnMismatch::Error, probe) {
            Ok((state, r)) => Ok((state, Some(r.dir))),
            Err(resilab_checkpoint::Error::Mismatch { .. }) => {
                match rec.guard.supervise(&mut rec.faults).checkpoint_mismatch(step, event.rank) {
                    Decision::Continue => {
                        let (state, r) = resilab_checkpoint::load(dir, &template, OnMismatch::Load, probe)?;
                        Ok((state, Some(r.dir)))
                    }
                    _ => match resilab_checkpoint::load(&self.ckpt_root, &template, OnMismatch::Fallback, probe) {
                        Ok((state, r)) => Ok((state, Some(r.dir))),
                        Err(_) => Ok((self.initial.clone(), None)),
                    },
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Evaluates when due, compares with the golden run, and writes a `metrics.csv` row every
    /// `log_every` steps and at each evaluation; returns the evaluation, if any. With `replay`,
    /// step `s` is the golden run's recorded step (the trainer has not taken it), and its
    /// recorded evaluation stands for the trainer's.
    fn log_step(&mut self, trainer: &Trainer, s: &StepStats, replay: Option<&crate::steps::StepRecord>) -> Result<Option<Evaluation>> {
        let epoch_start = replay.map_or_else(|| at_epoch_start(trainer), |r| r.epoch_start);
        if !row_due(trainer, s.step, epoch_start) {
            return Ok(None);
        }
        let eval = match (eval_due(trainer, s.step, epoch_start), replay) {
            (false, _) => None,
            (true, None) => Some(self.evaluate(trainer, s.step)?),
            (true, Some(r)) => Some(self.replay_eval(trainer, r)?),
        };
        self.final_train_loss = self.window.loss / self.window.steps as f64;
        let row = MetricsRow {
            step: s.step,
            epoch: s.epoch,
            loss: Some(self.final_train_loss),
            train_acc: Some(self.window.acc / self.window.steps as f64),
            test_acc: eval.map(|e| e.accuracy),
            test_loss: eval.map(|e| e.loss),
            lr: Some(s.lr),
            wall_s: Some(self.start.elapsed().as_secs_f64()),
            sim_s: Some(self.tally.sim_s),
            loss_scale: self.window.loss_scale,
            overflow_steps: self.window.loss_scale.map(|_| self.window.overflow_steps),
        };
        self.write_row(&row)?;
        let test = self.last_eval.map_or(String::new(), |e| format!(" test_acc {:.3}", e.accuracy));
        self.bar.set_message(format!("loss {:.3} acc {:.3}{test}", self.final_train_loss, self.window.acc / self.window.steps as f64));
        self.window = Window::default();
        Ok(eval)
    }

    fn write_row(&mut self, row: &MetricsRow) -> Result<()> {
        let path = self.opts.out.join("metrics.csv");
        self.metrics.serialize(row).map_err(csv_err(&path))?;
        self.metrics.flush().map_err(io(&path))
    }

    /// Writes the row of the step a run resumed at, which the interrupted run checkpointed but
    /// never logged: what the checkpoint determines (the evaluation when one was due), with the
    /// training window's means, learning rate and times left empty (they are not in it).
    fn recreate_row(&mut self, trainer: &Trainer) -> Result<()> {
        let step = trainer.step;
        let eval = if eval_due(trainer, step, at_epoch_start(trainer)) { Some(self.evaluate(trainer, step)?) } else { None };
        let cursor = trainer.workers[0].cursor;
        let epoch = if cursor.sample == 0 { cursor.epoch.saturating_sub(1) } else { cursor.epoch };
        let row = MetricsRow {
            step,
            epoch,
            loss: None,
            train_acc: None,
            test_acc: eval.map(|e| e.accuracy),
            test_loss: eval.map(|e| e.loss),
            lr: None,
            wall_s: None,
            sim_s: None,
            loss_scale: None,
            overflow_steps: None,
        };
        eprintln!("resilab: metrics.csv had no row for step {step}, where the run resumed: written again from the checkpoint");
        self.write_row(&row)
    }

    /// Evaluates the model; with a golden run, writes a `compare.csv` row; with
    /// `record_states`, saves the model under `<out>/states`.
    fn evaluate(&mut self, trainer: &Trainer, step: u64) -> Result<Evaluation> {
        let e = trainer.evaluate();
        let whole = (self.opts.record_states || self.golden.is_some()).then(|| whole_model(trainer));
        self.record_eval(step, e, whole)
    }

    /// Records evaluation `e` after step `step`: the time to the golden accuracy, and with
    /// `whole` (the whole model then), the `compare.csv` row and the recorded state.
    fn record_eval(&mut self, step: u64, e: Evaluation, whole: Option<resilab_train::WorkerState>) -> Result<Evaluation> {
        self.last_eval = Some(e);
        if self.tally.time_to_golden_acc_s.is_none() && self.golden.as_ref().is_some_and(|g| e.accuracy >= g.final_test_acc) {
            self.tally.time_to_golden_acc_s = Some(self.tally.sim_s);
        }
        let Some(whole) = whole else { return Ok(e) };
        if let (Some(g), Some(w)) = (&self.golden, self.compare.as_mut()) {
            let distance = g.state_at(step, &whole).map(|gs| crate::golden::param_distance(&whole, &gs));
            self.final_distance = distance;
            let golden_acc = g.curve.test_acc.get(&step).copied();
            let row = CompareRow {
                step,
                test_acc: e.accuracy,
                golden_test_acc: golden_acc,
                acc_loss: golden_acc.map(|a| a - e.accuracy),
                param_distance: distance,
            };
            let path = self.opts.out.join("compare.csv");
            w.serialize(&row).map_err(csv_err(&path))?;
            w.flush().map_err(io(&path))?;
        }
        if self.opts.record_states {
            crate::golden::save_state(&self.opts.out.join("states"), step, whole, self.cfg)?;
        }
        Ok(e)
    }

    /// The run's summary.
    pub(crate) fn finish(
        self,
        trainer: &mut Trainer,
        rec: &mut Recovery,
        split: &Split,
        resumed: Option<crate::records::Resumed>,
    ) -> Result<Summary> {
        let cfg = self.cfg;
        let eval = self.last_eval.unwrap_or_else(|| trainer.evaluate());
        let steps = trainer.step;
        let wall_s = self.start.elapsed().as_secs_f64();
        let workers = self.workers_summary(trainer);
        let t = self.tally;
        let health = workers_health(&trainer.workers, cfg.detect.extreme_threshold);
        Ok(Summary {
            name: cfg.run_name(),
            model: cfg.model.label(),
            params: trainer.model().num_trainable(),
            final_test_acc: eval.accuracy,
            final_test_loss: eval.loss,
            final_train_loss: self.final_train_loss,
            steps,
            epochs: steps as f64 / trainer.steps_per_epoch().max(1) as f64,
            wall_s,
            train_s: t.train_s,
            images_per_s: ((steps - self.first_step) as f64 * trainer.config.batch_size as f64) / t.train_s.max(1e-9),
            parallel: cfg.parallel.describe(),
            stages: stage_blocks(trainer),
            buckets: trainer.buckets().unwrap_or_default().iter().map(|b| b.iter().map(|(name, _)| name.clone()).collect()).collect(),
            time: t.simulated_time(),
            // A run that failed stopped early: its simulated time is no cost of recovery.
            simulated_overhead_vs_golden: self.golden.as_ref().and_then(|g| g.simulated_s).filter(|_| !t.failed).map(|g| (t.sim_s - g) / g),
            simulated_s_to_golden_acc: t.time_to_golden_acc_s,
            workers,
            comm_bytes: t.comm_bytes,
            train_images: split.train.len(),
            test_images: split.test.len(),
            resume: ResumeRecord::of(resumed),
            checkpoints: t.checkpoints,
            checkpoint_s: t.checkpoint_s,
            checkpoint_bytes: t.checkpoint_bytes,
            final_params_digest: params_digest(&trainer.model()),
            status: crate::RunStatus::of(t.failed),
            failure: t.failure,
            strategy: serde_json::to_value(cfg.recovery.strategy).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
            faults: fault_counts(rec),
            detections: std::mem::take(&mut rec.guard.detections),
            signal_costs: rec.guard.signals.as_ref().map(|l| l.costs.clone()),
            restarts: t.restarts,
            steps_lost: t.steps_lost,
            steps_recomputed: t.steps_lost + t.redos,
            overflow_steps: t.overflow_steps,
            scaler_skipped_faults: trainer.workers.first().and_then(|w| w.scaler.as_ref()).map(|_| t.scaler_skipped_faults),
            shortcut_prefix_steps: self.shortcut_prefix,
            shortcut_remainder_steps: self.shortcut_remainder,
            shortcut_off: self.shortcut_off,
            collapsed: health == Health::NonFinite || !self.last_loss.is_finite(),
            final_state_extreme: health != Health::Sound,
            acc_loss_vs_golden: self.golden.as_ref().map(|g| g.final_test_acc - eval.accuracy),
            // Filled by the caller from the golden ensemble, where there is one.
            golden_ensemble_accs_frac: None,
            golden_ensemble_mean_acc_frac: None,
            golden_ensemble_sd_frac: None,
            golden_ensemble_dirs: None,
            // Cached steps make the wall time no cost: none then (docs/metrics.md).
            time_overhead_vs_golden: self
                .golden
                .as_ref()
                .filter(|_| !t.failed && self.shortcut_prefix == 0 && self.shortcut_remainder == 0)
                .map(|g| (wall_s - g.wall_s) / g.wall_s),
            final_param_distance: self.final_distance,
            first_fault_step: rec.faults.logged().iter().map(|l| l.event.step).min(),
            first_non_finite_step: t.first_non_finite_step,
            // Filled by the caller, which has the golden run's curve and the ensemble.
            outcome: None,
            outcome_onset_step: None,
            golden: self.golden,
            provenance: self.opts.provenance.clone(),
        })
    }
}

/// The faults the run met and the values they altered, from the fault log.
fn fault_counts(rec: &Recovery) -> FaultCounts {
    let logged = rec.faults.logged();
    FaultCounts {
        faults_injected: logged.len(),
        crashes_met: logged.iter().filter(|l| l.event.target == resilab_faults::FaultTarget::Crash).count(),
        flips_met: flips_since(rec, 0) as usize,
        values_corrupted: logged.iter().map(|l| l.corrupted).sum(),
        values_non_finite_or_extreme: logged.iter().map(|l| l.nan + l.inf + l.extreme).sum(),
    }
}

/// Faults that altered values (every target but a crash) logged since the log held `before`
/// entries (after a step: those that struck it; from 0: all of them).
fn flips_since(rec: &Recovery, before: usize) -> u64 {
    let logged = rec.faults.logged();
    logged.get(before..).unwrap_or_default().iter().filter(|l| l.event.target != resilab_faults::FaultTarget::Crash).count() as u64
}

/// Whether the trainer's data cursor stands at an epoch's start (after a step: it ended one).
fn at_epoch_start(trainer: &Trainer) -> bool {
    trainer.workers[0].cursor.sample == 0
}

/// The whole model as a one-worker state (what golden comparisons read).
fn whole_model(trainer: &Trainer) -> resilab_train::WorkerState {
    resilab_train::WorkerState::capture(&resilab_train::Worker::new(0, trainer.model(), 0))
}

/// Whether the test set is evaluated after step `step`, the data cursor then at an epoch's
/// start when `epoch_start`.
fn eval_due(trainer: &Trainer, step: u64, epoch_start: bool) -> bool {
    let scheduled = match trainer.config.eval_every {
        Some(k) => step.is_multiple_of(k),
        None => step > 0 && epoch_start,
    };
    scheduled || step >= trainer.total_steps()
}

/// Whether step `step` has a `metrics.csv` row (`epoch_start` as for [`eval_due`]).
fn row_due(trainer: &Trainer, step: u64, epoch_start: bool) -> bool {
    step.is_multiple_of(trainer.config.log_every) || eval_due(trainer, step, epoch_start)
}
