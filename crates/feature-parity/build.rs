//! No build step: the build-dependencies in `Cargo.toml` only set features of the crates that
//! build scripts and procedural macros use (`cc`, `syn`, `proc-macro2`, ...).

fn main() {}
