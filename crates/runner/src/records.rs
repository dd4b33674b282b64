//! What a run writes and is given, shared by the run's set-up (`run`) and its loop
//! (`session`): the rows of `metrics.csv` and `compare.csv`, `summary.json`, the run's options,
//! and the helpers that open and append those files.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use resilab_models::{Compute, Net};
use resilab_recovery::DetectionRecord;
use resilab_train::Trainer;
use serde::{Deserialize, Serialize};

use crate::{Error, Provenance, Result};

/// One row of `metrics.csv`. Training loss and accuracy are means over the steps since the
/// previous row; test columns are empty where no evaluation ran.
#[derive(Debug, Serialize)]
pub struct MetricsRow {
    /// Steps completed.
    pub step: u64,
    /// Epoch of the last step (0-based).
    pub epoch: usize,
    /// Mean training loss since the previous row (empty in a row recreated on resume: the
    /// losses of the steps before it are not in the checkpoint).
    pub loss: Option<f64>,
    /// Training accuracy since the previous row (empty in a recreated row).
    pub train_acc: Option<f64>,
    /// Test accuracy, when evaluated at this step.
    pub test_acc: Option<f64>,
    /// Test loss, when evaluated at this step.
    pub test_loss: Option<f64>,
    /// Learning rate of the last step (empty in a recreated row).
    pub lr: Option<f64>,
    /// Seconds since training started (evaluation included; empty in a recreated row).
    pub wall_s: Option<f64>,
    /// Simulated seconds of the parallel run so far (steps only; see the cost model; empty in
    /// a recreated row).
    pub sim_s: Option<f64>,
    /// fp16: the loss scale of the row's last step (empty in other formats and in a recreated
    /// row).
    pub loss_scale: Option<f64>,
    /// fp16: steps since the previous row whose update the loss scaler skipped, their
    /// gradients holding an infinity or a NaN (empty where `loss_scale` is).
    pub overflow_steps: Option<u64>,
}

