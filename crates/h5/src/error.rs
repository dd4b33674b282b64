//! The crate's error type.

use std::path::PathBuf;

/// Errors of the HDF5 layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The HDF5 library reported an error.
    #[error("{file}: {object}: {message}")]
    Hdf5 {
        /// The file.
        file: PathBuf,
        /// The group, dataset or attribute involved.
        object: String,
        /// HDF5's message.
        message: String,
    },
    /// The file's content is not what was expected (shape, size, type).
    #[error("{file}: {object}: {message}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// The object involved.
        object: String,
        /// What is wrong.
        message: String,
    },
    /// Reading all of a dataset would need more memory than is left of the budget.
    #[error("{file}: {object}: reading it needs {}, more than is left of the memory budget of {budget}", resilab_limits::needed(*.needs))]
    OverBudget {
        /// The file.
        file: PathBuf,
        /// The dataset.
        object: String,
        /// The bytes reading it needs (`None`: more than 2^64).
        needs: Option<u64>,
        /// The budget, described when it refused (with what the process held then); boxed to
        /// keep the error small.
        budget: Box<str>,
    },
    /// The memory budget itself is unusable (`RESILAB_MAX_MEMORY` is not a size); names the file
    /// it was needed for.
    #[error("{file}: /: {source}")]
    Budget {
        /// The file.
        file: PathBuf,
        /// Why.
        source: resilab_limits::Error,
    },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;
