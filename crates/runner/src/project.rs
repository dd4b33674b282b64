//! Each recovery strategy's expected overhead at a scale too large to simulate, from the
//! simulation's own cost model: the step's overlapped timeline ([`StepModel`]) on N workers,
//! the checkpoint write at the storage bandwidth, rollback's copy at the memory bandwidth, a
//! respawned worker's state at the network bandwidth and `recovery.relaunch_s`.
//!
//! Per unit of useful work, to first order (failures counted per step of progress, as the
//! simulation schedules them; for a per-failure cost `f` much smaller than the system MTBF `M`
//! this is the same as failures per second of wall time):
//!
//! | strategy | every step | per failure `f` |
//! |---|---|---|
//! | checkpoint-restart | checkpoint `C` every `k` steps | `k T / 2` of work lost (completed steps since the checkpoint and half the failed step), relaunch `R`, read `C` |
//! | rollback | the copy `S` | half a step abandoned, the restore `S`, the redo's difference in length (over N-1 workers), the transfer `X` |
//! | lossy forward | — | the delay of re-reducing the bucket in flight and the later ones over N-1 workers (averaged over the crash time), the transfer `X` |
//! | none | — | the run fails: expected steps to the first failure `M / T` |
//!
//! Checkpoint writes (`C / kT`) are charged to every strategy that runs with checkpoints, as the
//! simulation charges them; the overhead is `steady + f / M`.

use resilab_models::InputShape;
use resilab_recovery::Strategy;
use resilab_train::StepModel;
use serde::Serialize;

use crate::{Error, Result, RunConfig};

/// Crash times averaged over for lossy forward's delay (midpoints of equal slices of a step).
const CRASH_POINTS: usize = 256;

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
    /// The strategy.
    pub strategy: Strategy,
    /// Simulated seconds of a fault-free step.
    pub step_s: f64,
    /// The system's mean time between failures, seconds (node MTBF / workers).
    pub system_mtbf_s: f64,
    /// Seconds to write one checkpoint of every worker's state.
    pub checkpoint_s: f64,
    /// Steps between checkpoints.
    pub interval_steps: u64,
    /// Overhead paid without failures, as a share of the fault-free time.
    pub steady: f64,
    /// Seconds lost per failure.
    pub per_failure_s: f64,
    /// Expected overhead against the fault-free run (`None` for `none`, which fails).
    pub overhead: Option<f64>,
    /// Expected steps before the first failure (what `none` gets done).
    pub steps_to_failure: f64,
}

/// What `resilab project` is asked for: the worker counts, the failure rate (per node, or the
/// system's in steps), and the checkpoint interval (fixed, or Daly's times a factor).
#[derive(Clone, Debug)]
pub struct Request {
    /// Data-parallel worker counts, one table block each.
    pub workers: Vec<usize>,
    /// One node's mean time between failures, in years.
    pub node_mtbf_years: f64,
    /// The system's mean time between failures in steps (instead of the nodes').
    pub system_mtbf_steps: Option<f64>,
    /// Checkpoint every this many steps (instead of Daly's interval).
    pub interval_steps: Option<u64>,
    /// Daly's interval times this factor.
    pub daly_factor: f64,
}

/// [`project`] for every worker count of `request`: one JSON line per projection with `json`,
/// else a table with a header line.
pub fn report(cfg: &RunConfig, request: &Request, json: bool) -> Result<String> {
    for (name, v) in [("--node-mtbf-years", request.node_mtbf_years), ("--daly-factor", request.daly_factor)] {
        if !(v.is_finite() && v > 0.0) {
            return Err(Error::Config(format!("{name} must be a number > 0, got {v}")));
        }
    }
    let interval = request.interval_steps.map_or(Interval::Daly(request.daly_factor), Interval::Steps);
    let node_mtbf_s = request.node_mtbf_years * 365.25 * 86_400.0;
    let mut lines = Vec::new();
    if !json {
        lines.push(format!(
            "{:>7} {:<19} {:>11} {:>12} {:>10} {:>9} {:>10} {:>9}",
            "workers", "strategy", "step s", "job MTBF s", "ckpt every", "steady", "per fail s", "overhead"
        ));
    }
    for &n in &request.workers {
        for p in project(cfg, n, Some(node_mtbf_s), request.system_mtbf_steps, interval)? {
            lines.push(if json {
                serde_json::to_string(&p).map_err(|source| Error::Json { what: "a projection".into(), source })?
            } else {
                p.row()
            });
        }
    }
    Ok(lines.join("\n"))
}

impl Projection {
    /// The projection as a row of [`report`]'s table.
    fn row(&self) -> String {
        let strategy = serde_json::to_value(self.strategy).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        let overhead = self.overhead.map_or_else(|| format!("fails ~{:.0} steps", self.steps_to_failure), |o| format!("{:.3}%", 100.0 * o));
        format!(
            "{:>7} {:<19} {:>11.3e} {:>12.3e} {:>10} {:>8.3}% {:>10.3e} {:>9}",
            self.workers,
            strategy,
            self.step_s,
            self.system_mtbf_s,
            self.interval_steps,
            100.0 * self.steady,
            self.per_failure_s,
            overhead
        )
    }
}