/// `summary.json`.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// Run name.
    pub name: String,
    /// Model label (e.g. `resnet8`).
    pub model: String,
    /// Trainable parameters.
    pub params: usize,
    /// Final test accuracy in `[0, 1]`.
    pub final_test_acc: f64,
    /// Final test loss.
    pub final_test_loss: f64,
    /// Final training loss (mean over the last logged window).
    pub final_train_loss: f64,
    /// Steps run.
    pub steps: u64,
    /// Epochs run (fractional when the run ends mid-epoch).
    pub epochs: f64,
    /// Wall time of the training loop, evaluation included.
    pub wall_s: f64,
    /// Wall time spent in training steps only (checkpoint writes excluded).
    pub train_s: f64,
    /// Training throughput: images per second of step time.
    pub images_per_s: f64,
    /// Workers or stages, e.g. `data x4 (ddp, ring)`.
    pub parallel: String,
    /// Blocks of each pipeline stage (empty for data parallelism).
    pub stages: Vec<Vec<String>>,
    /// Data parallelism: the parameters of each all-reduce bucket, in reduction order (the
    /// reverse of the model's order); empty for a pipeline.
    pub buckets: Vec<Vec<String>>,
    /// Simulated wall time on a real parallel machine and its parts (flattened into
    /// `summary.json`: `simulated_s`, `simulated_comm_s`, ..., `simulated_transfer_s`).
    #[serde(flatten)]
    pub time: SimulatedTime,
    /// `(simulated_s - golden simulated_s) / golden simulated_s`: deterministic when
    /// `parallel.compute.gflops` is set.
    pub simulated_overhead_vs_golden: Option<f64>,
    /// Simulated seconds at the first evaluation whose test accuracy reached the golden run's
    /// final accuracy (`train.eval_every` sets how often that is looked at); `None`: never
    /// reached, or no golden run.
    pub simulated_s_to_golden_acc: Option<f64>,
    /// The workers: at the start and the end, those lost for good, the spares used, the steps
    /// at each worker count and the batch and learning-rate rule in force.
    pub workers: WorkersSummary,
    /// Bytes moved over the network, all links and steps together.
    pub comm_bytes: u64,
    /// Training and test set sizes.
    pub train_images: usize,
    /// Test set size.
    pub test_images: usize,
    /// Where the run resumed from, what differed and what was loaded despite a mismatch
    /// (flattened: `resumed_from`, `resume_changes`, `checkpoint_mismatches`,
    /// `resumed_forward_pass`).
    #[serde(flatten)]
    pub resume: ResumeRecord,
    /// Checkpoints written.
    pub checkpoints: usize,
    /// Seconds spent writing checkpoints.
    pub checkpoint_s: f64,
    /// Bytes of state the checkpoints held, summed over the checkpoints written: every
    /// worker's parameters, buffers and optimizer state, 4 bytes a value (file overhead aside):
    /// what `simulated_storage_s` charges writes for.
    pub checkpoint_bytes: u64,
    /// XXH3-64 digest of every parameter and buffer of worker 0 (little-endian f32 bytes, in
    /// name order): equal digests mean bit-identical final weights.
    pub final_params_digest: String,
    /// `completed`, or `failed` (the strategy gave up: a crash under `none`; or a worker was
    /// lost for good and the job could not go on).
    pub status: RunStatus,
    /// Why the run failed, where it is more than the strategy giving up.
    pub failure: Option<String>,
    /// Recovery strategy.
    pub strategy: String,
    /// The faults that struck and the values they altered (flattened: `faults_injected`,
    /// `crashes_met`, `flips_met`, `values_corrupted`, `values_non_finite_or_extreme`).
    #[serde(flatten)]
    pub faults: FaultCounts,
    /// Every detection, with its step, worker, latency and the strategy's decision.
    pub detections: Vec<DetectionRecord>,
    /// With `detect.record_signals`: the measured seconds of the detectors' device reductions
    /// and digests, and how many were computed (the rows are in `signals.csv`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal_costs: Option<resilab_recovery::signals::SignalCosts>,
    /// Restarts from a checkpoint (or from the initial state).
    pub restarts: Vec<Restart>,
    /// Completed steps thrown away by restarts.
    pub steps_lost: u64,
    /// Steps computed again: redone steps plus the lost steps.
    pub steps_recomputed: u64,
    /// Steps whose update fp16's loss scaler skipped, their gradients holding an infinity or a
    /// NaN (0 in other formats).
    pub overflow_steps: u64,
    /// fp16: faults that altered values in a step whose update the loss scaler skipped (the
    /// scaler discarded what they did to that step's gradients); absent without a loss scaler.
    pub scaler_skipped_faults: Option<u64>,
    /// Steps taken from the golden run's cache instead of trained (the fault-free prefix before
    /// the first fault: docs/campaigns.md, "Shortcuts"); 0 when the shortcut was off.
    pub shortcut_prefix_steps: u64,
    /// Steps after the run's last fault taken from the golden run's cache, once the run's full
    /// state was the golden run's again (the remainder shortcut); 0 when it was not taken.
    pub shortcut_remainder_steps: u64,
    /// Why the shortcut was off, when it was.
    pub shortcut_off: Option<String>,
    /// Whether any worker's final state (parameters, buffers, optimizer state) holds a NaN/Inf,
    /// or the last step's training loss is not finite.
    pub collapsed: bool,
    /// Whether any worker's final state holds a NaN/Inf or a value above
    /// `detect.extreme_threshold` in magnitude (N-EV's state rule).
    pub final_state_extreme: bool,
    /// The golden run compared with (runs with faults).
    pub golden: Option<crate::golden::Golden>,
    /// Golden final test accuracy minus this run's: the golden run's (`golden`), or with
    /// `train.golden_ensemble` K > 1 the ensemble's mean (`golden_ensemble_mean_acc_frac`).
    pub acc_loss_vs_golden: Option<f64>,
    /// With `train.golden_ensemble` K > 1: each member's final test accuracy, member 0 (the
    /// run's own golden run, `golden`) first; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub golden_ensemble_accs_frac: Option<Vec<f64>>,
    /// With an ensemble: the members' mean final test accuracy, what `acc_loss_vs_golden` is
    /// measured against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub golden_ensemble_mean_acc_frac: Option<f64>,
    /// With an ensemble: the sample standard deviation (n - 1) of the members' final test
    /// accuracies, a fraction: the run-to-run noise of the fault-free runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub golden_ensemble_sd_frac: Option<f64>,
    /// With an ensemble: each member's directory in the golden cache, member 0 first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub golden_ensemble_dirs: Option<Vec<PathBuf>>,
    /// `(wall_s - golden wall_s) / golden wall_s`; absent for a run that failed or took cached
    /// steps (`shortcut_prefix_steps` or `shortcut_remainder_steps` above 0), whose wall time
    /// reflects the cache, not a cost.
    pub time_overhead_vs_golden: Option<f64>,
    /// Distance of the final parameters from the golden run's.
    pub final_param_distance: Option<f64>,
    /// The step of the run's first fault; absent when none struck.
    pub first_fault_step: Option<u64>,
    /// The first step of the run's final timeline whose training loss was NaN/Inf (one that a
    /// restart went back before is not counted); absent when there was none.
    pub first_non_finite_step: Option<u64>,
    /// With a golden run: the outcome class of the run's curve against the golden run's
    /// (`no_fault`, `masked`, `immediate_nan`, ...: docs/metrics.md, "Outcome classes").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<crate::outcome::Outcome>,
    /// With an outcome: the step from which the run stayed harmed to its end
    /// ([`crate::outcome::Classified::onset_step`]); absent for `no_fault` and `masked`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome_onset_step: Option<u64>,
    /// Where the numbers came from.
    pub provenance: Provenance,
}

