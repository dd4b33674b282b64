//! What a fuzzing case is: the commands fuzzed, the base configuration, the options of a run,
//! each case's random stream, the case and its result.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::SeedableRng as _;
use rand_chacha::ChaCha8Rng;

use crate::classify::Class;
use crate::exec::{Invocation, Limits};

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

/// The base run: the tests' tiny run ([`resilab_testkit::TINY`]: ResNet-8 at quarter width on
/// 16x16 synthetic images) for [`CHECKPOINT_STEP`] steps, SGD with momentum (so the checkpoint
/// holds optimizer state), one checkpoint at its last step. Config mutations start from this
/// text; `\nsteps = 4\n` in it sets the run's length.
pub fn base_config() -> String {
    let steps = CHECKPOINT_STEP.to_string();
    let mut text = resilab_testkit::TINY.trim_start().to_string();
    for (key, value) in
        [("train.steps", steps.as_str()), ("optimizer.momentum", "0.9"), ("checkpoint.every_steps", &steps), ("checkpoint.keep_last", "0")]
    {
        text = resilab_testkit::set(&text, key, value);
    }
    text
}

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
    /// A corpus of hostile files ([`crate::driver::corpus_files`]): every [`HOSTILE_EVERY`]th case of a file
    /// command runs on one of them, unmutated, instead of a mutated checkpoint.
    pub corpus: Option<PathBuf>,
}

/// One case in this many runs on a file of the hostile corpus (when there is one).
pub const HOSTILE_EVERY: usize = 8;

/// The files an attacker's checkpoint points to, kept beside the corpus and copied into each
/// hostile case: a command must leave them as they were.
pub const VICTIMS: [&str; 2] = ["victim.raw", "victim.h5"];

/// The files of the corpus directory `dir` whose extension is `ext`, sorted, victims excluded.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_run_is_the_tiny_run_with_momentum_and_one_checkpoint_at_its_end() {
        let text = base_config();
        // The drivers change the run's length by replacing this line.
        assert!(text.contains("\n[train]\nsteps = 4\n") && !text.contains("steps = 8"), "{text}");
        assert!(text.starts_with("seed = 7\n\n[data]\n"), "{text}");
        assert!(text.ends_with("lr = 0.05\nmomentum = 0.9\n\n[checkpoint]\nevery_steps = 4\nkeep_last = 0\n"), "{text}");
        let rest = |t: &str| t.lines().filter(|l| !l.contains("steps") && !l.contains("momentum") && !l.contains("keep_last")).count();
        assert_eq!(rest(&text), rest(resilab_testkit::TINY.trim_start()) + 2, "the tiny run's other lines, a blank line and [checkpoint]");
    }
}
