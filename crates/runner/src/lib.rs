//! Turns a run configuration into a training run and its result files.

pub mod advise;
pub mod bench;
pub mod compare;
mod config;
mod eval;
pub mod files;
pub mod golden;
pub mod interrupt;
pub mod platform;
pub mod project;
mod records;
mod run;
mod session;
pub mod steps;
mod text;

pub use config::{BackendKind, ImportConfig, RecoveryConfig, Rename, RunConfig, apply_override, default_out_dir, set_value, utc_stamp};
pub use eval::{Clean, EvalReport, clean_source, eval};
pub use records::{DataCache, FileProbe, MetricsRow, RunOptions, Summary, WorkersSummary, params_digest, stage_blocks};
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

/// The [`Error::Io`] for `path`.
pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// The [`Error::Csv`] for `path`.
pub(crate) fn csv_err(path: &Path) -> impl FnOnce(csv::Error) -> Error + '_ {
    move |source| Error::Csv { path: path.to_path_buf(), source }
}
