//! Turns a run configuration into a training run and its result files.

pub mod advise;
pub mod bench;
pub mod compare;
mod config;
mod cost_profile;
mod eval;
pub mod files;
pub mod golden;
pub mod interrupt;
pub mod outcome;
pub mod platform;
pub mod project;
mod records;
mod run;
mod session;
pub mod signals;
pub mod steps;
mod text;

pub use config::{BackendKind, ImportConfig, RecoveryConfig, Rename, RunConfig, apply_override, default_out_dir, set_value, utc_stamp};
pub use eval::{Clean, EvalReport, clean_source, eval};
pub use records::{
    DataCache, FaultCounts, FileProbe, MetricsRow, ResumeRecord, RunOptions, RunStatus, SimulatedTime, Summary, WorkersSummary,
    params_digest, stage_blocks,
};
pub use run::{build_net, build_trainer, check_output_dir, train, write_atomic};
pub use text::one_line;

use std::path::{Path, PathBuf};

/// Where a run's numbers came from.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Provenance {
    /// resilab's version.
    pub resilab_version: String,
    /// Git revision the binary was built from (`-dirty` when the tree had changes).
    pub git_revision: String,
    /// Backend name.
    pub backend: String,
    /// Device description.
    pub device: String,
    /// Processor model (`/proc/cpuinfo`).
    pub cpu: String,
    /// Instruction-set level the CPU kernels dispatch on (see [`platform::isa_level`]).
    pub isa: String,
    /// CPU threads.
    pub threads: usize,
    /// Run seed.
    pub seed: u64,
    /// Command line.
    pub command: String,
}

impl Provenance {
    /// The key of the bits this run computes (golden runs are cached under it): see
    /// [`platform::bits_key`].
    pub fn platform(&self) -> String {
        platform::bits_key(&self.backend, &self.device)
    }
}

/// Errors of a run. Each names the file or key involved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Invalid configuration or option: only what the user gave (runtime failures have their
    /// own variants).
    #[error("{0}")]
    Config(String),
    /// A record could not be encoded or decoded as JSON.
    #[error("{what}")]
    Json {
        /// The record or file.
        what: String,
        /// The cause.
        source: serde_json::Error,
    },
    /// A scheduled fault could not be injected into a checkpoint file.
    #[error("fault[{entry}] on {}", file.display())]
    Inject {
        /// The `[[fault]]` entry.
        entry: usize,
        /// The checkpoint file.
        file: PathBuf,
        /// The cause.
        source: resilab_inject::Error,
    },
    /// A golden run's directory is not a finished golden run.
    #[error("{0}")]
    Golden(String),
    /// A file could not be read or written.
    #[error("{path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A CSV file could not be written.
    #[error("{path}")]
    Csv {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: csv::Error,
    },
    /// Data error.
    #[error(transparent)]
    Data(#[from] resilab_data::Error),
    /// Model error.
    #[error(transparent)]
    Model(#[from] resilab_models::Error),
    /// Training configuration error.
    #[error(transparent)]
    Train(#[from] resilab_train::Error),
    /// Checkpoint error.
    #[error(transparent)]
    Checkpoint(#[from] resilab_checkpoint::Error),
    /// What the configuration asks for does not fit the memory budget, or the budget is unusable.
    #[error(transparent)]
    Budget(#[from] resilab_limits::Error),
    /// A configuration file (or a `--config` that is not a regular file, or too long) could not
    /// be read.
    #[error(transparent)]
    File(#[from] resilab_limits::FileError),
    /// What the configuration `origin` holds failed its checks; `error` says which and why.
    #[error("{origin}: {error}")]
    In {
        /// The file (or the campaign entry) the configuration comes from.
        origin: String,
        /// The error, of its own kind ([`Error::Config`], [`Error::Budget`], ...).
        error: Box<Error>,
    },
    /// The model the configuration describes does not fit the memory budget.
    #[error("{0}")]
    Footprint(Box<Footprint>),
    /// A `[[fault]]` entry does not fit this run (its locations, messages or schedule).
    #[error(transparent)]
    Faults(#[from] resilab_faults::Error),
    /// An output path is a symbolic link: never written through.
    #[error(
        "{} is a symbolic link: resilab writes its outputs only into files of their own, never through a link (remove it, or give another directory)",
        .0.display()
    )]
    Link(PathBuf),
    /// An output file shares its content with another name (hard links).
    #[error("{} has {links} hard links: resilab writes only files of its own, never into one another name shares", .path.display())]
    HardLinks {
        /// The file.
        path: PathBuf,
        /// Its link count.
        links: u64,
    },
    /// A directory is locked by another process.
    #[error("{what} {} is in use by {holder}: wait for it to end, or give another directory", .dir.display())]
    InUse {
        /// What names the directory (`--out`, `checkpoint.dir`).
        what: String,
        /// The directory.
        dir: PathBuf,
        /// The holder's note (`process 123 (started ...)`), or `another process`.
        holder: String,
    },
    /// A directory's lock file kept being replaced while this process locked it.
    #[error(
        "{what} {}: its lock file {lock_file} was replaced {tries} times while this process locked it: another process keeps taking and releasing the directory",
        .dir.display()
    )]
    LockLost {
        /// What names the directory.
        what: String,
        /// The directory.
        dir: PathBuf,
        /// The lock file's name.
        lock_file: &'static str,
        /// How many times the lock was taken again.
        tries: usize,
    },
    /// A directory the run writes into is no longer the one it claimed (removed, or replaced by
    /// another of the same name): the run stops without touching the new one.
    #[error("{dir} {what} while this run was writing into it: stopping without touching it (another run may be using that name now)")]
    Replaced {
        /// The directory.
        dir: PathBuf,
        /// What happened to it.
        what: &'static str,
    },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// What a model the budget refuses needs ([`Error::Footprint`]), estimated before it is built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the model {model} ({trainable} trainable values) needs about {} of memory: {} for {replicas} replica(s)' parameters, gradients and \
     optimizer state and {} of activations for a batch of {batch_size}, more than the budget of {budget}: lower {lower}",
    resilab_limits::needed(*.total),
    resilab_limits::needed(*.replicas_bytes),
    resilab_limits::needed(*.activations)
)]
pub struct Footprint {
    /// The model's label.
    pub model: String,
    /// Its trainable values.
    pub trainable: u64,
    /// The bytes it needs in all (`None`: more than 2^64).
    pub total: Option<u64>,
    /// The bytes of every replica's parameters, gradients and optimizer state.
    pub replicas_bytes: Option<u64>,
    /// The replicas.
    pub replicas: u64,
    /// The bytes of a training batch's activations.
    pub activations: Option<u64>,
    /// `train.batch_size`.
    pub batch_size: usize,
    /// The budget, described.
    pub budget: String,
    /// The keys to lower.
    pub lower: &'static str,
}

impl Error {
    /// `error`, said to come from the configuration `origin`.
    pub(crate) fn within(origin: &str, error: Error) -> Self {
        Error::In { origin: origin.to_string(), error: Box::new(error) }
    }

    /// The error itself, without the configurations ([`Error::In`]) that name where it comes
    /// from: what a caller matches on.
    pub fn innermost(&self) -> &Error {
        match self {
            Error::In { error, .. } => error.innermost(),
            other => other,
        }
    }
}

/// The [`Error::Io`] for `path`.
pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// The [`Error::Csv`] for `path`.
pub(crate) fn csv_err(path: &Path) -> impl FnOnce(csv::Error) -> Error + '_ {
    move |source| Error::Csv { path: path.to_path_buf(), source }
}
