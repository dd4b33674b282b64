//! Golden runs: the fault-free run of a configuration, computed once and cached by a hash of
//! the resolved configuration without its fault, recovery, detector and checkpoint sections,
//! that faulty runs are compared with (accuracy curve, parameter distance, time).
//!
//! The cache lives under a root directory (`results/golden` by default), one directory per key.
//! A golden run trains into a private temporary directory and renames it into place when done,
//! so processes that ask for the same golden run at once never see a half-written one: each
//! computes it, the first rename wins and the others use the winner's.

use std::path::{Path, PathBuf};

use resilab_train::{TrainState, WorkerState};
use serde::Serialize;

use crate::{Error, Result, RunConfig};

/// The configuration whose run is `cfg`'s golden run: faults, recovery, detectors, fault seed,
/// checkpoints, the outcome thresholds and the name removed.
pub fn golden_config(cfg: &RunConfig) -> RunConfig {
    let mut g = cfg.clone();
    g.faults = resilab_faults::Faults::default();
    g.recovery = Default::default();
    // A run that records its detectors' signals compares them with its golden run's, which
    // must record them too.
    g.detect = resilab_recovery::DetectConfig { record_signals: cfg.detect.record_signals, ..Default::default() };
    g.fault_seed = crate::config::default_fault_seed();
    g.checkpoint = Default::default();
    g.outcome = Default::default();
    g.name = Some("golden".into());
    // The ensemble is the faulty run's reference, not part of any golden run: member 0 is the
    // golden run a run without an ensemble has, under the same key.
    g.train.golden_ensemble = 1;
    g
}

/// Added to the reduction seed once per ensemble member (wrapping): odd, so that members
/// `1..K` of a run get `K - 1` distinct seeds, none the run's own (2^64 / gcd = 2^64 steps
/// before one repeats). The 64-bit golden ratio's odd integer.
pub const ENSEMBLE_SEED_STEP: u64 = 0x9E37_79B9_7F4A_7C15;

/// The configurations of `cfg`'s golden ensemble (`train.golden_ensemble` of them): member 0
/// is `cfg` itself (its golden run is the run's own, same reduction seed), member `k` has
/// `train.reduction_seed = seed + k * ENSEMBLE_SEED_STEP` (wrapping), where `seed` is the
/// run's reduction seed (`train.reduction_seed`, default the run's `seed`).
pub fn ensemble_configs(cfg: &RunConfig) -> Vec<RunConfig> {
    let base = cfg.train.reduction_seed.unwrap_or(cfg.seed);
    (0..u64::from(cfg.train.golden_ensemble.max(1)))
        .map(|k| {
            let mut m = cfg.clone();
            if k > 0 {
                m.train.reduction_seed = Some(base.wrapping_add(k.wrapping_mul(ENSEMBLE_SEED_STEP)));
            }
            m
        })
        .collect()
}

/// What a faulty run's golden ensemble measured: each member's final test accuracy (member 0
/// first), their mean and sample standard deviation (fractions).
#[derive(Clone, Debug, PartialEq)]
pub struct Ensemble {
    /// Each member's final test accuracy, member 0 (the run's own golden run) first.
    pub accs: Vec<f64>,
    /// Each member's directory in the cache.
    pub dirs: Vec<PathBuf>,
}

impl Ensemble {
    /// The members' mean final accuracy: what the accuracy loss is measured against.
    pub fn mean(&self) -> f64 {
        self.accs.iter().sum::<f64>() / self.accs.len().max(1) as f64
    }

    /// The sample standard deviation of the members' final accuracies (n - 1; 0 for one member).
    pub fn sd(&self) -> f64 {
        let n = self.accs.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean();
        (self.accs.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / (n - 1) as f64).sqrt()
    }
}

/// The cache key of `cfg`'s golden run on `platform` (the backend and device, since different
/// backends give different bits): XXH3-64 of its golden configuration as TOML and the platform,
/// and for more than one data-parallel worker the revision of the all-reduce buckets
/// ([`resilab_train::REDUCE_PLAN_REVISION`]), so that no run meets a golden run whose buckets
/// summed in other chunks.
pub fn key(cfg: &RunConfig, platform: &str) -> String {
    let mut text = format!("{}\n# platform: {platform}\n", golden_config(cfg).to_toml());
    let p = &cfg.parallel;
    if p.mode == resilab_train::ParallelMode::Data && p.workers > 1 {
        text += &format!("# all-reduce buckets: r{}\n", resilab_train::REDUCE_PLAN_REVISION);
    }
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}

