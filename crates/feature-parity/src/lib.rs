//! Feature parity between CI's two builds: see this crate's `Cargo.toml`. It has no code.
