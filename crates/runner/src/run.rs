//! One training run: builds data, model and trainer from a [`RunConfig`], trains, and writes
//! `metrics.csv`, `summary.json` and `config.resolved.toml` into the output directory.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use resilab_checkpoint::{LoadReport, OnMismatch};
use resilab_data::Split;
use resilab_faults::{FaultInjector, FaultTarget};
use resilab_models::{Compute, DatasetPath, InputShape, Net, init_parameters};
use resilab_recovery::Guard;
use resilab_train::{OptimizerConfig, ParallelMode, TrainSpec, TrainState, Trainer};

use crate::golden::Ensemble;
use crate::outcome::{Curve, OutcomeConfig};
use crate::records::{Resumed, RunOptions, Summary};
use crate::session::{Dirs, Recovery, Session};
use crate::{Error, Result, RunConfig};

/// Builds and initialises the network a configuration describes, for `split`'s images, on
/// `compute`'s device, running its kernels in the configuration's `train.precision`.
pub fn build_net(cfg: &RunConfig, split: &Split, compute: &Compute) -> Result<Net> {
    let input = InputShape { channels: split.train.channels, size: split.train.size };
    let net = cfg.model.build(input, split.train.classes, &compute.device)?;
    Ok(init_parameters(net, cfg.seed, &compute.device).with_kernels(compute.kernels).with_precision(cfg.train.precision))
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
    let split = opts.data.get(&cfg.data)?;
    let mut trainer = build_trainer(cfg, split.clone(), &opts.compute)?;
    let resumed = resume(&mut trainer, cfg, opts)?;
    let mut rec = make_recovery(cfg, &trainer)?;
    // The golden run comes before anything is written here: a run stopped while it computes
    // leaves this directory as it found it.
    let (golden, ensemble) = golden_run(cfg, opts)?.map_or((None, None), |(g, e)| (Some(g), e));
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
    session.fast_forward(&mut trainer, &mut rec)?;
    session.run(&mut trainer, &mut rec)?;
    let summary = with_ensemble(session.finish(&mut trainer, &mut rec, &split, resumed)?, ensemble);
    let summary = with_outcome(summary, &out.join("metrics.csv"), &cfg.outcome)?;
    if let Some(log) = rec.guard.signals.take() {
        write_atomic(&out.join(crate::signals::SIGNALS_CSV), &crate::signals::to_csv(&log.rows)?)?;
    }
    let json = serde_json::to_vec_pretty(&summary).map_err(|source| Error::Json { what: "summary.json".into(), source })?;
    watch.check()?;
    write_atomic(&out.join("summary.json"), &json)?;
    Ok(summary)
}

/// `summary` with its outcome class, read from its `metrics.csv` at `metrics` against its golden
/// run's curve (member 0 of an ensemble); unchanged without a golden run.
fn with_outcome(mut summary: Summary, metrics: &Path, t: &OutcomeConfig) -> Result<Summary> {
    let (Some(golden), Some(acc_loss)) = (&summary.golden, summary.acc_loss_vs_golden) else { return Ok(summary) };
    let facts = crate::outcome::RunFacts {
        first_fault_step: summary.first_fault_step,
        failed: summary.status == crate::RunStatus::Failed,
        collapsed: summary.collapsed,
        first_non_finite_step: summary.first_non_finite_step,
        last_step: summary.steps,
        acc_loss_points: acc_loss * 100.0,
    };
    let c = crate::outcome::classify(&facts, &Curve::read(metrics)?, &golden.curve, t);
    summary.outcome = Some(c.outcome);
    summary.outcome_onset_step = c.onset_step;
    Ok(summary)
}