/// A finished golden run.
#[derive(Clone, Debug, Serialize)]
pub struct Golden {
    /// Its directory.
    pub dir: PathBuf,
    /// Final test accuracy.
    pub final_test_acc: f64,
    /// Wall time of its training loop.
    pub wall_s: f64,
    /// Its simulated time (absent in summaries written before it was recorded).
    pub simulated_s: Option<f64>,
    /// Its training and test accuracy curve (`metrics.csv`).
    #[serde(skip)]
    pub curve: crate::outcome::Curve,
}

impl Golden {
    /// Reads a finished golden run's summary and accuracy curve.
    pub fn open(dir: &Path) -> Result<Self> {
        let path = dir.join("summary.json");
        let text = std::fs::read(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
        let v: serde_json::Value =
            serde_json::from_slice(&text).map_err(|source| Error::Json { what: path.display().to_string(), source })?;
        let num = |k: &str| v[k].as_f64().ok_or_else(|| Error::Golden(format!("{}: no {k}", path.display())));
        let curve = crate::outcome::Curve::read(&dir.join("metrics.csv"))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            final_test_acc: num("final_test_acc")?,
            wall_s: num("wall_s")?,
            simulated_s: v["simulated_s"].as_f64(),
            curve,
        })
    }

    /// The golden model's parameters at `step`, if it evaluated there, in the shape of `template`.
    pub fn state_at(&self, step: u64, template: &WorkerState) -> Option<WorkerState> {
        let file = self.dir.join("states").join(resilab_checkpoint::dir_name(step)).join(resilab_checkpoint::file_name(0));
        resilab_checkpoint::read_worker(&file, template).ok().map(|(w, _, _)| w)
    }
}

/// Saves the whole model (all stages joined) as a one-worker state under `root`, for golden
/// comparisons at `step`. `root` must have been claimed ([`resilab_checkpoint::claim`]) and is
/// never made again: once the run's directory is gone (an interrupted golden run's, removed on
/// the way out) a save fails instead of recreating it.
pub fn save_state(root: &Path, step: u64, model: WorkerState, cfg: &RunConfig) -> Result<()> {
    let meta = resilab_checkpoint::Meta { seed: cfg.seed, arch: cfg.model.label(), config: cfg.to_toml() };
    resilab_checkpoint::save_claimed(root, &TrainState { step, workers: vec![model] }, &meta)?;
    Ok(())
}

/// Euclidean distance between the trainable parameters of two states (NaN when either holds
/// NaN/Inf).
pub fn param_distance(a: &WorkerState, b: &WorkerState) -> f64 {
    let mut sum = 0.0f64;
    for (name, t) in &a.params {
        if !resilab_models::is_trainable(name) {
            continue;
        }
        if let Some(u) = b.params.get(name) {
            for (x, y) in t.values.iter().zip(&u.values) {
                let d = f64::from(*x) - f64::from(*y);
                sum += d * d;
            }
        }
    }
    sum.sqrt()
}

/// Makes sure the golden run of `cfg` on `platform` exists under `root`, running it with `run` (which trains
/// the given configuration into the given directory, saving its states) when it does not.
pub fn ensure(cfg: &RunConfig, platform: &str, root: &Path, run: impl FnOnce(&RunConfig, &Path) -> Result<()>) -> Result<Golden> {
    let key = key(cfg, platform);
    let dir = root.join(&key);
    if dir.join("summary.json").is_file() {
        return Golden::open(&dir);
    }
    std::fs::create_dir_all(root).map_err(|source| Error::Io { path: root.to_path_buf(), source })?;
    remove_stale(root, &key)?;
    let tmp = root.join(format!(".{key}.{}.tmp", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|source| Error::Io { path: tmp.clone(), source })?;
    }
    // Removed if a TERM or INT ends the process meanwhile, and on any error.
    let registered = crate::interrupt::Temporary::new(&tmp);
    if let Err(e) = run(&golden_config(cfg), &tmp) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    drop(registered);
    if std::fs::rename(&tmp, &dir).is_err() {
        // Another process finished first: use its run.
        let _ = std::fs::remove_dir_all(&tmp);
        if !dir.join("summary.json").is_file() {
            return Err(Error::Golden(format!("golden run {}: could not move it into place", dir.display())));
        }
    }
    Golden::open(&dir)
}

