//! Fault-injection campaigns: a grid of runs (models x strategies x fault settings x workers
//! hit x seeds x repetitions) carried out by worker processes, one row per finished run in
//! `runs.jsonl` and `runs.csv`.
//!
//! A campaign directory holds `campaign.toml` (the campaign as run, overrides applied),
//! `campaign.json` (platform and start time), `runs.jsonl` (the record: one JSON object per
//! finished run, appended and flushed as each run ends), `runs.csv` (the same rows, for
//! spreadsheets), `bases/` (base checkpoints and their fault-free continuations), `golden/`
//! (golden runs of `train` campaigns), `runs/` (each `train` run's files) and `logs/` (each
//! worker process's standard error).

mod census;
mod columns;
mod command;
mod csv_record;
mod ending;
mod estimate;
mod exec;
mod fault_log;
pub mod layers;
mod merge;
mod meta;
mod metrics;
pub mod output;
mod phases;
mod spec;
mod store;
mod work;

pub use census::{Census, Part, census};
pub use columns::{WALL_CLOCK_COLUMNS, header, metric_columns};
pub use command::{human_duration, jobs_for, serve, worker_command};
pub use csv_record::{read_csv_rows, read_record, record_path};
pub use estimate::{Estimate, SetupCost, estimate};
pub use exec::{Options, Outcome, execute};
pub use fault_log::{FAULTS_CSV, FaultRow, faults_csv, read_faults_csv};
pub use merge::{Merged, merge};
pub use meta::parse_shard;
pub use metrics::{Metrics, non_finite};
pub use spec::{Axis, Campaign, GridRun, Hypothesis, HypothesisMetric, Kind, MAX_RUNS, RunSpec, SelfTest, Settings};
pub use store::{Row, read_rows, write_csv};
pub use work::{BaseGolden, Job, REPLY_PREFIX, Reply, Worker, base_dir, mean_checkpoint_s, read_json};

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The campaign as run, in its directory.
pub const CAMPAIGN_FILE: &str = "campaign.toml";
/// The record of finished runs.
pub const RUNS_JSONL: &str = "runs.jsonl";
/// The same rows as CSV.
pub const RUNS_CSV: &str = "runs.csv";
/// What a worker prints once it is ready for jobs.
pub const READY_LINE: &str = "@resilab-ready";

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Finished; its metrics are valid.
    Ok,
    /// Failed with an error (message recorded).
    Error,
    /// An altered checkpoint could not be read (structurally corrupt).
    CorruptFile,
    /// Panicked inside the worker.
    Panicked,
    /// The worker process died during the run.
    Crashed,
    /// Took longer than the timeout and was killed.
    Timeout,
    /// Its base (or golden) run failed, so it did not run.
    BaseFailed,
    /// The machine failed, not the experiment: a full, over-quota or read-only file system, or
    /// an I/O error. Never recorded: the campaign stops, and `--resume` runs it again.
    Infrastructure,
}

impl Status {
    /// The spelling in `runs.csv`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::CorruptFile => "corrupt_file",
            Status::Infrastructure => "infrastructure",
            Status::Panicked => "panicked",
            Status::Crashed => "crashed",
            Status::Timeout => "timeout",
            Status::BaseFailed => "base_failed",
        }
    }
}

