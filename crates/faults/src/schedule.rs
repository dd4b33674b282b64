//! `[[fault]]` entries and the events they schedule.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use resilab_inject::{RawConfig, Spec};
use resilab_models::{DatasetKind, DatasetPath, Precision, stream_seed};
use resilab_train::Phase;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What a fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultTarget {
    /// The worker's (stage's) parameters and buffers, before its forward pass: the float32
    /// master weights, in a mixed-precision run too.
    Weights,
    /// The half-precision copy of the worker's convolution and linear weights and biases that
    /// its forward and backward passes use in a bf16 or fp16 run (`train.precision`), for one
    /// step: the flip lands in the half value the step computes with, and the float32 master
    /// weights are as they were once the step's gradients are computed.
    WeightCopy,
    /// The worker's local gradients, before the all-reduce.
    Gradients,
    /// The worker's copy of the averaged gradients, after the all-reduce.
    ReducedGradients,
    /// The worker's optimizer state (momentum, Adam moments), before its forward pass.
    Optimizer,
    /// An activation message received by the stage (pipelines).
    Activations,
    /// A gradient message received by the stage (pipelines).
    MessageGradients,
    /// Neurons: values of one block's output on the worker's forward pass (PyTorchFI's fault
    /// model), in data-parallel and single-worker runs as well as pipeline stages. The block
    /// is drawn uniformly from those `locations_to_corrupt` names (`neurons/layer2/1`), or from
    /// all of the worker's blocks; `injection_tries` values of its `[batch, C, H, W]` output
    /// are then altered for that forward pass only (the first micro-batch's, in a pipeline).
    Neurons,
    /// Fail-stop crash of the worker: its contribution is lost from this step until recovery.
    Crash,
    /// The newest checkpoint file of the worker, altered on disk (then training restarts from it).
    Checkpoint,
}

impl FaultTarget {
    /// The configuration spelling.
    pub fn name(self) -> &'static str {
        match self {
            FaultTarget::Weights => "weights",
            FaultTarget::WeightCopy => "weight_copy",
            FaultTarget::Gradients => "gradients",
            FaultTarget::ReducedGradients => "reduced_gradients",
            FaultTarget::Optimizer => "optimizer",
            FaultTarget::Activations => "activations",
            FaultTarget::MessageGradients => "message_gradients",
            FaultTarget::Neurons => "neurons",
            FaultTarget::Crash => "crash",
            FaultTarget::Checkpoint => "checkpoint",
        }
    }

    /// Whether the values it hits are half values in a bf16 or fp16 run (activations, block
    /// outputs, pipeline messages, gradients, the weights' half copy), so that its flips are
    /// flips of the half value. Master weights and optimizer state stay float32.
    pub fn half_valued(self) -> bool {
        matches!(
            self,
            FaultTarget::Gradients
                | FaultTarget::ReducedGradients
                | FaultTarget::Activations
                | FaultTarget::MessageGradients
                | FaultTarget::Neurons
                | FaultTarget::WeightCopy
        )
    }
}

/// One validated `[[fault]]` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultEntry {
    /// Position in the configuration.
    pub index: usize,
    /// What it hits.
    pub target: FaultTarget,
    /// The step at which it strikes (explicit faults).
    pub at_step: Option<u64>,
    /// Mean time between failures in steps, per worker (random arrivals).
    pub mtbf_steps: Option<f64>,
    /// Mean time between failures in steps of the whole system (random arrivals, each on a
    /// worker drawn uniformly, or on `worker`).
    pub system_mtbf_steps: Option<f64>,
    /// This many faults at steps drawn uniformly from the run's, each on its own worker drawn
    /// uniformly (no worker twice), or all on `worker`.
    pub count: Option<u64>,
    /// When a crash strikes inside its step (`None`: uniformly over the step's duration).
    pub crash_at: Option<CrashAt>,
    /// A crash whose worker never comes back on its node (`recovery.on_permanent_loss` decides
    /// what the job does); crashes are transient otherwise.
    pub permanent: bool,
    /// The worker or stage hit; `None`: every worker (random arrivals) or worker 0 (explicit).
    pub worker: Option<usize>,
    /// Stuck-at fault: the corrupted weights are held at their corrupted values before each
    /// forward pass of this many steps, counting the step of the fault.
    pub stuck_steps: Option<u64>,
    /// The injector's fault model, attempts and locations (the `resilab inject` keys).
    pub spec: Spec,
}

/// When a crash strikes inside its step, on the step's simulated timeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CrashAt {
    /// At this share of the step's duration (`at_fraction`, in [0, 1)).
    Fraction(f64),
    /// In the middle of a named phase (`phase`, with `bucket` for an all-reduce or update).
    Phase(Phase),
}

