//! The run configuration: TOML into plain serde structs (unknown keys rejected), with
//! `--set key=value` overrides applied before deserialisation.

use std::path::{Path, PathBuf};

use resilab_checkpoint::CheckpointConfig;
use resilab_data::{DataConfig, DataSource};
use resilab_faults::Faults;
use resilab_inject::config::{toml_from_str, toml_from_table, toml_table};
use resilab_models::ModelConfig;
use resilab_recovery::{DetectConfig, LossPolicy, Strategy};
use resilab_train::{BatchRule, OptimizerConfig, ParallelConfig, ParallelMode, ScheduleConfig, TrainConfig};
use serde::{Deserialize, Serialize};

use crate::outcome::OutcomeConfig;
use crate::{Error, Result};

/// Compute backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Burn's flex CPU backend as Burn ships it (the default before resilab's kernels).
    Flex,
    /// Burn's flex CPU backend with resilab's own kernels (convolutions' forward and both
    /// gradients as GEMMs, BatchNorm fused with its ReLU; `resilab-kernels`): the default,
    /// 1.4-1.7x flex on every benchmark model (`bench/train_throughput.sh`).
    #[default]
    Native,
    /// Burn's ndarray CPU backend (deprecated by Burn 0.22; kept selectable).
    Ndarray,
    /// Burn's wgpu GPU backend (needs the `wgpu` cargo feature).
    Wgpu,
    /// Burn's LibTorch backend on the CPU (needs the `tch` cargo feature and PyTorch's libtorch).
    Tch,
}

impl BackendKind {
    /// The configuration spelling.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Flex => "flex",
            BackendKind::Native => "native",
            BackendKind::Ndarray => "ndarray",
            BackendKind::Wgpu => "wgpu",
            BackendKind::Tch => "tch",
        }
    }
}

impl std::str::FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "flex" => Ok(Self::Flex),
            "native" => Ok(Self::Native),
            "ndarray" => Ok(Self::Ndarray),
            "wgpu" => Ok(Self::Wgpu),
            "tch" => Ok(Self::Tch),
            other => Err(format!("unknown backend \"{other}\" (allowed: flex, native, ndarray, wgpu, tch)")),
        }
    }
}

fn default_seed() -> u64 {
    42
}

/// A whole run configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// A name for the run (default: the config file's stem); used in output paths.
    #[serde(default)]
    pub name: Option<String>,
    /// Seed of parameter initialisation, data order and augmentation.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Backend (`native` by default); `--backend` overrides it.
    #[serde(default)]
    pub backend: Option<BackendKind>,
    /// Data source.
    #[serde(default)]
    pub data: DataConfig,
    /// Network.
    pub model: ModelConfig,
    /// Training loop.
    #[serde(default)]
    pub train: TrainConfig,
    /// Optimizer.
    #[serde(default)]
    pub optimizer: OptimizerConfig,
    /// Learning-rate schedule.
    #[serde(default)]
    pub schedule: ScheduleConfig,
    /// Simulated data-parallel workers or pipeline stages (one worker unless configured).
    #[serde(default)]
    pub parallel: ParallelConfig,
    /// Checkpoint policy (none unless configured).
    #[serde(default)]
    pub checkpoint: CheckpointConfig,
    /// Seed of the fault schedule's random arrivals and bit draws, separate from `seed` so
    /// repetitions vary the faults over one golden run.
    #[serde(default = "default_fault_seed")]
    pub fault_seed: u64,
    /// Mid-run faults (`[[fault]]` entries), parsed when the configuration is read; none
    /// unless configured.
    #[serde(default, rename = "fault", skip_serializing_if = "Faults::is_empty")]
    #[schemars(with = "Vec<std::collections::BTreeMap<String, serde_json::Value>>")]
    pub faults: Faults,
    /// Which detectors run.
    #[serde(default)]
    pub detect: DetectConfig,
    /// What to do about a detected fault or a crash.
    #[serde(default)]
    pub recovery: RecoveryConfig,
    /// How `resilab import` maps another framework's parameter names onto the model's.
    #[serde(default, skip_serializing_if = "ImportConfig::is_empty")]
    pub import: ImportConfig,
    /// The thresholds that read a faulty run's curve into its outcome class (docs/metrics.md,
    /// "Outcome classes"); they decide nothing in training.
    #[serde(default, skip_serializing_if = "OutcomeConfig::is_default")]
    pub outcome: OutcomeConfig,
}

/// The `[import]` section: read by `resilab import` only.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportConfig {
    /// Renames applied, in order, to every tensor name of the imported file before it is
    /// matched with the model's (PyTorch-style) names: `[[import.rename]]` entries.
    #[serde(default)]
    pub rename: Vec<Rename>,
}

impl ImportConfig {
    /// Whether no rename is configured (the section is then left out of a stored configuration).
    pub fn is_empty(&self) -> bool {
        self.rename.is_empty()
    }
}

/// One `[[import.rename]]` entry: every match of the regular expression `from` in a name is
/// replaced by `to` (which may refer to groups as `$1` or `${name}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rename {
    /// A regular expression (Rust's `regex` syntax).
    pub from: String,
    /// The replacement.
    pub to: String,
}

/// The fault seed when the configuration gives none.
pub fn default_fault_seed() -> u64 {
    1
}

/// `recovery.detect_timeout_s` when the configuration gives none: ULFM's default failure
/// detection timeout (Open MPI 5, `docs/features/ulfm.rst`).
pub fn default_detect_timeout_s() -> f64 {
    10.0
}

