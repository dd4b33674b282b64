//! The crate's error type.

use std::path::{Path, PathBuf};

/// Errors of importing and exporting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file that cannot be read as what it should be; the message says what it is instead.
    #[error("{}: {message}", .path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The file's tensors do not fit the model: every missing, unexpected and wrongly shaped
    /// tensor, on one line.
    #[error("{} does not fit {model}: {problems}; {hint}", .path.display())]
    Fit {
        /// The file.
        path: PathBuf,
        /// The model's label.
        model: String,
        /// The problems, grouped.
        problems: String,
        /// What to do about them.
        hint: String,
    },
    /// A configuration value is wrong; the message names the key.
    #[error("{0}")]
    Config(String),
    /// A named file is not a regular file, or cannot be opened or read within its bounds.
    #[error(transparent)]
    Limits(#[from] resilab_limits::FileError),
    /// Another process changed the output directory's checkpoints while this import ran.
    #[error("{}: its checkpoints changed while this import ran; nothing was written", .out.display())]
    Changed {
        /// The output directory.
        out: PathBuf,
    },
    /// The memory budget is unusable (`RESILAB_MAX_MEMORY` is not a size).
    #[error(transparent)]
    Budget(#[from] resilab_limits::Error),
    /// Loading the run's configuration, data or model failed.
    #[error(transparent)]
    Runner(#[from] resilab_runner::Error),
    /// Reading or writing a checkpoint failed.
    #[error(transparent)]
    Checkpoint(#[from] resilab_checkpoint::Error),
}

impl Error {
    pub(crate) fn file(path: &Path, message: impl Into<String>) -> Self {
        Error::File { path: path.to_path_buf(), message: message.into() }
    }
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;
