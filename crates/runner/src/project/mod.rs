//! Each recovery strategy's expected overhead at a scale too large to simulate, from the
//! simulation's own cost model: the step's overlapped timeline ([`StepModel`]) on N workers,
//! the checkpoint write at the storage bandwidth, rollback's copy at the memory bandwidth, a
//! respawned worker's state at the network bandwidth, and the `[recovery]` constants: the
//! failure detector's timeout `D` (`detect_timeout_s`), a communicator rebuild `B`
//! (`rebuild_s`) and a relaunch `R` (`relaunch_s`).
//!
//! Per unit of useful work, to first order (failures counted per step of progress, as the
//! simulation schedules them; for a per-failure cost `f` much smaller than the system MTBF `M`
//! this is the same as failures per second of wall time):
//!
//! | strategy | every step | per failure `f` |
//! |---|---|---|
//! | checkpoint-restart | checkpoint `C` every `k` steps | the detection `D`, `k T / 2` of work lost (completed steps since the checkpoint and half the failed step), relaunch `R`, read `C` |
//! | rollback | the copy `S` | `D`, half a step abandoned, the restore `S`, the redo's difference in length (over N-1 workers), two rebuilds `2B` (without the lost rank, then with the respawned one), the transfer `X` |
//! | lossy forward | — | `D`, the delay of re-reducing the bucket in flight and the later ones over N-1 workers (averaged over the crash time, never below zero), `2B`, the transfer `X` |
//! | none | — | the run fails: expected steps to the first failure `M / T` |
//!
//! Checkpoint writes (`C / kT`) are charged to every strategy that runs with checkpoints, as the
//! simulation charges them; the overhead is `steady + f / M`.
//!
//! The ring over N-1 workers is shorter than over N (`2 (N-2) / (N-1)` of a bucket against
//! `2 (N-1) / N`, and two latency hops fewer), so a crash before the last buckets were reduced
//! can end the step earlier than the fault-free one: a gain of microseconds that no job sees,
//! since its survivors first wait `D` for the failure detector. The projection counts no gain
//! from a crash: at each crash time the delay is at least zero.
//!
//! [`turns`] reads the verdict against each constant: where, holding the others at their
//! configured values, the cheapest of checkpoint-restart, rollback and lossy forward changes.

mod job;
mod spread;

pub use job::{Request, profile_sets, report};

use resilab_models::InputShape;
use resilab_recovery::Strategy;
use resilab_train::StepModel;
use serde::Serialize;
use spread::PerFailure;

use crate::{Error, Result, RunConfig};

/// Crash times averaged over for lossy forward's delay (midpoints of equal slices of a step).
const CRASH_POINTS: usize = 256;

/// The strategies that go on after a crash, compared for the cheapest (`none` fails).
const RECOVERING: [Strategy; 3] = [Strategy::CheckpointRestart, Strategy::Rollback, Strategy::LossyForward];

/// How often the projection checkpoints.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Interval {
    /// Every this many steps.
    Steps(u64),
    /// Daly's optimum for the checkpoint cost and system MTBF, times this factor, in whole
    /// steps (at least 1).
    Daly(f64),
}

/// One strategy's projection for one worker count.
#[derive(Clone, Debug, Serialize)]
pub struct Projection {
    /// Data-parallel workers.
    pub workers: usize,
    /// The nodes they run on (workers / GPUs per node, rounded up).
    pub nodes: usize,
    /// The strategy.
    pub strategy: Strategy,
    /// Seconds of a fault-free step.
    pub step_s: f64,
    /// The system's mean time between failures, seconds (node MTBF / nodes).
    pub system_mtbf_s: f64,
    /// Seconds to write one checkpoint of every worker's state.
    pub checkpoint_s: f64,
    /// Steps between checkpoints.
    pub interval_steps: u64,
    /// Overhead paid without failures, as a share of the fault-free time.
    pub steady_frac: f64,
    /// Seconds lost per failure, on average.
    pub per_failure_s: f64,
    /// Expected overhead against the fault-free run (`None` for `none`, which fails).
    pub overhead_frac: Option<f64>,
    /// 2.5% quantile of the overhead of jobs of the requested length (see `spread`).
    pub overhead_lo_frac: Option<f64>,
    /// 97.5% quantile of the same.
    pub overhead_hi_frac: Option<f64>,
    /// Expected failures in a job of the requested length.
    pub failures_per_job: f64,
    /// Expected steps before the first failure (what `none` gets done).
    pub to_failure_steps: f64,
}

