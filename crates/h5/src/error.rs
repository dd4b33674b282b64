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
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;
