//! One training run: builds data, model and trainer from a [`RunConfig`], trains, and writes
//! `metrics.csv`, `summary.json` and `config.resolved.toml` into the output directory.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use resilab_checkpoint::{LoadReport, OnMismatch};
use resilab_data::Split;
use resilab_faults::{FaultInjector, FaultTarget};
use resilab_models::{Compute, InputShape, Net, init_parameters};
use resilab_recovery::{DetectionRecord, Guard};
use resilab_train::{OptimizerConfig, ParallelMode, TrainSpec, TrainState, Trainer};
use serde::Serialize;

use crate::session::{Dirs, Session};
use crate::{Error, Provenance, Result, RunConfig};

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
    /// Simulated wall time on a real parallel machine: per step, the end of its overlapped
    /// timeline (compute measured, or modelled with `parallel.compute.gflops`; bucketed
    /// all-reduces overlapping backward; updates overlapping communication), or the pipeline
    /// schedule's span; rollback's state copies and thrown-away attempts; plus checkpoint
    /// writes, the relaunches and reloads of restarts, and respawned workers' state transfers.
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
    /// Within `simulated_s`: job relaunches of restarts from a checkpoint
    /// (`recovery.relaunch_s` each).
    pub simulated_relaunch_s: f64,
    /// Within `simulated_s`: state sent to respawned workers from a healthy replica, at the
    /// network's bandwidth.
    pub simulated_transfer_s: f64,
    /// `(simulated_s - golden simulated_s) / golden simulated_s`: deterministic when
    /// `parallel.compute.gflops` is set.
    pub simulated_overhead_vs_golden: Option<f64>,
    /// Simulated seconds at the first evaluation whose test accuracy reached the golden run's
    /// final accuracy (`train.eval_every` sets how often that is looked at); `None`: never
    /// reached, or no golden run.
    pub simulated_s_to_golden_acc: Option<f64>,
    /// The workers: at the start and the end, those lost for good, the spares used, the steps
    /// at each worker count and the batch and learning-rate rule in force.
    pub workers: crate::session::WorkersSummary,
    /// Bytes moved over the network, all links and steps together.
    pub comm_bytes: u64,
    /// Training and test set sizes.
    pub train_images: usize,
    /// Test set size.
    pub test_images: usize,
    /// Checkpoint the run continued from, if any.
    pub resumed_from: Option<PathBuf>,
    /// Settings that differ from the run that wrote that checkpoint (`key: old -> new`:
    /// `seed`, `optimizer.lr`, `train.batch_size`, `data.train_size`), each also warned about.
    pub resume_changes: Vec<String>,
    /// Datasets loaded despite a digest mismatch (policy `load`).
    pub checkpoint_mismatches: Vec<String>,
    /// Checkpoints written.
    pub checkpoints: usize,
    /// Seconds spent writing checkpoints.
    pub checkpoint_s: f64,
    /// XXH3-64 digest of every parameter and buffer of worker 0 (little-endian f32 bytes, in
    /// name order): equal digests mean bit-identical final weights.
    pub final_params_digest: String,
    /// `completed`, or `failed` (the strategy gave up: a crash under `none`; or a worker was
    /// lost for good and the job could not go on).
    pub status: String,
    /// Why the run failed, where it is more than the strategy giving up.
    pub failure: Option<String>,
    /// Recovery strategy.
    pub strategy: String,
    /// Faults that struck (see `faults.jsonl`).
    pub faults_injected: usize,
    /// Values the faults changed.
    pub values_corrupted: usize,
    /// Corrupted values that became NaN, ±Inf or extreme.
    pub values_non_finite_or_extreme: usize,
    /// Every detection, with its step, worker, latency and the strategy's decision.
    pub detections: Vec<DetectionRecord>,
    /// Restarts from a checkpoint (or from the initial state).
    pub restarts: Vec<Restart>,
    /// Completed steps thrown away by restarts.
    pub steps_lost: u64,
    /// Steps computed again: redone steps plus the lost steps.
    pub steps_recomputed: u64,
    /// Whether any worker's final state (parameters, buffers, optimizer state) holds a NaN/Inf,
    /// or the last step's training loss is not finite.
    pub collapsed: bool,
    /// Whether any worker's final state holds a NaN/Inf or a value above
    /// `detect.extreme_threshold` in magnitude (N-EV's state rule).
    pub final_state_extreme: bool,
    /// The golden run compared with (runs with faults).
    pub golden: Option<crate::golden::Golden>,
    /// Golden final test accuracy minus this run's.
    pub acc_loss_vs_golden: Option<f64>,
    /// `(wall_s - golden wall_s) / golden wall_s`.
    pub time_overhead_vs_golden: Option<f64>,
    /// Distance of the final parameters from the golden run's.
    pub final_param_distance: Option<f64>,
    /// Where the numbers came from.
    pub provenance: Provenance,
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
    /// `golden_test_acc - test_acc`.
    pub acc_loss: Option<f64>,
    /// Euclidean distance between this run's and the golden run's trainable parameters.
    pub param_distance: Option<f64>,
}