/// What the job is beyond its configuration: how often it fails, on how many GPUs per node,
/// its step (when not the cost model's), its length, and whether the relaunch figure already
/// covers the checkpoint read and the recomputation (a cost profile says).
#[derive(Clone, Copy, Debug)]
pub struct Job {
    /// One node's mean time between failures, seconds.
    pub node_mtbf_s: Option<f64>,
    /// The whole job's mean time between failures in steps (wins over the nodes').
    pub system_mtbf_steps: Option<f64>,
    /// GPUs (workers) per node: a node's failure takes all of them.
    pub gpus_per_node: usize,
    /// The job's fault-free step in seconds, instead of the cost model's.
    pub step_s: Option<f64>,
    /// Seconds of useful work in the job, for the intervals.
    pub length_s: f64,
    /// Checkpoint-restart pays `D + R` alone (see `resilab_recovery::profile`).
    pub relaunch_covers_redo: bool,
}

impl Job {
    /// A job failing as given, one GPU per node, the cost model's step, 54 days long.
    pub fn failing(node_mtbf_s: Option<f64>, system_mtbf_steps: Option<f64>) -> Self {
        Self { node_mtbf_s, system_mtbf_steps, gpus_per_node: 1, step_s: None, length_s: 54.0 * 86_400.0, relaunch_covers_redo: false }
    }

    /// The nodes `workers` workers occupy.
    pub fn nodes(&self, workers: usize) -> usize {
        workers.div_ceil(self.gpus_per_node.max(1))
    }
}

/// The projections of the four strategies for `cfg`'s model on `workers` workers, each keeping
/// `cfg`'s per-worker batch, for `job` (its failures, nodes, step and length), each with the
/// interval of a job of that length. Needs `parallel.compute.gflops`.
pub fn project(cfg: &RunConfig, workers: usize, job: &Job, interval: Interval) -> Result<Vec<Projection>> {
    let facts = StepFacts::new(cfg, &Built::new(cfg)?, workers, job.step_s)?;
    facts.project(cfg, job, interval, true)
}

/// The model of a configuration, built once: what every worker count's step is modelled from.
struct Built {
    net: resilab_models::Net,
    input: InputShape,
}

impl Built {
    fn new(cfg: &RunConfig) -> Result<Self> {
        let (channels, size, classes) = cfg.data.shape();
        let input = InputShape { channels, size };
        Ok(Self { net: cfg.model.build(input, classes, &burn::prelude::Device::flex())?, input })
    }

    /// The cost model's fault-free step on `workers` workers under `cfg`'s `[parallel]`.
    fn step_model(&self, cfg: &RunConfig, workers: usize) -> Result<StepModel> {
        if workers == 0 {
            return Err(Error::Config("--workers must be at least 1".into()));
        }
        let shard = (cfg.train.batch_size / cfg.parallel.workers.max(1)).max(1);
        StepModel::new(&self.net, self.input, &cfg.parallel, &cfg.optimizer, shard, workers)
            .ok_or_else(|| Error::Config("projecting needs modelled compute: set parallel.compute.gflops".into()))
    }
}

/// What the projection takes from the cost model's step on N workers.
#[derive(Clone, Debug)]
struct StepFacts {
    workers: usize,
    /// The fault-free step.
    step_s: f64,
    /// The step over one worker fewer (rollback's redo).
    survivors_step_s: f64,
    /// Lossy forward's delay of the crash step at each of [`CRASH_POINTS`] crash times (each at
    /// least 0).
    lossy_delays_s: Vec<f64>,
    /// One worker's model and optimizer state.
    state_bytes: u64,
}

