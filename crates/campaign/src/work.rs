//! What a worker process does with one job: prepare a base (train to the checkpoint, then the
//! fault-free continuation) or carry out one run. Data sets are loaded once per process.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rand::SeedableRng;
use rand::seq::index::sample;
use resilab_checkpoint::{OnMismatch, Probe};
use resilab_data::Split;
use resilab_models::Compute;
use resilab_recovery::detect::{Health, Outcome, StateEvidence, state_evidence, workers_health, workers_scan};
use resilab_runner::{Provenance, RunConfig, RunOptions, build_trainer};
use resilab_train::Trainer;
use serde::{Deserialize, Serialize};

use crate::phases::Phases;
use crate::spec::{Campaign, Kind, RunSpec, SelfTest};
use crate::{Error, Metrics, Result, Status};

/// A job sent to a worker process (one JSON line).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "job", rename_all = "snake_case")]
pub enum Job {
    /// Prepare the base (and golden run) of run `index`.
    Prep {
        /// A run whose base this is.
        index: u64,
    },
    /// Carry out run `index`.
    Run {
        /// The run.
        index: u64,
    },
}

/// A worker's answer (one JSON line, after [`REPLY_PREFIX`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reply {
    /// The job answered.
    pub job: Job,
    /// How it ended.
    pub status: Status,
    /// What went wrong, if anything.
    pub message: Option<String>,
    /// The run's measurements (runs only).
    pub metrics: Metrics,
}

/// Marks a reply line on a worker's standard output (other lines are ignored).
pub const REPLY_PREFIX: &str = "@resilab-reply ";

/// The fault-free reference of a base: written by the prep job as `golden.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BaseGolden {
    /// Test accuracy of the fault-free continuation (`restart`) or of the base model (`eval`).
    pub test_acc: f64,
    /// Its test loss.
    pub test_loss: f64,
    /// Seconds of the fault-free continuation (restart to the end, evaluation included).
    pub wall_s: f64,
    /// Seconds to train the base.
    pub base_s: f64,
    /// Mean seconds per training step of the base.
    pub step_s: f64,
    /// Seconds and bytes of writing the base checkpoint.
    pub checkpoint_s: f64,
    /// Bytes of the base checkpoint (all worker files).
    pub checkpoint_bytes: u64,
    /// Data parallel: every replica's test accuracy in the reference, in rank order, evaluated
    /// as the runs evaluate theirs (empty for a pipeline, and in bases of earlier revisions).
    #[serde(default)]
    pub replica_acc: Vec<f64>,
}

/// Where a base lives in the campaign directory.
pub fn base_dir(dir: &Path, key: &str) -> PathBuf {
    dir.join("bases").join(key)
}

/// Mean seconds to write one base checkpoint over the bases of the campaign in `dir` (what
/// `restart` and `eval` campaigns measure in `bases/*/golden.json`).
pub fn mean_checkpoint_s(dir: &Path) -> Result<f64> {
    let bases = dir.join("bases");
    let entries = std::fs::read_dir(&bases).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => Error::Config(format!("{}: not a campaign directory with base runs", dir.display())),
        _ => Error::Io { path: bases.clone(), source },
    })?;
    let costs: Vec<f64> =
        entries.flatten().filter_map(|e| read_json::<BaseGolden>(&e.path().join("golden.json")).ok()).map(|g| g.checkpoint_s).collect();
    if costs.is_empty() {
        return Err(Error::Config(format!(
            "{}: no base checkpoints measured (only restart and eval campaigns write them)",
            bases.display()
        )));
    }
    Ok(costs.iter().sum::<f64>() / costs.len() as f64)
}

/// A worker process's state: the campaign, its directory and the data sets loaded so far.
pub struct Worker<'a> {
    campaign: Campaign,
    dir: PathBuf,
    compute: Compute,
    provenance: Provenance,
    probe: Probe<'a>,
    /// The data sets of this worker's runs, each made once and shared by all its runs.
    data: resilab_runner::DataCache,
    /// Whether train runs take the shortcuts (docs/campaigns.md, "Shortcuts"), and golden runs
    /// record the step cache they read.
    shortcuts: bool,
}

