//! The crate's error type.

/// Errors of fault configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A `[[fault]]` key is missing or invalid; `key` names it (`fault[0].first_bit`).
    #[error("{key}: {message}")]
    Config {
        /// The key, with the entry's index.
        key: String,
        /// What is wrong.
        message: String,
    },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;
