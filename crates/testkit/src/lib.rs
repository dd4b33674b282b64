//! Fixtures shared by resilab's tests, so that each exists once: the tiny run configuration
//! ([`TINY`], and [`set`] to vary it), the toy network and images that the crates' tests train
//! (`toy`, with the `toy` feature) and the `resilab` argument lists of the CLI tests ([`Args`]).
//!
//! A dev-dependency of the crates whose tests use it, and of the binary's `tests/common`; the
//! fuzzing harness takes the configuration alone (without `toy`). It depends only on
//! `resilab-data` and `resilab-models`, so it sits just above `resilab-train` in the crate
//! tour and every crate from the trainer down may use it in its tests.

mod args;
mod config;
#[cfg(feature = "toy")]
pub mod toy;

pub use args::Args;
pub use config::{TINY, set};
