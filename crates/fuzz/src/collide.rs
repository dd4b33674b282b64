//! Two modes that fuzz the machine around a run rather than its inputs:
//!
//! - `writers`: two `resilab train` processes on one `--out`, the second started a drawn delay
//!   after the first. Sound: each process exits 0 or fails cleanly (the second: "in use"), and a
//!   run that exited 0 left its outputs whole (`metrics.csv` without NUL bytes, every logged step
//!   once and in order up to the last; `summary.json` complete). A damaged output is
//!   `input_modified`: one process changed files that were the other's.
//! - `full-disk`: `resilab train` on a tmpfs of a drawn size. Sound: exit 0 with whole outputs, or
//!   one clean error; never a half-written `summary.json`. A run that exited 0 with damaged outputs,
//!   or a half-written summary, is `messy_error`. Needs root and permission to mount.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail};
use rand::Rng as _;

use crate::case::{Case, CaseResult, Options, Target, base_config, case_rng};
use crate::classify::{Class, Observed, classify};
use crate::exec::{self, Finished, Invocation};

/// What one case does, drawn from its seed.
enum Plan {
    Writers { steps: u64, delay_ms: u64 },
    FullDisk { steps: u64, kib: u64 },
}

fn plan(opts: &Options, target: Target, index: usize) -> Option<Plan> {
    let mut rng = case_rng(opts.seed, target, index);
    match target {
        // Runs of 0.3-2 s and a second start within 0.5 s: most cases overlap, some do not.
        Target::Writers => Some(Plan::Writers { steps: rng.random_range(40..=400), delay_ms: rng.random_range(0..=500) }),
        Target::FullDisk => Some(Plan::FullDisk { steps: rng.random_range(4..=24), kib: rng.random_range(16..=1024) }),
        _ => None,
    }
}

impl Plan {
    fn steps(&self) -> u64 {
        match self {
            Plan::Writers { steps, .. } | Plan::FullDisk { steps, .. } => *steps,
        }
    }

    fn describe(&self) -> String {
        match self {
            Plan::Writers { steps, delay_ms } => {
                format!("two writers on out/ ({steps} steps each), the second {delay_ms} ms after the first")
            }
            Plan::FullDisk { steps, kib } => format!("train ({steps} steps) into a {kib} KiB file system at fs/"),
        }
    }

    /// The output directory, relative to the case's directory.
    fn out(&self) -> &'static str {
        match self {
            Plan::Writers { .. } => "out",
            Plan::FullDisk { .. } => "fs/out",
        }
    }
}

/// The case's config and command line (the second writer runs the same one), written into
/// `dir`; `None` for the other targets.
pub fn case(opts: &Options, target: Target, index: usize, dir: &Path) -> anyhow::Result<Option<Case>> {
    plan(opts, target, index).map(|p| case_of(opts, &p, dir)).transpose()
}

fn case_of(opts: &Options, plan: &Plan, dir: &Path) -> anyhow::Result<Case> {
    let config = base_config().replace("\nsteps = 4\n", &format!("\nsteps = {}\n", plan.steps()));
    std::fs::write(dir.join("base.toml"), config).with_context(|| format!("{}", dir.display()))?;
    let args = ["train", "--config", "base.toml", "--out", plan.out(), "--quiet", "--threads", "1", "--golden-dir", "golden"];
    let invocation = Invocation { program: opts.resilab.clone(), args: args.iter().map(OsString::from).collect(), dir: dir.to_path_buf() };
    Ok(Case { mutation: plan.describe(), invocation, inputs: vec![dir.join("base.toml")] })
}

/// A tmpfs mounted at a directory, unmounted when dropped.
struct Mount(std::path::PathBuf);