/// The faults a run met, counted from its fault log (`summary.json`'s fault fields).
#[derive(Debug, Serialize)]
pub struct FaultCounts {
    /// Faults that struck (see `faults.jsonl`).
    pub faults_injected: usize,
    /// Of those, crashes (a worker stopped).
    pub crashes_met: usize,
    /// Of those, faults that flip or alter values (every target but a crash).
    pub flips_met: usize,
    /// Attempts that corrupted a value: a value hit twice counts twice, and one the corruption
    /// left as it was (a flip that the cast back to the stored type drops, a scaling by 1 or of
    /// a zero) counts too; the fault log's `stored_bits_changed` says which changed.
    pub values_corrupted: usize,
    /// Corrupted values that became NaN, ±Inf or extreme.
    pub values_non_finite_or_extreme: usize,
}

/// What a run resumed from (`summary.json`'s resume fields; empty for a fresh run).
#[derive(Debug, Serialize)]
pub struct ResumeRecord {
    /// Checkpoint the run continued from, if any.
    pub resumed_from: Option<PathBuf>,
    /// Settings that differ from the run that wrote that checkpoint (`key: old -> new`:
    /// `seed`, `optimizer.lr`, `train.batch_size`, `data.train_size`), each also warned about.
    pub resume_changes: Vec<String>,
    /// Datasets loaded despite a digest mismatch (policy `load`).
    pub checkpoint_mismatches: Vec<String>,
    /// Where the run resumed from an import: whether a probe verified its forward pass
    /// (`{"status": "unverified", "detail": ...}`: this run's accuracy may not be the source
    /// model's). `null` otherwise.
    pub resumed_forward_pass: Option<resilab_checkpoint::ForwardPass>,
}

impl ResumeRecord {
    /// The record of `resumed` (the checkpoint loaded and the settings changed since), or of a
    /// fresh run. A worker file named on its own is what the run resumed from.
    pub(crate) fn of(resumed: Option<Resumed>) -> Self {
        let (report, resume_changes) = resumed.map_or((None, Vec::new()), |(r, c)| (Some(r), c));
        let resumed_forward_pass = report.as_ref().and_then(|r| r.forward_pass.clone());
        let (resumed_from, checkpoint_mismatches) = report.map_or((None, Vec::new()), |r| (Some(r.file.unwrap_or(r.dir)), r.mismatched));
        Self { resumed_from, resume_changes, checkpoint_mismatches, resumed_forward_pass }
    }
}

