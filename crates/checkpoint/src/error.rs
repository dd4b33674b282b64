//! The crate's error type, and the two ways its modules build one.

use std::path::{Path, PathBuf};

/// Errors of checkpointing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// HDF5 error (names file and object).
    #[error(transparent)]
    H5(#[from] resilab_h5::Error),
    /// A value given on the command line is out of range; the message names the flag.
    #[error("{0}")]
    Usage(String),
    /// File-system error.
    #[error("{path}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A checkpoint is incomplete, of another layout, or does not fit the model.
    #[error("{path}: {message}")]
    Invalid {
        /// The checkpoint file or directory.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Reading the file crashed or hung the HDF5 library in a probe process.
    #[error("{path}: {message}")]
    Unsafe {
        /// The file.
        path: PathBuf,
        /// What happened.
        message: String,
    },
    /// Stored digests do not match the data (policy `error`).
    #[error("{path}: {} dataset(s) or attribute set(s) fail their xxh3 digest: {}", .datasets.len(), .datasets.join(", "))]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// The datasets whose digest differs.
        datasets: Vec<String>,
    },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// The [`Error::Io`] for `path`.
pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// An [`Error::Invalid`] naming `path`.
pub(crate) fn invalid(path: &Path, message: impl Into<String>) -> Error {
    Error::Invalid { path: path.to_path_buf(), message: message.into() }
}
