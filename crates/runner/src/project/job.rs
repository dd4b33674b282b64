//! `resilab project` for a job a user describes: its workers, GPUs per node, step, failure
//! rate, length and cost profile. The answer starts with the assumptions it rests on, warns
//! when the constants look scaled to a short modelled step while the failures are in real
//! time, and gives each strategy's overhead with the interval of a job of that length.

use resilab_recovery::profile::Profile;
use serde::Serialize;

use super::{Interval, Job, Projection, project, strategy_name, turns};
use crate::{Error, Result, RunConfig};

/// The smallest published figure of each constant (docs/recovery.md): ULFM's detector can be
/// tuned to 100 ms; TorchFT's rebuild over Gloo takes under 1 s; DLRover's fastest recovery,
/// processes restarted in place, about 1 min. Below them, a constant reads as scaled.
const PUBLISHED_MINIMA: [(&str, f64); 3] = [("detect_timeout_s", 0.1), ("rebuild_s", 0.5), ("relaunch_s", 60.0)];

/// What `resilab project` is asked for.
#[derive(Clone, Debug)]
pub struct Request {
    /// Data-parallel worker (GPU) counts, one table block each.
    pub workers: Vec<usize>,
    /// One node's mean time between failures, in years.
    pub node_mtbf_years: f64,
    /// The system's mean time between failures in steps (instead of the nodes').
    pub system_mtbf_steps: Option<f64>,
    /// GPUs per node: a node's failure ends all of them.
    pub gpus_per_node: usize,
    /// The job's fault-free step in seconds (instead of the cost model's).
    pub step_s: Option<f64>,
    /// Days of useful work, for the intervals and the expected failures.
    pub job_days: f64,
    /// Checkpoint every this many steps (instead of Daly's interval).
    pub interval_steps: Option<u64>,
    /// Daly's interval times this factor.
    pub daly_factor: f64,
    /// The cost profile the constants come from (its values reach `cfg` through
    /// [`profile_sets`]); `None`: the configuration's constants.
    pub profile: Option<&'static Profile>,
}

impl Request {
    /// The job the request describes, its relaunch covering the redo as its profile says (or,
    /// without one, as `cfg`'s `recovery.relaunch_covers_redo` does).
    fn job(&self, cfg: &RunConfig) -> Job {
        Job {
            node_mtbf_s: Some(self.node_mtbf_years * 365.25 * 86_400.0),
            system_mtbf_steps: self.system_mtbf_steps,
            gpus_per_node: self.gpus_per_node,
            step_s: self.step_s,
            length_s: self.job_days * 86_400.0,
            relaunch_covers_redo: self.profile.map_or(cfg.recovery.relaunch_covers_redo, |p| p.relaunch_covers_redo),
        }
    }

    /// Its checkpoint interval.
    fn interval(&self) -> Interval {
        self.interval_steps.map_or(Interval::Daly(self.daly_factor), Interval::Steps)
    }

    /// `cfg` as the projection models it: without `parallel.compute.gflops`, a given
    /// `--step-s` takes its shape from the cost model at 50 GFLOP/s.
    fn modelled(&self, cfg: &RunConfig) -> RunConfig {
        let mut cfg = cfg.clone();
        if self.step_s.is_some() && cfg.parallel.compute.gflops.is_none() {
            cfg.parallel.compute.gflops = Some(50.0);
        }
        cfg
    }
}

/// `--set` overrides that give `cfg` the profile's constants, to be placed before the user's
/// own (which then win, one constant at a time).
pub fn profile_sets(profile: &Profile) -> Vec<String> {
    vec![
        format!("recovery.detect_timeout_s={}", profile.detect.seconds),
        format!("recovery.rebuild_s={}", profile.rebuild.seconds),
        format!("recovery.relaunch_s={}", profile.relaunch.seconds),
    ]
}

