//! Image classification data for resilab.
//!
//! - [`synthetic`]: a built-in, seed-deterministic, learnable 10-class image set (no files).
//! - [`cifar`]: CIFAR-10 binary batches (`data_batch_*.bin`, `test_batch.bin`).
//! - [`mnist`]: MNIST / Fashion-MNIST IDX files, raw or gzip-compressed.
//!
//! All sources produce an in-memory [`Dataset`] of `u8` images. [`Split`] pairs the train and
//! test sets with the per-channel normalisation computed on the training images, and
//! [`EpochOrder`] gives the deterministic shuffled order of an epoch, from which the
//! data-parallel shards of every global batch are cut.

pub mod cifar;
mod config;
mod dataset;
pub mod limits;
pub mod mnist;
mod order;
pub mod synthetic;

pub use config::{DEFAULT_TEST_SIZE, DEFAULT_TRAIN_SIZE, DataConfig, DataSource, NormalizeSpec, load, source_name};
pub use dataset::{Dataset, Normalization, Split};
pub use limits::check_memory;
pub use order::{EpochOrder, shard_range};

use std::path::PathBuf;

/// Errors from reading or generating data. Each names the file and the problem.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be opened or read.
    #[error("cannot read {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file exists but its content is not what the format requires.
    #[error("{path}: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A configuration value is out of range; the message names the key.
    #[error("{0}")]
    Config(String),
    /// A dataset file is not a regular file, or longer than its format or the memory budget
    /// allows.
    #[error(transparent)]
    File(#[from] resilab_limits::FileError),
    /// What a configuration value or a file's header declares does not fit the memory budget.
    #[error(transparent)]
    Budget(#[from] resilab_limits::Error),
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;