/// Keys of a `[[fault]]` entry that are not the injector's.
pub const OWN_KEYS: &[&str] = &[
    "target",
    "at_step",
    "mtbf_steps",
    "system_mtbf_steps",
    "count",
    "worker",
    "stage",
    "stuck_steps",
    "at_fraction",
    "phase",
    "bucket",
    "permanent",
];

/// When an entry strikes: exactly one of these is set.
struct When {
    at_step: Option<u64>,
    mtbf_steps: Option<f64>,
    system_mtbf_steps: Option<f64>,
    count: Option<u64>,
}

/// A whole number >= 0 at `key`, if given.
fn whole(i: usize, table: &toml::Table, key: &str) -> Result<Option<u64>> {
    match table.get(key) {
        None => Ok(None),
        Some(toml::Value::Integer(n)) if *n >= 0 => Ok(Some(*n as u64)),
        Some(v) => Err(bad(i, key, format!("must be a whole number >= 0, got {v}"))),
    }
}

/// `at_step`, `mtbf_steps`, `system_mtbf_steps` or `count`: exactly one.
fn when(i: usize, table: &toml::Table) -> Result<When> {
    let positive = |key: &str| -> Result<Option<f64>> {
        match table.get(key) {
            None => Ok(None),
            Some(v) => match v.as_float().or_else(|| v.as_integer().map(|n| n as f64)) {
                Some(x) if x.is_finite() && x > 0.0 => Ok(Some(x)),
                _ => Err(bad(i, key, format!("must be a number > 0, got {v}"))),
            },
        }
    };
    let w = When {
        at_step: whole(i, table, "at_step")?,
        mtbf_steps: positive("mtbf_steps")?,
        system_mtbf_steps: positive("system_mtbf_steps")?,
        count: whole(i, table, "count")?,
    };
    if w.at_step == Some(0) {
        return Err(bad(i, "at_step", "steps count from 1"));
    }
    if w.count == Some(0) {
        return Err(bad(i, "count", "must be at least 1 (leave the entry out for no faults)"));
    }
    let given: Vec<&str> = [
        ("at_step", w.at_step.is_some()),
        ("mtbf_steps", w.mtbf_steps.is_some()),
        ("system_mtbf_steps", w.system_mtbf_steps.is_some()),
        ("count", w.count.is_some()),
    ]
    .into_iter()
    .filter(|g| g.1)
    .map(|g| g.0)
    .collect();
    match given.as_slice() {
        [] => Err(bad(
            i,
            "at_step",
            "missing: give at_step (an explicit fault), mtbf_steps or system_mtbf_steps (random arrivals), or count (faults at random steps)",
        )),
        [_] => Ok(w),
        [first, second, ..] => {
            Err(bad(i, second, format!("give one of at_step, mtbf_steps, system_mtbf_steps and count, not both {first} and {second}")))
        }
    }
}

/// `permanent`: a crash whose worker never comes back on its node.
fn permanent(i: usize, table: &toml::Table, target: FaultTarget) -> Result<bool> {
    match table.get("permanent") {
        None => Ok(false),
        Some(_) if target != FaultTarget::Crash => {
            Err(bad(i, "permanent", "only a crash can be permanent: use it with target = \"crash\""))
        }
        Some(toml::Value::Boolean(b)) => Ok(*b),
        Some(v) => Err(bad(i, "permanent", format!("must be true or false, got {v}"))),
    }
}

/// `at_fraction`, or `phase` and `bucket`, of a crash entry.
fn crash_at(i: usize, table: &toml::Table, target: FaultTarget) -> Result<Option<CrashAt>> {
    let (fraction, phase, bucket) = (table.get("at_fraction"), table.get("phase"), table.get("bucket"));
    if target != FaultTarget::Crash {
        if let Some(k) = ["at_fraction", "phase", "bucket"].into_iter().find(|k| table.contains_key(*k)) {
            return Err(bad(i, k, "places a crash in its step: use it with target = \"crash\""));
        }
        return Ok(None);
    }
    let bucket = match bucket {
        None => None,
        Some(toml::Value::Integer(k)) if *k >= 0 => Some(*k as usize),
        Some(v) => return Err(bad(i, "bucket", format!("must be a bucket index >= 0, got {v}"))),
    };
    match (fraction, phase) {
        (Some(_), Some(_)) => Err(bad(i, "phase", "give at_fraction or phase, not both")),
        (Some(v), None) => match v.as_float().or_else(|| v.as_integer().map(|n| n as f64)) {
            Some(f) if (0.0..1.0).contains(&f) && bucket.is_none() => Ok(Some(CrashAt::Fraction(f))),
            Some(_) if bucket.is_some() => Err(bad(i, "bucket", "names a bucket of phase = \"allreduce\" or \"update\"")),
            _ => Err(bad(
                i,
                "at_fraction",
                format!("must be a number with 0 <= at_fraction < 1 (a share of the step's simulated duration), got {v}"),
            )),
        },
        (None, Some(v)) => {
            let p = match (v.as_str(), bucket) {
                (Some("forward"), None) => Phase::Forward,
                (Some("backward"), None) => Phase::Backward,
                (Some("allreduce"), b) => Phase::Allreduce(b.unwrap_or(0)),
                (Some("update"), b) => Phase::Update(b.unwrap_or(0)),
                (Some("forward" | "backward"), Some(_)) => {
                    return Err(bad(i, "bucket", "names a bucket of phase = \"allreduce\" or \"update\""));
                }
                _ => return Err(bad(i, "phase", format!("{v} is not one of forward, backward, allreduce, update"))),
            };
            Ok(Some(CrashAt::Phase(p)))
        }
        (None, None) if bucket.is_some() => Err(bad(i, "bucket", "names a bucket of phase = \"allreduce\" or \"update\"")),
        (None, None) => Ok(None),
    }
}