impl<'a> Worker<'a> {
    /// A worker for the campaign in `dir` (its `campaign.toml`), training on `compute`; `probe`
    /// checks altered checkpoint files before this process opens them (structurally corrupt
    /// HDF5 files can crash the library).
    pub fn new(dir: &Path, compute: Compute, provenance: Provenance, probe: Probe<'a>) -> Result<Self> {
        let campaign = Campaign::stored(dir)?;
        Ok(Self { campaign, dir: dir.to_path_buf(), compute, provenance, probe, data: Default::default(), shortcuts: true })
    }

    /// This worker with the shortcuts on or off (on by default; `resilab campaign
    /// --no-shortcuts` turns them off).
    pub fn with_shortcuts(mut self, on: bool) -> Self {
        self.shortcuts = on;
        self
    }

    fn split(&self, cfg: &RunConfig) -> Result<Arc<Split>> {
        Ok(self.data.get(&cfg.data)?)
    }

    /// Carries out `job`; panics inside the job are caught and reported.
    pub fn handle(&mut self, job: Job) -> Reply {
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match job {
            Job::Prep { index } => self.prep(index).map(|()| Metrics::default()),
            Job::Run { index } => self.run(index),
        }));
        let (status, message, metrics) = match caught {
            Ok(Ok(m)) => (Status::Ok, None, m),
            Ok(Err(e)) if crate::infrastructure(&e).is_some() => {
                (Status::Infrastructure, Some(resilab_runner::one_line(&e)), Metrics::default())
            }
            Ok(Err(Error::CorruptFile(m))) => (Status::CorruptFile, Some(m), Metrics::default()),
            Ok(Err(e)) => (Status::Error, Some(resilab_runner::one_line(&e)), Metrics::default()),
            Err(p) => {
                let m = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".into());
                (Status::Panicked, Some(m), Metrics::default())
            }
        };
        Reply { job, status, message, metrics }
    }

    /// A run's options; without `golden` it is a golden run, which records the step cache when
    /// the shortcuts are on.
    fn options(&self, out: PathBuf, golden: Option<PathBuf>) -> RunOptions {
        let record_steps = self.shortcuts && golden.is_none();
        RunOptions {
            out,
            compute: self.compute.clone(),
            provenance: self.provenance.clone(),
            progress: false,
            resume: None,
            probe: Box::new(|_: &Path| Ok(())),
            golden,
            compare_fault_free: true,
            record_states: false,
            record_samples: false,
            shortcuts: self.shortcuts,
            record_steps,
            data: self.data.clone(),
        }
    }

    fn platform(&self) -> String {
        self.provenance.platform()
    }

    /// Prepares run `index`'s base, unless it is there already.
    pub fn prep(&mut self, index: u64) -> Result<()> {
        let spec = self.campaign.run(index)?;
        if self.campaign.settings.kind == Kind::Train {
            let root = self.dir.join("golden");
            let platform = self.platform();
            let opts_for = |dir: &Path| self.options(dir.to_path_buf(), None);
            let mut opts = None;
            resilab_runner::golden::ensure(&spec.config, &platform, &root, |g, dir| {
                let o = opts.insert(opts_for(dir));
                // Only runs on modelled compute, not pipelines, take the shortcut.
                o.record_steps &= g.parallel.mode != resilab_train::ParallelMode::Pipeline && g.parallel.compute.gflops.is_some();
                resilab_runner::train(g, o).map(|_| ())
            })?;
            return Ok(());
        }
        let dir = base_dir(&self.dir, &spec.base_key);
        if dir.join("golden.json").is_file() {
            return Ok(());
        }
        let tmp = self.dir.join("bases").join(format!(".{}.{}.tmp", spec.base_key, std::process::id()));
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| Error::Io { path: p, source }
        };
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
        }
        std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
        let cfg = spec.config;
        let split = self.split(&cfg)?;
        let mut trainer = build_trainer(&cfg, split, &self.compute)?;
        let base_steps = self.campaign.settings.base_steps.unwrap_or(0);
        let t = Instant::now();
        while trainer.step < base_steps && !trainer.done() {
            trainer.step().map_err(resilab_runner::Error::from)?;
        }
        let base_s = t.elapsed().as_secs_f64();
        let meta = resilab_checkpoint::Meta { seed: cfg.seed, arch: cfg.model.label(), config: cfg.to_toml() };
        let t = Instant::now();
        let ckpt = resilab_checkpoint::save(&tmp.join("ckpt"), &trainer.snapshot(), &meta)?;
        let checkpoint_s = t.elapsed().as_secs_f64();
        let checkpoint_bytes = std::fs::read_dir(&ckpt).map_err(io(&ckpt))?.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum();
        let t = Instant::now();
        if self.campaign.settings.kind == Kind::Restart {
            while !trainer.done() {
                trainer.step().map_err(resilab_runner::Error::from)?;
            }
        }
        let e = trainer.evaluate();
        let replica_acc = match trainer.stage_ranges() {
            Some(_) => Vec::new(),
            None => trainer.evaluate_replicas(self.campaign.settings.kind == Kind::Restart).iter().map(|e| e.accuracy).collect(),
        };
        let golden = BaseGolden {
            replica_acc,
            test_acc: e.accuracy,
            test_loss: e.loss,
            wall_s: t.elapsed().as_secs_f64(),
            base_s,
            step_s: base_s / base_steps.max(1) as f64,
            checkpoint_s,
            checkpoint_bytes,
        };
        let json = serde_json::to_vec_pretty(&golden).map_err(|source| Error::Json { what: format!("base {}", dir.display()), source })?;
        resilab_runner::write_atomic(&tmp.join("golden.json"), &json)?;
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
            if !dir.join("golden.json").is_file() {
                return Err(Error::Base(format!("base {}: could not move it into place", dir.display())));
            }
        }
        Ok(())
    }

    /// Carries out run `index`.
    pub fn run(&mut self, index: u64) -> Result<Metrics> {
        let spec = self.campaign.run(index)?;
        match spec.self_test {
            SelfTest::None => {}
            SelfTest::Panic => panic!("self_test = panic (run {})", spec.id),
            SelfTest::Hang => loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            },
            SelfTest::Abort => std::process::abort(),
        }
        match self.campaign.settings.kind {
            Kind::Train => self.run_train(&spec),
            _ => self.run_altered(&spec),
        }
    }

    fn run_train(&mut self, spec: &RunSpec) -> Result<Metrics> {
        let out = self.dir.join("runs").join(&spec.id);
        let opts = self.options(out.clone(), Some(self.dir.join("golden")));
        let s = resilab_runner::train(&spec.config, &opts)?;
        let golden_key = resilab_runner::golden::key(&spec.config, &self.platform());
        let f = crate::fault_log::flips(&out)?;
        Ok(Metrics {
            golden_key: Some(golden_key),
            layers: Some(f.layers),
            bits: Some(f.bits),
            words: Some(f.words),
            fault_targets: Some(f.targets),
            ..Metrics::from(&s)
        })
    }

    fn run_altered(&mut self, spec: &RunSpec) -> Result<Metrics> {
        let t0 = Instant::now();
        let mut ph = Phases::start();
        let base = base_dir(&self.dir, &spec.base_key);
        let golden: BaseGolden = read_json(&base.join("golden.json"))?;
        let (base_step, src) =
            resilab_checkpoint::list(&base.join("ckpt"))?.pop().ok_or_else(|| Error::Base(format!("{}: no checkpoint", base.display())))?;
        // One scratch directory per attempt (run id and process), so that an attempt still
        // running in a process the campaign gave up on never shares files with a new one.
        let work = self.dir.join("tmp").join(format!("{}.{}", spec.id, std::process::id()));
        let result = self.alter_and_measure(spec, &src, &work, &mut ph);
        let _ = std::fs::remove_dir_all(&work);
        ph.mark("cleanup");
        let mut m = result?;
        m.phase_s = Some(ph.text());
        m.base_step = Some(base_step);
        m.wall_s = Some(t0.elapsed().as_secs_f64());
        m.golden_acc = Some(golden.test_acc);
        m.golden_replica_accs = (!golden.replica_acc.is_empty()).then(|| list(&golden.replica_acc));
        m.acc_loss = m.final_acc.map(|a| golden.test_acc - a);
        m.golden_key = Some(format!("{}@{:016x}", spec.base_key, xxhash_rust::xxh3::xxh3_64(self.platform().as_bytes())));
        if self.campaign.settings.kind == Kind::Restart {
            m.golden_wall_s = Some(golden.wall_s);
            m.time_overhead = m.wall_s.map(|w| (w - golden.wall_s) / golden.wall_s);
        }
        Ok(m)
    }

    fn alter_and_measure(&mut self, spec: &RunSpec, src: &Path, work: &Path, ph: &mut Phases) -> Result<Metrics> {
        let step_dir = work.join(src.file_name().unwrap_or_default());
        std::fs::create_dir_all(&step_dir).map_err(|source| Error::Io { path: step_dir.clone(), source })?;
        // The worker files by rank (numerically: worker-10.h5 after worker-9.h5); the checkpoint's
        // marker file is copied too but is no worker.
        let mut ranks = std::collections::BTreeSet::new();
        let mut others = Vec::new();
        for e in std::fs::read_dir(src).map_err(|source| Error::Io { path: src.to_path_buf(), source })? {
            let e = e.map_err(|source| Error::Io { path: src.to_path_buf(), source })?;
            let name = e.file_name().to_string_lossy().into_owned();
            match name.strip_prefix("worker-").and_then(|n| n.strip_suffix(".h5")).and_then(|n| n.parse::<usize>().ok()) {
                Some(rank) => _ = ranks.insert(rank),
                None => others.push(e.file_name()),
            }
        }
        let world = ranks.len();
        // Which workers' files to alter: `workers_hit` distinct ranks drawn from the fault seed.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(spec.fault_seed);
        let mut hit: Vec<usize> = sample(&mut rng, world, spec.workers_hit.min(world)).into_vec();
        hit.sort_unstable();
        // The files not altered are copied; each altered one is written by the injection itself,
        // from the base file into the scratch directory (one copy, never synced: scratch).
        for name in ranks.iter().filter(|r| hit.binary_search(r).is_err()).map(|&r| resilab_checkpoint::file_name(r).into()).chain(others) {
            let to = step_dir.join(&name);
            std::fs::copy(src.join(&name), &to).map_err(|source| Error::Io { path: to.clone(), source })?;
        }
        ph.mark("copy");
        let inj = spec.injector.as_ref().ok_or_else(|| Error::Config("[inject]: a train run alters no checkpoint".into()))?;
        let mut m = Metrics { ranks_hit: Some(hit.iter().map(usize::to_string).collect::<Vec<_>>().join(";")), ..Metrics::default() };
        let (mut corrupted, mut bad_values) = (0u64, 0u64);
        let mut layers = std::collections::BTreeSet::new();
        let mut bits = Vec::new();
        for &r in &hit {
            let file = step_dir.join(resilab_checkpoint::file_name(r));
            let seed = spec.fault_seed.wrapping_add(r as u64);
            let base = src.join(resilab_checkpoint::file_name(r));
            let report = resilab_inject::inject_file(inj, &base, &resilab_inject::Output::Copy(file.clone()), seed)
                .map_err(|e| Error::CorruptFile(format!("injecting into {}: {e}", file.display())))?;
            corrupted += report.summary.corrupted + report.byte_records.len() as u64;
            bad_values += report.summary.nan + report.summary.inf + report.summary.extreme;
            for r in report.records.iter().filter(|r| r.outcome == resilab_inject::Outcome::Corrupted) {
                layers.insert(crate::layers::recorded(&r.dataset));
                bits.extend(r.bits_reference.iter().map(u32::to_string));
            }
            if inj.target == resilab_inject::TargetKind::Bytes {
                (self.probe)(&file).map_err(|e| Error::CorruptFile(e.to_string()))?;
            }
        }
        m.values_corrupted = Some(corrupted);
        m.non_finite_or_extreme_injected = Some(bad_values);
        m.layers = Some(layers.into_iter().collect::<Vec<_>>().join(";"));
        m.bits = Some(bits.join(";"));
        ph.mark("inject");
        let trainer = self.restore_altered(spec, &step_dir, &mut m, ph)?;
        self.measure(trainer, &hit, m, ph)
    }

    /// Builds the run's trainer and restores the altered checkpoint into it. `ev_injected` and
    /// `restart_step` (the step counter as restored) are read from the state as the files hold
    /// it, before a restart's broadcast from rank 0 (which could overwrite the replica hit); a
    /// `restart` run then synchronises its replicas as `parallel.broadcast_on_restart` says, an
    /// `eval` run reads every replica as it is.
    fn restore_altered(&mut self, spec: &RunSpec, step_dir: &Path, m: &mut Metrics, ph: &mut Phases) -> Result<Trainer> {
        let mut cfg = spec.config.clone();
        cfg.parallel.broadcast_on_restart = Some(resilab_train::Broadcast::Nothing);
        let split = self.split(&cfg)?;
        let mut trainer = build_trainer(&cfg, split, &self.compute)?;
        ph.mark("build");
        let template = trainer.snapshot();
        let (state, _) = resilab_checkpoint::load(step_dir, &template, OnMismatch::Load, &|_: &Path| Ok(()))
            .map_err(|e| Error::CorruptFile(e.to_string()))?;
        trainer.restore(&state).map_err(|e| Error::CorruptFile(e.to_string()))?;
        let threshold = self.campaign.settings.extreme_threshold;
        m.ev_injected = Some(workers_health(&trainer.workers, threshold) != Health::Sound);
        m.restart_step = Some(state.step);
        m.extreme_threshold = Some(threshold);
        if self.campaign.settings.kind == Kind::Restart && trainer.stage_ranges().is_none() {
            trainer.broadcast_from_rank0(spec.config.parallel.broadcast());
        }
        ph.mark("load");
        Ok(trainer)
    }

    /// Continues (`restart`) or evaluates (`eval`) the restored run and records its outcome and
    /// the evidence it rests on.
    fn measure(&self, mut trainer: Trainer, hit: &[usize], mut m: Metrics, ph: &mut Phases) -> Result<Metrics> {
        let threshold = self.campaign.settings.extreme_threshold;
        if self.campaign.settings.kind == Kind::Restart {
            let scan = |t: &Trainer| workers_scan(&t.workers, threshold);
            let (steps, o) = continue_training(&mut trainer, self.campaign.settings.stop_at_collapse, &scan)?;
            m.steps = Some(steps);
            m.final_train_loss = o.last_loss;
            m.collapse_step = o.collapse_step;
            m.peak_abs = Some(o.peak_abs);
            ph.mark("steps");
        }
        // A restarted replica is judged as its next forward pass sees it (under DDP with rank
        // 0's buffers); an evaluated checkpoint's replicas as their files hold them.
        let evals = trainer.evaluate_replicas(self.campaign.settings.kind == Kind::Restart);
        ph.mark("eval");
        let e = evals[0];
        m.final_acc = Some(e.accuracy);
        m.final_loss = Some(e.loss);
        replicas(&trainer, &evals, hit, &mut m);
        let evidence = state_evidence(&trainer.workers);
        record_evidence(&evidence, &mut m);
        if self.campaign.settings.kind == Kind::Restart {
            // N-EV by the outcome: a NaN/Inf loss (the last step's or the test set's) or a
            // NaN/Inf or extreme value in the state at the end.
            let losses_finite = m.final_train_loss.is_none_or(f64::is_finite) && e.loss.is_finite();
            m.collapsed = Some(!losses_finite || evidence.non_finite());
            m.nev = Some(!losses_finite || evidence.non_finite() || evidence.extreme(threshold));
        } else {
            // Nothing trains after the injection: the outcome is the evaluation itself (NaN/Inf
            // logits give a NaN/Inf loss), of the replica hit.
            let hit_loss = if trainer.stage_ranges().is_some() { e.loss } else { m.hit_loss.unwrap_or(e.loss) };
            m.nev = Some(!hit_loss.is_finite());
            m.collapsed = Some(!hit_loss.is_finite());
        }
        m.digest = Some(resilab_runner::params_digest(&trainer.model()));
        ph.mark("evidence");
        Ok(m)
    }
}

