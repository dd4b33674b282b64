//! The driver: one intact tiny checkpoint made with `resilab train`, then per case a mutated
//! copy and one command run on it, classified, with the first failing inputs kept.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rand::SeedableRng as _;
use rand_chacha::ChaCha8Rng;

use crate::classify::{Class, Observed, classify};
use crate::exec::{self, Invocation, Limits};
use crate::mutate::{FileMutation, Layout};
use crate::text::TextMutation;

/// A command the harness feeds mutated inputs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// `resilab inspect FILE`.
    Inspect,
    /// `resilab eval FILE`.
    Eval,
    /// `resilab diff ORIGINAL FILE`.
    Diff,
    /// `resilab inject --config INJ --file FILE --output OUT --log LOG --seed N`.
    Inject,
    /// `resilab train --config CFG --resume STEP_DIR` with `checkpoint.on_mismatch = "load"`.
    Resume,
    /// `resilab train --config MUTATED_CONFIG`.
    Config,
    /// `resilab __probe FILE`: the HDF5 library reading the same files as `inspect`, with no
    /// child-process guard, so its own crashes and hangs count. For comparing HDF5 builds; not
    /// in [`Target::ALL`].
    Probe,
    /// Two `resilab train` processes on one `--out` (see [`crate::collide`]); not in
    /// [`Target::ALL`].
    Writers,
    /// `resilab train` on a small tmpfs that fills (see [`crate::collide`]); needs root; not in
    /// [`Target::ALL`].
    FullDisk,
    /// `resilab import FILE.pt` on the hostile pickles of the corpus (`Options::corpus`), in
    /// turn: each must be refused and nothing written. Not in [`Target::ALL`].
    Import,
}

impl Target {
    /// Every target, in table order.
    pub const ALL: [Target; 6] = [Target::Inspect, Target::Eval, Target::Diff, Target::Inject, Target::Resume, Target::Config];

    /// The name used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Target::Inspect => "inspect",
            Target::Eval => "eval",
            Target::Diff => "diff",
            Target::Inject => "inject",
            Target::Resume => "resume",
            Target::Config => "config",
            Target::Probe => "probe",
            Target::Writers => "writers",
            Target::FullDisk => "full-disk",
            Target::Import => "import",
        }
    }

    /// The target whose random stream draws this target's mutations: `probe` mutates exactly
    /// the files `inspect` gets.
    fn stream(self) -> Target {
        if self == Target::Probe { Target::Inspect } else { self }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let known: Vec<Target> =
            Target::ALL.into_iter().chain([Target::Probe, Target::Writers, Target::FullDisk, Target::Import]).collect();
        let names: Vec<&str> = known.iter().map(|t| t.name()).collect();
        known.into_iter().find(|t| t.name() == s).ok_or_else(|| format!("unknown command `{s}` (known: {})", names.join(", ")))
    }
}

/// The checkpoint's step: the base run trains this many steps and checkpoints at the end.
pub const CHECKPOINT_STEP: u64 = 4;

/// The base run: ResNet-8 at quarter width on 16x16 synthetic images, SGD with momentum (so the
/// checkpoint holds optimizer state), one checkpoint at step [`CHECKPOINT_STEP`]. Config
/// mutations start from this text.
pub const BASE_CONFIG: &str = r#"seed = 7

[data]
source = "synthetic"
train_size = 128
test_size = 64
image_size = 16
difficulty = 0.3

[model]
arch = "resnet"
depth = 8
width = 0.25

[train]
steps = 4
batch_size = 32
log_every = 2
eval_every = 4

[optimizer]
kind = "sgd"
lr = 0.05
momentum = 0.9

[checkpoint]
every_steps = 4
keep_last = 0
"#;

/// Injector configs, used in turn: a bit range over the model's values, and raw byte flips in
/// the metadata.
pub const INJECTOR_CONFIGS: [&str; 2] = [
    "injection_tries = 10\nfirst_bit = 0\nlast_bit = 31\nlocations_to_corrupt = [\"/model\"]\n",
    "target = \"bytes\"\nbyte_region = \"metadata\"\ninjection_tries = 5\nuse_random_locations = true\n",
];