fn bad(index: usize, key: &str, message: impl Into<String>) -> Error {
    Error::Config { key: format!("fault[{index}].{key}"), message: message.into() }
}

/// Validates `[[fault]]` entries: `target`, one of `at_step` and `mtbf_steps`, optionally
/// `worker` (or its alias `stage`), and the injector's keys (`injection_tries`,
/// `float_precision`, `first_bit`, `last_bit`, `burst`, `bit_mask`, `scaling_factor`,
/// `locations_to_corrupt`, ...) verbatim. `injection_tries` defaults to 1 and, without
/// `locations_to_corrupt`, every tensor of the target may be hit. Errors name `fault[i].key`.
pub(crate) fn parse(entries: &[toml::Table]) -> Result<Vec<FaultEntry>> {
    entries.iter().enumerate().map(|(i, t)| parse_one(i, t)).collect()
}

fn parse_one(i: usize, table: &toml::Table) -> Result<FaultEntry> {
    let target: FaultTarget = match table.get("target") {
        None => return Err(bad(i, "target", "missing (weights, weight_copy, gradients, reduced_gradients, optimizer, activations, message_gradients, neurons, crash or checkpoint)")),
        Some(v) => v.clone().try_into().map_err(|_| {
            bad(i, "target", format!("{v} is not one of weights, weight_copy, gradients, reduced_gradients, optimizer, activations, message_gradients, neurons, crash, checkpoint"))
        })?,
    };
    let When { at_step, mtbf_steps, system_mtbf_steps, count } = when(i, table)?;
    let crash_at = crash_at(i, table, target)?;
    let permanent = permanent(i, table, target)?;
    let int = |key: &str| whole(i, table, key);
    let worker = match (int("worker")?, int("stage")?) {
        (Some(_), Some(_)) => return Err(bad(i, "stage", "give worker or stage, not both")),
        (w, s) => w.or(s).map(|w| w as usize),
    };
    let stuck_steps = int("stuck_steps")?;
    if stuck_steps == Some(0) {
        return Err(bad(i, "stuck_steps", "must be at least 1"));
    }
    if stuck_steps.is_some() && target != FaultTarget::Weights {
        return Err(bad(i, "stuck_steps", "stuck-at faults hold weights: use target = \"weights\""));
    }
    if target == FaultTarget::Checkpoint && (mtbf_steps.is_some() || system_mtbf_steps.is_some() || count.is_some()) {
        return Err(bad(i, "mtbf_steps", "checkpoint faults are explicit: give at_step"));
    }
    if permanent && worker.is_some() && count.is_some_and(|k| k > 1) {
        return Err(bad(i, "count", "a worker lost for good cannot be lost again: drop `worker` to lose distinct workers"));
    }
    let mut rest: toml::Table =
        table.iter().filter(|(k, _)| !OWN_KEYS.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect();
    if target == FaultTarget::Crash
        && let Some(k) = rest.keys().next()
    {
        return Err(bad(
            i,
            k,
            "a crash flips no bits: only target, at_step, mtbf_steps, system_mtbf_steps or count, worker, permanent, and at_fraction or phase (with bucket) apply",
        ));
    }
    for k in ["hdf5_file", "injection_sequence_path", "byte_region", "seed"] {
        if rest.contains_key(k) {
            return Err(bad(i, k, "not used in a run's faults (faults draw from the run's fault_seed)"));
        }
    }
    // Defaults for a run's faults: one attempt, anywhere in the target.
    rest.entry("injection_tries").or_insert(toml::Value::Integer(1));
    if !rest.contains_key("locations_to_corrupt") {
        rest.entry("use_random_locations").or_insert(toml::Value::Boolean(true));
    }
    let raw: RawConfig = toml::Value::Table(rest).try_into().map_err(|e: toml::de::Error| bad(i, "*", e.message().trim().to_string()))?;
    let mut spec = raw.validate().map_err(|e| match e {
        resilab_inject::Error::Config { key, message } => bad(i, &key, message),
        resilab_inject::Error::Budget(resilab_limits::Error::Budget(refusal)) => bad(i, &refusal.key.clone(), refusal.to_string()),
        other => bad(i, "*", other.to_string()),
    })?;
    if target == FaultTarget::Crash {
        spec.tries = resilab_inject::Tries::Count(0);
    } else {
        // Tensors in training are f32: the bits asked for must lie in the word the fault sees.
        // A half run's half values are checked against 16 bits with the run's format
        // (`check_precision`).
        if let Err(message) = spec.model.check_width(spec.model.precision.fixed().unwrap_or(32)) {
            return Err(bad(i, width_key(&message), format!("{message} (training tensors are 32-bit floats)")));
        }
    }
    Ok(FaultEntry { index: i, target, at_step, mtbf_steps, system_mtbf_steps, count, crash_at, permanent, worker, stuck_steps, spec })
}

/// The key a [`resilab_inject::FaultModel::check_width`] message is about.
fn width_key(message: &str) -> &'static str {
    ["first_bit", "last_bit", "burst", "bit_mask"].into_iter().find(|k| message.starts_with(k)).unwrap_or("float_precision")
}

