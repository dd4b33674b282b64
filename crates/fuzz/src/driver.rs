//! The driver: one intact tiny checkpoint made with `resilab train`, then per case a mutated
//! copy and one command run on it, classified, with the first failing inputs kept.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

pub use crate::case::{
    CHECKPOINT_STEP, Case, CaseResult, HOSTILE_EVERY, INJECTOR_CONFIGS, Options, Target, VICTIMS, base_config, case_rng,
};
use crate::classify::{Class, Observed, classify};
use crate::exec::{self, Invocation, Limits};
use crate::mutate::{FileMutation, Layout};
use crate::text::TextMutation;

fn corpus_with(dir: &Path, ext: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("the hostile corpus {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == ext) && !p.file_name().is_some_and(|n| VICTIMS.iter().any(|v| n == *v)))
        .collect();
    files.sort();
    Ok(files)
}

/// Case `index` of [`Target::Import`]: the corpus's hostile pickles in turn, imported with the
/// base configuration.
fn import_case(opts: &Options, index: usize, dir: &Path) -> anyhow::Result<Case> {
    let corpus = opts.corpus.as_deref().context("the import command fuzzes the corpus's .pt files: give a corpus")?;
    let files = corpus_with(corpus, "pt")?;
    anyhow::ensure!(!files.is_empty(), "the corpus {} holds no .pt files", corpus.display());
    let src = &files[index % files.len()];
    let file = dir.join("weights.pt");
    std::fs::copy(src, &file).with_context(|| format!("{}", src.display()))?;
    write(&dir.join("import.toml"), &base_config())?;
    let args = ["import", "weights.pt", "--config", "import.toml", "--out", "out"].iter().map(OsString::from).collect();
    let invocation = Invocation { program: opts.resilab.clone(), args, dir: dir.to_path_buf() };
    Ok(Case { mutation: format!("hostile corpus file {}", src.display()), invocation, inputs: vec![file, dir.join("import.toml")] })
}

/// The hostile `.h5` files of a corpus directory (made by `scripts/hostile_h5.py`: external
/// storage, virtual datasets, external and soft links out of the file, declared sizes beyond
/// memory), sorted, victims excluded.
pub fn corpus_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    corpus_with(dir, "h5")
}

/// The hostile corpus file case `index` runs on, if it is one of every [`HOSTILE_EVERY`].
fn hostile_file(opts: &Options, index: usize) -> anyhow::Result<Option<PathBuf>> {
    let Some(dir) = &opts.corpus else { return Ok(None) };
    if index % HOSTILE_EVERY != HOSTILE_EVERY - 1 {
        return Ok(None);
    }
    let files = corpus_files(dir)?;
    Ok((!files.is_empty()).then(|| files[(index / HOSTILE_EVERY) % files.len()].clone()))
}

/// Puts hostile corpus file `src` at `file` and what it points to into `dir` (the victims, and
/// a FIFO named `fifo` that blocks whoever opens it); returns the victims to keep unchanged.
fn place_hostile(src: &Path, file: &Path, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::copy(src, file).with_context(|| format!("{}", src.display()))?;
    let corpus = src.parent().unwrap_or(Path::new("."));
    let mut victims = Vec::new();
    for v in VICTIMS {
        std::fs::copy(corpus.join(v), dir.join(v)).with_context(|| format!("{}", corpus.join(v).display()))?;
        victims.push(dir.join(v));
    }
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().with_context(|| "mkfifo")?;
    anyhow::ensure!(made.success(), "mkfifo {} failed", fifo.display());
    Ok(victims)
}

/// The intact checkpoint every case starts from.
#[derive(Clone, Debug)]
pub struct Base {
    /// Its worker file.
    pub file: PathBuf,
    /// Where its metadata lies and which groups it has.
    pub layout: Layout,
    /// The resilab git revision that wrote it (from the run's `summary.json`).
    pub revision: String,
}

/// The `step-*` directory name of the checkpoint.
fn step_dir_name() -> String {
    format!("step-{CHECKPOINT_STEP:08}")
}