/// `recovery.rebuild_s` when the configuration gives none: MegaScale's communicator
/// initialisation on 2,048 GPUs (NSDI'24, section 3.5).
pub fn default_rebuild_s() -> f64 {
    5.0
}

/// `recovery.relaunch_s` when the configuration gives none: a failed pod rescheduled (about
/// 2 min) and the nodes checked (2-3 min) in DLRover's measurements of thousand-GPU jobs.
pub fn default_relaunch_s() -> f64 {
    300.0
}

/// `recovery.in_place_reload` when the configuration gives none: a job that is alive reloads
/// a checkpoint in place.
pub fn default_in_place_reload() -> bool {
    true
}

/// The `[recovery]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecoveryConfig {
    /// `none` (default), `checkpoint_restart`, `rollback` or `lossy_forward`.
    #[serde(default)]
    pub strategy: Strategy,
    /// Rollback after a crash: the redone step spreads the lost worker's samples over the
    /// survivors (`true`: the global batch is kept) or drops them (`false`, default).
    #[serde(default)]
    pub rebalance: bool,
    /// Simulated seconds from a crash until the survivors learn of it (fail-stop: the failure
    /// detector's timeout, which ends the collective in flight with an error). Charged once per
    /// step with crashes by every strategy that goes on (checkpoint-restart, rollback, lossy
    /// forward, and the permanent-loss policies after them); never for silent damage, which the
    /// replicas' digests find. Default 10: ULFM's failure detector in Open MPI 5
    /// (`errmgr_detector_heartbeat_timeout`, docs/recovery.md).
    #[serde(default = "default_detect_timeout_s")]
    pub detect_timeout_s: f64,
    /// Simulated seconds to rebuild the data-parallel communicator with a changed membership:
    /// without the lost rank when the job goes on in the same processes (rollback, lossy
    /// forward, a shrink), and again when a respawned replica joins. Not scaled with the
    /// workers. Default 5: MegaScale's optimised communicator initialisation on 2,048 GPUs
    /// (NSDI'24, docs/recovery.md).
    #[serde(default = "default_rebuild_s")]
    pub rebuild_s: f64,
    /// Simulated seconds to relaunch the job (rescheduling, process start, communicator
    /// setup) at a restart from a checkpoint after a process died: a crash under
    /// checkpoint-restart (or a fallback to a checkpoint), or a worker lost for good under
    /// `reinit`; charged after the detection and before the checkpoint read. A restart while
    /// every process is alive reloads in place instead (`in_place_reload`). Default 300:
    /// DLRover's measured recovery of thousand-GPU jobs (docs/recovery.md).
    #[serde(default = "default_relaunch_s")]
    pub relaunch_s: f64,
    /// A restart from a checkpoint while the job is alive (damage found by a check: a silent
    /// flip in the replicas' digests, a NaN/Inf, a loss spike) reloads the checkpoint in the
    /// running processes: the read and the steps since the checkpoint, no relaunch (`true`,
    /// default, as real jobs do). `false`: the runtime cannot reload in place, so every restart
    /// from a checkpoint relaunches the job (`relaunch_s`), as resilab did before; for
    /// reproducing earlier numbers.
    #[serde(default = "default_in_place_reload")]
    pub in_place_reload: bool,
    /// What the job does once a worker is lost for good (`[[fault]]` crashes with
    /// `permanent = true`), after the step's own recovery: `respawn` (default: a spare takes
    /// its place as a copy of a healthy replica), `reinit` (every worker restarts from the
    /// newest checkpoint, a spare in its place) or `shrink` (the others go on without it; data
    /// parallelism only). Respawn and reinit fall back to shrink when `parallel.spares` run out.
    #[serde(default)]
    pub on_permanent_loss: LossPolicy,
    /// The batch after a shrink: `keep_global` (default: the global batch is kept, each worker
    /// left takes more) or `keep_per_worker` (the global batch shrinks with the workers and
    /// the learning rate with it, by the linear scaling rule).
    #[serde(default)]
    pub shrink_batch: BatchRule,
    /// Allow `relaunch_s` below `rebuild_s` (default `false`: refused). A relaunch starts a new
    /// job, whose communicator initialisation at the same scale is a rebuild, so a relaunch
    /// cheaper than a rebuild pairs constants from two systems; set this only to say that the
    /// pairing is deliberate (docs/recovery.md, "Cost profiles").
    #[serde(default)]
    pub relaunch_below_rebuild: bool,
    /// A cost profile (`megascale-optimised`, `megascale-unoptimised`; docs/recovery.md, "Cost
    /// profiles"): one real system's detection, rebuild and relaunch, each times
    /// `profile_scale`, fill `detect_timeout_s`, `rebuild_s`, `relaunch_s` and
    /// `relaunch_covers_redo` where the configuration gives none (a key given overrides its
    /// constant alone). Unset (default): those keys' own defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Simulated seconds per second of the profile (default 1): the modelled step's length over
    /// the real job's, to charge a real system's costs to a small model's steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_scale: Option<f64>,
    /// The relaunch's figure already contains the checkpoint read and the recomputation of the
    /// steps lost since the checkpoint ("back to the progress before the crash"): after a
    /// relaunch, those are computed but not charged again (default `false`; a profile that
    /// says so sets it).
    #[serde(default)]
    pub relaunch_covers_redo: bool,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        Self {
            strategy: Strategy::default(),
            rebalance: false,
            detect_timeout_s: default_detect_timeout_s(),
            rebuild_s: default_rebuild_s(),
            relaunch_s: default_relaunch_s(),
            in_place_reload: default_in_place_reload(),
            on_permanent_loss: LossPolicy::default(),
            shrink_batch: BatchRule::default(),
            relaunch_below_rebuild: false,
            profile: None,
            profile_scale: None,
            relaunch_covers_redo: false,
        }
    }
}