/// Removes the temporary directories of `key`'s golden run (`.<key>.<pid>.tmp`) that processes
/// killed before they could clean up left in `root`: those whose lock (the run's
/// `.resilab.lock`) no process holds, or, without a lock file (not yet, or no longer: a run
/// removes it when it ends), whose process is gone.
fn remove_stale(root: &Path, key: &str) -> Result<()> {
    let prefix = format!(".{key}.");
    let entries = std::fs::read_dir(root).map_err(|source| Error::Io { path: root.to_path_buf(), source })?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(&prefix).and_then(|r| r.strip_suffix(".tmp")).and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let lock = entry.path().join(crate::files::LOCK_FILE);
        let stale = match std::fs::File::open(&lock) {
            Ok(f) => f.try_lock().is_ok(),
            Err(_) => !Path::new(&format!("/proc/{pid}")).exists(),
        };
        if stale {
            std::fs::remove_dir_all(entry.path()).map_err(|source| Error::Io { path: entry.path(), source })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_parallel_key_names_the_all_reduce_buckets_revision() {
        let without = |cfg: &RunConfig| {
            let text = format!("{}\n# platform: cpu\n", golden_config(cfg).to_toml());
            format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
        };
        let one = RunConfig::from_toml("[model]\narch = \"resnet\"\ndepth = 8\n", &[], "t.toml").unwrap();
        assert_eq!(key(&one, "cpu"), without(&one), "one worker has no all-reduce");
        let four = RunConfig::from_toml("[model]\narch = \"resnet\"\ndepth = 8\n[parallel]\nworkers = 4\n", &[], "t.toml").unwrap();
        assert_ne!(key(&four, "cpu"), without(&four), "the buckets' revision is part of the key");
    }

    #[test]
    fn ensemble_members_differ_only_in_their_reduction_seed_and_member_0_is_the_runs_golden_run() {
        let text = "seed = 7\n[model]\narch = \"resnet\"\ndepth = 8\n[train]\nreduction_order = \"seeded\"\ngolden_ensemble = 3\n";
        let mut cfg = RunConfig::from_toml(text, &[], "t.toml").unwrap();
        let members = ensemble_configs(&cfg);
        assert_eq!(members.len(), 3);
        let seeds: Vec<Option<u64>> = members.iter().map(|m| m.train.reduction_seed).collect();
        assert_eq!(
            seeds,
            [None, Some(7u64.wrapping_add(ENSEMBLE_SEED_STEP)), Some(7u64.wrapping_add(2u64.wrapping_mul(ENSEMBLE_SEED_STEP)))]
        );
        let keys: std::collections::BTreeSet<String> = members.iter().map(|m| key(m, "cpu")).collect();
        assert_eq!(keys.len(), 3, "three distinct golden runs");
        // Member 0's golden run is the one the run has without an ensemble.
        let k0 = key(&members[0], "cpu");
        cfg.train.golden_ensemble = 1;
        assert_eq!(k0, key(&cfg, "cpu"));
        assert_eq!(ensemble_configs(&cfg).len(), 1);
    }

    #[test]
    fn an_ensembles_spread_is_the_sample_standard_deviation() {
        let e = Ensemble { accs: vec![0.5, 0.6, 0.7], dirs: Vec::new() };
        assert!((e.mean() - 0.6).abs() < 1e-12 && (e.sd() - 0.1).abs() < 1e-12);
        assert_eq!(Ensemble { accs: vec![0.5], dirs: Vec::new() }.sd(), 0.0);
    }

    #[test]
    fn stale_temporaries_of_a_key_are_removed_and_live_ones_kept() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        // A dead process's directory with a free lock, one without a lock whose process is
        // gone (pid 0 is never a user process), a live one (its lock held), another key's.
        let dead = root.join(".abc.4000000.tmp");
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join(crate::files::LOCK_FILE), "process 4000000\n").unwrap();
        let unlocked = root.join(".abc.0.tmp");
        std::fs::create_dir(&unlocked).unwrap();
        let live = root.join(".abc.4000001.tmp");
        let held = crate::files::lock_dir(&live, "--out").unwrap();
        let other = root.join(".abd.4000000.tmp");
        std::fs::create_dir(&other).unwrap();
        remove_stale(root, "abc").unwrap();
        assert!(!dead.exists() && !unlocked.exists());
        assert!(live.exists() && other.exists());
        drop(held);
        remove_stale(root, "abc").unwrap();
        assert!(!live.exists());
    }

    #[test]
    fn a_golden_directory_that_is_not_a_finished_run_names_its_file_and_keeps_the_cause() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("summary.json"), "{ not json").unwrap();
        let e = Golden::open(dir.path()).err().unwrap();
        assert!(matches!(&e, Error::Json { what, .. } if what.ends_with("summary.json")), "{e:?}");
        assert!(std::error::Error::source(&e).is_some_and(|s| s.to_string().contains("key must be a string")), "{e:?}");
    }
}