/// Builds and initialises the network a configuration describes, for `split`'s images, on
/// `compute`'s device and running its kernels.
pub fn build_net(cfg: &RunConfig, split: &Split, compute: &Compute) -> Result<Net> {
    let input = InputShape { channels: split.train.channels, size: split.train.size };
    let net = cfg.model.build(input, split.train.classes, &compute.device)?;
    Ok(init_parameters(net, cfg.seed, &compute.device).with_kernels(compute.kernels))
}

/// Builds the trainer a configuration describes, on `compute` (its device made autodiff here).
pub fn build_trainer(cfg: &RunConfig, split: Arc<Split>, compute: &Compute) -> Result<Trainer> {
    let device = compute.device.clone().autodiff();
    let net = build_net(cfg, &split, &Compute { device: device.clone(), kernels: compute.kernels })?;
    let spec = TrainSpec {
        train: cfg.train.clone(),
        optimizer: cfg.optimizer.clone(),
        schedule: cfg.schedule.clone(),
        parallel: cfg.parallel.clone(),
        seed: cfg.seed,
    };
    Ok(Trainer::new(net, spec, split, device)?)
}

/// The block names of each pipeline stage (empty for data parallelism).
pub fn stage_blocks(trainer: &Trainer) -> Vec<Vec<String>> {
    trainer.workers.iter().filter(|_| trainer.stage_ranges().is_some()).map(|w| w.net.block_names.clone()).collect()
}

/// Checks that resilab may write its files into `dir`: it does not exist yet, is empty, or holds
/// one of the files named in `own` (an earlier output of the same kind, which resilab wrote).
/// Anything else is an error naming `what` and one of the entries, so no flag can make a
/// command overwrite files it did not write.
pub fn check_output_dir(dir: &Path, own: &[&str], what: &str) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(Error::Config(format!("{what} {} exists and is not a directory", dir.display())));
        }
        Err(source) => return Err(Error::Io { path: dir.to_path_buf(), source }),
    };
    let mut first = None;
    for e in entries {
        let name = e.map_err(|source| Error::Io { path: dir.to_path_buf(), source })?.file_name();
        // The lock, and temporary files of resilab's own atomic writes (left by a write that
        // failed: a full disk), are not foreign.
        if name == crate::files::LOCK_FILE || own_temporary(&name.to_string_lossy(), own) || empty_checkpoint_root(&dir.join(&name)) {
            continue;
        }
        if own.iter().any(|o| name == *o) {
            return Ok(());
        }
        first.get_or_insert(name);
    }
    match first {
        None => Ok(()),
        Some(name) => Err(Error::Config(format!(
            "{what} {} holds {} and other files resilab did not write (no {}): give a new or empty directory",
            dir.display(),
            name.to_string_lossy(),
            own.join(" or ")
        ))),
    }
}

/// Whether `path` is a checkpoint root resilab claimed and wrote nothing into yet (it holds
/// only its marker): what a run stopped right after claiming it leaves.
fn empty_checkpoint_root(path: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(path) else { return false };
    let names: Vec<std::ffi::OsString> = entries.flatten().map(|e| e.file_name()).collect();
    names.len() == 1 && names[0] == resilab_checkpoint::ROOT_MARKER
}