/// Trains the base run in `<scratch>/base` and reads its checkpoint's layout.
pub fn prepare(opts: &Options) -> anyhow::Result<Base> {
    let dir = opts.scratch.join("base");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
    std::fs::write(dir.join("base.toml"), base_config()).with_context(|| format!("{}", dir.display()))?;
    if let Some(given) = &opts.base {
        let file = dir.join("worker-0.h5");
        std::fs::copy(given, &file).with_context(|| format!("copying {}", given.display()))?;
        let layout = Layout::of(&file).with_context(|| format!("reading the base checkpoint {}", file.display()))?;
        return Ok(Base { file, layout, revision: format!("given base {}", given.display()) });
    }
    let args = ["train", "--config", "base.toml", "--out", "run", "--quiet", "--threads", "1", "--golden-dir", "golden"];
    let inv = Invocation { program: opts.resilab.clone(), args: args.iter().map(OsString::from).collect(), dir: dir.clone() };
    let limits = Limits { time: Duration::from_secs(600), ..opts.limits.clone() };
    let done = exec::run(&inv, &limits).with_context(|| format!("running {}", opts.resilab.display()))?;
    if done.status.is_none_or(|s| !s.success()) {
        bail!("the base run failed ({}): {}\n{}", inv.shell_line(), done.stderr.trim(), status_text(done.status));
    }
    let file = dir.join("run/checkpoints").join(step_dir_name()).join("worker-0.h5");
    let layout = Layout::of(&file).with_context(|| format!("reading the base checkpoint {}", file.display()))?;
    let revision = revision_of(&dir.join("run/summary.json")).unwrap_or_else(|| "unknown".into());
    Ok(Base { file, layout, revision })
}

fn status_text(status: Option<std::process::ExitStatus>) -> String {
    status.map_or("timed out".into(), |s| s.to_string())
}

/// The `git_revision` a run's `summary.json` records (at its top level or one level down).
fn revision_of(summary: &Path) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(summary).ok()?).ok()?;
    let found = v.get("git_revision").or_else(|| v.as_object()?.values().find_map(|x| x.get("git_revision")))?;
    found.as_str().map(str::to_string)
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("{}", path.display()))
}

/// Writes case `index` of `target`'s inputs into `dir` (which must exist) and returns it. The
/// same seed, target and index give the same inputs in any directory.
pub fn make_case(opts: &Options, base: &Base, target: Target, index: usize, dir: &Path) -> anyhow::Result<Case> {
    if let Some(case) = crate::collide::case(opts, target, index, dir)? {
        return Ok(case);
    }
    if target == Target::Import {
        return import_case(opts, index, dir);
    }
    let mut rng = case_rng(opts.seed, target, index);
    let strs = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
    let train = ["--out", "out", "--quiet", "--threads", "1", "--golden-dir", "golden"];
    if target == Target::Config {
        let base = base_config();
        let m = TextMutation::draw(&mut rng, &base);
        write(&dir.join("config.toml"), &m.apply(&base))?;
        let args = strs(&[&["train", "--config", "config.toml"][..], &train[..]].concat());
        let inv = Invocation { program: opts.resilab.clone(), args, dir: dir.to_path_buf() };
        return Ok(Case { mutation: m.to_string(), invocation: inv, inputs: vec![dir.join("config.toml")] });
    }
    let step = dir.join(step_dir_name());
    std::fs::create_dir_all(&step).with_context(|| format!("{}", step.display()))?;
    let file = step.join("worker-0.h5");
    let m = FileMutation::draw(&mut rng, &base.layout);
    let (mutation, victims) = match hostile_file(opts, index)? {
        Some(src) => (format!("hostile corpus file {}", src.display()), place_hostile(&src, &file, dir)?),
        None => {
            std::fs::copy(&base.file, &file).with_context(|| format!("{}", file.display()))?;
            m.apply_to_file(&file).with_context(|| format!("mutating {}: {m}", file.display()))?;
            (m.to_string(), Vec::new())
        }
    };
    let rel = format!("{}/worker-0.h5", step_dir_name());
    let (args, mut inputs) = match target {
        Target::Inspect => (strs(&["inspect", rel.as_str()]), vec![file]),
        Target::Probe => (strs(&["__probe", rel.as_str()]), vec![file]),
        Target::Eval => (strs(&["eval", rel.as_str(), "--threads", "1"]), vec![file]),
        Target::Diff => {
            std::fs::copy(&base.file, dir.join("original.h5")).with_context(|| format!("{}", dir.display()))?;
            (strs(&["diff", "original.h5", rel.as_str()]), vec![dir.join("original.h5"), file])
        }
        Target::Inject => {
            write(&dir.join("inj.toml"), INJECTOR_CONFIGS[index % INJECTOR_CONFIGS.len()])?;
            let seed = index.to_string();
            let args = [
                "inject",
                "--config",
                "inj.toml",
                "--file",
                rel.as_str(),
                "--output",
                "out.h5",
                "--log",
                "out.log.jsonl",
                "--seed",
                seed.as_str(),
            ];
            (strs(&args), vec![dir.join("inj.toml"), file])
        }
        Target::Resume | Target::Config | Target::Writers | Target::FullDisk | Target::Import => {
            let cfg = base_config().replace("\nsteps = 4\n", &format!("\nsteps = {}\n", CHECKPOINT_STEP + 2));
            write(&dir.join("resume.toml"), &cfg)?;
            let name = step_dir_name();
            let resume = ["train", "--config", "resume.toml", "--resume", name.as_str(), "--set", "checkpoint.on_mismatch=\"load\""];
            (strs(&[&resume[..], &train[..]].concat()), vec![dir.join("resume.toml"), step])
        }
    };
    inputs.extend(victims);
    Ok(Case { mutation, invocation: Invocation { program: opts.resilab.clone(), args, dir: dir.to_path_buf() }, inputs })
}