/// What a fuzzing run needs.
#[derive(Clone, Debug)]
pub struct Options {
    /// The `resilab` binary under test.
    pub resilab: PathBuf,
    /// Seed of every mutation: case `i` of command `c` draws from ChaCha8 stream `(c, i)`.
    pub seed: u64,
    /// Cases per command.
    pub cases: usize,
    /// The commands to fuzz.
    pub targets: Vec<Target>,
    /// Scratch directory: `base/` (the intact checkpoint), `cases/` (deleted as they finish),
    /// `failures/` (the kept failing inputs).
    pub scratch: PathBuf,
    /// Cases run at once.
    pub jobs: usize,
    /// Limits of each command.
    pub limits: Limits,
    /// Failing inputs kept per command and class.
    pub keep: usize,
    /// An intact worker file to mutate instead of training one, so that two binaries (two HDF5
    /// builds) can be fuzzed on the same files.
    pub base: Option<PathBuf>,
    /// A corpus of hostile files ([`corpus_files`]): every [`HOSTILE_EVERY`]th case of a file
    /// command runs on one of them, unmutated, instead of a mutated checkpoint.
    pub corpus: Option<PathBuf>,
}

/// One case in this many runs on a file of the hostile corpus (when there is one).
pub const HOSTILE_EVERY: usize = 8;

/// The files an attacker's checkpoint points to, kept beside the corpus and copied into each
/// hostile case: a command must leave them as they were.
pub const VICTIMS: [&str; 2] = ["victim.raw", "victim.h5"];

/// The files of the corpus directory `dir` whose extension is `ext`, sorted, victims excluded.
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
    write(&dir.join("import.toml"), BASE_CONFIG)?;
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

impl Options {
    /// Defaults: every command, 10 cases each, seed 1, 2 jobs, 90 s and 4 GiB per command,
    /// 3 failures kept per command and class.
    pub fn new(resilab: &Path, scratch: &Path) -> Self {
        Self {
            resilab: resilab.to_path_buf(),
            seed: 1,
            cases: 10,
            targets: Target::ALL.to_vec(),
            scratch: scratch.to_path_buf(),
            jobs: 2,
            limits: Limits { time: Duration::from_secs(90), memory_mb: Some(4096) },
            keep: 3,
            base: None,
            corpus: None,
        }
    }
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
    std::fs::write(dir.join("base.toml"), BASE_CONFIG).with_context(|| format!("{}", dir.display()))?;
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

/// The random stream of case `index` of `target`.
pub fn case_rng(seed: u64, target: Target, index: usize) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(((target.stream() as u64) << 40) | index as u64);
    rng
}

/// One case: the mutation drawn, the command line, and the inputs it must leave untouched.
#[derive(Clone, Debug)]
pub struct Case {
    /// The mutation, in words.
    pub mutation: String,
    /// The command.
    pub invocation: Invocation,
    /// Files and directories the command reads and must not change.
    pub inputs: Vec<PathBuf>,
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
        let m = TextMutation::draw(&mut rng, BASE_CONFIG);
        write(&dir.join("config.toml"), &m.apply(BASE_CONFIG))?;
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
            let cfg = BASE_CONFIG.replace("\nsteps = 4\n", &format!("\nsteps = {}\n", CHECKPOINT_STEP + 2));
            write(&dir.join("resume.toml"), &cfg)?;
            let name = step_dir_name();
            let resume = ["train", "--config", "resume.toml", "--resume", name.as_str(), "--set", "checkpoint.on_mismatch=\"load\""];
            (strs(&[&resume[..], &train[..]].concat()), vec![dir.join("resume.toml"), step])
        }
    };
    inputs.extend(victims);
    Ok(Case { mutation, invocation: Invocation { program: opts.resilab.clone(), args, dir: dir.to_path_buf() }, inputs })
}

/// The result of one case.
#[derive(Clone, Debug)]
pub struct CaseResult {
    /// The command.
    pub target: Target,
    /// The case's index.
    pub index: usize,
    /// Its class.
    pub class: Class,
    /// The mutation, in words.
    pub mutation: String,
    /// The command line (in the kept failure's directory when one was kept).
    pub command_line: String,
    /// The command's stderr.
    pub stderr: String,
    /// Wall-clock seconds of the command.
    pub seconds: f64,
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