impl Mount {
    fn tmpfs(dir: &Path, kib: u64) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(dir)
            .output()
            .context("running mount")?;
        if !o.status.success() {
            bail!("full-disk mode needs root and permission to mount a tmpfs: {}", String::from_utf8_lossy(&o.stderr).trim());
        }
        Ok(Self(dir.to_path_buf()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Runs case `index` of `writers` or `full-disk` in `dir`; `None` for the other targets.
pub fn run(opts: &Options, target: Target, index: usize, dir: &Path) -> anyhow::Result<Option<CaseResult>> {
    let Some(plan) = plan(opts, target, index) else { return Ok(None) };
    let case = case_of(opts, &plan, dir)?;
    let (class, stderr, seconds) = match plan {
        Plan::Writers { steps, delay_ms } => writers(opts, &case, steps, delay_ms)?,
        Plan::FullDisk { steps, kib } => {
            let _mount = Mount::tmpfs(&dir.join("fs"), kib)?;
            full_disk(opts, &case, steps)?
        }
    };
    Ok(Some(CaseResult { target, index, class, mutation: case.mutation, command_line: case.invocation.shell_line(), stderr, seconds }))
}

fn observed(f: &Finished) -> Class {
    classify(&Observed { status: f.status, stderr: f.stderr.clone(), input_modified: false })
}

/// Two writers: the worse of the two processes' classes, then the outputs' soundness.
fn writers(opts: &Options, case: &Case, steps: u64, delay_ms: u64) -> anyhow::Result<(Class, String, f64)> {
    let (a, b) = std::thread::scope(|s| {
        let first = s.spawn(|| exec::run(&case.invocation, &opts.limits));
        std::thread::sleep(Duration::from_millis(delay_ms));
        let second = exec::run(&case.invocation, &opts.limits);
        (first.join().map_err(|_| anyhow::anyhow!("a writer thread panicked")), second)
    });
    let (a, b) = (a?.context("first writer")?, b.context("second writer")?);
    let stderr = format!("first:\n{}\nsecond:\n{}", a.stderr, b.stderr);
    let seconds = a.seconds + b.seconds;
    let classes = [observed(&a), observed(&b)];
    if let Some(c) = classes.iter().find(|c| c.is_failure()) {
        return Ok((*c, stderr, seconds));
    }
    // A refused writer must say why: the directory is in use.
    if [&a, &b].iter().any(|f| f.status.and_then(|s| s.code()) == Some(1) && !f.stderr.contains("is in use by process")) {
        return Ok((Class::MessyError, stderr, seconds));
    }
    let out = case.invocation.dir.join("out");
    if let Err(why) = outputs_sound(&out, steps) {
        return Ok((Class::InputModified, format!("{why}\n{stderr}"), seconds));
    }
    let refused = classes.contains(&Class::CleanError);
    Ok((if refused { Class::CleanError } else { Class::Ok }, stderr, seconds))
}

/// A full disk: the process's class, then what it left.
fn full_disk(opts: &Options, case: &Case, steps: u64) -> anyhow::Result<(Class, String, f64)> {
    let f = exec::run(&case.invocation, &opts.limits).context("train on a small file system")?;
    let out = case.invocation.dir.join("fs/out");
    let class = observed(&f);
    let sound = match class {
        Class::Ok => outputs_sound(&out, steps),
        // A failed run may have stopped anywhere, but never leaves a half-written summary.
        _ => summary_sound_or_absent(&out),
    };
    match sound {
        Err(why) if !class.is_failure() => Ok((Class::MessyError, format!("{why}\n{}", f.stderr), f.seconds)),
        _ => Ok((class, f.stderr, f.seconds)),
    }
}

/// `summary.json`, when present, is whole JSON.
fn summary_sound_or_absent(out: &Path) -> Result<(), String> {
    match std::fs::read(out.join("summary.json")) {
        Err(_) => Ok(()),
        Ok(bytes) => serde_json::from_slice::<serde_json::Value>(&bytes).map(|_| ()).map_err(|e| format!("summary.json is not whole: {e}")),
    }
}

/// A completed run's outputs: `metrics.csv` without NUL bytes, its steps strictly increasing to
/// `steps`; `summary.json` whole and at `steps`.
pub fn outputs_sound(out: &Path, steps: u64) -> Result<(), String> {
    let metrics = std::fs::read(out.join("metrics.csv")).map_err(|e| format!("metrics.csv: {e}"))?;
    if metrics.contains(&0) {
        return Err("metrics.csv holds NUL bytes".into());
    }
    let text = String::from_utf8_lossy(&metrics);
    let rows: Vec<u64> = text.lines().skip(1).map(|l| l.split(',').next().and_then(|s| s.parse().ok()).unwrap_or(0)).collect();
    if rows.windows(2).any(|w| w[0] >= w[1]) || rows.last() != Some(&steps) {
        return Err(format!("metrics.csv's steps are not one run's: {rows:?}"));
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).map_err(|e| format!("summary.json: {e}"))?)
            .map_err(|e| format!("summary.json is not whole: {e}"))?;
    if summary["steps"].as_u64() != Some(steps) {
        return Err(format!("summary.json says {} steps, not {steps}", summary["steps"]));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn out(metrics: &[u8], summary: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("metrics.csv"), metrics).unwrap();
        std::fs::write(d.path().join("summary.json"), summary).unwrap();
        d
    }

    #[test]
    fn only_one_whole_run_is_sound() {
        let good = b"step,epoch\n2,0\n4,0\n";
        assert!(outputs_sound(out(good, r#"{"steps": 4}"#).path(), 4).is_ok());
        assert!(outputs_sound(out(b"step,epoch\n2,0\n\0\0\0\n4,0\n", r#"{"steps": 4}"#).path(), 4).unwrap_err().contains("NUL"));
        assert!(
            outputs_sound(out(b"step,epoch\n2,0\n4,0\n2,0\n4,0\n", r#"{"steps": 4}"#).path(), 4).unwrap_err().contains("not one run's")
        );
        assert!(outputs_sound(out(good, r#"{"steps": 4"#).path(), 4).unwrap_err().contains("not whole"));
        assert!(outputs_sound(out(good, r#"{"steps": 2}"#).path(), 4).unwrap_err().contains("says 2 steps"));
        let d = tempfile::tempdir().unwrap();
        assert!(summary_sound_or_absent(d.path()).is_ok());
    }
}
