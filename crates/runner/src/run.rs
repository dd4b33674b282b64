//! One training run: builds data, model and trainer from a [`RunConfig`], trains, and writes
//! `metrics.csv`, `summary.json` and `config.resolved.toml` into the output directory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use burn::prelude::*;
use indicatif::{ProgressBar, ProgressStyle};
use resilab_data::Split;
use resilab_models::{InputShape, Net, init_parameters};
use resilab_faults::{FaultInjector, FaultTarget};
use resilab_recovery::{Decision, DetectionRecord, Guard};
use resilab_train::{Evaluation, ParallelMode, StepOutcome, TrainSpec, Trainer};
use serde::Serialize;

use crate::{Error, Provenance, Result, RunConfig};

/// One row of `metrics.csv`. Training loss and accuracy are means over the steps since the
/// previous row; test columns are empty where no evaluation ran.
#[derive(Debug, Serialize)]
pub struct MetricsRow {
    /// Steps completed.
    pub step: u64,
    /// Epoch of the last step (0-based).
    pub epoch: usize,
    /// Mean training loss since the previous row.
    pub loss: f64,
    /// Training accuracy since the previous row.
    pub train_acc: f64,
    /// Test accuracy, when evaluated at this step.
    pub test_acc: Option<f64>,
    /// Test loss, when evaluated at this step.
    pub test_loss: Option<f64>,
    /// Learning rate of the last step.
    pub lr: f64,
    /// Seconds since training started (evaluation included).
    pub wall_s: f64,
    /// Simulated seconds of the parallel run so far (steps only; see the cost model).
    pub sim_s: f64,
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
    /// Simulated wall time of the steps on a real parallel machine: per step, the slowest
    /// worker's measured compute plus modelled communication (or the pipeline schedule's span).
    pub simulated_s: f64,
    /// Modelled communication time within `simulated_s`.
    pub simulated_comm_s: f64,
    /// Bytes moved over the network, all links and steps together.
    pub comm_bytes: u64,
    /// Training and test set sizes.
    pub train_images: usize,
    /// Test set size.
    pub test_images: usize,
    /// Checkpoint the run continued from, if any.
    pub resumed_from: Option<PathBuf>,
    /// Datasets loaded despite a digest mismatch (policy `load`).
    pub checkpoint_mismatches: Vec<String>,
    /// Checkpoints written.
    pub checkpoints: usize,
    /// Seconds spent writing checkpoints.
    pub checkpoint_s: f64,
    /// XXH3-64 digest of every parameter and buffer of worker 0 (little-endian f32 bytes, in
    /// name order): equal digests mean bit-identical final weights.
    pub final_params_digest: String,
    /// `completed`, or `failed` (the strategy gave up: a crash under `none`).
    pub status: String,
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
    /// Whether the final weights hold NaN/Inf or the final training loss is not finite.
    pub collapsed: bool,
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
    /// The device to train on (an autodiff device is made from it).
    pub device: Device,
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
    /// Save the whole model at every evaluation under `<out>/states` (golden runs do).
    pub record_states: bool,
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

/// Builds and initialises the network a configuration describes, for `split`'s images.
pub fn build_net(cfg: &RunConfig, split: &Split, device: &Device) -> Result<Net> {
    let input = InputShape { channels: split.train.channels, size: split.train.size };
    let net = cfg.model.build(input, split.train.classes, device)?;
    Ok(init_parameters(net, cfg.seed, device))
}

/// Builds the trainer a configuration describes, on `device` (made autodiff here).
pub fn build_trainer(cfg: &RunConfig, split: Arc<Split>, device: &Device) -> Result<Trainer> {
    let device = device.clone().autodiff();
    let net = build_net(cfg, &split, &device)?;
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

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// Opens `metrics.csv` for writing. When resuming at step `resume_step` into a directory that
/// already has one, the rows up to that step are kept and later rows (from the interrupted run,
/// about to be recomputed) are dropped, so the file reads as one uninterrupted run.
fn open_metrics(path: &Path, resume_step: Option<u64>) -> Result<csv::Writer<std::fs::File>> {
    let csv_err = |e| Error::Csv { path: path.to_path_buf(), source: e };
    let Some(step) = resume_step.filter(|_| path.exists()) else {
        return csv::Writer::from_path(path).map_err(csv_err);
    };
    let mut kept = Vec::new();
    let mut reader = csv::Reader::from_path(path).map_err(csv_err)?;
    let headers = reader.headers().map_err(csv_err)?.clone();
    for record in reader.records() {
        let record = record.map_err(csv_err)?;
        if record.get(0).and_then(|s| s.parse::<u64>().ok()).is_some_and(|s| s <= step) {
            kept.push(record);
        }
    }
    let mut w = csv::Writer::from_path(path).map_err(csv_err)?;
    w.write_record(&headers).map_err(csv_err)?;
    for r in &kept {
        w.write_record(r).map_err(csv_err)?;
    }
    w.flush().map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    let file = std::fs::OpenOptions::new().append(true).open(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    Ok(csv::WriterBuilder::new().has_headers(false).from_writer(file))
}

/// Appends the fault log's entries from `from` on to `file` (JSON lines, flushed); returns the
/// number of entries written in all.
fn append_fault_log(file: &mut impl Write, path: &Path, log: &[resilab_faults::FaultLog], from: usize) -> Result<usize> {
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    for entry in &log[from..] {
        let line = serde_json::to_string(entry).map_err(|e| Error::Config(format!("fault log: {e}")))?;
        writeln!(file, "{line}").map_err(io)?;
    }
    file.flush().map_err(io)?;
    Ok(log.len())
}

/// Trains as configured and writes the run's files. Returns the summary.
pub fn train(cfg: &RunConfig, opts: &RunOptions) -> Result<Summary> {
    let out = &opts.out;
    std::fs::create_dir_all(out).map_err(|source| Error::Io { path: out.clone(), source })?;
    write_atomic(&out.join("config.resolved.toml"), cfg.to_toml().as_bytes())?;

    let split = Arc::new(resilab_data::load(&cfg.data)?);
    let mut trainer = build_trainer(cfg, split.clone(), &opts.device)?;
    let params = trainer.model().num_trainable();
    let mut resumed_from = None;
    let mut mismatches = Vec::new();
    if let Some(target) = &opts.resume {
        let template = trainer.snapshot();
        let (state, report) = resilab_checkpoint::load(target, &template, cfg.checkpoint.on_mismatch, opts.probe.as_ref())?;
        trainer.restore(&state)?;
        for s in &report.skipped {
            eprintln!("resilab: skipped checkpoint {s}");
        }
        if !report.mismatched.is_empty() {
            eprintln!("resilab: loaded {} dataset(s) whose digest differs: {}", report.mismatched.len(), report.mismatched.join(", "));
        }
        eprintln!("resilab: resumed from {} at step {}", report.dir.display(), trainer.step);
        resumed_from = Some(report.dir);
        mismatches = report.mismatched;
    }
    let ckpt_root = cfg.checkpoint.dir.clone().unwrap_or_else(|| out.join("checkpoints"));
    let entries = resilab_faults::parse(&cfg.faults).map_err(|e| Error::Config(e.to_string()))?;
    if let Some(e) = entries.iter().find(|e| e.target == FaultTarget::Checkpoint)
        && !cfg.checkpoint.enabled()
    {
        return Err(Error::Config(format!(
            "fault[{}].target = \"checkpoint\" needs checkpoints: set checkpoint.every_steps or checkpoint.every_epoch",
            e.index
        )));
    }
    let block_names: Vec<String> = trainer.workers.iter().flat_map(|w| w.net.block_names.clone()).collect();
    resilab_faults::check_neuron_locations(&entries, &block_names).map_err(|e| Error::Config(e.to_string()))?;
    let stages = (cfg.parallel.mode == ParallelMode::Pipeline).then_some(trainer.workers.len());
    resilab_faults::check_messages(&entries, stages).map_err(|e| Error::Config(e.to_string()))?;
    let events = resilab_faults::schedule(&entries, trainer.total_steps(), trainer.workers.len(), cfg.fault_seed)
        .map_err(|e| Error::Config(e.to_string()))?;
    let replicas = if cfg.parallel.mode == ParallelMode::Data { trainer.workers.len() } else { 1 };
    let mut guard = Guard::new(FaultInjector::new(entries, events, cfg.fault_seed), cfg.recovery.strategy, cfg.detect.clone(), replicas);
    let golden = match &opts.golden {
        Some(root) if !cfg.faults.is_empty() => Some(crate::golden::ensure(cfg, &format!("{} / {}", opts.provenance.backend, opts.provenance.device), root, |gcfg, dir| {
            if opts.progress {
                eprintln!("resilab: computing the golden (fault-free) run into {}", root.display());
            }
            let o = RunOptions {
                out: dir.to_path_buf(),
                device: opts.device.clone(),
                provenance: opts.provenance.clone(),
                progress: opts.progress,
                resume: None,
                probe: Box::new(|_: &Path| Ok(())),
                golden: None,
                record_states: true,
            };
            train(gcfg, &o).map(|_| ())
        })?),
        _ => None,
    };
    let compare_path = out.join("compare.csv");
    let mut compare = match &golden {
        Some(_) => Some(csv::Writer::from_path(&compare_path).map_err(|e| Error::Csv { path: compare_path.clone(), source: e })?),
        None => None,
    };
    let mut final_distance = None;
    let initial = trainer.snapshot();
    let faults_path = out.join("faults.jsonl");
    let mut faults_file = std::io::BufWriter::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(resumed_from.is_some())
            .write(true)
            .truncate(resumed_from.is_none())
            .open(&faults_path)
            .map_err(|source| Error::Io { path: faults_path.clone(), source })?,
    );
    let (mut logged_faults, mut restarts, mut steps_lost, mut redos) = (0usize, Vec::new(), 0u64, 0u64);
    let mut status = "completed";
    let meta = resilab_checkpoint::Meta { seed: cfg.seed, arch: cfg.model.label(), config: cfg.to_toml() };
    let (mut checkpoints, mut checkpoint_s) = (0usize, 0.0f64);
    let first_step = trainer.step;

    let metrics_path = out.join("metrics.csv");
    let mut metrics = open_metrics(&metrics_path, resumed_from.is_some().then_some(trainer.step))?;
    let total = trainer.total_steps();
    let bar = if opts.progress { ProgressBar::new(total) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} steps ({per_sec}, eta {eta}) {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );

    let start = Instant::now();
    let mut train_s = 0.0;
    let (mut win_loss, mut win_acc, mut win_n) = (0.0, 0.0, 0u64);
    let mut last_eval: Option<Evaluation> = None;
    let mut final_train_loss = f64::NAN;
    let (mut sim_s, mut comm_s, mut comm_bytes) = (0.0f64, 0.0f64, 0u64);
    while !trainer.done() {
        let t = Instant::now();
        let outcome = trainer.step_with(&mut guard)?;
        train_s += t.elapsed().as_secs_f64();
        logged_faults = append_fault_log(&mut faults_file, &faults_path, &guard.faults.log, logged_faults)?;
        let s = match outcome {
            StepOutcome::Done(s) => {
                redos += u64::from(s.redos);
                s
            }
            StepOutcome::Restored { .. } => continue,
            StepOutcome::Stopped { .. } => match guard.pending.take() {
                Some(Decision::RestartFromCheckpoint) => {
                    let at_step = trainer.step + 1;
                    let t = Instant::now();
                    let template = trainer.snapshot();
                    let loaded = if resilab_checkpoint::list(&ckpt_root).is_ok_and(|l| !l.is_empty()) {
                        let (state, report) = resilab_checkpoint::load(&ckpt_root, &template, resilab_checkpoint::OnMismatch::Fallback, opts.probe.as_ref())?;
                        (state, Some(report.dir))
                    } else {
                        (initial.clone(), None)
                    };
                    trainer.restore(&loaded.0)?;
                    for r in guard.faults.crashed().clone() {
                        guard.faults.respawn(r);
                    }
                    steps_lost += at_step - 1 - trainer.step;
                    restarts.push(Restart { at_step, from: loaded.1, to_step: trainer.step, seconds: t.elapsed().as_secs_f64() });
                    bar.set_position(trainer.step);
                    continue;
                }
                _ => {
                    status = "failed";
                    break;
                }
            },
        };
        sim_s += s.sim_s;
        comm_s += s.comm_s;
        comm_bytes += s.comm_bytes;
        win_loss += s.loss;
        win_acc += s.train_acc;
        win_n += 1;
        bar.inc(1);
        if cfg.checkpoint.due(s.step, s.epoch_end) {
            let t = Instant::now();
            resilab_checkpoint::save(&ckpt_root, &trainer.snapshot(), &meta)?;
            if cfg.checkpoint.keep_last > 0 {
                resilab_checkpoint::prune(&ckpt_root, cfg.checkpoint.keep_last)?;
            }
            checkpoint_s += t.elapsed().as_secs_f64();
            checkpoints += 1;
        }
        let mut restarted = false;
        for event in guard.faults.due_checkpoint(s.step) {
            let Some((_, dir)) = resilab_checkpoint::list(&ckpt_root)?.last().cloned() else {
                eprintln!("resilab: checkpoint fault {} at step {}: no checkpoint written yet, skipped", event.entry, s.step);
                continue;
            };
            let file = dir.join(resilab_checkpoint::file_name(event.rank));
            let Some(spec) = guard.faults.spec(&event).cloned() else { continue };
            let seed = guard.faults.event_seed(&event);
            let report = resilab_inject::inject_file(&spec, &file, &resilab_inject::Output::InPlace, seed)
                .map_err(|e| Error::Config(format!("fault[{}] on {}: {e}", event.entry, file.display())))?;
            guard.faults.record(event, report.records);
            // The published method: restart training from the altered checkpoint.
            let t = Instant::now();
            let template = trainer.snapshot();
            let probe = opts.probe.as_ref();
            let (state, from) = match resilab_checkpoint::load(&dir, &template, resilab_checkpoint::OnMismatch::Error, probe) {
                Ok((state, r)) => (state, Some(r.dir)),
                Err(resilab_checkpoint::Error::Mismatch { .. }) => match guard.checkpoint_mismatch(s.step, event.rank) {
                    Decision::Continue => {
                        let (state, r) = resilab_checkpoint::load(&dir, &template, resilab_checkpoint::OnMismatch::Load, probe)?;
                        (state, Some(r.dir))
                    }
                    _ => match resilab_checkpoint::load(&ckpt_root, &template, resilab_checkpoint::OnMismatch::Fallback, probe) {
                        Ok((state, r)) => (state, Some(r.dir)),
                        Err(_) => (initial.clone(), None),
                    },
                },
                Err(e) => return Err(e.into()),
            };
            trainer.restore(&state)?;
            steps_lost += s.step - trainer.step;
            restarts.push(Restart { at_step: s.step, from, to_step: trainer.step, seconds: t.elapsed().as_secs_f64() });
            restarted = true;
        }
        if restarted {
            logged_faults = append_fault_log(&mut faults_file, &faults_path, &guard.faults.log, logged_faults)?;
            bar.set_position(trainer.step);
            continue;
        }
        let eval_now = match trainer.config.eval_every {
            Some(k) => s.step % k == 0,
            None => s.epoch_end,
        } || trainer.done();
        if s.step % trainer.config.log_every == 0 || eval_now {
            let eval = eval_now.then(|| trainer.evaluate());
            if let Some(e) = eval {
                last_eval = Some(e);
                if opts.record_states || golden.is_some() {
                    let whole = resilab_train::WorkerState::capture(&resilab_train::Worker::new(0, trainer.model(), 0));
                    if let (Some(g), Some(w)) = (&golden, compare.as_mut()) {
                        let distance = g.state_at(s.step, &whole).map(|gs| crate::golden::param_distance(&whole, &gs));
                        final_distance = distance;
                        let golden_acc = g.curve.get(&s.step).copied();
                        let row = CompareRow { step: s.step, test_acc: e.accuracy, golden_test_acc: golden_acc, acc_loss: golden_acc.map(|a| a - e.accuracy), param_distance: distance };
                        w.serialize(&row).map_err(|e| Error::Csv { path: compare_path.clone(), source: e })?;
                        w.flush().map_err(|source| Error::Io { path: compare_path.clone(), source })?;
                    }
                    if opts.record_states {
                        crate::golden::save_state(&out.join("states"), s.step, whole, cfg)?;
                    }
                }
            }
            final_train_loss = win_loss / win_n as f64;
            let row = MetricsRow {
                step: s.step,
                epoch: s.epoch,
                loss: final_train_loss,
                train_acc: win_acc / win_n as f64,
                test_acc: eval.map(|e| e.accuracy),
                test_loss: eval.map(|e| e.loss),
                lr: s.lr,
                wall_s: start.elapsed().as_secs_f64(),
                sim_s,
            };
            metrics.serialize(&row).map_err(|e| Error::Csv { path: metrics_path.clone(), source: e })?;
            metrics.flush().map_err(|source| Error::Io { path: metrics_path.clone(), source })?;
            let test = last_eval.map_or(String::new(), |e| format!(" test_acc {:.3}", e.accuracy));
            bar.set_message(format!("loss {:.3} acc {:.3}{test}", row.loss, row.train_acc));
            (win_loss, win_acc, win_n) = (0.0, 0.0, 0);
        }
    }
    bar.finish();
    let eval = last_eval.unwrap_or_else(|| trainer.evaluate());
    let steps = trainer.step;
    let wall_s = start.elapsed().as_secs_f64();
    let summary = Summary {
        name: cfg.run_name(),
        model: cfg.model.label(),
        params,
        final_test_acc: eval.accuracy,
        final_test_loss: eval.loss,
        final_train_loss,
        steps,
        epochs: steps as f64 / trainer.steps_per_epoch().max(1) as f64,
        wall_s,
        train_s,
        images_per_s: ((steps - first_step) as f64 * trainer.config.batch_size as f64) / train_s.max(1e-9),
        parallel: cfg.parallel.describe(),
        stages: stage_blocks(&trainer),
        simulated_s: sim_s,
        simulated_comm_s: comm_s,
        comm_bytes,
        train_images: split.train.len(),
        test_images: split.test.len(),
        resumed_from,
        checkpoint_mismatches: mismatches,
        checkpoints,
        checkpoint_s,
        final_params_digest: params_digest(&trainer.model()),
        status: status.to_string(),
        strategy: serde_json::to_value(cfg.recovery.strategy).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
        faults_injected: guard.faults.log.len(),
        values_corrupted: guard.faults.log.iter().map(|l| l.corrupted).sum(),
        values_non_finite_or_extreme: guard.faults.log.iter().map(|l| l.nan + l.inf + l.extreme).sum(),
        detections: std::mem::take(&mut guard.detections),
        restarts,
        steps_lost,
        steps_recomputed: steps_lost + redos,
        collapsed: !resilab_faults::detect::weights_finite(&trainer.model()) || !final_train_loss.is_finite(),
        acc_loss_vs_golden: golden.as_ref().map(|g| g.final_test_acc - eval.accuracy),
        time_overhead_vs_golden: golden.as_ref().map(|g| (wall_s - g.wall_s) / g.wall_s),
        final_param_distance: final_distance,
        golden,
        provenance: opts.provenance.clone(),
    };
    let json = serde_json::to_vec_pretty(&summary).map_err(|e| Error::Config(format!("summary: {e}")))?;
    write_atomic(&out.join("summary.json"), &json)?;
    Ok(summary)
}
