//! The costs `resilab advise --from-run` reads from a finished run: its mean checkpoint write
//! and its mean training step, both measured.

use std::path::Path;

use serde::Deserialize;

use crate::{Error, Result};

/// The fields of a run's `summary.json` that give its costs.
#[derive(Debug, Deserialize)]
struct Costs {
    steps: u64,
    train_s: f64,
    checkpoints: usize,
    checkpoint_s: f64,
}

/// Mean seconds per checkpoint write and per training step of the run in `dir`.
pub fn run_costs(dir: &Path) -> Result<(f64, f64)> {
    let path = dir.join("summary.json");
    let text = std::fs::read(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
    let c: Costs =
        serde_json::from_slice(&text).map_err(|source| Error::Json { what: format!("{}: not a run summary", path.display()), source })?;
    if c.checkpoints == 0 {
        return Err(Error::Config(format!("{}: the run wrote no checkpoints, so it measured no checkpoint cost", path.display())));
    }
    if c.steps == 0 {
        return Err(Error::Config(format!("{}: the run trained no steps, so it measured no step time", path.display())));
    }
    Ok((c.checkpoint_s / c.checkpoints as f64, c.train_s / c.steps as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_that_is_not_json_is_a_json_error_naming_the_file() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("summary.json"), "steps = 3").unwrap();
        let e = run_costs(d.path()).unwrap_err();
        assert!(matches!(&e, Error::Json { what, .. } if what.ends_with("summary.json: not a run summary")), "{e:?}");
        let e = run_costs(&d.path().join("missing")).unwrap_err();
        assert!(
            matches!(&e, Error::Io { path, source } if path.ends_with("missing/summary.json") && source.kind() == std::io::ErrorKind::NotFound),
            "{e:?}"
        );
    }
}