impl RecoveryConfig {
    /// Checks the values; errors name the key.
    pub fn validate(&self) -> Result<()> {
        for (key, v) in [("detect_timeout_s", self.detect_timeout_s), ("rebuild_s", self.rebuild_s), ("relaunch_s", self.relaunch_s)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::Config(format!("recovery.{key} = {v} must be a finite number of seconds >= 0")));
            }
        }
        if let Some(name) = &self.profile {
            crate::cost_profile::lookup(name)?;
        }
        if let Some(scale) = self.profile_scale
            && !(scale.is_finite() && scale > 0.0 && self.profile.is_some())
        {
            return Err(Error::Config(format!("recovery.profile_scale = {scale} must be a finite number above 0, with recovery.profile")));
        }
        if self.relaunch_s < self.rebuild_s && !self.relaunch_below_rebuild {
            return Err(Error::Config(format!(
                "recovery.relaunch_s = {} s is below recovery.rebuild_s = {} s: a relaunch contains the new job's communicator initialisation, so it cannot cost less than a rebuild of the same system; take both from one cost profile (docs/recovery.md), or set recovery.relaunch_below_rebuild = true to pair them deliberately",
                self.relaunch_s, self.rebuild_s
            )));
        }
        Ok(())
    }
}

/// Parses `key=value` and sets it in `table`; `key` may be dotted (`train.epochs`) and may
/// index arrays of tables (`fault.0.injection_tries`). The value is read as a TOML value (`3`,
/// `0.1`, `true`, `"text"`, `[1, 2]`) and otherwise as a string. As with [`set_value`], setting
/// `train.steps` removes `train.epochs` and the other way round.
pub fn apply_override(table: &mut toml::Table, assignment: &str) -> Result<()> {
    let (key, value) = assignment.split_once('=').ok_or_else(|| Error::Config(format!("--set {assignment}: expected key=value")))?;
    let value = value.trim();
    let parsed: toml::Value = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    set_value(table, key.trim(), parsed).map_err(|e| Error::Config(format!("--set {assignment}: {e}")))
}

/// The components of a dotted key, read as TOML reads one, so a component may be quoted:
/// `grid."inject.injection_tries"` has two.
fn key_parts(key: &str) -> std::result::Result<Vec<String>, String> {
    let mut parts = Vec::new();
    let doc: toml::Table = toml::from_str(&format!("{key} = 0")).map_err(|_| format!("`{key}` is not a valid key"))?;
    let mut t = &doc;
    loop {
        let Some((k, v)) = t.iter().next() else { return Err(format!("`{key}` is not a valid key")) };
        parts.push(k.clone());
        match v {
            toml::Value::Table(inner) => t = inner,
            _ => return Ok(parts),
        }
    }
}

/// The run length's two keys: a `train` table holds at most one of them.
const EXCLUSIVE: [(&str, &str); 2] = [("steps", "epochs"), ("epochs", "steps")];

/// Sets the dotted `key` in `table` to `value`. A numeric component indexes an array
/// (`fault.0.target`); missing tables are created. A table `value` set where a table already
/// is merges key by key (so `model = {width = 0.5}` keeps the model's other keys).
///
/// `train.steps` and `train.epochs` exclude each other, so setting one (as a key, or in a table
/// set at `train`) removes the other from that `train` table: `--set train.steps=20` on a
/// configuration that gives `epochs` trains 20 steps, as do campaigns that set the steps of
/// their runs. This holds under any prefix (`base.train.steps` in a campaign file).
pub fn set_value(table: &mut toml::Table, key: &str, value: toml::Value) -> std::result::Result<(), String> {
    let parts = key_parts(key)?;
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    // The `train` table this assignment sets a run length in, and the length keys it sets.
    let (train_path, set_keys): (&[&str], Vec<&str>) = match (parts.split_last(), &value) {
        (Some((&"train", _)), toml::Value::Table(t)) => {
            (&parts[..], EXCLUSIVE.iter().map(|e| e.0).filter(|k| t.contains_key(*k)).collect())
        }
        (Some((last, rest)), _) if rest.last() == Some(&"train") && EXCLUSIVE.iter().any(|e| e.0 == *last) => (rest, vec![*last]),
        _ => (&[], Vec::new()),
    };
    fn descend<'a>(v: &'a mut toml::Value, part: &str, path: &str) -> std::result::Result<&'a mut toml::Value, String> {
        match v {
            toml::Value::Table(t) => Ok(t.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()))),
            toml::Value::Array(a) => {
                let i: usize = part.parse().map_err(|_| format!("`{path}` is an array: index it with a number"))?;
                let n = a.len();
                a.get_mut(i).ok_or_else(|| format!("`{path}` has {n} entries, no entry {i}"))
            }
            _ => Err(format!("`{path}` is not a table")),
        }
    }
    let mut root = toml::Value::Table(std::mem::take(table));
    let result = (|| {
        let mut v = &mut root;
        for (i, p) in parts.iter().enumerate() {
            v = descend(v, p, &parts[..i].join("."))?;
        }
        match (v, value) {
            (toml::Value::Table(old), toml::Value::Table(new)) => {
                for (k, x) in new {
                    old.insert(k, x);
                }
            }
            (slot, value) => *slot = value,
        }
        if let [only] = set_keys[..] {
            let mut v = &mut root;
            for p in train_path {
                v = descend(v, p, "")?;
            }
            if let (toml::Value::Table(train), Some((_, other))) = (v, EXCLUSIVE.iter().find(|e| e.0 == only)) {
                train.remove(*other);
            }
        }
        Ok(())
    })();
    if let toml::Value::Table(t) = root {
        *table = t;
    }
    result
}

