//! resilab's own fuzzing harness: mutated checkpoints and configurations fed to every command
//! that reads a user's checkpoint or config, each outcome classified.
//!
//! - [`mutate`]: bit flips, truncation, zeroed blocks and overwritten bytes weighted toward a
//!   checkpoint's HDF5 metadata, and cyclic hard links (a group that contains itself).
//! - [`text`]: TOML config mutations (a flipped character, a deleted or duplicated line, a
//!   number made huge, negative or zero, an unknown key).
//! - [`exec`]: one command under a wall-clock limit (its process group killed at the limit) and
//!   an address-space limit.
//! - [`classify`]: `ok`, `clean_error`, `messy_error`, `panic`, `signal`, `hang`,
//!   `input_modified`.
//! - [`driver`]: makes a tiny checkpoint with `resilab train`, then runs `inspect`, `eval`,
//!   `diff`, `inject`, `train --resume` on mutated copies and `train` on mutated configs, in
//!   parallel, deterministically from a seed, keeping the first failing inputs.
//! - [`collide`]: the machine around a run: two writers on one directory, a file system that
//!   fills.
//! - [`report`]: the table and the CSV row per command.
//!
//! The `resilab-fuzz` binary and the root package's `tests/fuzz.rs` (a bounded slice for CI)
//! both call [`driver::prepare`] and [`driver::run`]; `scripts/fuzz.sh` runs the long fuzz.

pub mod case;
pub mod classify;
pub mod collide;
pub mod driver;
pub mod exec;
pub mod mutate;
pub mod report;
pub mod text;

pub use case::{CaseResult, Options, Target};
pub use classify::{Class, Observed, classify};
pub use driver::{Base, Report, Tally, prepare, run};