/// Simulated wall time on a real parallel machine, with the parts of it that recovery and
/// checkpoints cost and the charges counted (in `summary.json` beside the other fields).
#[derive(Debug, Serialize)]
pub struct SimulatedTime {
    /// Simulated wall time on a real parallel machine: per step, the end of its overlapped
    /// timeline (compute measured, or modelled with `parallel.compute.gflops`; bucketed
    /// all-reduces overlapping backward; updates overlapping communication), or the pipeline
    /// schedule's span; rollback's state copies and thrown-away attempts; plus checkpoint
    /// writes, the relaunches and reads of restarts, respawned workers' state transfers, the
    /// failure detector's timeouts after crashes and the communicator rebuilds.
    pub simulated_s: f64,
    /// Modelled communication time within `simulated_s`.
    pub simulated_comm_s: f64,
    /// Within `simulated_s`: rollback's copies of model and optimizer state before every step
    /// and on every redo, at `parallel.compute.memory_gbps`.
    pub simulated_snapshot_s: f64,
    /// Within `simulated_s`: attempts of steps that were thrown away and redone.
    pub simulated_redo_s: f64,
    /// Within `simulated_s`: checkpoint writes and restart reloads at
    /// `parallel.compute.storage_gbps`.
    pub simulated_storage_s: f64,
    /// Within `simulated_s`: the part of each step that a crash cut short before a restart
    /// from a checkpoint (a rollback's abandoned attempts are in `simulated_redo_s`).
    pub simulated_crash_lost_s: f64,
    /// Within `simulated_s`: job relaunches of restarts from a checkpoint after a process died
    /// (`recovery.relaunch_s` each, `relaunches` of them).
    pub simulated_relaunch_s: f64,
    /// Restarts from a checkpoint that relaunched the job: a process died (a crash in the
    /// step, or a worker lost for good under `reinit`), or `recovery.in_place_reload = false`.
    pub relaunches: u64,
    /// Restarts from a checkpoint that reloaded it in the running processes (the job was
    /// alive: damage found by a check), paying the read and the lost steps, no relaunch.
    pub in_place_reloads: u64,
    /// The checkpoint reads and recomputed steps after relaunches, until the job was back at the
    /// step it had reached: within `simulated_s`, unless the relaunch's figure covers them
    /// (`recovery.relaunch_covers_redo`); recorded either way, so that a run can be re-priced
    /// at a profile whose relaunch does or does not cover them.
    pub simulated_relaunch_redo_s: f64,
    /// Within `simulated_s`: the survivors' waits for the failure detector after crashes
    /// (`recovery.detect_timeout_s` per step with crashes that the job went on after).
    pub simulated_detect_s: f64,
    /// Times `recovery.detect_timeout_s` was charged (`simulated_detect_s` is this many of it).
    pub detect_charges: u64,
    /// Within `simulated_s`: communicator rebuilds (`recovery.rebuild_s` each): without the
    /// lost rank when rollback or lossy forward went on, and when a respawned replica joined.
    pub simulated_rebuild_s: f64,
    /// Communicator rebuilds charged (`simulated_rebuild_s` is this many `recovery.rebuild_s`).
    pub rebuilds: u64,
    /// Within `simulated_s`: state sent to respawned workers from a healthy replica, at the
    /// network's bandwidth.
    pub simulated_transfer_s: f64,
}

/// How a training run ended (`summary.json`'s `status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// It trained all its steps.
    Completed,
    /// It stopped early: its strategy gave up (a crash under `none`), or a worker was lost for
    /// good and the job could not go on.
    Failed,
}

impl RunStatus {
    /// `failed` when `failed`, else `completed`.
    pub fn of(failed: bool) -> Self {
        if failed { RunStatus::Failed } else { RunStatus::Completed }
    }