/// Why `name` cannot name a run's directory under `results/runs` (`None`: it can): it must not
/// be empty, start with `.` (so not `.` or `..` either) or hold `/`, `\` or NUL, which would leave
/// that directory or cannot name a file.
fn unsafe_name(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("it is empty".into());
    }
    if name.starts_with('.') {
        return Some("it starts with '.'".into());
    }
    name.chars().find(|c| matches!(c, '/' | '\\') || c.is_control()).map(|c| format!("it contains {c:?}"))
}

/// Checks a run's name (`name = ...`, which becomes a directory under `results/runs`): not
/// empty, not starting with `.`, no `/`, `\` or control character (NUL, ESC, newline: a name
/// is printed to the terminal and written into paths).
pub fn check_name(name: &str) -> std::result::Result<(), String> {
    match unsafe_name(name) {
        Some(why) => Err(format!("name = {name:?} cannot name the run's directory under results/runs: {why}")),
        None => Ok(()),
    }
}

impl RunConfig {
    /// Reads `path`, applies `overrides` (`key=value`), deserialises and validates
    /// ([`RunConfig::validate`]). Errors name the file and the offending key. Without a `name`,
    /// the run is named after the file's stem, which must then be a safe name too.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Self> {
        let text = resilab_limits::read_config("--config", path)?;
        let mut c = Self::from_toml(&text, overrides, &path.display().to_string())?;
        if c.name.is_none() {
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            if let Some(why) = unsafe_name(&stem) {
                return Err(Error::Config(format!(
                    "{}: the run takes the file's stem {stem:?} as its name (the file gives no name), which cannot name the run's directory under results/runs: {why}; set name = \"...\" in the file",
                    path.display()
                )));
            }
            c.name = Some(stem);
        }
        Ok(c)
    }

    /// Parses and validates configuration text; `origin` names it in errors. A TOML error's
    /// first line reads `{origin}: {dotted key}: {message} (line L, column C)`; a key set by
    /// `--set` has no line in the file, so its error reads `{origin} (with --set overrides):
    /// {dotted key}: {message}`.
    pub fn from_toml(text: &str, overrides: &[String], origin: &str) -> Result<Self> {
        let mut table = toml_table(text).map_err(|e| Error::Config(format!("{origin}: {e}")))?;
        for o in overrides {
            apply_override(&mut table, o)?;
        }
        let profiled = crate::cost_profile::fill(&mut table).map_err(|e| Error::within(origin, e))?;
        let c: Self = if overrides.is_empty() && !profiled {
            toml_from_str(text).map_err(|e| Error::Config(format!("{origin}: {e}")))?
        } else {
            toml_from_table(table).map_err(|e| match toml_from_str::<Self>(text) {
                // The same error in the file alone: it has a line there.
                Err(f) if f.key == e.key && f.message == e.message => Error::Config(format!("{origin}: {f}")),
                _ => Error::Config(format!("{origin} (with --set overrides): {e}")),
            })?
        };
        c.validate().map_err(|e| Error::within(origin, e))?;
        Ok(c)
    }

    /// Deserialises and validates an already assembled table (a campaign's base with its grid
    /// options, say); `origin` names it in errors, which name the dotted key but no line.
    pub fn from_table(mut table: toml::Table, origin: &str) -> Result<Self> {
        crate::cost_profile::fill(&mut table).map_err(|e| Error::within(origin, e))?;
        let c: Self = toml_from_table(table).map_err(|e| Error::Config(format!("{origin}: {e}")))?;
        c.validate().map_err(|e| Error::within(origin, e))?;
        Ok(c)
    }

    /// Parses a resolved configuration stored by an earlier resilab (in a checkpoint): those
    /// wrote `train.epochs` even when `train.steps` was set, and steps won, so `epochs` is
    /// dropped where both are given; otherwise as [`RunConfig::from_toml`].
    pub fn from_stored_toml(text: &str, overrides: &[String], origin: &str) -> Result<Self> {
        let mut table = toml_table(text).map_err(|e| Error::Config(format!("{origin}: {e}")))?;
        if let Some(toml::Value::Table(train)) = table.get_mut("train")
            && train.contains_key("steps")
        {
            train.remove("epochs");
        }
        let text = toml::to_string(&table).map_err(|e| Error::Config(format!("{origin}: {e}")))?;
        let origin = format!("{origin} (as stored)");
        Self::from_toml(&text, overrides, &origin)
    }

    /// Checks every value before anything is allocated or run; errors name the key:
    /// the run's `name` ([`check_name`]), `train` ([`TrainConfig::validate`]: `epochs` and
    /// `steps` not both), the data's sizes against the memory budget
    /// ([`DataConfig::validate`]), the batch sizes ([`TrainConfig::check_sizes`]), and the
    /// random fault arrivals that the run length draws, and `[checkpoint]`
    /// ([`CheckpointConfig::validate`]).
    pub fn validate(&self) -> Result<()> {
        if let Some(name) = &self.name {
            check_name(name).map_err(Error::Config)?;
        }
        self.train.validate()?;
        self.data.validate()?;
        self.checkpoint.validate().map_err(Error::Config)?;
        self.recovery.validate()?;
        self.outcome.validate()?;
        self.train.check_sizes(&self.data)?;
        self.check_losses()?;
        self.check_across_sections()?;
        self.check_footprint()?;
        self.check_fault_schedule()
    }

    /// The memory the model asks for, estimated from the configuration before anything is
    /// built ([`resilab_models::ModelConfig::footprint`]): each replica's parameters and
    /// buffers, gradients and optimizer state, and the activations of a training batch, in f32.
    /// Above the memory budget it is an error naming the key to lower.
    fn check_footprint(&self) -> Result<()> {
        let (channels, size, classes) = self.data.shape();
        let f = self.model.footprint(resilab_models::InputShape { channels, size }, classes)?;
        let buffers = match self.optimizer.kind {
            resilab_train::OptimizerKind::Adam => 2,
            resilab_train::OptimizerKind::Sgd if self.optimizer.momentum != 0.0 => 1,
            resilab_train::OptimizerKind::Sgd => 0,
        };
        let replicas = if self.parallel.mode == ParallelMode::Pipeline { 1 } else { self.parallel.world().max(1) as u64 };
        let per_replica = f.trainable.checked_mul(1 + buffers).and_then(|g| g.checked_add(f.values));
        let model = per_replica.and_then(|v| v.checked_mul(4 * replicas));
        let activations = f.activations_per_image.checked_mul(4 * self.train.batch_size as u64);
        let total = model.zip(activations).and_then(|(m, a)| m.checked_add(a));
        let budget = resilab_limits::memory_budget()?;
        if budget.admits(total) {
            return Ok(());
        }
        let lower = if activations > model {
            "train.batch_size"
        } else if replicas > 1 {
            "model.width or model.depth, or parallel.workers"
        } else {
            "model.width or model.depth"
        };
        Err(Error::Footprint(Box::new(crate::Footprint {
            model: self.model.label(),
            trainable: f.trainable,
            total,
            replicas_bytes: model,
            replicas,
            activations,
            batch_size: self.train.batch_size,
            budget: budget.describe(),
            lower,
        })))
    }

    /// Values that are valid alone but not together, or out of range where no section checks
    /// them: the detectors' threshold, and a schedule floor above the rate it anneals from.
    fn check_across_sections(&self) -> Result<()> {
        let t = self.detect.extreme_threshold;
        if !(t.is_finite() && t > 0.0) {
            return Err(Error::Config(format!("detect.extreme_threshold = {t} must be a positive magnitude (docs/metrics.md uses 1e10)")));
        }
        if self.schedule.min_lr > self.optimizer.lr {
            return Err(Error::Config(format!(
                "schedule.min_lr = {} is above optimizer.lr = {}: the schedule would raise the learning rate instead of lowering it",
                self.schedule.min_lr, self.optimizer.lr
            )));
        }
        Ok(())
    }

    /// `recovery.on_permanent_loss` and `recovery.shrink_batch` against `[parallel]`: a
    /// pipeline cannot shrink, and keeping the per-worker batch needs one.
    fn check_losses(&self) -> Result<()> {
        let r = &self.recovery;
        let pipeline = self.parallel.mode == ParallelMode::Pipeline;
        if pipeline && r.on_permanent_loss == LossPolicy::Shrink {
            return Err(Error::Config(
                "recovery.on_permanent_loss = \"shrink\" cannot apply to a pipeline: every stage holds its own part of the model, so a lost stage must be replaced (\"respawn\" or \"reinit\")".into(),
            ));
        }
        let may_shrink = r.on_permanent_loss == LossPolicy::Shrink || self.parallel.spares.is_some();
        let workers = self.parallel.workers.max(1);
        if !pipeline && may_shrink && r.shrink_batch == BatchRule::KeepPerWorker && !self.train.batch_size.is_multiple_of(workers) {
            return Err(Error::Config(format!(
                "recovery.shrink_batch = \"keep_per_worker\" needs a per-worker batch: train.batch_size = {} is not a multiple of parallel.workers = {workers}",
                self.train.batch_size
            )));
        }
        Ok(())
    }

    /// The fault schedule holds one event per random arrival, about `steps / mtbf_steps` per
    /// worker hit (see `resilab_faults::schedule`): the one allocation that grows with the run's
    /// length. Checked against the memory budget where the length is known before the data
    /// is read (`train.steps`, or `train.epochs` of synthetic data).
    fn check_fault_schedule(&self) -> Result<()> {
        if self.faults.is_empty() {
            return Ok(());
        }
        let (key, value, steps) = match (self.train.steps, self.data.source) {
            (Some(s), _) => ("train.steps", s, s),
            (None, DataSource::Synthetic) => {
                let per_epoch = (self.data.train_size.unwrap_or(resilab_data::DEFAULT_TRAIN_SIZE) / self.train.batch_size.max(1)) as u64;
                ("train.epochs", self.train.epochs() as u64, self.train.total_steps(per_epoch))
            }
            (None, _) => return Ok(()),
        };
        let world = self.parallel.world().max(1);
        for e in self.faults.entries() {
            let (mtbf, ranks) = match (e.mtbf_steps, e.system_mtbf_steps) {
                (Some(m), _) => (m, if e.worker.is_some() { 1 } else { world }),
                (None, Some(m)) => (m, 1),
                (None, None) => continue,
            };
            if mtbf <= 0.0 {
                continue;
            }
            let events = steps as f64 / mtbf * ranks as f64;
            let bytes = events * std::mem::size_of::<resilab_faults::FaultEvent>() as f64;
            let bytes = (bytes < u64::MAX as f64).then_some(bytes as u64);
            let what = format!("the random arrivals of fault[{}] (mtbf_steps = {mtbf}: about {events:.3e} events)", e.index);
            resilab_data::check_memory(key, &value, bytes, &what)?;
        }
        Ok(())
    }

    /// The resolved configuration as TOML (every default written out; `train.epochs` only
    /// when `train.steps` is not set, so the text loads again).
    pub fn to_toml(&self) -> String {
        let resolved = Self { train: self.train.resolved(), ..self.clone() };
        toml::to_string(&resolved).unwrap_or_else(|e| format!("# could not serialise the configuration: {e}\n"))
    }

    /// The run's name.
    pub fn run_name(&self) -> String {
        self.name.clone().unwrap_or_else(|| "run".to_string())
    }
}