/// Loads `opts.resume` into the trainer, if given; returns what loading found. Optimizer state
/// that the configured optimizer would drop or start again is an error unless
/// `checkpoint.on_mismatch = "load"`; other changed settings are warned about.
fn resume(trainer: &mut Trainer, cfg: &RunConfig, opts: &RunOptions) -> Result<Option<Resumed>> {
    let Some(target) = &opts.resume else { return Ok(None) };
    let template = trainer.snapshot();
    let (state, mut report) = resilab_checkpoint::load(target, &template, cfg.checkpoint.on_mismatch, opts.probe.as_ref())?;
    check_optimizer_state(&state, &cfg.optimizer, cfg.checkpoint.on_mismatch)?;
    let file = report.file.clone().unwrap_or_else(|| report.dir.join(resilab_checkpoint::file_name(0)));
    report.forward_pass = resilab_checkpoint::forward_pass(&file)?;
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
    if let Some(line) = report.forward_pass.as_ref().and_then(|f| f.warning(&file)) {
        eprintln!("resilab: {}", resilab_text::terminal(&line));
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

/// The `[[fault]]` entries checked against the trainer and scheduled in their injector, and the
/// guard that detects and recovers.
fn make_recovery(cfg: &RunConfig, trainer: &Trainer) -> Result<Recovery> {
    let entries = cfg.faults.entries();
    if let Some(e) = entries.iter().find(|e| e.target == FaultTarget::Checkpoint)
        && !cfg.checkpoint.enabled()
    {
        return Err(Error::Config(format!(
            "fault[{}].target = \"checkpoint\" needs checkpoints: set checkpoint.every_steps or checkpoint.every_epoch",
            e.index
        )));
    }
    let block_names: Vec<String> = trainer.workers.iter().flat_map(|w| w.net.block_names.clone()).collect();
    resilab_faults::check_neuron_locations(entries, &block_names)?;
    resilab_faults::check_tensor_locations(entries, &tensor_paths(trainer, &cfg.optimizer), &copied_paths(trainer))?;
    let stages = (cfg.parallel.mode == ParallelMode::Pipeline).then_some(trainer.workers.len());
    resilab_faults::check_messages(entries, stages)?;
    resilab_faults::check_precision(entries, cfg.train.precision)?;
    let events = resilab_faults::schedule(entries, trainer.total_steps(), trainer.workers.len(), cfg.fault_seed)?;
    let replicas = if cfg.parallel.mode == ParallelMode::Data { trainer.workers.len() } else { 1 };
    let mut guard = Guard::new(cfg.recovery.strategy, cfg.detect.clone(), replicas);
    guard.rebalance = cfg.recovery.rebalance;
    Ok(Recovery { guard, faults: FaultInjector::new(entries.to_vec(), events, cfg.fault_seed) })
}

/// Every tensor's checkpoint path in the run: each worker's parameters and buffers under
/// `model/`, and the optimizer buffers `optimizer` keeps for its trainable parameters.
fn tensor_paths(trainer: &Trainer, optimizer: &OptimizerConfig) -> Vec<DatasetPath> {
    let buffers = optimizer.buffer_names();
    let mut out = Vec::new();
    for w in &trainer.workers {
        for p in resilab_models::named_params(&w.net) {
            if p.trainable {
                out.extend(buffers.iter().map(|b| DatasetPath::Optimizer { param: p.name.clone(), buffer: b.to_string() }));
            }
            out.push(DatasetPath::Model(p.name));
        }
    }
    out
}

/// The checkpoint paths of the parameters a `weight_copy` fault can hit: every worker's
/// trainable convolution and linear weights and biases (BatchNorm has no half copy).
fn copied_paths(trainer: &Trainer) -> Vec<DatasetPath> {
    let params = trainer.workers.iter().flat_map(|w| resilab_models::named_params(&w.net));
    params.filter(resilab_models::ParamInfo::has_weight_copy).map(|p| DatasetPath::Model(p.name)).collect()
}

/// The golden (fault-free) run of a configuration with faults, computed into the cache once,
/// and with `train.golden_ensemble` K > 1 the ensemble it belongs to: member 0 that golden run,
/// members 1..K golden runs differing only in their reduction seed, each cached like any golden
/// run ([`crate::golden::ensemble_configs`]).
fn golden_run(cfg: &RunConfig, opts: &RunOptions) -> Result<Option<(crate::golden::Golden, Option<Ensemble>)>> {
    let Some(root) = opts.golden.as_ref().filter(|_| opts.compare_fault_free || !cfg.faults.is_empty()) else { return Ok(None) };
    let platform = opts.provenance.platform();
    let members = crate::golden::ensemble_configs(cfg);
    let mut goldens = Vec::with_capacity(members.len());
    for (k, m) in members.iter().enumerate() {
        goldens.push(crate::golden::ensure(m, &platform, root, |gcfg, dir| {
            if opts.progress {
                let which = if members.len() > 1 { format!(" (ensemble member {k} of {})", members.len()) } else { String::new() };
                eprintln!("resilab: computing the golden (fault-free) run{which} into {}", root.display());
            }
            train(gcfg, &golden_options(opts, dir)).map(|_| ())
        })?);
    }
    let ensemble = (goldens.len() > 1).then(|| Ensemble {
        accs: goldens.iter().map(|g| g.final_test_acc).collect(),
        dirs: goldens.iter().map(|g| g.dir.clone()).collect(),
    });
    Ok(goldens.into_iter().next().map(|g| (g, ensemble)))
}

/// How a golden run of a run with `opts` trains into `dir`: saving its states, and its step
/// cache where the run takes shortcuts.
fn golden_options(opts: &RunOptions, dir: &Path) -> RunOptions {
    RunOptions {
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
        shortcuts: false,
        record_steps: opts.shortcuts,
        data: opts.data.clone(),
    }
}

/// `summary` measured against a golden ensemble: the accuracy loss against the members' mean
/// final accuracy, and the members' accuracies, mean and spread recorded (`golden` stays
/// member 0, the run's own golden run).
fn with_ensemble(mut summary: Summary, ensemble: Option<Ensemble>) -> Summary {
    if let Some(e) = ensemble {
        summary.acc_loss_vs_golden = Some(e.mean() - summary.final_test_acc);
        summary.golden_ensemble_mean_acc_frac = Some(e.mean());
        summary.golden_ensemble_sd_frac = Some(e.sd());
        summary.golden_ensemble_accs_frac = Some(e.accs);
        summary.golden_ensemble_dirs = Some(e.dirs);
    }
    summary
}