    /// The spelling in `summary.json` and `strategies.csv`.
    pub fn name(self) -> &'static str {
        match self {
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// One restart.
#[derive(Debug, Serialize)]
pub struct Restart {
    /// The step that failed.
    pub at_step: u64,
    /// The checkpoint reloaded (`None`: the initial state).
    pub from: Option<PathBuf>,
    /// Steps completed in the state reloaded.
    pub to_step: u64,
    /// Seconds to reload.
    pub seconds: f64,
}

/// XXH3-64 over every parameter's values (little-endian f32) in module order, with names.
pub fn params_digest(net: &Net) -> String {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    resilab_models::for_each_param(net, |info, t| {
        h.update(info.name.as_bytes());
        let values = t.into_data().convert::<f32>();
        h.update(values.as_bytes());
    });
    format!("{:016x}", h.digest())
}

/// A check run on each checkpoint file before it is opened in this process.
pub type FileProbe = Box<dyn Fn(&Path) -> resilab_checkpoint::Result<()>>;

/// Options of a run that are not part of the configuration.
pub struct RunOptions {
    /// Output directory.
    pub out: PathBuf,
    /// The device to train on (an autodiff device is made from it) and the kernels to run.
    pub compute: Compute,
    /// Provenance to record.
    pub provenance: Provenance,
    /// Show a progress bar.
    pub progress: bool,
    /// Continue from this checkpoint (a `step-*` directory, a worker file in one, or a
    /// directory of checkpoints, whose newest is used).
    pub resume: Option<PathBuf>,
    /// Checked on every checkpoint file before it is opened in this process.
    pub probe: FileProbe,
    /// Root of the golden-run cache: a run with faults is compared with its fault-free golden
    /// run, computed there once. `None`: no comparison.
    pub golden: Option<PathBuf>,
    /// Compare a run without faults with its golden run too (a campaign's fault-free cells,
    /// whose accuracy loss and overhead are then measured as zero rather than missing).
    pub compare_fault_free: bool,
    /// Save the whole model at every evaluation under `<out>/states` (golden runs do).
    pub record_states: bool,
    /// Write `samples.csv`: the training images each worker reads at each step.
    pub record_samples: bool,
    /// Take the steps before the first fault from the golden run's step cache instead of
    /// training them, when the run allows it (docs/campaigns.md, "Shortcuts"): the results are
    /// the same bits, only faster.
    pub shortcuts: bool,
    /// Record the step cache that shortcuts read (`steps.csv` and `full/`): a golden run's.
    pub record_steps: bool,
    /// Data sets loaded so far, shared with the golden run and with later runs (a campaign
    /// worker keeps one for all its runs): each configuration's data is made once.
    pub data: DataCache,
}

/// Data sets by their `[data]` configuration, each loaded (or generated) once and shared:
/// a run gets exactly the data its configuration describes, whoever loaded it first. Cloning
/// shares the cache.
#[derive(Clone, Default)]
pub struct DataCache(std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<resilab_data::Split>>>>);

impl DataCache {
    /// The data `cfg` describes, loaded now unless an earlier call loaded it.
    pub fn get(&self, cfg: &resilab_data::DataConfig) -> Result<std::sync::Arc<resilab_data::Split>> {
        // The whole configuration, serialised, is the key: two configurations that differ in
        // any key never share a data set.
        let key = toml::to_string(cfg).map_err(|e| Error::Config(format!("[data]: {e}")))?;
        let mut held = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(s) = held.get(&key) {
            return Ok(s.clone());
        }
        let s = std::sync::Arc::new(resilab_data::load(cfg)?);
        held.insert(key, s.clone());
        Ok(s)
    }
}

/// One row of `compare.csv`: a faulty run against its golden run at an evaluated step.
#[derive(Debug, Serialize)]
pub struct CompareRow {
    /// Step.
    pub step: u64,
    /// This run's test accuracy.
    pub test_acc: f64,
    /// The golden run's test accuracy at the same step.
    pub golden_test_acc: Option<f64>,
    /// `golden_test_acc - test_acc`, a fraction (`acc_loss_frac`: every accuracy here is one).
    #[serde(rename = "acc_loss_frac")]
    pub acc_loss: Option<f64>,
    /// Euclidean distance between this run's and the golden run's trainable parameters.
    pub param_distance: Option<f64>,
}

/// The block names of each pipeline stage (empty for data parallelism).
pub fn stage_blocks(trainer: &Trainer) -> Vec<Vec<String>> {
    trainer.workers.iter().filter(|_| trainer.stage_ranges().is_some()).map(|w| w.net.block_names.clone()).collect()
}

/// Opens `metrics.csv` for writing. When resuming at step `resume_step` into a directory that
/// already has one, the rows up to that step are kept and later rows (from the interrupted run,
/// about to be recomputed) are dropped, so the file reads as one uninterrupted run.
/// Returns the writer and, when resuming, the last step that has a row.
pub(crate) fn open_metrics(path: &Path, resume_step: Option<u64>) -> Result<(resilab_text::CsvWriter<std::fs::File>, Option<u64>)> {
    let csv_err = |e| Error::Csv { path: path.to_path_buf(), source: e };
    let Some(step) = resume_step.filter(|_| path.exists()) else {
        return Ok((resilab_text::CsvWriter::from_writer(crate::files::create_output(path)?), None));
    };
    let mut kept = Vec::new();
    let mut reader = csv::Reader::from_path(path).map_err(csv_err)?;
    let headers = reader.headers().map_err(csv_err)?.clone();
    for record in reader.records() {
        // A last row cut short (the disk filled, or the run was killed mid-write) is dropped.
        let record = match record {
            Ok(r) => resilab_text::unescaped(&r),
            Err(e) => {
                eprintln!("resilab: warning: {}: dropped a malformed row and any after it ({e})", path.display());
                break;
            }
        };
        if record.get(0).and_then(|s| s.parse::<u64>().ok()).is_some_and(|s| s <= step) {
            kept.push(record);
        }
    }
    let last = kept.last().and_then(|r| r.get(0)).and_then(|s| s.parse::<u64>().ok());
    let mut w = resilab_text::CsvWriter::from_writer(crate::files::create_output(path)?);
    w.write_record(&headers).map_err(csv_err)?;
    for r in &kept {
        w.write_record(r).map_err(csv_err)?;
    }
    w.flush().map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    let file = crate::files::append_output(path)?;
    Ok((resilab_text::CsvWriter::without_headers(file), last))
}

/// Appends the fault log's entries from `from` on to `file` (JSON lines, flushed); returns the
/// number of entries written in all.
pub(crate) fn append_fault_log(file: &mut impl Write, path: &Path, log: &[resilab_faults::FaultLog], from: usize) -> Result<usize> {
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    for entry in &log[from..] {
        let line =
            serde_json::to_string(entry).map_err(|source| Error::Json { what: format!("{} (fault log)", path.display()), source })?;
        writeln!(file, "{line}").map_err(io)?;
    }
    file.flush().map_err(io)?;
    Ok(log.len())
}

/// `summary.json`'s record of the workers: how many, what was lost, and what the job did.
#[derive(Debug, Serialize)]
pub struct WorkersSummary {
    /// Workers (or stages) the job started with.
    pub at_start: usize,
    /// Workers (or stages) at the end.
    pub at_end: usize,
    /// Workers lost for good (`[[fault]]` crashes with `permanent = true`).
    pub permanent_losses: u64,
    /// `recovery.on_permanent_loss`.
    pub on_permanent_loss: String,
    /// Spare nodes that took a lost worker's place.
    pub spares_used: u64,
    /// Losses that `respawn` or `reinit` met with no spare left, and shrank instead.
    pub spare_fallbacks: u64,
    /// Restarts from a checkpoint that replaced a lost worker (`reinit`), within `restarts`.
    pub reinits: u64,
    /// Steps computed (redone and recomputed ones included) at each number of workers.
    pub steps_at_workers: BTreeMap<usize, u64>,
    /// The batch rule in force after a shrink (`keep_global` or `keep_per_worker`); `None`
    /// when the job never shrank.
    pub batch_rule: Option<String>,
    /// Images of the last global batch.
    pub global_batch_at_end: usize,
    /// The learning rate's factor at the end (the linear scaling rule; 1 unless the global
    /// batch shrank).
    pub lr_scale_at_end: f64,
}

/// What resuming found: the load's report, and the settings that differ from the run that
/// wrote the checkpoint (`key: old -> new`).
pub(crate) type Resumed = (resilab_checkpoint::LoadReport, Vec<String>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_data_configuration_is_made_once_and_shared_and_no_other_shares_it() {
        let cfg: resilab_data::DataConfig =
            toml::from_str("source = \"synthetic\"\ntrain_size = 64\ntest_size = 32\nimage_size = 8").expect("data config");
        let cache = DataCache::default();
        let a = cache.get(&cfg).expect("load");
        let b = cache.clone().get(&cfg).expect("load");
        assert!(std::sync::Arc::ptr_eq(&a, &b), "a clone shares the cache");
        let fresh = resilab_data::load(&cfg).expect("load");
        assert_eq!(a.train.images, fresh.train.images, "the cached data is the data the configuration makes");
        let other = resilab_data::DataConfig { seed: cfg.seed.wrapping_add(1), ..cfg.clone() };
        let c = cache.get(&other).expect("load");
        assert!(!std::sync::Arc::ptr_eq(&a, &c));
        assert_ne!(a.train.images, c.train.images);
    }
}