/// Checks that entry `i`'s bits fit the 16-bit word of a half value: `float_precision` is left
/// out (or 16: the half value's own word), and the bit range or mask lies in bits 0..=15.
fn check_half_width(i: usize, spec: &resilab_inject::Spec) -> Result<()> {
    if let Some(p) = spec.model.precision.fixed().filter(|&p| p != 16) {
        return Err(bad(
            i,
            "float_precision",
            format!("is {p}, but a flip in a half value flips a bit of its own 16-bit word: leave float_precision out (or 16)"),
        ));
    }
    spec.model
        .check_width(16)
        .map_err(|message| bad(i, width_key(&message), format!("{message}: the values this fault hits are 16-bit half values in this run")))
}

/// Checks the entries against the run's format (`train.precision`): in a bf16 or fp16 run,
/// the bits of every entry whose target holds half values ([`FaultTarget::half_valued`], the
/// weights' half copy among them) must fit a 16-bit word. In a float32 run `weight_copy` hits
/// the float32 weights as one step's passes read them. Errors name `fault[i].key`.
pub fn check_precision(entries: &[FaultEntry], precision: Precision) -> Result<()> {
    for e in entries {
        if e.target.half_valued() && precision.half().is_some() {
            check_half_width(e.index, &e.spec)?;
        }
    }
    Ok(())
}

/// The name a block's output goes by in `locations_to_corrupt` and the fault log
/// (`layer2.1` -> `neurons/layer2/1`).
pub(crate) fn neuron_path(block: &str) -> String {
    format!("neurons/{}", block.replace('.', "/"))
}

/// Checks that the `locations_to_corrupt` of every `neurons` entry name at least one of the
/// network's blocks (`neurons/<block>`, dots as slashes: `neurons/layer2/1`); the error names
/// the entry's key and lists the blocks.
pub fn check_neuron_locations(entries: &[FaultEntry], block_names: &[String]) -> Result<()> {
    let paths: Vec<String> = block_names.iter().map(|b| neuron_path(b)).collect();
    for e in entries.iter().filter(|e| e.target == FaultTarget::Neurons) {
        for loc in e.spec.locations.iter().flatten() {
            if !paths.iter().any(|p| resilab_inject::config::location_matches(loc, p)) {
                return Err(bad(e.index, "locations_to_corrupt", format!("{loc:?} names no block; the blocks are {}", paths.join(", "))));
            }
        }
    }
    Ok(())
}

/// Checks that the `locations_to_corrupt` of every weights, gradients, reduced-gradients and
/// optimizer entry name at least one tensor it can hit: `tensors` are the run's checkpoint
/// paths (`model/layer1/0/conv1/weight`, `optimizer/<parameter path>/momentum_buffer`); a
/// gradient entry's names are its parameters' paths under `gradients/`; a weight-copy entry's
/// are those of `copied`, the parameters with a copy (trainable convolution and linear weights
/// and biases). The error names the entry's key and shows a few paths.
pub fn check_tensor_locations(entries: &[FaultEntry], tensors: &[DatasetPath], copied: &[DatasetPath]) -> Result<()> {
    for e in entries {
        let paths: Vec<String> = match e.target {
            FaultTarget::Weights => tensors.iter().filter(|t| t.kind() == DatasetKind::Model).map(ToString::to_string).collect(),
            FaultTarget::WeightCopy => copied.iter().map(ToString::to_string).collect(),
            FaultTarget::Optimizer => tensors.iter().filter(|t| t.kind() == DatasetKind::Optimizer).map(ToString::to_string).collect(),
            // Gradients are named as the model's tensors are, under their own root.
            FaultTarget::Gradients | FaultTarget::ReducedGradients => tensors
                .iter()
                .filter(|t| t.kind() == DatasetKind::Model)
                .map(|t| DatasetPath::Gradient(t.param().to_string()).to_string())
                .collect(),
            _ => continue,
        };
        for loc in e.spec.locations.iter().flatten() {
            if !paths.iter().any(|p| resilab_inject::config::location_matches(loc, p)) {
                let some: Vec<&str> = paths.iter().take(4).map(String::as_str).collect();
                return Err(bad(
                    e.index,
                    "locations_to_corrupt",
                    format!("{loc:?} names no tensor a {} fault can hit (they are named like {}, ...)", e.target.name(), some.join(", ")),
                ));
            }
        }
    }
    Ok(())
}

