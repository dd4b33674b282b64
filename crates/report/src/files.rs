//! What a report writes, and how: never through a link.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// What [`crate::report`] wrote.
#[derive(Clone, Debug, Default)]
pub struct Written {
    /// Cells reported.
    pub cells: usize,
    /// Runs read.
    pub runs: usize,
    /// Files written.
    pub files: Vec<PathBuf>,
}

/// Writes `text` to `path`, creating its directory.
pub(crate) fn write(path: &Path, text: &str) -> Result<PathBuf> {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).map_err(|source| Error::Io { path: p.to_path_buf(), source })?;
    }
    // Never through a link: a link in the report's directory is an error naming it.
    let mut f = resilab_runner::files::create_output(path)?;
    std::io::Write::write_all(&mut f, text.as_bytes()).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    Ok(path.to_path_buf())
}