impl StepFacts {
    /// The facts of the cost model's step, its times scaled to `step_s` when given (the
    /// model's timeline then gives only the shape: how the step divides into compute and
    /// communication).
    fn new(cfg: &RunConfig, built: &Built, workers: usize, step_s: Option<f64>) -> Result<Self> {
        let model = built.step_model(cfg, workers)?;
        let modelled = model.timeline.end_s;
        let scale = step_s.map_or(1.0, |s| s / modelled);
        // A crash never makes a step shorter (see the module's documentation).
        let delay = |i: usize| (model.end_after_crash((i as f64 + 0.5) / CRASH_POINTS as f64 * modelled) - modelled).max(0.0) * scale;
        Ok(Self {
            workers,
            step_s: modelled * scale,
            survivors_step_s: model.survivors_step_s() * scale,
            lossy_delays_s: (0..CRASH_POINTS).map(delay).collect(),
            state_bytes: model.state_bytes,
        })
    }

    /// The four strategies' projections under `cfg`'s constants for `job`; their intervals
    /// when `spread` (the turning points' search leaves them out).
    fn project(&self, cfg: &RunConfig, job: &Job, interval: Interval, spread: bool) -> Result<Vec<Projection>> {
        let (workers, step_s) = (self.workers, self.step_s);
        let system_mtbf_s = match (job.system_mtbf_steps, job.node_mtbf_s) {
            (Some(m), _) => m * step_s,
            (None, Some(m)) => m / job.nodes(workers) as f64,
            (None, None) => return Err(Error::Config("give a node MTBF or a system MTBF in steps".into())),
        };
        let checkpoint_s = cfg.parallel.compute.storage_s(workers as u64 * self.state_bytes);
        let interval_steps = match interval {
            Interval::Steps(k) => k.max(1),
            Interval::Daly(f) => ((f * resilab_checkpoint::advise::daly(checkpoint_s, system_mtbf_s) / step_s).round() as u64).max(1),
        };
        let ckpt = checkpoint_s / (interval_steps as f64 * step_s);
        let copy = cfg.parallel.compute.copy_s(self.state_bytes);
        let rows = [
            (Strategy::None, 0.0),
            (Strategy::CheckpointRestart, ckpt),
            (Strategy::Rollback, ckpt + copy / step_s),
            (Strategy::LossyForward, ckpt),
        ];
        Ok(rows
            .into_iter()
            .map(|(strategy, steady)| {
                let cost = self.per_failure(cfg, job, strategy, interval_steps, checkpoint_s);
                let goes_on = strategy != Strategy::None;
                let range = (goes_on && spread).then(|| spread::interval(steady, &cost, system_mtbf_s, job.length_s));
                Projection {
                    workers,
                    nodes: job.nodes(workers),
                    strategy,
                    step_s,
                    system_mtbf_s,
                    checkpoint_s,
                    interval_steps,
                    steady_frac: steady,
                    per_failure_s: cost.mean(),
                    overhead_frac: goes_on.then(|| steady + cost.mean() / system_mtbf_s),
                    overhead_lo_frac: range.map(|r| r.0),
                    overhead_hi_frac: range.map(|r| r.1),
                    failures_per_job: job.length_s / system_mtbf_s,
                    to_failure_steps: system_mtbf_s / step_s,
                }
            })
            .collect())
    }