/// Checks that every pipeline-message entry can strike: messages exist only between pipeline
/// stages (`stages` is `None` for other runs), the first stage receives no activation message
/// and the last no gradient message. A fault at a fixed step without `stage` hits stage 0.
pub fn check_messages(entries: &[FaultEntry], stages: Option<usize>) -> Result<()> {
    for e in entries {
        let (first, last) = (0, stages.unwrap_or(1).saturating_sub(1));
        let (never, why) = match e.target {
            FaultTarget::Activations => (first, format!("stage {first}, the first, receives no activation message")),
            FaultTarget::MessageGradients => (last, format!("stage {last}, the last, receives no gradient message")),
            _ => continue,
        };
        let Some(n) = stages else {
            return Err(bad(
                e.index,
                "target",
                format!("{:?} hits a pipeline message, but the run is not a pipeline (parallel.mode = \"pipeline\")", e.target.name()),
            ));
        };
        if n < 2 {
            return Err(bad(e.index, "target", format!("{:?} needs at least 2 pipeline stages", e.target.name())));
        }
        if e.at_step.is_some() && e.worker.unwrap_or(0) == never {
            return Err(bad(e.index, "stage", format!("{why}: choose another stage")));
        }
    }
    Ok(())
}

/// One fault striking one worker at one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FaultEvent {
    /// Event number (position in the schedule), which also names its random stream.
    pub id: usize,
    /// The step during which it strikes (1-based).
    pub step: u64,
    /// Worker or stage hit.
    pub rank: usize,
    /// Index of the `[[fault]]` entry.
    pub entry: usize,
    /// What it hits.
    pub target: FaultTarget,
}

/// The events of a run of `total_steps` steps on `world` workers. Explicit faults strike at
/// their step (worker 0 unless given); random arrivals strike each worker (or the given one)
/// with exponentially distributed gaps of mean `mtbf_steps`, each arrival at the step that
/// contains it, drawn from the worker's own stream of `fault_seed`. Sorted by step, rank, entry.
pub fn schedule(entries: &[FaultEntry], total_steps: u64, world: usize, fault_seed: u64) -> Result<Vec<FaultEvent>> {
    let mut out = Vec::new();
    for e in entries {
        if let Some(w) = e.worker
            && w >= world
        {
            return Err(bad(e.index, "worker", format!("is {w}, but the run has {world} worker(s) or stage(s)")));
        }
        if let Some(step) = e.at_step {
            if step > total_steps {
                return Err(bad(
                    e.index,
                    "at_step",
                    format!("is {step}, beyond the run's {total_steps} step(s): the fault would never strike"),
                ));
            }
            out.push(FaultEvent { id: 0, step, rank: e.worker.unwrap_or(0), entry: e.index, target: e.target });
            continue;
        }
        if let Some(k) = e.count {
            out.extend(counted(e, k, total_steps, world, fault_seed)?);
            continue;
        }
        if let Some(mtbf) = e.system_mtbf_steps {
            let mut rng = ChaCha8Rng::seed_from_u64(stream_seed(fault_seed, &format!("fault.{}.system", e.index)));
            for step in arrivals(&mut rng, mtbf, total_steps) {
                let rank = e.worker.unwrap_or_else(|| rng.random_range(0..world.max(1)));
                out.push(FaultEvent { id: 0, step, rank, entry: e.index, target: e.target });
            }
            continue;
        }
        let Some(mtbf) = e.mtbf_steps else { continue };
        let ranks: Vec<usize> = e.worker.map_or_else(|| (0..world).collect(), |w| vec![w]);
        for rank in ranks {
            let mut rng = ChaCha8Rng::seed_from_u64(stream_seed(fault_seed, &format!("fault.{}.worker.{rank}", e.index)));
            for step in arrivals(&mut rng, mtbf, total_steps) {
                out.push(FaultEvent { id: 0, step, rank, entry: e.index, target: e.target });
            }
        }
    }
    out.sort_by_key(|e| (e.step, e.rank, e.entry));
    for (id, e) in out.iter_mut().enumerate() {
        e.id = id;
    }
    Ok(out)
}

