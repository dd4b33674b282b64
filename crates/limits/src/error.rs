//! What the memory budget refuses, as values a caller can match on.

use crate::{Budget, ENV, needed};

/// Why a size was not admitted, or why the budget itself could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// [`ENV`] is set to something that is not a size.
    #[error("{ENV} = {text:?} is not a size: give bytes, or a number with K, M, G or T (binary units), e.g. 8G")]
    NotASize {
        /// The variable's value.
        text: String,
    },
    /// What `key = value` asks for does not fit beside what the process already holds.
    #[error(transparent)]
    Budget(Box<Refusal>),
}

/// A size the budget refused ([`Error::Budget`]): the key and value that ask for it, the bytes
/// and the budget.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key} = {value} needs {} of memory for {what}, more than the budget of {}", needed(*.bytes), .budget.describe_held(*.held))]
pub struct Refusal {
    /// The configuration key (or dataset, or file) that sizes the allocation.
    pub key: String,
    /// Its value, as written in the message.
    pub value: String,
    /// The bytes it would need (`None`: more than 2^64, an overflow while computing it).
    pub bytes: Option<u64>,
    /// What the bytes are for (`its images`).
    pub what: String,
    /// The budget it was held to.
    pub budget: Budget,
    /// What the process already held when it was refused, where that is counted.
    pub held: Option<u64>,
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;