/// Accuracies as a `;`-list, each as Rust prints it (the shortest text that reads back the same).
fn list(accs: &[f64]) -> String {
    accs.iter().map(f64::to_string).collect::<Vec<_>>().join(";")
}

/// Copies the state's evidence into the run's columns.
fn record_evidence(e: &StateEvidence, m: &mut Metrics) {
    m.param_max_abs = Some(e.param_max_abs);
    m.buffer_max_abs = Some(e.buffer_max_abs);
    m.optim_max_abs = Some(e.optim_max_abs);
    m.param_non_finite = Some(e.param_non_finite);
    m.buffer_non_finite = Some(e.buffer_non_finite);
    m.optim_non_finite = Some(e.optim_non_finite);
}

/// Data-parallel runs: the first hit replica's test accuracy and loss, every replica's lowest,
/// mean and highest accuracy (`evals`, in rank order), and how far the replicas are from rank 0
/// (largest Euclidean distance of the trainable parameters, and how many differ).
fn replicas(trainer: &Trainer, evals: &[resilab_train::Evaluation], hit: &[usize], m: &mut Metrics) {
    if trainer.stage_ranges().is_some() || evals.len() < 2 {
        return;
    }
    let r = hit.first().copied().unwrap_or(0).min(evals.len() - 1);
    m.hit_acc = Some(evals[r].accuracy);
    m.hit_loss = Some(evals[r].loss);
    let accs: Vec<f64> = evals.iter().map(|e| e.accuracy).collect();
    m.replica_accs = Some(list(&accs));
    m.replica_acc_min = accs.iter().copied().reduce(f64::min);
    m.replica_acc_max = accs.iter().copied().reduce(f64::max);
    m.replica_acc_mean = Some(accs.iter().sum::<f64>() / accs.len() as f64);
    let states: Vec<resilab_train::WorkerState> = trainer.workers.iter().map(resilab_train::WorkerState::capture).collect();
    let d: Vec<f64> = states[1..].iter().map(|s| resilab_runner::golden::param_distance(&states[0], s)).collect();
    m.replica_divergence = Some(d.iter().copied().fold(0.0, |a, b| if b.is_nan() || a.is_nan() { f64::NAN } else { a.max(b) }));
    m.replicas_diverged = Some(d.iter().filter(|x| !(**x == 0.0)).count() as u64);
}

