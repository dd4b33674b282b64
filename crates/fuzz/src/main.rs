//! `resilab-fuzz`: feeds mutated checkpoints and configurations to resilab's commands and
//! counts what happens. Exits 1 if any case panicked, was killed by a signal, hung, failed
//! messily or modified its input; 2 if the harness itself failed.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context as _;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use resilab_fuzz::driver::{self, CaseResult, Options, Target};
use resilab_fuzz::exec::Limits;
use resilab_fuzz::report::{self, Provenance};

/// Fuzz every resilab command that reads a user's checkpoint or config: a tiny checkpoint is
/// trained first, then each case mutates a copy (bit flips, truncation, zeroed blocks and
/// overwritten bytes weighted toward HDF5 metadata, cyclic group links; or a TOML mutation) and
/// runs one command on it. Cases are classified ok, clean_error, messy_error, panic, signal,
/// hang or input_modified; the first failing inputs of each kind are kept under
/// <scratch>/failures with the command line that reproduces them.
#[derive(Parser)]
#[command(name = "resilab-fuzz", version)]
struct Args {
    /// The resilab binary under test.
    #[arg(long, value_name = "PATH", default_value = "target/release/resilab")]
    resilab: PathBuf,
    /// Cases per command.
    #[arg(long, value_name = "N", default_value_t = 100)]
    cases: usize,
    /// Commands to fuzz, comma-separated: inspect, eval, diff, inject, resume, config; probe
    /// (the HDF5 library reading inspect's files with no child-process guard); writers (two
    /// `train` processes on one --out, the second a drawn delay after the first) and full-disk
    /// (`train` on a tmpfs of a drawn size; needs root and permission to mount); import (the
    /// corpus's hostile pickles, each of which must be refused).
    #[arg(long, value_delimiter = ',', default_value = "inspect,eval,diff,inject,resume,config")]
    commands: Vec<Target>,
    /// Seed of every mutation (case i of a command draws from its own ChaCha8 stream).
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    /// Cases run at once.
    #[arg(long, value_name = "J", default_value_t = 2)]
    jobs: usize,
    /// Append one row per command to this CSV (header written if the file is new).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Scratch directory (the base checkpoint, the running cases, failures/).
    #[arg(long, value_name = "DIR", default_value = "target/fuzz")]
    scratch: PathBuf,
    /// Seconds a command may run before its process group is killed and the case is a hang.
    #[arg(long, value_name = "S", default_value_t = 90)]
    timeout: u64,
    /// Address-space limit of each command in MiB (0: none).
    #[arg(long, value_name = "MIB", default_value_t = 4096)]
    mem_limit: u64,
    /// Failing inputs kept per command and class.
    #[arg(long, value_name = "N", default_value_t = 3)]
    keep: usize,
    /// Write every case as a JSON line (command, index, class, mutation, seconds, command line,
    /// stderr) to this file.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Mutate this intact worker file instead of training a checkpoint first (fuzz two builds,
    /// e.g. two HDF5 libraries, on the same files).
    #[arg(long, value_name = "FILE")]
    base: Option<PathBuf>,
    /// A directory of hostile HDF5 files (scripts/hostile_h5.py) with the victims they point
    /// to: one case in 8 of each file command runs on one of them instead of a mutated
    /// checkpoint, and must not touch the victims.
    #[arg(long, value_name = "DIR", default_value = "tests/fixtures/hostile")]
    corpus: PathBuf,
}

/// One JSON line of `--log`.
fn log_line(r: &CaseResult) -> String {
    let v = serde_json::json!({
        "command": r.target.name(),
        "index": r.index,
        "class": r.class.name(),
        "mutation": r.mutation,
        "seconds": (r.seconds * 1000.0).round() / 1000.0,
        "command_line": r.command_line,
        "stderr": r.stderr,
    });
    format!("{v}\n")
}

fn options(args: &Args) -> Options {
    let mut targets = Vec::new();
    for t in &args.commands {
        if !targets.contains(t) {
            targets.push(*t);
        }
    }
    Options {
        resilab: std::path::absolute(&args.resilab).unwrap_or_else(|_| args.resilab.clone()),
        seed: args.seed,
        cases: args.cases,
        targets,
        scratch: std::path::absolute(&args.scratch).unwrap_or_else(|_| args.scratch.clone()),
        jobs: args.jobs.max(1),
        limits: Limits { time: Duration::from_secs(args.timeout.max(1)), memory_mb: (args.mem_limit > 0).then_some(args.mem_limit) },
        keep: args.keep,
        base: args.base.as_ref().map(|b| std::path::absolute(b).unwrap_or_else(|_| b.clone())),
        corpus: args.corpus.is_dir().then(|| std::path::absolute(&args.corpus).unwrap_or_else(|_| args.corpus.clone())),
    }
}

fn progress(total: usize) -> ProgressBar {
    let bar = ProgressBar::new(total as u64);
    let style = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg} (eta {eta})")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

fn fuzz(args: &Args) -> anyhow::Result<bool> {
    let opts = options(args);
    if !opts.resilab.is_file() {
        anyhow::bail!("{}: no such binary (build it with `cargo build --release`)", opts.resilab.display());
    }
    eprintln!("training the base checkpoint with {} ...", opts.resilab.display());
    let base = driver::prepare(&opts)?;
    let bar = progress(opts.cases * opts.targets.len());
    let failures = std::sync::atomic::AtomicUsize::new(0);
    let log = match &args.log {
        Some(p) => Some(Mutex::new(std::fs::File::create(p).with_context(|| format!("{}", p.display()))?)),
        None => None,
    };
    let report = driver::run(&opts, &base, &|r: &CaseResult| {
        if let Some(Ok(mut f)) = log.as_ref().map(Mutex::lock) {
            let _ = f.write_all(log_line(r).as_bytes());
        }
        let n =
            failures.fetch_add(usize::from(r.class.is_failure()), std::sync::atomic::Ordering::Relaxed) + usize::from(r.class.is_failure());
        bar.set_message(format!("{n} failing"));
        bar.inc(1);
    })?;
    bar.finish();
    print!("{}", report::table(&report));
    println!("{:.0} s wall, {} jobs, seed {}, resilab {}", report.seconds, opts.jobs, opts.seed, base.revision);
    if report.failures() > 0 {
        println!("\nfirst failure of each kind (inputs kept in {}):", report.failures_dir.display());
        print!("{}", report::examples(&report));
    }
    if let Some(csv) = &args.csv {
        report::append_csv(csv, &Provenance::now(&base.revision, &opts.resilab), &report)?;
    }
    Ok(report.failures() == 0)
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match fuzz(&args) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
