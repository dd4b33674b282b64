//! `resilab` argument lists, built by name instead of spelled out in each test.

use std::ffi::OsString;
use std::path::Path;

/// The arguments of one `resilab` command. Pass it to `Command::args` (it iterates over its
/// arguments); each method adds a flag.
///
/// ```
/// use resilab_testkit::Args;
/// let a = Args::train("c.toml".as_ref(), "out".as_ref()).resume_from("out/checkpoints".as_ref()).set("train.steps=9");
/// assert_eq!(
///     a.to_strings(),
///     ["train", "--config", "c.toml", "--out", "out", "--quiet", "--resume", "out/checkpoints", "--set", "train.steps=9"]
/// );
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Args(Vec<OsString>);

impl Args {
    /// `command --config <config> --out <out> --quiet`: a run (`train`, `campaign`, ...) of a
    /// configuration file into a directory, without progress output.
    pub fn command(command: &str, config: &Path, out: &Path) -> Self {
        Self(vec![command.into(), "--config".into(), config.into(), "--out".into(), out.into(), "--quiet".into()])
    }

    /// `train --config <config> --out <out> --quiet`.
    pub fn train(config: &Path, out: &Path) -> Self {
        Self::command("train", config, out)
    }

    /// `--resume <checkpoint>`: a run that goes on from a checkpoint (a step's directory, a
    /// checkpoint root, or one worker's file).
    pub fn resume_from(self, checkpoint: &Path) -> Self {
        self.arg("--resume").arg(checkpoint)
    }

    /// `--resume`: a campaign that goes on in its directory.
    pub fn resume(self) -> Self {
        self.arg("--resume")
    }

    /// `--golden-dir <dir>`: where golden runs are cached.
    pub fn golden(self, dir: &Path) -> Self {
        self.arg("--golden-dir").arg(dir)
    }

    /// `--set <assignment>` (`key=value`).
    pub fn set(self, assignment: &str) -> Self {
        self.arg("--set").arg(assignment)
    }

    /// One more argument, as given.
    pub fn arg(mut self, a: impl Into<OsString>) -> Self {
        self.0.push(a.into());
        self
    }

    /// More arguments, as given.
    pub fn args<A: Into<OsString>>(mut self, more: impl IntoIterator<Item = A>) -> Self {
        self.0.extend(more.into_iter().map(Into::into));
        self
    }

    /// The arguments as text (lossy where a path is not UTF-8), for messages and comparisons.
    pub fn to_strings(&self) -> Vec<String> {
        self.0.iter().map(|a| a.to_string_lossy().into_owned()).collect()
    }
}

impl IntoIterator for Args {
    type Item = OsString;
    type IntoIter = std::vec::IntoIter<OsString>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Args {
    type Item = &'a OsString;
    type IntoIter = std::slice::Iter<'a, OsString>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}
