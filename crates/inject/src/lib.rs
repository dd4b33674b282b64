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

mod bytes;
pub mod command;
pub mod config;
mod diff;
mod error;
mod file;
pub mod model;
mod paths;
pub mod run;

pub use bytes::{ByteRecord, region_intervals};
pub use command::{Done, Request, fresh_seed, inject, load_spec};
pub use config::{RawConfig, Region, Spec, TargetKind, Tries};
pub use diff::{DatasetDiff, FileDiff, LogCheck, diff};
pub use error::{Error, Result};
pub use file::{
    Header, LogLine, Output, Prepared, Replay, Report, Staged, StagedLog, Unreadable, inject_file, log_header, prepare_file,
    prepare_file_with, read_log, remove_staged, replay_file, stage_log, targets, unreadable, write_log,
};
pub use model::{FaultModel, Flip, Mode, Precision};
pub use paths::{Link, check_distinct, check_new_log, default_log, default_output, link_of, same_file};
pub use resilab_h5::Dtype;
pub use run::{Outcome, Plan, Record, Sampling, Summary, Target, inject_f32, inject_f32_as};
