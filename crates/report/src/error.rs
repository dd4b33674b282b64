//! The crate's error type.

use std::path::PathBuf;

/// Errors of reports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The campaign directory could not be read.
    #[error(transparent)]
    Campaign(#[from] resilab_campaign::Error),
    /// The output directory could not be locked or checked.
    #[error(transparent)]
    Runner(#[from] resilab_runner::Error),
    /// A file could not be written. The cause is the error's source, printed once after the
    /// path by `{:#}`.
    #[error("{path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A plot could not be drawn.
    #[error("plot {0}")]
    Plot(String),
    /// Nothing to report.
    #[error("{0}")]
    Empty(String),
    /// A symbolic link where a report's file goes: never written through.
    #[error(
        "{} is a symbolic link: resilab writes its outputs only into files of their own, never through a link (remove it, or give another directory)",
        .0.display()
    )]
    Link(PathBuf),
    /// The output directory holds files a report does not write.
    #[error(
        "--out {} holds {name}, which a report does not write: a report replaces its directory whole, so --out must be new, empty or hold an earlier report",
        out.display()
    )]
    NotAReport {
        /// The output directory.
        out: PathBuf,
        /// The first entry a report does not write.
        name: String,
    },
    /// A table could not be written as CSV.
    #[error("csv: {0}")]
    Csv(String),
    /// The CSV writer failed; the cause is the error's source, printed after `csv` by `{:#}`.
    #[error("csv")]
    Table(#[from] csv::Error),
    /// A file of a paper preset's report (`resilab report --paper`) could not be read as one.
    #[error("{}: {what}", path.display())]
    Paper {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// `--set` could not re-price the runs (a key it does not re-price, a bad value, a run
    /// recorded without the counts it needs).
    #[error("{0}")]
    Price(String),
    /// `--power` was not a positive difference.
    #[error("--power {0}: expected a positive difference (points for rates and accuracy losses, % for overheads)")]
    Power(f64),
}

/// The text a CSV writer into memory holds.
pub(crate) fn csv_text(w: resilab_text::CsvWriter<Vec<u8>>) -> Result<String> {
    let bytes = w.into_inner().map_err(|e| Error::Table(e.into()))?;
    String::from_utf8(bytes).map_err(|e| Error::Csv(e.to_string()))
}

pub(crate) fn csv_error(e: csv::Error) -> Error {
    Error::Table(e)
}

/// Result of this crate.
pub type Result<T> = std::result::Result<T, Error>;
