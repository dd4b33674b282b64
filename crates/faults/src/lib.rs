//! Mid-run faults for resilab.
//!
//! A run's `[[fault]]` entries, parsed once when the configuration is read ([`Faults`]),
//! become a list of events ([`schedule`]): explicit faults at a step, or random arrivals per
//! worker with a mean time between failures, drawn from the fault seed (separate from the training seed, so repetitions vary the faults over
//! one golden run). A [`FaultInjector`] implements the training crate's hooks and applies each
//! event at its step to the chosen worker's weights, gradients (before or after the
//! all-reduce), optimizer state or pipeline messages, with the injector's own fault model
//! (the same keys, bit numbering and records as `resilab inject`), or crashes the worker
//! (fail-stop: its contribution is lost until recovery respawns it). Every injected fault is
//! logged. The detectors that look for the damage are `resilab_recovery::detect`'s.

mod error;
mod hook;
mod list;
mod schedule;

pub use error::{Error, Result};
pub use hook::{FaultInjector, FaultLog};
pub use list::Faults;
pub use schedule::{
    CrashAt, FaultEntry, FaultEvent, FaultTarget, OWN_KEYS, check_messages, check_neuron_locations, check_precision,
    check_tensor_locations, schedule,
};