/// `count = k` faults of entry `e`: steps drawn uniformly from `1..=total_steps`, each on its
/// own worker drawn uniformly without replacement (or all on `e.worker`), from the entry's
/// stream of `fault_seed`.
fn counted(e: &FaultEntry, k: u64, total_steps: u64, world: usize, fault_seed: u64) -> Result<Vec<FaultEvent>> {
    let k = usize::try_from(k).unwrap_or(usize::MAX);
    if e.worker.is_none() && k > world {
        return Err(bad(e.index, "count", format!("is {k}, but the run has {world} worker(s) or stage(s) to hit (each at most once)")));
    }
    if total_steps == 0 {
        return Ok(Vec::new());
    }
    let mut rng = ChaCha8Rng::seed_from_u64(stream_seed(fault_seed, &format!("fault.{}.count", e.index)));
    let ranks: Vec<usize> = match e.worker {
        Some(w) => vec![w; k],
        None => rand::seq::index::sample(&mut rng, world, k).into_vec(),
    };
    Ok(ranks
        .into_iter()
        .map(|rank| FaultEvent { id: 0, step: rng.random_range(1..=total_steps), rank, entry: e.index, target: e.target })
        .collect())
}

/// The steps of a Poisson process's arrivals with mean gap `mtbf` steps, up to `total_steps`
/// (each arrival at the step that contains it).
fn arrivals(rng: &mut ChaCha8Rng, mtbf: f64, total_steps: u64) -> Vec<u64> {
    let (mut out, mut t) = (Vec::new(), 0.0f64);
    loop {
        let u: f64 = rng.random();
        t += -(1.0 - u).ln() * mtbf;
        let step = t.ceil().max(1.0) as u64;
        if step > total_steps {
            return out;
        }
        out.push(step);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn errors_name_the_entry_and_key() {
        let err = |t: &str| parse(&[table("target = \"weights\"\nat_step = 1\n"), table(t)]).unwrap_err().to_string();
        assert!(err("at_step = 3\n").contains("fault[1].target: missing"));
        assert!(err("target = \"brain\"\nat_step = 3\n").contains("fault[1].target"));
        assert!(err("target = \"weights\"\n").contains("fault[1].at_step: missing"));
        assert!(err("target = \"weights\"\nat_step = 3\nmtbf_steps = 5\n").contains("not both"));
        assert!(err("target = \"weights\"\nat_step = 3\nfirst_bit = 9\nlast_bit = 2\n").contains("fault[1].first_bit"));
        assert!(err("target = \"weights\"\nat_step = 3\nfirts_bit = 9\n").contains("firts_bit"));
        assert!(err("target = \"crash\"\nat_step = 3\nfirst_bit = 1\n").contains("fault[1].first_bit: a crash"));
        assert!(err("target = \"weights\"\nat_step = 3\nseed = 1\n").contains("fault_seed"));
        assert!(err("target = \"gradients\"\nat_step = 3\nstuck_steps = 2\n").contains("fault[1].stuck_steps"));
        assert!(err("target = \"weights\"\nat_step = 3\nstuck_steps = 0\n").contains("fault[1].stuck_steps"));
    }

    #[test]
    fn injector_keys_pass_through() {
        let e = parse(&[table(
            "target = \"gradients\"\nat_step = 4\nworker = 2\ninjection_tries = 3\nfirst_bit = 1\nlast_bit = 1\nfloat_precision = 32\n",
        )])
        .unwrap();
        assert_eq!(e[0].worker, Some(2));
        assert_eq!(e[0].spec.tries, resilab_inject::Tries::Count(3));
        assert_eq!(e[0].spec.model.mode, resilab_inject::Mode::BitRange { first: Some(1), last: Some(1), burst: 1 });
    }

    #[test]
    fn explicit_faults_strike_once_and_arrivals_follow_the_mean() {
        let e = parse(&[table("target = \"weights\"\nat_step = 5\nworker = 1\n"), table("target = \"crash\"\nmtbf_steps = 50\n")]).unwrap();
        let s = schedule(&e, 10_000, 4, 9).unwrap();
        assert_eq!(s.iter().filter(|x| x.entry == 0).map(|x| (x.step, x.rank)).collect::<Vec<_>>(), [(5, 1)]);
        let arrivals = s.iter().filter(|x| x.entry == 1).count() as f64;
        // 4 workers x 10,000 steps / 50: 800 expected, sd about 28.
        assert!((arrivals - 800.0).abs() < 4.0 * 800f64.sqrt(), "{arrivals}");
        assert_eq!(s, schedule(&e, 10_000, 4, 9).unwrap());
        assert_ne!(s, schedule(&e, 10_000, 4, 10).unwrap());
        assert!(schedule(&e, 10_000, 1, 9).unwrap_err().to_string().contains("fault[0].worker"));
        assert!(s.windows(2).all(|w| (w[0].step, w[0].rank) <= (w[1].step, w[1].rank)));
    }

    #[test]
    fn counted_faults_hit_distinct_workers_at_uniform_steps() {
        let e = parse(&[table("target = \"crash\"\npermanent = true\ncount = 4\n")]).unwrap();
        assert!(e[0].permanent && e[0].count == Some(4));
        let mut steps = Vec::new();
        for seed in 0..200 {
            let s = schedule(&e, 64, 16, seed).unwrap();
            assert_eq!(s.len(), 4);
            let ranks: std::collections::BTreeSet<usize> = s.iter().map(|x| x.rank).collect();
            assert_eq!(ranks.len(), 4, "no worker twice: {s:?}");
            assert!(s.iter().all(|x| (1..=64).contains(&x.step) && x.rank < 16));
            assert_eq!(s, schedule(&e, 64, 16, seed).unwrap());
            steps.extend(s.iter().map(|x| x.step as f64));
        }
        // 800 uniform draws over 1..=64: mean 32.5, sd of the mean about 0.65.
        let mean = steps.iter().sum::<f64>() / steps.len() as f64;
        assert!((mean - 32.5).abs() < 3.0, "{mean}");
        assert!(schedule(&e, 64, 3, 1).unwrap_err().to_string().contains("fault[0].count"));
        let err = |t: &str| parse(&[table(t)]).unwrap_err().to_string();
        assert!(err("target = \"crash\"\ncount = 0\n").contains("fault[0].count"));
        assert!(err("target = \"crash\"\ncount = 2\nworker = 1\npermanent = true\n").contains("cannot be lost again"));
        assert!(err("target = \"weights\"\nat_step = 2\npermanent = true\n").contains("fault[0].permanent"));
        assert!(err("target = \"crash\"\nat_step = 2\npermanent = 1\n").contains("true or false"));
        assert!(err("target = \"checkpoint\"\ncount = 2\n").contains("explicit"));
    }

    #[test]
    fn crashes_take_a_time_in_their_step() {
        let one = |t: &str| parse(&[table(t)]).map(|e| e[0].crash_at);
        assert_eq!(one("target = \"crash\"\nat_step = 3\n").unwrap(), None);
        assert_eq!(one("target = \"crash\"\nat_step = 3\nat_fraction = 0.25\n").unwrap(), Some(CrashAt::Fraction(0.25)));
        assert_eq!(
            one("target = \"crash\"\nat_step = 3\nphase = \"update\"\nbucket = 2\n").unwrap(),
            Some(CrashAt::Phase(Phase::Update(2)))
        );
        assert_eq!(one("target = \"crash\"\nat_step = 3\nphase = \"backward\"\n").unwrap(), Some(CrashAt::Phase(Phase::Backward)));
        let err = |t: &str| one(t).unwrap_err().to_string();
        assert!(err("target = \"crash\"\nat_step = 3\nat_fraction = 1.0\n").contains("fault[0].at_fraction"));
        assert!(err("target = \"crash\"\nat_step = 3\nat_fraction = 0.5\nphase = \"forward\"\n").contains("fault[0].phase: give"));
        assert!(err("target = \"crash\"\nat_step = 3\nphase = \"lunch\"\n").contains("fault[0].phase"));
        assert!(err("target = \"crash\"\nat_step = 3\nphase = \"forward\"\nbucket = 1\n").contains("fault[0].bucket"));
        assert!(err("target = \"weights\"\nat_step = 3\nat_fraction = 0.5\n").contains("fault[0].at_fraction"));
    }

    #[test]
    fn bit_fields_are_checked_against_the_tensors_width() {
        let err = |t: &str| parse(&[table(t)]).unwrap_err().to_string();
        let e = err("target = \"weights\"\nat_step = 3\nburst = 40\n");
        assert!(e.starts_with("fault[0].burst: burst 40 is larger than the 32 candidate bit(s) of the range at 32 bits"), "{e}");
        let e = err("target = \"gradients\"\nat_step = 3\nfirst_bit = 40\nlast_bit = 50\n");
        assert!(e.starts_with("fault[0].last_bit: last_bit 50 is outside a 32-bit word"), "{e}");
        // The 64-bit view of the same tensors has room for them.
        assert!(parse(&[table("target = \"weights\"\nat_step = 3\nfirst_bit = 40\nlast_bit = 50\nfloat_precision = 64\n")]).is_ok());
    }

    #[test]
    fn half_values_take_bits_of_a_16_bit_word_in_a_half_run() {
        let one = |t: &str| parse(&[table(t)]).unwrap();
        let check = |t: &str, p: Precision| check_precision(&one(t), p).map_err(|e| e.to_string());
        // The float32 word of an fp32 run's gradients has room for bit 20; a bf16 run's has not.
        let wide = "target = \"gradients\"\nat_step = 3\nfirst_bit = 9\nlast_bit = 20\n";
        assert!(check(wide, Precision::Fp32).is_ok());
        let e = check(wide, Precision::Bf16).unwrap_err();
        assert!(e.starts_with("fault[0].last_bit: last_bit 20 is outside a 16-bit word") && e.contains("half values"), "{e}");
        let e = check("target = \"neurons\"\nat_step = 3\nbit_mask = \"11111111111111111\"\n", Precision::Fp16).unwrap_err();
        assert!(e.starts_with("fault[0].bit_mask"), "{e}");
        let e = check("target = \"activations\"\nat_step = 3\nfloat_precision = 32\n", Precision::Fp16).unwrap_err();
        assert!(e.starts_with("fault[0].float_precision: is 32"), "{e}");
        assert!(check("target = \"message_gradients\"\nat_step = 3\nfloat_precision = 16\nlast_bit = 15\n", Precision::Bf16).is_ok());
        // Master weights and optimizer state stay float32.
        assert!(check("target = \"weights\"\nat_step = 3\nfirst_bit = 20\nlast_bit = 31\n", Precision::Bf16).is_ok());
        assert!(check("target = \"optimizer\"\nat_step = 3\nfloat_precision = 32\n", Precision::Fp16).is_ok());
    }

    #[test]
    fn the_weight_copy_is_16_bit_in_half_runs_and_32_bit_in_float32_runs() {
        let copy = "target = \"weight_copy\"\nat_step = 3\nfirst_bit = 1\nlast_bit = 8\n";
        let e = parse(&[table(copy)]).unwrap();
        assert_eq!(e[0].target, FaultTarget::WeightCopy);
        assert!(Precision::ALL.iter().all(|&p| check_precision(&e, p).is_ok()));
        let wide = parse(&[table("target = \"weight_copy\"\nat_step = 3\nlast_bit = 20\n")]).unwrap();
        assert!(check_precision(&wide, Precision::Fp32).is_ok());
        let err = check_precision(&wide, Precision::Bf16).unwrap_err().to_string();
        assert!(err.starts_with("fault[0].last_bit: last_bit 20 is outside a 16-bit word"), "{err}");
        let f64_view = parse(&[table("target = \"weight_copy\"\nat_step = 3\nfloat_precision = 64\n")]).unwrap();
        let err = check_precision(&f64_view, Precision::Fp16).unwrap_err().to_string();
        assert!(err.starts_with("fault[0].float_precision"), "{err}");
        let err = parse(&[table("target = \"weight_copy\"\nat_step = 3\nstuck_steps = 2\n")]).unwrap_err().to_string();
        assert!(err.starts_with("fault[0].stuck_steps"), "{err}");
    }

    #[test]
    fn system_arrivals_follow_the_system_mean_over_uniform_workers() {
        let e = parse(&[table("target = \"crash\"\nsystem_mtbf_steps = 20\n")]).unwrap();
        let s = schedule(&e, 20_000, 4, 3).unwrap();
        // 20,000 / 20 = 1,000 expected over the whole system, sd about 32.
        assert!((s.len() as f64 - 1000.0).abs() < 4.0 * 1000f64.sqrt(), "{}", s.len());
        for r in 0..4 {
            let n = s.iter().filter(|x| x.rank == r).count() as f64;
            assert!((n - 250.0).abs() < 5.0 * 250f64.sqrt(), "rank {r}: {n}");
        }
        let err = parse(&[table("target = \"crash\"\nsystem_mtbf_steps = 20\nmtbf_steps = 5\n")]).unwrap_err().to_string();
        assert!(err.contains("fault[0].system_mtbf_steps"), "{err}");
    }

    #[test]
    fn message_faults_must_be_able_to_strike() {
        let one = |t: &str| parse(&[table(t)]).unwrap();
        let act = |stage: usize| one(&format!("target = \"activations\"\nat_step = 3\nstage = {stage}\n"));
        let grad = |stage: usize| one(&format!("target = \"message_gradients\"\nat_step = 3\nstage = {stage}\n"));
        assert!(check_messages(&act(1), Some(4)).is_ok());
        assert!(check_messages(&grad(2), Some(4)).is_ok());
        let e = check_messages(&act(0), Some(4)).unwrap_err().to_string();
        assert!(e.contains("fault[0].stage") && e.contains("first"), "{e}");
        let e = check_messages(&grad(3), Some(4)).unwrap_err().to_string();
        assert!(e.contains("fault[0].stage") && e.contains("last"), "{e}");
        // No stage given: a fixed-step fault hits stage 0.
        assert!(check_messages(&one("target = \"activations\"\nat_step = 3\n"), Some(4)).is_err());
        let e = check_messages(&act(1), None).unwrap_err().to_string();
        assert!(e.contains("fault[0].target") && e.contains("pipeline"), "{e}");
        // Other targets are not concerned.
        assert!(check_messages(&one("target = \"weights\"\nat_step = 3\n"), None).is_ok());
    }
}
