//! Whether the memory a configuration value asks for fits the budget, checked before anything is
//! allocated: an absurd size (`train_size = 1000000000000`) is then an error that names its key
//! instead of an aborted allocation. Every crate that sizes a buffer from a configuration value
//! asks [`check_memory`]; the budget itself is [`resilab_limits`]'s (`RESILAB_MAX_MEMORY`, or
//! half of the machine's memory).

pub use resilab_limits::{Budget, Error, checked_product, human_bytes, memory_budget};

/// Checks that `bytes` (`None`: more than a 64-bit count holds, an overflow while computing it)
/// fit in the memory budget. The error is one line naming `key = value`, the bytes it would
/// need and the budget.
pub fn check_memory(key: &str, value: &dyn std::fmt::Display, bytes: Option<u64>, what: &str) -> resilab_limits::Result<()> {
    resilab_limits::check(key, value, bytes, what)
}