    /// What one failure costs `strategy`: see the module's table.
    fn per_failure(&self, cfg: &RunConfig, job: &Job, strategy: Strategy, interval_steps: u64, checkpoint_s: f64) -> PerFailure {
        let (r, step_s) = (&cfg.recovery, self.step_s);
        let transfer = cfg.parallel.network.send_s(self.state_bytes);
        // Rollback and lossy forward go on in the same job: a rebuild without the lost rank,
        // and another when its replacement joins.
        let (detect, rebuilds) = (r.detect_timeout_s, 2.0 * r.rebuild_s);
        match strategy {
            Strategy::None => PerFailure::default(),
            // A relaunch figure that covers the read and the recomputation is the whole cost.
            Strategy::CheckpointRestart if job.relaunch_covers_redo => PerFailure { fixed: detect + r.relaunch_s, ..PerFailure::default() },
            Strategy::CheckpointRestart => {
                PerFailure { fixed: detect + r.relaunch_s + checkpoint_s, uniform: interval_steps as f64 * step_s, at_times: Vec::new() }
            }
            // The redo is the step itself (over one worker fewer): what is lost is the
            // abandoned part-step, the restore and the redo's difference in length.
            Strategy::Rollback => PerFailure {
                fixed: detect + cfg.parallel.compute.copy_s(self.state_bytes) + (self.survivors_step_s - step_s) + rebuilds + transfer,
                uniform: step_s,
                at_times: Vec::new(),
            },
            Strategy::LossyForward => {
                PerFailure { fixed: detect + rebuilds + transfer, uniform: 0.0, at_times: self.lossy_delays_s.clone() }
            }
        }
    }
}

/// A constant the projection's verdict is read against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Knob {
    /// `recovery.detect_timeout_s`.
    DetectTimeout,
    /// `recovery.rebuild_s`.
    Rebuild,
    /// `recovery.relaunch_s`.
    Relaunch,
    /// `parallel.compute.storage_gbps`: checkpoint writes and reads (and so Daly's interval).
    StorageGbps,
    /// `parallel.compute.memory_gbps`: rollback's copy, and the modelled updates of every step.
    MemoryGbps,
}

impl Knob {
    /// Every knob, in the order `resilab project` prints them.
    pub const ALL: [Knob; 5] = [Knob::DetectTimeout, Knob::Rebuild, Knob::Relaunch, Knob::StorageGbps, Knob::MemoryGbps];

    /// The configuration key.
    pub fn key(self) -> &'static str {
        match self {
            Knob::DetectTimeout => "recovery.detect_timeout_s",
            Knob::Rebuild => "recovery.rebuild_s",
            Knob::Relaunch => "recovery.relaunch_s",
            Knob::StorageGbps => "parallel.compute.storage_gbps",
            Knob::MemoryGbps => "parallel.compute.memory_gbps",
        }
    }

    /// The range searched: seconds from 0 to 1e6 (11.6 days), bandwidths from 1e-3 to 1e5 GB/s.
    pub fn range(self) -> (f64, f64) {
        match self {
            Knob::DetectTimeout | Knob::Rebuild | Knob::Relaunch => (0.0, 1e6),
            Knob::StorageGbps | Knob::MemoryGbps => (1e-3, 1e5),
        }
    }

    /// Its value in `cfg`.
    pub fn get(self, cfg: &RunConfig) -> f64 {
        match self {
            Knob::DetectTimeout => cfg.recovery.detect_timeout_s,
            Knob::Rebuild => cfg.recovery.rebuild_s,
            Knob::Relaunch => cfg.recovery.relaunch_s,
            Knob::StorageGbps => cfg.parallel.compute.storage_gbps,
            Knob::MemoryGbps => cfg.parallel.compute.memory_gbps,
        }
    }

    fn set(self, cfg: &mut RunConfig, v: f64) {
        match self {
            Knob::DetectTimeout => cfg.recovery.detect_timeout_s = v,
            Knob::Rebuild => cfg.recovery.rebuild_s = v,
            Knob::Relaunch => cfg.recovery.relaunch_s = v,
            Knob::StorageGbps => cfg.parallel.compute.storage_gbps = v,
            Knob::MemoryGbps => cfg.parallel.compute.memory_gbps = v,
        }
    }
}

/// A stretch of a knob's range over which one strategy is the cheapest.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stretch {
    /// Its lower end.
    pub from: f64,
    /// Its upper end (where the next stretch starts).
    pub to: f64,
    /// The cheapest of checkpoint-restart, rollback and lossy forward over it.
    pub cheapest: Strategy,
}

