//! The crate's error type.

use std::path::PathBuf;

/// Errors of fault injection.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A config key has a bad value.
    #[error("config key `{key}`: {message}")]
    Config {
        /// The key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A config file could not be parsed.
    #[error("{path}: {message}", path = .path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (names unknown keys).
        message: String,
    },
    /// A location to corrupt is unusable in this file.
    #[error("{file}: location {location:?} {message}", file = .file.display())]
    Location {
        /// The location (or dataset) as configured.
        location: String,
        /// The file.
        file: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A log cannot be replayed on this file.
    #[error("{path}:{line}: {message}", path = .path.display())]
    Replay {
        /// The log.
        path: PathBuf,
        /// Line number, from 1.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {error}", path = .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        error: std::io::Error,
    },
    /// A path cannot be used as given: not a regular file, the same file as another role, a log
    /// that exists, an extension that names no format.
    #[error("{path}: {message}", path = .path.display())]
    Path {
        /// The path.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A log record could not be written as JSON.
    #[error("{path}: {error}", path = .path.display())]
    Json {
        /// The log.
        path: PathBuf,
        /// The encoder's error.
        error: serde_json::Error,
    },
    /// HDF5 refused.
    #[error(transparent)]
    H5(#[from] resilab_h5::Error),
    /// The request cannot be carried out as given; the message says what to change.
    #[error("{0}")]
    Usage(String),
    /// Datasets an injection would target cannot be read; the message names them.
    #[error("{file}: {message}", file = .file.display())]
    Unreadable {
        /// The file.
        file: PathBuf,
        /// Which datasets, and what to do.
        message: String,
    },
    /// A file failed the check run before it is opened (see [`command::FileCheck`]).
    #[error("{0}")]
    Check(String),
    /// A file a config or flag names is not a regular file, or is longer than its format or
    /// the memory budget allows.
    #[error(transparent)]
    File(#[from] resilab_limits::FileError),
    /// The attempts asked for need more memory for their records than the budget leaves.
    #[error(transparent)]
    Budget(#[from] resilab_limits::Error),
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;