/// Whether `name` is the temporary file [`write_atomic`] writes for one of the files in `own`
/// or for the run's other atomic outputs (`summary.json`, `config.resolved.toml`).
fn own_temporary(name: &str, own: &[&str]) -> bool {
    let Some(stem) = name.strip_suffix(".tmp") else { return false };
    own.iter()
        .chain(&["summary.json", "config.resolved.toml", "campaign.json", "campaign.toml"])
        .any(|o| Path::new(o).file_stem().is_some_and(|s| s == stem))
}

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename): the rename replaces a
/// link at `path` rather than writing through it, and the temporary file is never a link.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let mut f = crate::files::create_output(&tmp)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// Opens `metrics.csv` for writing. When resuming at step `resume_step` into a directory that
/// already has one, the rows up to that step are kept and later rows (from the interrupted run,
/// about to be recomputed) are dropped, so the file reads as one uninterrupted run.
/// Returns the writer and, when resuming, the last step that has a row.
pub(crate) fn open_metrics(path: &Path, resume_step: Option<u64>) -> Result<(csv::Writer<std::fs::File>, Option<u64>)> {
    let csv_err = |e| Error::Csv { path: path.to_path_buf(), source: e };
    let Some(step) = resume_step.filter(|_| path.exists()) else {
        return Ok((csv::Writer::from_writer(crate::files::create_output(path)?), None));
    };
    let mut kept = Vec::new();
    let mut reader = csv::Reader::from_path(path).map_err(csv_err)?;
    let headers = reader.headers().map_err(csv_err)?.clone();
    for record in reader.records() {
        // A last row cut short (the disk filled, or the run was killed mid-write) is dropped.
        let record = match record {
            Ok(r) => r,
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
    let mut w = csv::Writer::from_writer(crate::files::create_output(path)?);
    w.write_record(&headers).map_err(csv_err)?;
    for r in &kept {
        w.write_record(r).map_err(csv_err)?;
    }
    w.flush().map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    let file = crate::files::append_output(path)?;
    Ok((csv::WriterBuilder::new().has_headers(false).from_writer(file), last))
}

/// Appends the fault log's entries from `from` on to `file` (JSON lines, flushed); returns the
/// number of entries written in all.
pub(crate) fn append_fault_log(file: &mut impl Write, path: &Path, log: &[resilab_faults::FaultLog], from: usize) -> Result<usize> {
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    for entry in &log[from..] {
        let line = serde_json::to_string(entry).map_err(|e| Error::Config(format!("fault log: {e}")))?;
        writeln!(file, "{line}").map_err(io)?;
    }
    file.flush().map_err(io)?;
    Ok(log.len())
}

/// Trains as configured and writes the run's files. Returns the summary.
///
/// The phases: prepare the output directory, build data and trainer, resume from a checkpoint
/// if asked, claim the checkpoint directory, set up the faults and their guard, make sure the
/// golden run exists, train ([`Session`]), and write `summary.json`.
pub fn train(cfg: &RunConfig, opts: &RunOptions) -> Result<Summary> {
    cfg.checkpoint.validate().map_err(Error::Config)?;
    let resolved = crate::project::resolve_daly(cfg)?;
    let cfg = &resolved;
    let out = &opts.out;
    // Held until the run ends: a second run on the same directory fails at once, before it
    // looks at what the first has begun to write.
    let _out_lock = crate::files::lock_dir(out, "the output directory")?;
    check_output_dir(out, &["config.resolved.toml"], "the output directory")?;
    let split = Arc::new(resilab_data::load(&cfg.data)?);
    let mut trainer = build_trainer(cfg, split.clone(), &opts.compute)?;
    let resumed = resume(&mut trainer, cfg, opts)?;
    let mut guard = make_guard(cfg, &trainer)?;
    // The golden run comes before anything is written here: a run stopped while it computes
    // leaves this directory as it found it.
    let golden = golden_run(cfg, opts)?;
    let ckpt_root = cfg.checkpoint.root(out);
    let mut watch = crate::files::Watch::default();
    watch.add(out)?;
    // A checkpoint directory outside the output directory has its own lock: two runs that
    // share one would prune each other's checkpoints.
    let _ckpt_lock = match cfg.checkpoint.enabled() {
        true => {
            resilab_checkpoint::claim(&ckpt_root, cfg.checkpoint.adopt_dir)?;
            watch.add(&ckpt_root)?;
            (!ckpt_root.starts_with(out)).then(|| crate::files::lock_dir(&ckpt_root, "checkpoint.dir")).transpose()?
        }
        false => None,
    };
    // Only now, when nothing can refuse the run any more, are the directory's files replaced.
    watch.check()?;
    write_atomic(&out.join("config.resolved.toml"), cfg.to_toml().as_bytes())?;
    let mut session = Session::open(cfg, opts, &trainer, Dirs { ckpt_root, watch: watch.clone() }, golden, resumed.is_some())?;
    session.run(&mut trainer, &mut guard)?;
    let summary = session.finish(&mut trainer, &mut guard, &split, resumed)?;
    let json = serde_json::to_vec_pretty(&summary).map_err(|e| Error::Config(format!("summary: {e}")))?;
    watch.check()?;
    write_atomic(&out.join("summary.json"), &json)?;
    Ok(summary)
}

/// What resuming found: the load's report, and the settings that differ from the run that
/// wrote the checkpoint (`key: old -> new`).
pub(crate) type Resumed = (LoadReport, Vec<String>);

/// Loads `opts.resume` into the trainer, if given; returns what loading found. Optimizer state
/// that the configured optimizer would drop or start again is an error unless
/// `checkpoint.on_mismatch = "load"`; other changed settings are warned about.
fn resume(trainer: &mut Trainer, cfg: &RunConfig, opts: &RunOptions) -> Result<Option<Resumed>> {
    let Some(target) = &opts.resume else { return Ok(None) };
    let template = trainer.snapshot();
    let (state, report) = resilab_checkpoint::load(target, &template, cfg.checkpoint.on_mismatch, opts.probe.as_ref())?;
    check_optimizer_state(&state, &cfg.optimizer, cfg.checkpoint.on_mismatch)?;
    let changes = changed_settings(&report, cfg);
    if state.step == trainer.total_steps() {
        return Err(Error::Config(format!(
            "{} holds step {}, and this run trains {} step(s) in all: nothing is left to train (raise train.epochs or train.steps to train further)",
            report.dir.display(),
            state.step,
            trainer.total_steps()
        )));
    }
    trainer.restore(&state)?;
    for c in &changes {
        eprintln!("resilab: warning: resuming with {c} (the checkpoint's run had the first value)");
    }
    for s in &report.skipped {
        eprintln!("resilab: skipped checkpoint {s}");
    }
    if !report.mismatched.is_empty() {
        eprintln!("resilab: loaded {} dataset(s) whose digest differs: {}", report.mismatched.len(), report.mismatched.join(", "));
    }
    match &report.file {
        Some(f) => {
            eprintln!("resilab: resumed from {} (with {} read for its rank) at step {}", report.dir.display(), f.display(), trainer.step)
        }
        None => eprintln!("resilab: resumed from {} at step {}", report.dir.display(), trainer.step),
    }
    Ok(Some((report, changes)))
}

/// Refuses a checkpoint whose optimizer state the configured optimizer would silently drop
/// (buffers it does not keep: another optimizer kind) or start again from zero (a stepped
/// optimizer without the buffers it keeps), unless `policy` is `load`.
fn check_optimizer_state(state: &TrainState, opt: &OptimizerConfig, policy: OnMismatch) -> Result<()> {
    let params = || state.workers.iter().flat_map(|w| w.optim.values());
    let held: BTreeSet<&str> = params().flat_map(|p| p.buffers.keys().map(String::as_str)).collect();
    let kept: BTreeSet<&str> = opt.buffer_names().iter().copied().collect();
    let stepped = params().any(|p| p.step > 0);
    if held == kept || policy == OnMismatch::Load || (held.is_empty() && !stepped) {
        return Ok(());
    }
    let list = |s: &BTreeSet<&str>| if s.is_empty() { "no buffers".to_string() } else { s.iter().copied().collect::<Vec<_>>().join(", ") };
    Err(Error::Config(format!(
        "the checkpoint's optimizer state holds {}, but optimizer.kind = {:?} with momentum = {} keeps {}: resuming would drop it or start it again from zero; resume with the checkpoint's optimizer settings, or set checkpoint.on_mismatch = \"load\" to go on anyway",
        list(&held),
        opt.kind,
        opt.momentum,
        list(&kept)
    )))
}

/// The settings that shape training and differ between the checkpoint's run and `cfg`, as
/// `key: old -> new`.
fn changed_settings(report: &LoadReport, cfg: &RunConfig) -> Vec<String> {
    let file = report.file.clone().unwrap_or_else(|| report.dir.join(resilab_checkpoint::file_name(0)));
    let Ok(old) = resilab_checkpoint::read_meta(&file).and_then(|m| {
        toml::from_str::<RunConfig>(&m.config)
            .map_err(|e| resilab_checkpoint::Error::Invalid { path: file.clone(), message: e.to_string() })
    }) else {
        return Vec::new();
    };
    let pairs = [
        ("seed", old.seed.to_string(), cfg.seed.to_string()),
        ("optimizer.lr", old.optimizer.lr.to_string(), cfg.optimizer.lr.to_string()),
        ("train.batch_size", old.train.batch_size.to_string(), cfg.train.batch_size.to_string()),
        ("data.train_size", format!("{:?}", old.data.train_size), format!("{:?}", cfg.data.train_size)),
    ];
    pairs.into_iter().filter(|(_, a, b)| a != b).map(|(k, a, b)| format!("{k}: {a} -> {b}")).collect()
}

/// The `[[fault]]` entries checked against the trainer and scheduled, in the guard that injects
/// them and detects and recovers.
fn make_guard(cfg: &RunConfig, trainer: &Trainer) -> Result<Guard> {
    let config = |e: &dyn std::fmt::Display| Error::Config(e.to_string());
    let entries = resilab_faults::parse(&cfg.faults).map_err(|e| config(&e))?;
    if let Some(e) = entries.iter().find(|e| e.target == FaultTarget::Checkpoint)
        && !cfg.checkpoint.enabled()
    {
        return Err(Error::Config(format!(
            "fault[{}].target = \"checkpoint\" needs checkpoints: set checkpoint.every_steps or checkpoint.every_epoch",
            e.index
        )));
    }
    let block_names: Vec<String> = trainer.workers.iter().flat_map(|w| w.net.block_names.clone()).collect();
    resilab_faults::check_neuron_locations(&entries, &block_names).map_err(|e| config(&e))?;
    resilab_faults::check_tensor_locations(&entries, &tensor_paths(trainer, &cfg.optimizer)).map_err(|e| config(&e))?;
    let stages = (cfg.parallel.mode == ParallelMode::Pipeline).then_some(trainer.workers.len());
    resilab_faults::check_messages(&entries, stages).map_err(|e| config(&e))?;
    let events =
        resilab_faults::schedule(&entries, trainer.total_steps(), trainer.workers.len(), cfg.fault_seed).map_err(|e| config(&e))?;
    let replicas = if cfg.parallel.mode == ParallelMode::Data { trainer.workers.len() } else { 1 };
    let mut guard = Guard::new(FaultInjector::new(entries, events, cfg.fault_seed), cfg.recovery.strategy, cfg.detect.clone(), replicas);
    guard.rebalance = cfg.recovery.rebalance;
    Ok(guard)
}

/// Every tensor's checkpoint path in the run: each worker's parameters and buffers under
/// `model/`, and the optimizer buffers `optimizer` keeps for its trainable parameters.
fn tensor_paths(trainer: &Trainer, optimizer: &OptimizerConfig) -> Vec<String> {
    let buffers = optimizer.buffer_names();
    let mut out = Vec::new();
    for w in &trainer.workers {
        for p in resilab_models::named_params(&w.net) {
            let path = resilab_checkpoint::name_to_path(&p.name);
            if p.trainable {
                out.extend(buffers.iter().map(|b| format!("optimizer/{path}/{b}")));
            }
            out.push(format!("model/{path}"));
        }
    }
    out
}

/// The golden (fault-free) run of a configuration with faults, computed into the cache once.
fn golden_run(cfg: &RunConfig, opts: &RunOptions) -> Result<Option<crate::golden::Golden>> {
    let Some(root) = opts.golden.as_ref().filter(|_| opts.compare_fault_free || !cfg.faults.is_empty()) else { return Ok(None) };
    let platform = opts.provenance.platform();
    let golden = crate::golden::ensure(cfg, &platform, root, |gcfg, dir| {
        if opts.progress {
            eprintln!("resilab: computing the golden (fault-free) run into {}", root.display());
        }
        let o = RunOptions {
            out: dir.to_path_buf(),
            compute: opts.compute.clone(),
            provenance: opts.provenance.clone(),
            progress: opts.progress,
            resume: None,
            probe: Box::new(|_: &Path| Ok(())),
            golden: None,
            compare_fault_free: false,
            record_states: true,
            record_samples: false,
        };
        train(gcfg, &o).map(|_| ())
    })?;
    Ok(Some(golden))
}