/// `results/runs/<name>-<UTC timestamp>` under the current directory.
pub fn default_out_dir(name: &str) -> PathBuf {
    PathBuf::from("results").join("runs").join(format!("{name}-{}", utc_stamp()))
}

/// The current UTC time as `YYYYMMDD-HHMMSS`.
pub fn utc_stamp() -> String {
    stamp_of(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()))
}

/// `secs` after 1970-01-01 00:00:00 UTC as `YYYYMMDD-HHMMSS`.
fn stamp_of(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}{m:02}{d:02}-{:02}{:02}{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = "[model]\narch = \"resnet\"\ndepth = 8\n";

    #[test]
    fn defaults_and_overrides() {
        let c = RunConfig::from_toml(MIN, &[], "t").unwrap();
        assert_eq!(c.seed, 42);
        assert_eq!(c.train.batch_size, 64);
        let c = RunConfig::from_toml(MIN, &["train.epochs=3".into(), "optimizer.kind=adam".into(), "seed=7".into()], "t").unwrap();
        assert_eq!(c.train.epochs, Some(3));
        assert_eq!(c.optimizer.kind, resilab_train::OptimizerKind::Adam);
        assert_eq!(c.seed, 7);
    }

    #[test]
    fn unknown_key_and_wrong_type_are_named() {
        let e = RunConfig::from_toml(&format!("{MIN}dept = 3\n"), &[], "f.toml").unwrap_err().to_string();
        assert!(e.contains("f.toml") && e.contains("dept"), "{e}");
        let e = RunConfig::from_toml(MIN, &["train.epochs=\"many\"".into()], "f.toml").unwrap_err().to_string();
        assert!(e.contains("epochs") || e.contains("invalid type"), "{e}");
        let e = RunConfig::from_toml("[model]\narch = \"lenet\"\n", &[], "f.toml").unwrap_err().to_string();
        assert!(e.contains("lenet") && e.contains("resnet"), "{e}");
    }

    #[test]
    fn overrides_index_arrays_and_merge_tables() {
        let text = format!("{MIN}[[fault]]\ntarget = \"weights\"\nat_step = 2\n");
        let c = RunConfig::from_toml(&text, &["fault.0.at_step=5".into()], "t").unwrap();
        assert_eq!(c.faults.tables()[0]["at_step"].as_integer(), Some(5));
        assert_eq!(c.faults.entries()[0].at_step, Some(5), "the entries are parsed after the overrides");
        let e = RunConfig::from_toml(&text, &["fault.3.at_step=5".into()], "t").unwrap_err().to_string();
        assert!(e.contains("no entry 3"), "{e}");
        let mut t: toml::Table = toml::from_str(MIN).unwrap();
        set_value(&mut t, "model", toml::Value::Table(toml::from_str("width = 0.5").unwrap())).unwrap();
        assert_eq!(t["model"]["depth"].as_integer(), Some(8));
        assert_eq!(t["model"]["width"].as_float(), Some(0.5));
        set_value(&mut t, "grid.\"inject.first_bit\"", toml::Value::Integer(3)).unwrap();
        assert_eq!(t["grid"]["inject.first_bit"].as_integer(), Some(3));
        assert!(set_value(&mut t, "a..b", toml::Value::Integer(3)).unwrap_err().contains("a..b"));
    }

    #[test]
    fn resolved_config_round_trips() {
        let c = RunConfig::from_toml(MIN, &[], "t").unwrap();
        let again = RunConfig::from_toml(&c.to_toml(), &[], "t").unwrap();
        // The same configuration with the default epochs written out.
        assert_eq!(RunConfig { train: c.train.resolved(), ..c.clone() }, again);
        assert_eq!(c.to_toml(), again.to_toml());
    }

    #[test]
    fn every_shipped_configuration_loads_and_validates() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let c = RunConfig::load(&path, &[]).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                c.parallel.validate(c.train.batch_size).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                c.optimizer.validate().unwrap();
                seen += 1;
            }
        }
        assert!(seen >= 3, "found {seen} configurations in {}", dir.display());
    }

    fn first_line(e: Error) -> String {
        e.to_string().lines().next().unwrap_or_default().to_string()
    }

    #[test]
    fn toml_errors_name_file_key_and_position_on_the_first_line() {
        let text = format!("{MIN}[train]\nbatch_size = \"big\"\n");
        let e = first_line(RunConfig::from_toml(&text, &[], "f.toml").unwrap_err());
        assert_eq!(e, "f.toml: train.batch_size: invalid type: string \"big\", expected usize (line 5, column 14)");
        let e = first_line(RunConfig::from_toml(&format!("{MIN}widht = 2\n"), &[], "f.toml").unwrap_err());
        assert!(e.starts_with("f.toml: model.widht: unknown field `widht`, expected one of") && e.contains("`width`"), "{e}");
        assert!(e.ends_with("(line 4, column 1)"), "{e}");
        let e =
            first_line(RunConfig::from_toml("[model]\narch = \"resnet\"\ndepth = 8\n[[fault]]\ntarget = 3\n", &[], "f.toml").unwrap_err());
        assert!(e.starts_with("f.toml: fault[0].target:") || e.contains("fault"), "{e}");
        // A syntax error names the file, line and column.
        let e = first_line(RunConfig::from_toml("[model]\narch = \"resnet\"\ndepth = = 8\n", &[], "f.toml").unwrap_err());
        assert!(e.starts_with("f.toml: ") && e.ends_with("(line 3, column 9)"), "{e}");
        let e = first_line(RunConfig::from_toml("[model]\narch = \"resnet\"\ndepth = = 8\n", &["seed=1".into()], "f.toml").unwrap_err());
        assert!(e.starts_with("f.toml: ") && e.ends_with("(line 3, column 9)"), "{e}");
        let e = first_line(RunConfig::from_toml("seed = 1\n", &[], "f.toml").unwrap_err());
        assert_eq!(e, "f.toml: missing field `model` (line 1, column 1)");
        // With overrides: a key from the file keeps its line; a key set by --set has none.
        let e = first_line(RunConfig::from_toml(&text, &["seed=3".into()], "f.toml").unwrap_err());
        assert_eq!(e, "f.toml: train.batch_size: invalid type: string \"big\", expected usize (line 5, column 14)");
        let e = first_line(RunConfig::from_toml(MIN, &["train.batch_size=\"big\"".into()], "f.toml").unwrap_err());
        assert_eq!(e, "f.toml (with --set overrides): train.batch_size: invalid type: string \"big\", expected usize");
    }

    #[test]
    fn epochs_and_steps_exclude_each_other() {
        let both = format!("{MIN}[train]\nepochs = 4\nsteps = 100\n");
        let e = RunConfig::from_toml(&both, &[], "f.toml").unwrap_err().to_string();
        assert!(e.contains("train.epochs = 4 and train.steps = 100 are both set"), "{e}");
        // An override of one replaces the other.
        let c = RunConfig::from_toml(&format!("{MIN}[train]\nepochs = 4\n"), &["train.steps=7".into()], "t").unwrap();
        assert_eq!((c.train.epochs, c.train.steps), (None, Some(7)));
        let c = RunConfig::from_toml(&format!("{MIN}[train]\nsteps = 7\n"), &["train.epochs=2".into()], "t").unwrap();
        assert_eq!((c.train.epochs, c.train.steps), (Some(2), None));
        let c = RunConfig::from_toml(&format!("{MIN}[train]\nsteps = 7\n"), &["train={epochs = 2}".into()], "t").unwrap();
        assert_eq!((c.train.epochs, c.train.steps), (Some(2), None));
        let mut t: toml::Table = toml::from_str("[base.train]\nepochs = 3\n").unwrap();
        set_value(&mut t, "base.train.steps", toml::Value::Integer(5)).unwrap();
        assert_eq!(t["base"]["train"].as_table().map(|t| t.keys().cloned().collect::<Vec<_>>()), Some(vec!["steps".to_string()]));
        // The resolved form writes the default epochs, never both, and loads again.
        let train_keys = |c: &RunConfig| {
            let t: toml::Table = toml::from_str(&c.to_toml()).unwrap();
            ["epochs", "steps"].map(|k| t["train"].get(k).and_then(toml::Value::as_integer))
        };
        let c = RunConfig::from_toml(MIN, &[], "t").unwrap();
        assert_eq!(train_keys(&c), [Some(1), None]);
        let c = RunConfig::from_toml(&format!("{MIN}[train]\nsteps = 7\n"), &[], "t").unwrap();
        assert_eq!(train_keys(&c), [None, Some(7)]);
        assert_eq!(RunConfig::from_toml(&c.to_toml(), &[], "t").unwrap(), c);
        // A configuration stored before this rule (epochs written out beside steps) loads, steps winning.
        let old = format!("{MIN}[train]\nepochs = 1\nsteps = 7\n");
        let c = RunConfig::from_stored_toml(&old, &[], "ckpt").unwrap();
        assert_eq!((c.train.epochs, c.train.steps), (None, Some(7)));
    }

    #[test]
    fn unsafe_names_are_errors() {
        for bad in ["", ".", "..", "../x", "a/b", "a\\b", ".hidden", "a\u{0}b", "a\u{1b}[31mred", "two\nlines"] {
            let text = format!("name = {}\n{MIN}", toml::Value::String(bad.into()));
            let e = RunConfig::from_toml(&text, &[], "f.toml").unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("f.toml: name = {bad:?} cannot name the run's directory under results/runs: it ")),
                "{bad:?}: {e}"
            );
        }
        RunConfig::from_toml(&format!("name = \"ok-run_1.b\"\n{MIN}"), &[], "f.toml").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let hidden = dir.path().join(".hidden.toml");
        std::fs::write(&hidden, MIN).unwrap();
        let e = RunConfig::load(&hidden, &[]).unwrap_err().to_string();
        assert!(e.contains("the file's stem \".hidden\"") && e.contains("it starts with '.'"), "{e}");
        let plain = dir.path().join("plain.toml");
        std::fs::write(&plain, MIN).unwrap();
        assert_eq!(RunConfig::load(&plain, &[]).unwrap().name.as_deref(), Some("plain"));
    }

    #[test]
    fn sizes_are_checked_before_anything_is_allocated() {
        let e = RunConfig::from_toml(MIN, &["data.train_size=1000000000000".into()], "t").unwrap_err().to_string();
        assert!(e.starts_with("t: data.train_size = 1000000000000 needs 3073000000000000 bytes"), "{e}");
        let e = RunConfig::from_toml(MIN, &["train.batch_size=100000".into()], "t").unwrap_err().to_string();
        assert!(e.contains("train.batch_size = 100000"), "{e}");
        // Random fault arrivals: one event each, about steps / mtbf_steps per worker.
        let faults = format!("{MIN}[[fault]]\ntarget = \"weights\"\nmtbf_steps = 1e-9\n");
        let e = RunConfig::from_toml(&faults, &["train.steps=100000000".into()], "t").unwrap_err().to_string();
        assert!(e.starts_with("t: train.steps = 100000000 needs") && e.contains("fault[0]"), "{e}");
        RunConfig::from_toml(&faults.replace("1e-9", "50.0"), &["train.steps=100".into()], "t").unwrap();
    }

    #[test]
    fn recovery_costs_default_to_their_published_figures_and_bad_values_name_the_key() {
        // docs/recovery.md: ULFM's detector timeout, MegaScale's communicator init on 2,048
        // GPUs, DLRover's pod rescheduling and node check.
        let r = RunConfig::from_toml(MIN, &[], "t").unwrap().recovery;
        assert_eq!((r.detect_timeout_s, r.rebuild_s, r.relaunch_s), (10.0, 5.0, 300.0));
        assert_eq!(r, RecoveryConfig::default());
        for key in ["detect_timeout_s", "rebuild_s", "relaunch_s"] {
            for bad in ["-1", "nan", "inf"] {
                let e = RunConfig::from_toml(MIN, &[format!("recovery.{key}={bad}")], "t").unwrap_err().to_string();
                assert!(e.contains(&format!("recovery.{key} = ")) && e.contains("must be a finite number of seconds >= 0"), "{e}");
            }
            // A relaunch of 0 s needs a rebuild of 0 s too (below).
            let ok = RunConfig::from_toml(MIN, &[format!("recovery.{key}=0"), "recovery.rebuild_s=0".into()], "t").unwrap();
            assert!(ok.to_toml().contains(&format!("{key} = 0")), "{}", ok.to_toml());
        }
    }

    #[test]
    fn a_cost_profile_fills_the_constants_it_is_not_overridden_in_and_round_trips() {
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let text = format!("{MIN}[recovery]\nprofile = \"megascale-optimised\"\nprofile_scale = 0.001\n");
        let c = RunConfig::from_toml(&text, &set(&["recovery.detect_timeout_s=0.01"]), "t").unwrap();
        let r = &c.recovery;
        assert_eq!((r.detect_timeout_s, r.rebuild_s, r.relaunch_s, r.relaunch_covers_redo), (0.01, 0.03, 0.9, true));
        // The stored configuration holds the profile and the constants it charged: read back, the same.
        assert_eq!(RunConfig::from_toml(&c.to_toml(), &[], "stored").unwrap().recovery, c.recovery);
        let e = RunConfig::from_toml(&text.replace("optimised", "fast"), &[], "t").unwrap_err().to_string();
        assert!(e.contains("recovery.profile = \"megascale-fast\" is not a cost profile"), "{e}");
        let e = RunConfig::from_toml(MIN, &set(&["recovery.profile_scale=2"]), "t").unwrap_err().to_string();
        assert!(e.contains("recovery.profile_scale is set without recovery.profile"), "{e}");
    }

    #[test]
    fn a_relaunch_cheaper_than_a_rebuild_is_refused_naming_both_keys_unless_deliberate() {
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let e = RunConfig::from_toml(MIN, &set(&["recovery.rebuild_s=1047", "recovery.relaunch_s=300"]), "t").unwrap_err().to_string();
        assert!(e.contains("recovery.relaunch_s = 300 s is below recovery.rebuild_s = 1047 s"), "{e}");
        assert!(e.contains("recovery.relaunch_below_rebuild = true"), "{e}");
        // Equal is allowed (a relaunch that is only the new job's initialisation), and the key
        // makes the pairing deliberate.
        RunConfig::from_toml(MIN, &set(&["recovery.rebuild_s=300", "recovery.relaunch_s=300"]), "t").unwrap();
        let ok = RunConfig::from_toml(
            MIN,
            &set(&["recovery.rebuild_s=1047", "recovery.relaunch_s=300", "recovery.relaunch_below_rebuild=true"]),
            "t",
        )
        .unwrap();
        assert!(ok.recovery.relaunch_below_rebuild);
    }

    #[test]
    fn stamps_are_the_calendars_dates() {
        // The epoch, leap days (2000 is a leap year, 2100 is not), the end of a year and the
        // second after it; checked against Python's datetime.
        for (secs, want) in [
            (0, "19700101-000000"),
            (951_782_400, "20000229-000000"),
            (1_709_251_199, "20240229-235959"),
            (1_735_689_599, "20241231-235959"),
            (1_735_689_600, "20250101-000000"),
            (4_107_542_399, "21000228-235959"),
            (4_107_542_400, "21000301-000000"),
        ] {
            assert_eq!(stamp_of(secs), want, "{secs}");
        }
        assert_eq!(utc_stamp().len(), 15);
    }

    #[test]
    fn a_model_over_the_budget_is_a_footprint_error_inside_its_file() {
        let text = format!("{MIN}width = 16.0\n").replace("depth = 8", "depth = 1202");
        let e = RunConfig::from_toml(&text, &[], "big.toml").unwrap_err();
        assert!(matches!(&e, Error::In { origin, .. } if origin == "big.toml"), "{e:?}");
        let Error::Footprint(f) = e.innermost() else { panic!("{e:?}") };
        assert_eq!(f.model, "resnet1202-w16");
        assert!(f.total.is_none_or(|t| t > (1 << 30)), "{f:?}");
        assert!(e.to_string().starts_with("big.toml: the model resnet1202-w16 ("), "{e}");
    }
}