/// Trains to the end of the run from the restored state; with `stop`, stops as soon as the
/// outcome is decided (a NaN/Inf in the state, which is absorbing). `scan` gives the state's
/// health and largest |value|. Returns the steps run and the outcome.
fn continue_training(trainer: &mut Trainer, stop: bool, scan: &dyn Fn(&Trainer) -> (Health, f64)) -> Result<(u64, Outcome)> {
    let start = trainer.step;
    let mut o = Outcome::start(scan(trainer));
    while !(trainer.done() || (stop && o.decided())) {
        let s = trainer.step().map_err(resilab_runner::Error::from)?;
        o.step(trainer.step - start, s.loss, scan(trainer));
    }
    Ok((trainer.step - start, o))
}

/// Reads a JSON file.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    serde_json::from_slice(&text).map_err(|source| Error::Json { what: path.display().to_string(), source })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed
    use super::*;

    #[test]
    fn bases_that_cannot_be_listed_are_an_io_error_and_no_bases_a_config_error() {
        let dir = tempfile::tempdir().unwrap();
        match mean_checkpoint_s(dir.path()) {
            Err(Error::Config(m)) => assert!(m.ends_with("not a campaign directory with base runs"), "{m}"),
            other => panic!("{other:?}"),
        }
        // `bases` a file: listing it fails for the machine's reason, kept as the source.
        std::fs::write(dir.path().join("bases"), b"").unwrap();
        match mean_checkpoint_s(dir.path()) {
            Err(Error::Io { path, source }) => {
                assert_eq!(path, dir.path().join("bases"));
                assert_eq!(source.kind(), std::io::ErrorKind::NotADirectory);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn jobs_are_one_json_line_each() {
        let j = serde_json::to_string(&Job::Run { index: 7 }).unwrap();
        assert_eq!(j, r#"{"job":"run","index":7}"#);
        assert_eq!(serde_json::from_str::<Job>(&j).unwrap(), Job::Run { index: 7 });
    }
}