/// Errors of campaigns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad campaign file, option or state of the campaign directory: only what the user
    /// gave (runtime failures have their own variants).
    #[error("{0}")]
    Config(String),
    /// A campaign worker process could not be started.
    #[error("could not start a worker process ({})", program.display())]
    WorkerStart {
        /// The program.
        program: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A campaign worker process failed, or broke the job protocol (a reply that is not one, a
    /// closed channel).
    #[error("campaign worker: {0}")]
    Worker(String),
    /// A record could not be encoded or decoded as JSON.
    #[error("{what}")]
    Json {
        /// The record or file.
        what: String,
        /// Why.
        source: serde_json::Error,
    },
    /// A CSV file could not be written.
    #[error("{path}")]
    Csv {
        /// The file.
        path: PathBuf,
        /// Why.
        source: csv::Error,
    },
    /// A base (or golden) run of the campaign left no usable output.
    #[error("{0}")]
    Base(String),
    /// A file could not be read or written. The cause is the error's source, printed once
    /// after the path by `{:#}` (or [`resilab_runner::one_line`]).
    #[error("{path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line of `runs.jsonl` is not a run record.
    #[error("{path} line {line}: not a run record")]
    Record {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// Why it does not parse.
        source: serde_json::Error,
    },
    /// A row of `runs.jsonl` is not a run of its campaign's grid, or records a run again with
    /// another result.
    #[error("{path} line {line}: {why}")]
    Row {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// A campaign directory without its record (`runs.jsonl` or `runs.csv`): a merge or a
    /// campaign's start that did not finish, not a campaign with no runs recorded.
    #[error(
        "{0}: holds {CAMPAIGN_FILE} but no record of runs ({RUNS_JSONL} or {RUNS_CSV}): a merge or a campaign start that did not finish; merge it again, or continue it with `campaign --resume`"
    )]
    NoRecord(PathBuf),
    /// An output directory given is something else.
    #[error("{what} {} is {kind}, not a directory", path.display())]
    NotADirectory {
        /// The option that named it (`--out`).
        what: String,
        /// The path.
        path: PathBuf,
        /// What it is instead (`a file`).
        kind: &'static str,
    },
    /// An altered checkpoint could not be read.
    #[error("{0}")]
    CorruptFile(String),
    /// A run failed because of the machine (a full or read-only file system, an I/O error),
    /// not the experiment: the campaign stops, the run is not recorded, and `--resume` runs it
    /// again.
    #[error(
        "the campaign stopped: {message} (the file system holding {} has {free} free). This is the machine, not the experiment: the run is not recorded, and `campaign --resume` runs it again once there is room",
        out.display()
    )]
    Machine {
        /// What the run reported.
        message: String,
        /// The campaign directory.
        out: PathBuf,
        /// The free space of its file system, in bytes (or `unknown`).
        free: String,
    },
    /// The campaign file could not be read (missing, not a regular file, over its size bound).
    #[error(transparent)]
    File(#[from] resilab_limits::FileError),
    /// The resolved campaign could not be written back as TOML.
    #[error("the campaign as TOML")]
    Toml(#[from] toml::ser::Error),
    /// A worker process was ended by TERM, INT or HUP: someone stopped the campaign. Nothing is
    /// recorded for the run it held, and the campaign stops; `--resume` runs the run again.
    #[error(
        "the campaign was interrupted: worker process {worker} was ended by {} during {during}; nothing is recorded for it, and `campaign --resume` runs it again",
        resilab_runner::interrupt::signal_name(*signal)
    )]
    Interrupted {
        /// The signal.
        signal: i32,
        /// The worker's slot (its log is `logs/worker-{worker}.log`).
        worker: usize,
        /// What it was doing.
        during: String,
    },
    /// A run failed.
    #[error(transparent)]
    Runner(#[from] resilab_runner::Error),
    /// A checkpoint failed.
    #[error(transparent)]
    Checkpoint(#[from] resilab_checkpoint::Error),
}

/// Result of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// The operating-system errors that are the machine's, not the experiment's.
const MACHINE_ERRNOS: &[(i32, &str)] =
    &[(28, "No space left on device"), (122, "Disk quota exceeded"), (30, "Read-only file system"), (5, "Input/output error")];

/// Whether `e` (or an error it wraps, or the text of one that only carries a message, as the
/// HDF5 library's do) is a full, over-quota or read-only file system or an I/O error: the
/// machine failing rather than the experiment. Returns that cause's description.
pub fn infrastructure(e: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(code) = err.downcast_ref::<std::io::Error>().and_then(std::io::Error::raw_os_error)
            && let Some((_, what)) = MACHINE_ERRNOS.iter().find(|(c, _)| *c == code)
        {
            return Some(what);
        }
        next = err.source();
    }
    infrastructure_text(&e.to_string())
}

/// [`infrastructure`] for an error known only by its text.
pub fn infrastructure_text(text: &str) -> Option<&'static str> {
    MACHINE_ERRNOS.iter().find(|(_, what)| text.contains(what)).map(|(_, what)| *what)
}