/// Where the cheapest strategy changes as one constant moves over its range, every other one
/// held at its configured value.
#[derive(Clone, Debug, Serialize)]
pub struct Turns {
    /// Data-parallel workers.
    pub workers: usize,
    /// The constant's configuration key.
    pub key: &'static str,
    /// Its configured value.
    pub configured: f64,
    /// The cheapest strategy at the configured value.
    pub cheapest: Strategy,
    /// The range as stretches of one cheapest strategy each, in order: one stretch, no change.
    pub stretches: Vec<Stretch>,
}

/// Grid points per decade of a knob's range, scanned before the changes are bisected.
const PER_DECADE: f64 = 4.0;

/// [`Turns`] of every [`Knob`] for `cfg` on `workers` workers, failures as in [`project`].
/// The cheapest strategy is read on a grid of 4 points per decade of each range (and 0), and
/// each change between neighbouring points is bisected on the projection's own formula to a
/// relative 1e-9; two changes between the same neighbours would be missed.
pub fn turns(cfg: &RunConfig, workers: usize, job: &Job, interval: Interval) -> Result<Vec<Turns>> {
    let built = Built::new(cfg)?;
    let facts = StepFacts::new(cfg, &built, workers, job.step_s)?;
    let mut out = Vec::new();
    for knob in Knob::ALL {
        let cheapest_at = |v: f64| -> Result<Strategy> {
            let mut c = cfg.clone();
            knob.set(&mut c, v);
            // Only the memory bandwidth moves the step's timeline (the modelled updates).
            let rows = if knob == Knob::MemoryGbps {
                StepFacts::new(&c, &built, workers, job.step_s)?.project(&c, job, interval, false)?
            } else {
                facts.project(&c, job, interval, false)?
            };
            cheapest(&rows)
        };
        let configured = knob.get(cfg);
        let stretches = stretches(&cheapest_at, knob.range())?;
        out.push(Turns { workers, key: knob.key(), configured, cheapest: cheapest_at(configured)?, stretches });
    }
    Ok(out)
}