/// The assumptions and warnings, then each worker count's projections and turns: one JSON line
/// each with `json` (the first holds the assumptions and warnings), else a table; and the
/// projections themselves.
pub fn report(cfg: &RunConfig, request: &Request, json: bool) -> Result<(String, Vec<Projection>)> {
    validate(request)?;
    let shape_only = request.step_s.is_some() && cfg.parallel.compute.gflops.is_none();
    let cfg = request.modelled(cfg);
    let (job, interval) = (request.job(&cfg), request.interval());
    let (assumed, warned) = (assumptions(&cfg, request, shape_only), warnings(&cfg, request));
    let mut lines = Vec::new();
    if json {
        lines.push(json_line(&Preamble { assumptions: &assumed, warnings: &warned })?);
    } else {
        lines.push("Assumptions:".into());
        lines.extend(assumed.iter().map(|a| format!("  {a}")));
        lines.extend(warned.iter().map(|w| format!("warning: {w}")));
        lines.push(String::new());
        lines.push(header());
    }
    let mut projections = Vec::new();
    for &n in &request.workers {
        projections.extend(project(&cfg, n, &job, interval)?);
    }
    for p in &projections {
        lines.push(if json { json_line(p)? } else { p.row() });
    }
    if !json {
        lines.push(String::new());
        lines.push("Where the verdict turns: each constant alone over its range, the others as configured; the cheapest of checkpoint_restart, rollback and lossy_forward.".into());
    }
    for &n in &request.workers {
        if !json {
            lines.push(format!("{n:>7} workers:"));
        }
        for t in turns(&cfg, n, &job, interval)? {
            lines.push(if json { json_line(&t)? } else { format!("          {}", t.text()) });
        }
    }
    Ok((lines.join("\n"), projections))
}

/// The first JSON line.
#[derive(Serialize)]
struct Preamble<'a> {
    assumptions: &'a [String],
    warnings: &'a [String],
}

fn validate(request: &Request) -> Result<()> {
    let positive = [
        ("--node-mtbf-years", Some(request.node_mtbf_years)),
        ("--daly-factor", Some(request.daly_factor)),
        ("--job-days", Some(request.job_days)),
        ("--step-s", request.step_s),
        ("--system-mtbf-steps", request.system_mtbf_steps),
    ];
    for (name, v) in positive {
        if let Some(v) = v
            && !(v.is_finite() && v > 0.0)
        {
            return Err(Error::Config(format!("{name} must be a number > 0, got {v}")));
        }
    }
    if request.gpus_per_node == 0 {
        return Err(Error::Config("--gpus-per-node must be at least 1".into()));
    }
    Ok(())
}

/// What the answer rests on, a line each.
fn assumptions(cfg: &RunConfig, request: &Request, shape_only: bool) -> Vec<String> {
    let r = &cfg.recovery;
    let mut out = match request.profile {
        Some(p) => {
            let mut lines = p.describe();
            for (key, profiled, used) in [
                ("detect_timeout_s", p.detect.seconds, r.detect_timeout_s),
                ("rebuild_s", p.rebuild.seconds, r.rebuild_s),
                ("relaunch_s", p.relaunch.seconds, r.relaunch_s),
            ] {
                if profiled != used {
                    lines.push(format!("  recovery.{key} = {used} s overrides the profile's {profiled} s (--set)"));
                }
            }
            lines
        }
        None => vec![format!(
            "constants from the configuration (no --profile): recovery.detect_timeout_s = {} s, rebuild_s = {} s, relaunch_s = {} s; their published sources are in docs/recovery.md",
            r.detect_timeout_s, r.rebuild_s, r.relaunch_s
        )],
    };
    out.push(match (request.step_s, shape_only) {
        (Some(s), true) => format!("step: {s} s (--step-s); the cost model at 50 GFLOP/s gives only its shape (compute, communication)"),
        (Some(s), false) => format!("step: {s} s (--step-s); the configuration's cost model gives only its shape"),
        (None, _) => "step: the configuration's cost model (parallel.compute), each worker keeping its batch".into(),
    });
    out.push(match request.system_mtbf_steps {
        Some(m) => format!("failures: the whole job fails every {m} steps (--system-mtbf-steps)"),
        None => format!(
            "failures: a node fails every {} years ({:.3} failures per 1,000 node-days); GPUs per node: {}; the job fails when any of its nodes does",
            request.node_mtbf_years,
            1000.0 / (request.node_mtbf_years * 365.25),
            request.gpus_per_node
        ),
    });
    out.push(format!(
        "job: {} days of useful work; each interval holds 95% of such jobs (4,000 drawn with their failures, Poisson, and when each came; beyond 1,000 failures a job, the normal approximation); the constants' own uncertainty is in the turning points, not the intervals",
        request.job_days
    ));
    out.push(match request.interval_steps {
        Some(k) => format!("checkpoints: every {k} steps, of the configuration's model state at parallel.compute.storage_gbps"),
        None => format!(
            "checkpoints: Daly's interval x {}, of the configuration's model state at parallel.compute.storage_gbps",
            request.daly_factor
        ),
    });
    out
}