/// The projections of the four strategies for `cfg`'s model on `workers` workers, each keeping
/// `cfg`'s per-worker batch, with a per-node MTBF of `node_mtbf_s` seconds (or a system MTBF of
/// `system_mtbf_steps` steps when given). Needs `parallel.compute.gflops`.
pub fn project(
    cfg: &RunConfig,
    workers: usize,
    node_mtbf_s: Option<f64>,
    system_mtbf_steps: Option<f64>,
    interval: Interval,
) -> Result<Vec<Projection>> {
    let model = step_model(cfg, workers)?;
    let step_s = model.timeline.end_s;
    let system_mtbf_s = match (system_mtbf_steps, node_mtbf_s) {
        (Some(m), _) => m * step_s,
        (None, Some(m)) => m / workers as f64,
        (None, None) => return Err(Error::Config("give a node MTBF or a system MTBF in steps".into())),
    };
    let compute = &cfg.parallel.compute;
    let checkpoint_s = compute.storage_s(workers as u64 * model.state_bytes);
    let interval_steps = match interval {
        Interval::Steps(k) => k.max(1),
        Interval::Daly(f) => ((f * resilab_checkpoint::advise::daly(checkpoint_s, system_mtbf_s) / step_s).round() as u64).max(1),
    };
    let ckpt = checkpoint_s / (interval_steps as f64 * step_s);
    let (copy, transfer) = (compute.copy_s(model.state_bytes), cfg.parallel.network.send_s(model.state_bytes));
    let lossy_delay =
        (0..CRASH_POINTS).map(|i| model.end_after_crash((i as f64 + 0.5) / CRASH_POINTS as f64 * step_s) - step_s).sum::<f64>()
            / CRASH_POINTS as f64;
    let rows = [
        (Strategy::None, 0.0, 0.0),
        (Strategy::CheckpointRestart, ckpt, interval_steps as f64 * step_s / 2.0 + cfg.recovery.relaunch_s + checkpoint_s),
        // The redo is the step itself (over one worker fewer): what is lost is the abandoned
        // part-step, the restore and the redo's difference in length.
        (Strategy::Rollback, ckpt + copy / step_s, step_s / 2.0 + copy + (model.survivors_step_s() - step_s) + transfer),
        (Strategy::LossyForward, ckpt, lossy_delay + transfer),
    ];
    Ok(rows
        .into_iter()
        .map(|(strategy, steady, per_failure_s)| Projection {
            workers,
            strategy,
            step_s,
            system_mtbf_s,
            checkpoint_s,
            interval_steps,
            steady,
            per_failure_s,
            overhead: (strategy != Strategy::None).then(|| steady + per_failure_s / system_mtbf_s),
            steps_to_failure: system_mtbf_s / step_s,
        })
        .collect())
}

/// `cfg` with `checkpoint.daly_factor` resolved into `checkpoint.every_steps`: that multiple
/// of Daly's interval for the run's modelled step, its checkpoint cost and the system MTBF of
/// its random-arrival faults, in whole steps (at least 1). Unchanged without `daly_factor`.
pub fn resolve_daly(cfg: &RunConfig) -> Result<RunConfig> {
    let Some(factor) = cfg.checkpoint.daly_factor else { return Ok(cfg.clone()) };
    let workers = cfg.parallel.workers.max(1);
    let entries = resilab_faults::parse(&cfg.faults).map_err(|e| Error::Config(e.to_string()))?;
    // Faults per step of the whole system.
    let rate: f64 = entries
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
    let model = step_model(cfg, workers).map_err(|e| Error::Config(format!("checkpoint.daly_factor: {e}")))?;
    let step_s = model.timeline.end_s;
    let checkpoint_s = cfg.parallel.compute.storage_s(workers as u64 * model.state_bytes);
    let daly = resilab_checkpoint::advise::daly(checkpoint_s, step_s / rate);
    let mut out = cfg.clone();
    out.checkpoint.every_steps = Some(((factor * daly / step_s).round() as u64).max(1));
    // The resolved configuration (config.resolved.toml) names the interval itself.
    out.checkpoint.daly_factor = None;
    Ok(out)
}

/// The cost model's fault-free step of `cfg`'s model on `workers` workers.
fn step_model(cfg: &RunConfig, workers: usize) -> Result<StepModel> {
    if workers == 0 {
        return Err(Error::Config("--workers must be at least 1".into()));
    }
    let (channels, size, classes) = cfg.data.shape();
    let input = InputShape { channels, size };
    let net = cfg.model.build(input, classes, &burn::prelude::Device::flex())?;
    let shard = (cfg.train.batch_size / cfg.parallel.workers.max(1)).max(1);
    StepModel::new(&net, input, &cfg.parallel, &cfg.optimizer, shard, workers)
        .ok_or_else(|| Error::Config("projecting needs modelled compute: set parallel.compute.gflops".into()))
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

    #[test]
    fn strategies_order_as_their_costs_say_at_scale() {
        let c = cfg(BASE);
        let three_years = 3.0 * 365.25 * 86_400.0;
        for workers in [1024, 16_384] {
            let p = project(&c, workers, Some(three_years), None, Interval::Daly(1.0)).unwrap_or_else(|e| panic!("{e}"));
            let o = |s: Strategy| p.iter().find(|x| x.strategy == s).and_then(|x| x.overhead);
            assert_eq!(o(Strategy::None), None);
            let (cr, rb, lf) = (
                o(Strategy::CheckpointRestart).unwrap_or(0.0),
                o(Strategy::Rollback).unwrap_or(0.0),
                o(Strategy::LossyForward).unwrap_or(0.0),
            );
            assert!(cr > rb && rb > lf && lf > 0.0, "{cr} {rb} {lf}");
            assert!((p[0].system_mtbf_s - three_years / workers as f64).abs() < 1e-6);
        }
        let e = project(&cfg("[model]\narch = \"resnet\"\ndepth = 8\n"), 8, Some(1e6), None, Interval::Steps(10)).unwrap_err().to_string();
        assert!(e.contains("parallel.compute.gflops"), "{e}");
    }
}