/// The recovering strategy of least expected overhead (the first of equals).
fn cheapest(rows: &[Projection]) -> Result<Strategy> {
    RECOVERING
        .iter()
        .filter_map(|s| rows.iter().find(|p| p.strategy == *s).and_then(|p| p.overhead_frac).map(|o| (*s, o)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(s, _)| s)
        .ok_or_else(|| Error::Config("no recovering strategy was projected".into()))
}

/// `(lo, hi)` as stretches of one value of `at` each (see [`turns`]).
fn stretches(at: &dyn Fn(f64) -> Result<Strategy>, (lo, hi): (f64, f64)) -> Result<Vec<Stretch>> {
    let first = if lo > 0.0 { lo } else { hi * 1e-12 };
    let n = ((hi / first).log10() * PER_DECADE).ceil().max(1.0) as usize;
    let mut grid: Vec<f64> = (0..=n).map(|i| first * (hi / first).powf(i as f64 / n as f64)).collect();
    if lo == 0.0 {
        grid.insert(0, 0.0);
    }
    let (mut out, mut from) = (Vec::new(), lo);
    let (mut x0, mut s0) = (grid[0], at(grid[0])?);
    for &x in &grid[1..] {
        let s = at(x)?;
        if s != s0 {
            let edge = bisect(at, x0, x, s0)?;
            out.push(Stretch { from, to: edge, cheapest: s0 });
            from = edge;
        }
        (x0, s0) = (x, s);
    }
    out.push(Stretch { from, to: hi, cheapest: s0 });
    Ok(out)
}

/// Where in `(a, b]` the value of `at` stops being `left` (`at(a) == left != at(b)`), to a
/// relative 1e-9.
fn bisect(at: &dyn Fn(f64) -> Result<Strategy>, mut a: f64, mut b: f64, left: Strategy) -> Result<f64> {
    for _ in 0..200 {
        if b - a <= 1e-9 * b {
            break;
        }
        let m = 0.5 * (a + b);
        if at(m)? == left {
            a = m;
        } else {
            b = m;
        }
    }
    Ok(0.5 * (a + b))
}

impl Turns {
    /// The turns in words: what stays cheapest around the configured value, and what takes
    /// over beyond the nearest turn on either side.
    pub fn text(&self) -> String {
        let name = self.key.rsplit('.').next().unwrap_or(self.key);
        let head = format!("{} = {}: {}", self.key, num(self.configured), strategy_name(self.cheapest));
        let (lo, hi) = self.stretches.first().zip(self.stretches.last()).map_or((0.0, 0.0), |(a, b)| (a.from, b.to));
        if self.stretches.len() < 2 {
            return format!("{head} cheapest; no change for {name} in [{}, {}]", num(lo), num(hi));
        }
        // The stretch of the configured value (the nearest end when it lies outside the range).
        let i = self.stretches.iter().position(|s| self.configured <= s.to).unwrap_or(self.stretches.len() - 1);
        let mut unless = Vec::new();
        if let Some(below) = i.checked_sub(1).and_then(|j| self.stretches.get(j)) {
            unless.push(format!("{name} < {} (then {})", num(below.to), strategy_name(below.cheapest)));
        }
        if let Some(above) = self.stretches.get(i + 1) {
            unless.push(format!("{name} > {} (then {})", num(above.from), strategy_name(above.cheapest)));
        }
        let mut text = format!("{head} stays cheapest unless {}", unless.join(" or "));
        // Turns beyond the nearest ones: the whole range.
        if self.stretches.len() > 1 + unless.len() {
            let all: Vec<String> = self.stretches.iter().map(|s| format!("{} from {}", strategy_name(s.cheapest), num(s.from))).collect();
            text.push_str(&format!("; over [{}, {}]: {}", num(lo), num(hi), all.join(", ")));
        }
        text
    }
}

/// The strategy's configuration spelling.
fn strategy_name(s: Strategy) -> String {
    serde_json::to_value(s).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// A number in four significant digits, trailing zeros dropped: plain between 1e-3 and 1e5,
/// else in scientific notation.
fn num(v: f64) -> String {
    let trim = |t: &str| if t.contains('.') { t.trim_end_matches('0').trim_end_matches('.').to_string() } else { t.to_string() };
    match v.abs() {
        0.0 => "0".to_string(),
        a if (1e-3..1e5).contains(&a) => {
            let digits = (3 - a.log10().floor() as i32).max(0) as usize;
            trim(&format!("{v:.digits$}"))
        }
        _ => {
            let t = format!("{v:.3e}");
            let (mantissa, exponent) = t.split_once('e').unwrap_or((&t, "0"));
            format!("{}e{exponent}", trim(mantissa))
        }
    }
}

/// `cfg` with `checkpoint.daly_factor` resolved into `checkpoint.every_steps`: that multiple
/// of Daly's interval for the run's modelled step, its checkpoint cost and the system MTBF of
/// its random-arrival faults, in whole steps (at least 1). Unchanged without `daly_factor`.
pub fn resolve_daly(cfg: &RunConfig) -> Result<RunConfig> {
    let Some(factor) = cfg.checkpoint.daly_factor else { return Ok(cfg.clone()) };
    let workers = cfg.parallel.workers.max(1);
    // Faults per step of the whole system.
    let rate: f64 = cfg
        .faults
        .entries()
        .iter()
        .map(|e| match (e.system_mtbf_steps, e.mtbf_steps) {
            (Some(m), _) => 1.0 / m,
            (None, Some(m)) => (if e.worker.is_some() { 1.0 } else { workers as f64 }) / m,
            (None, None) => 0.0,
        })
        .sum();
    if rate <= 0.0 {
        return Err(Error::Config(
            "checkpoint.daly_factor needs random-arrival faults (mtbf_steps or system_mtbf_steps) to know the MTBF".into(),
        ));
    }
    let model =
        Built::new(cfg).and_then(|b| b.step_model(cfg, workers)).map_err(|e| Error::Config(format!("checkpoint.daly_factor: {e}")))?;
    let step_s = model.timeline.end_s;
    let checkpoint_s = cfg.parallel.compute.storage_s(workers as u64 * model.state_bytes);
    let daly = resilab_checkpoint::advise::daly(checkpoint_s, step_s / rate);
    let mut out = cfg.clone();
    out.checkpoint.every_steps = Some(((factor * daly / step_s).round() as u64).max(1));
    // The resolved configuration (config.resolved.toml) names the interval itself.
    out.checkpoint.daly_factor = None;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> RunConfig {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
        RunConfig::load(&path, &[]).unwrap_or_else(|e| panic!("{e}"))
    }

    const BASE: &str =
        "[model]\narch = \"resnet\"\ndepth = 8\n[parallel]\nworkers = 4\ncompute = { gflops = 50.0 }\n[recovery]\nrelaunch_s = 30.0\n";

    /// The width-0.25 ResNet-8 of tests/project.rs on 16x16 images, 8 images per worker, 4 KiB
    /// buckets at 20 GFLOP/s: a step of 0.56 ms at 4 workers, where lossy forward's crash
    /// step used to come out shorter than the fault-free one.
    const TINY: &str = "[data]\nsource = \"synthetic\"\ntrain_size = 128\ntest_size = 64\nimage_size = 16\n\
        [model]\narch = \"resnet\"\ndepth = 8\nwidth = 0.25\n[train]\nsteps = 50\nbatch_size = 32\n\
        [optimizer]\nkind = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n\
        [parallel]\nworkers = 4\nbucket_mb = 0.004\ncompute = { gflops = 20.0 }\n";

    fn row(p: &[Projection], s: Strategy) -> &Projection {
        p.iter().find(|x| x.strategy == s).unwrap_or_else(|| panic!("no {s:?}"))
    }

    #[test]
    fn a_crash_never_makes_lossy_forward_gain_time() {
        let c = cfg(&format!("{TINY}[recovery]\ndetect_timeout_s = 0.0\nrebuild_s = 0.0\n"));
        // The cause: re-reduced over 3 workers, a bucket's ring is shorter than over 4, so a
        // crash before the last buckets ends the step early.
        let built = Built::new(&c).unwrap_or_else(|e| panic!("{e}"));
        let model = built.step_model(&c, 4).unwrap_or_else(|e| panic!("{e}"));
        let t = model.timeline.end_s;
        let raw = (0..CRASH_POINTS).map(|i| model.end_after_crash((i as f64 + 0.5) / CRASH_POINTS as f64 * t) - t).sum::<f64>()
            / CRASH_POINTS as f64;
        let transfer = c.parallel.network.send_s(model.state_bytes);
        assert!(raw + transfer < 0.0, "the check can tell: the uncounted gain {raw} outweighs the transfer {transfer}");
        for workers in [2, 4, 8, 16] {
            let p = project(&c, workers, &Job::failing(None, Some(10.0)), Interval::Steps(5)).unwrap_or_else(|e| panic!("{e}"));
            for s in RECOVERING {
                assert!(row(&p, s).per_failure_s >= 0.0, "{workers} workers, {s:?}: {}", row(&p, s).per_failure_s);
            }
        }
        // With the published constants the detection and two rebuilds dominate.
        let d = project(&cfg(TINY), 4, &Job::failing(None, Some(10.0)), Interval::Steps(5)).unwrap_or_else(|e| panic!("{e}"));
        let lossy = row(&d, Strategy::LossyForward).per_failure_s;
        assert!((20.0..20.001).contains(&lossy), "{lossy}");
    }

    #[test]
    fn turning_points_fall_where_the_formula_says() {
        // Overheads are linear in the relaunch (checkpoint-restart only) and the rebuild
        // (rollback and lossy forward, twice): each turn solves one equation. Lossy forward
        // against checkpoint-restart, whose steady costs are the same checkpoints:
        // R* = delay + 2B + X - kT/2 - C, and B* = (kT/2 + R + C - delay - X) / 2.
        let c =
            cfg(&format!("{TINY}[recovery]\ndetect_timeout_s = 7.0\nrebuild_s = 2.0\nrelaunch_s = 1.0\nrelaunch_below_rebuild = true\n"));
        let (mtbf, interval) = (Some(1e5), Interval::Steps(40));
        let p = project(&c, 8, &Job::failing(None, mtbf), interval).unwrap_or_else(|e| panic!("{e}"));
        let (cr, lf) = (row(&p, Strategy::CheckpointRestart), row(&p, Strategy::LossyForward));
        assert_eq!(cr.steady_frac, lf.steady_frac);
        let relaunch = lf.per_failure_s - (cr.per_failure_s - 1.0);
        let rebuild = (cr.per_failure_s - (lf.per_failure_s - 4.0)) / 2.0;
        assert!(relaunch > 1.0 && rebuild > 0.0, "{relaunch} {rebuild}");
        let t = turns(&c, 8, &Job::failing(None, mtbf), interval).unwrap_or_else(|e| panic!("{e}"));
        let by = |k: Knob| t.iter().find(|x| x.key == k.key()).unwrap_or_else(|| panic!("{k:?}"));
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b;
        let r = by(Knob::Relaunch);
        assert_eq!(r.cheapest, Strategy::CheckpointRestart, "{}", r.text());
        assert_eq!(r.stretches.iter().map(|s| s.cheapest).collect::<Vec<_>>(), [Strategy::CheckpointRestart, Strategy::LossyForward]);
        assert!(close(r.stretches[0].to, relaunch), "{} vs {relaunch}", r.stretches[0].to);
        let b = by(Knob::Rebuild);
        assert_eq!(b.stretches.iter().map(|s| s.cheapest).collect::<Vec<_>>(), [Strategy::LossyForward, Strategy::CheckpointRestart]);
        assert!(close(b.stretches[0].to, rebuild), "{} vs {rebuild}", b.stretches[0].to);
        assert!(r.text().contains(&format!("unless relaunch_s > {} (then lossy_forward)", num(relaunch))), "{}", r.text());
        // Every strategy that goes on waits for the detector alike: it never decides.
        let d = by(Knob::DetectTimeout);
        assert_eq!(d.stretches.len(), 1, "{}", d.text());
        assert!(d.text().ends_with("no change for detect_timeout_s in [0, 1e6]"), "{}", d.text());
        assert_eq!((num(212.49), num(1e6), num(0.0012345), num(-3.0)), ("212.5".into(), "1e6".into(), "0.001234".into(), "-3".into()));
    }

    #[test]
    fn strategies_order_as_their_costs_say_at_scale() {
        let c = cfg(BASE);
        let three_years = 3.0 * 365.25 * 86_400.0;
        for workers in [1024, 16_384] {
            let p = project(&c, workers, &Job::failing(Some(three_years), None), Interval::Daly(1.0)).unwrap_or_else(|e| panic!("{e}"));
            let o = |s: Strategy| p.iter().find(|x| x.strategy == s).and_then(|x| x.overhead_frac);
            assert_eq!(o(Strategy::None), None);
            let (cr, rb, lf) = (
                o(Strategy::CheckpointRestart).unwrap_or(0.0),
                o(Strategy::Rollback).unwrap_or(0.0),
                o(Strategy::LossyForward).unwrap_or(0.0),
            );
            assert!(cr > rb && rb > lf && lf > 0.0, "{cr} {rb} {lf}");
            assert!((p[0].system_mtbf_s - three_years / workers as f64).abs() < 1e-6);
        }
        let e = project(&cfg("[model]\narch = \"resnet\"\ndepth = 8\n"), 8, &Job::failing(Some(1e6), None), Interval::Steps(10))
            .unwrap_err()
            .to_string();
        assert!(e.contains("parallel.compute.gflops"), "{e}");
    }
}