/// Constants that cannot describe the job as given, a line each.
fn warnings(cfg: &RunConfig, request: &Request) -> Vec<String> {
    let r = &cfg.recovery;
    let values = [r.detect_timeout_s, r.rebuild_s, r.relaunch_s];
    let mut out = Vec::new();
    if request.system_mtbf_steps.is_none() {
        let scaled: Vec<String> = PUBLISHED_MINIMA
            .iter()
            .zip(values)
            .filter(|((_, min), v)| v < min)
            .map(|((key, min), v)| format!("recovery.{key} = {v} s (published: at least {min} s)"))
            .collect();
        if !scaled.is_empty() {
            out.push(format!(
                "{} look scaled to a short modelled step, but the failures are in real time (node MTBF in years): give --profile or unscaled constants",
                scaled.join(", ")
            ));
        }
    }
    if r.relaunch_s < r.rebuild_s {
        out.push(format!(
            "recovery.relaunch_s = {} s is below recovery.rebuild_s = {} s: a relaunch contains the new job's communicator initialisation",
            r.relaunch_s, r.rebuild_s
        ));
    }
    out
}

/// `v` as one JSON line of [`report`].
fn json_line<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|source| Error::Json { what: "a projection".into(), source })
}

fn header() -> String {
    format!(
        "{:>7} {:>6} {:<19} {:>9} {:>10} {:>10} {:>8} {:>10} {:>9} {:>19} {:>9}",
        "workers", "nodes", "strategy", "step s", "job MTBF s", "ckpt every", "steady", "per fail s", "overhead", "95% of jobs", "failures"
    )
}

impl Projection {
    /// The projection as a row of [`report`]'s table.
    fn row(&self) -> String {
        let pct = |v: f64| format!("{:.3}%", 100.0 * v);
        let overhead = self.overhead_frac.map_or_else(|| format!("fails ~{:.0} steps", self.to_failure_steps), pct);
        let range =
            self.overhead_lo_frac.zip(self.overhead_hi_frac).map_or_else(String::new, |(lo, hi)| format!("{} to {}", pct(lo), pct(hi)));
        format!(
            "{:>7} {:>6} {:<19} {:>9.3e} {:>10.3e} {:>10} {:>8} {:>10.3e} {:>9} {:>19} {:>9.1}",
            self.workers,
            self.nodes,
            strategy_name(self.strategy),
            self.step_s,
            self.system_mtbf_s,
            self.interval_steps,
            pct(self.steady_frac),
            self.per_failure_s,
            overhead,
            range,
            self.failures_per_job
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> RunConfig {
        toml::from_str("[model]\narch = \"resnet\"\ndepth = 8\n").unwrap_or_else(|e| panic!("{e}"))
    }

    fn request(profile: Option<&'static Profile>) -> Request {
        Request {
            workers: vec![1024],
            node_mtbf_years: 3.0,
            system_mtbf_steps: None,
            gpus_per_node: 8,
            step_s: Some(1.0),
            job_days: 54.0,
            interval_steps: None,
            daly_factor: 1.0,
            profile,
        }
    }

    #[test]
    fn scaled_constants_meeting_real_failures_are_named() {
        let mut cfg = base();
        (cfg.recovery.detect_timeout_s, cfg.recovery.rebuild_s, cfg.recovery.relaunch_s) = (0.24, 0.12, 7.2);
        let w = warnings(&cfg, &request(None));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("recovery.rebuild_s = 0.12 s (published: at least 0.5 s)") && w[0].contains("relaunch_s = 7.2 s"), "{w:?}");
        // In steps, the constants and the failures are on one scale: no warning.
        assert!(warnings(&cfg, &Request { system_mtbf_steps: Some(100.0), ..request(None) }).is_empty());
        cfg.recovery = base().recovery;
        assert!(warnings(&cfg, &request(None)).is_empty());
        cfg.recovery.rebuild_s = 1047.0;
        assert!(warnings(&cfg, &request(None))[0].contains("below recovery.rebuild_s = 1047 s"));
    }

    #[test]
    fn a_profile_is_stated_with_its_sources_and_overrides() {
        let p = resilab_recovery::profile::profile("megascale-optimised").unwrap_or_else(|| panic!("no profile"));
        let mut cfg = base();
        (cfg.recovery.detect_timeout_s, cfg.recovery.rebuild_s, cfg.recovery.relaunch_s) = (600.0, 30.0, 60.0);
        let text = assumptions(&cfg, &request(Some(p)), true).join("\n");
        assert!(text.contains("cost profile megascale-optimised"), "{text}");
        assert!(text.contains("recovery.relaunch_s = 60 s overrides the profile's 900 s"), "{text}");
        assert!(!text.contains("recovery.rebuild_s = 30 s overrides"), "{text}");
        assert!(text.contains("0.913 failures per 1,000 node-days); GPUs per node: 8"), "{text}");
    }
}
