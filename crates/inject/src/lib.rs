//! Bit-flip fault injection: one fault model, applied to HDF5 checkpoint files and to
//! in-memory tensors.
//!
//! - [`model`]: how one value is corrupted (bit range with burst, bit mask, scaling factor; at
//!   16/32/64-bit or the stored precision; sign and NaN rules; integers as the published
//!   injector treats them). Bit numbering is explained there.
//! - [`run`]: where attempts land (per tensor or per element, with a probability), the record
//!   each leaves, and [`inject_f32`] for tensors in memory.
//! - [`config`]: the published injector's YAML keys (in YAML or TOML) and resilab's own.
//! - [`inject_file`], [`replay_file`]: checkpoint alteration through the HDF5 API, or single bit
//!   flips in the file's bytes (metadata included), always into a staged copy renamed over the
//!   output, with a JSON-lines log ([`write_log`]) that [`replay_file`] redoes exactly.
//! - [`diff()`]: what differs between two files, value by value and bit by bit.
//!
//! ```
//! use resilab_inject::{FaultModel, Mode, Plan, Sampling, inject_f32};
//! let mut weights = vec![0.5f32; 1000];
//! let plan = Plan {
//!     model: FaultModel { mode: Mode::BitRange { first: Some(1), last: Some(1), burst: 1 }, allow_sign_change: false, ..Default::default() },
//!     probability: 1.0,
//!     attempts: 3,
//!     sampling: Sampling::PerElement,
//! };
//! let records = inject_f32(&plan, &mut [("fc.weight", &mut weights[..])], 42);
//! assert_eq!(records.len(), 3);
//! assert!(records.iter().all(|r| r.bits_reference == [1] && r.bits_ieee == [30]));
//! ```

use std::path::PathBuf;

mod bytes;
pub mod command;
pub mod config;
mod diff;
mod file;
pub mod model;
mod paths;
pub mod run;

pub use bytes::{ByteRecord, region_intervals};
pub use command::{Done, Request, inject, load_spec};
pub use config::{RawConfig, Region, Spec, TargetKind, Tries};
pub use diff::{DatasetDiff, FileDiff, LogCheck, diff};
pub use file::{
    Header, LogLine, Output, Prepared, Replay, Report, Staged, StagedLog, inject_file, log_header, prepare_file, read_log, remove_staged,
    replay_file, stage_log, targets, write_log,
};
pub use model::{FaultModel, Flip, Mode, Precision};
pub use paths::{check_distinct, default_log, default_output, same_file};
pub use run::{Outcome, Plan, Record, Sampling, Summary, Target, inject_f32};

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
    #[error("{path}: {message}", path = .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's message.
        message: String,
    },
    /// HDF5 refused.
    #[error(transparent)]
    H5(#[from] resilab_h5::Error),
    /// The request cannot be carried out as given; the message says what to change.
    #[error("{0}")]
    Usage(String),
    /// A file failed the check run before it is opened (see [`command::FileCheck`]).
    #[error("{0}")]
    Check(String),
}

/// A seed from the operating system's entropy, for runs given none (it is logged).
pub fn fresh_seed() -> u64 {
    use rand::Rng;
    rand::rng().random()
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;