/// Whether a `train` run killed at the time limit was training: its `metrics.csv` has rows.
/// A mutated config may ask for billions of steps, which is no hang.
fn was_training(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("out/metrics.csv")).is_ok_and(|t| t.lines().count() > 1)
}

/// Runs case `index` of `target` in `<scratch>/cases/<target>-<index>` (deleted afterwards).
pub fn run_case(opts: &Options, base: &Base, target: Target, index: usize) -> anyhow::Result<CaseResult> {
    let dir = opts.scratch.join("cases").join(format!("{target}-{index}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
    if let Some(r) = crate::collide::run(opts, target, index, &dir)? {
        std::fs::remove_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
        return Ok(r);
    }
    let case = make_case(opts, base, target, index, &dir)?;
    let before: Vec<Option<u64>> = case.inputs.iter().map(|p| exec::digest(p)).collect();
    let done = exec::run(&case.invocation, &opts.limits).with_context(|| case.invocation.shell_line())?;
    let after: Vec<Option<u64>> = case.inputs.iter().map(|p| exec::digest(p)).collect();
    let observed = Observed { status: done.status, stderr: done.stderr.clone(), input_modified: before != after };
    let mut class = classify(&observed);
    if class == Class::Hang && target == Target::Config && was_training(&dir) {
        class = Class::Ok;
    }
    std::fs::remove_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
    Ok(CaseResult {
        target,
        index,
        class,
        mutation: case.mutation,
        command_line: case.invocation.shell_line(),
        stderr: done.stderr,
        seconds: done.seconds,
    })
}

/// Counts of one command's cases by class.
#[derive(Clone, Debug)]
pub struct Tally {
    /// The command.
    pub target: Target,
    /// Cases per class (every class present, zeros included).
    pub counts: BTreeMap<Class, usize>,
    /// Summed wall-clock seconds of its cases.
    pub seconds: f64,
}

impl Tally {
    fn new(target: Target) -> Self {
        Self { target, counts: Class::ALL.into_iter().map(|c| (c, 0)).collect(), seconds: 0.0 }
    }
    /// Cases run.
    pub fn cases(&self) -> usize {
        self.counts.values().sum()
    }
    /// Cases of class `c`.
    pub fn count(&self, c: Class) -> usize {
        self.counts.get(&c).copied().unwrap_or(0)
    }
    /// Cases in a failing class.
    pub fn failures(&self) -> usize {
        Class::ALL.into_iter().filter(|c| c.is_failure()).map(|c| self.count(c)).sum()
    }
}

/// Everything a fuzzing run found.
#[derive(Clone, Debug)]
pub struct Report {
    /// One tally per command, in the order asked.
    pub tallies: Vec<Tally>,
    /// The first failing case of each command and class (lowest index), with its stderr.
    pub examples: Vec<CaseResult>,
    /// Where the kept failing inputs are.
    pub failures_dir: PathBuf,
    /// Wall-clock seconds of the whole run (the base run excluded).
    pub seconds: f64,
}

impl Report {
    /// Cases in a failing class, over every command.
    pub fn failures(&self) -> usize {
        self.tallies.iter().map(Tally::failures).sum()
    }
}

/// What the worker threads share.
struct Shared {
    tallies: BTreeMap<Target, Tally>,
    examples: BTreeMap<(Target, Class), CaseResult>,
    kept: BTreeMap<(Target, Class), usize>,
    error: Option<anyhow::Error>,
}

/// Copies a failing case's inputs (made again from its seed: the originals may have been
/// changed by the command) with its command line, stderr and mutation into
/// `<scratch>/failures/<target>-<index>-<class>/`, and points the result's command line there.
fn keep_failure(opts: &Options, base: &Base, r: &mut CaseResult) -> anyhow::Result<()> {
    let dir = opts.scratch.join("failures").join(format!("{}-{:05}-{}", r.target, r.index, r.class));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
    let case = make_case(opts, base, r.target, r.index, &dir)?;
    r.command_line = case.invocation.shell_line();
    write(&dir.join("command.sh"), &format!("#!/bin/sh\n# {}: {}\n{}\n", r.class, r.mutation, r.command_line))?;
    write(&dir.join("stderr.txt"), &r.stderr)?;
    write(&dir.join("mutation.txt"), &format!("{}\n", r.mutation))
}

/// Records one finished case; keeps its inputs if it is among the first failures of its kind.
fn record(opts: &Options, base: &Base, shared: &Mutex<Shared>, mut r: CaseResult) -> anyhow::Result<CaseResult> {
    let key = (r.target, r.class);
    let keep = {
        let mut s = shared.lock().map_err(|_| anyhow::anyhow!("a worker thread panicked"))?;
        let n = s.kept.entry(key).or_insert(0);
        let keep = r.class.is_failure() && *n < opts.keep;
        *n += usize::from(keep);
        keep
    };
    if keep {
        keep_failure(opts, base, &mut r)?;
    }
    let mut s = shared.lock().map_err(|_| anyhow::anyhow!("a worker thread panicked"))?;
    let t = s.tallies.entry(r.target).or_insert_with(|| Tally::new(r.target));
    *t.counts.entry(r.class).or_insert(0) += 1;
    t.seconds += r.seconds;
    if r.class.is_failure() && s.examples.get(&key).is_none_or(|e| e.index > r.index) {
        s.examples.insert(key, r.clone());
    }
    Ok(r)
}

/// Runs `opts.cases` cases of every command in `opts.targets` on `opts.jobs` threads, calling
/// `on_case` after each (from the thread that ran it). Stops at the first error of the harness
/// itself (a file it cannot write, a binary it cannot start); failures of the commands are
/// results, not errors.
pub fn run(opts: &Options, base: &Base, on_case: &(dyn Fn(&CaseResult) + Sync)) -> anyhow::Result<Report> {
    let start = Instant::now();
    let jobs: Vec<(Target, usize)> = (0..opts.cases).flat_map(|i| opts.targets.iter().map(move |&t| (t, i))).collect();
    let next = AtomicUsize::new(0);
    let tallies = opts.targets.iter().map(|&t| (t, Tally::new(t))).collect();
    let shared = Mutex::new(Shared { tallies, examples: BTreeMap::new(), kept: BTreeMap::new(), error: None });
    std::thread::scope(|scope| {
        for _ in 0..opts.jobs.max(1) {
            scope.spawn(|| {
                while let Some(&(target, index)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    match run_case(opts, base, target, index).and_then(|r| record(opts, base, &shared, r)) {
                        Ok(r) => on_case(&r),
                        Err(e) => {
                            next.store(jobs.len(), Ordering::Relaxed);
                            if let Ok(mut s) = shared.lock() {
                                s.error.get_or_insert(e);
                            }
                        }
                    }
                }
            });
        }
    });
    let s = shared.into_inner().map_err(|_| anyhow::anyhow!("a worker thread panicked"))?;
    if let Some(e) = s.error {
        return Err(e);
    }
    let tallies = opts.targets.iter().filter_map(|t| s.tallies.get(t).cloned()).collect();
    let examples = s.examples.into_values().collect();
    Ok(Report { tallies, examples, failures_dir: opts.scratch.join("failures"), seconds: start.elapsed().as_secs_f64() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng as _;

    #[test]
    fn probe_mutates_exactly_the_files_inspect_gets_and_names_parse() {
        for i in [0, 7, 9999] {
            let (mut a, mut b) = (case_rng(3, Target::Probe, i), case_rng(3, Target::Inspect, i));
            assert_eq!(a.random::<u64>(), b.random::<u64>());
        }
        assert_ne!(case_rng(3, Target::Eval, 1).random::<u64>(), case_rng(3, Target::Inspect, 1).random::<u64>());
        assert_eq!("probe".parse::<Target>(), Ok(Target::Probe));
        assert!(!Target::ALL.contains(&Target::Probe));
        assert!("nope".parse::<Target>().unwrap_err().contains("probe"));
    }
}
