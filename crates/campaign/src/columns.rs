//! The columns of the CSV files a campaign writes, from the serde structs of their rows: one
//! way for every file ([`header`]; the report's files use it too), and the metric columns of
//! `runs.csv`, with the kinds of campaign whose runs fill each ([`crate::Metrics`]).

use serde::Serialize;

use crate::metrics::{E, R, T};
use crate::spec::Kind;
use crate::{Error, Metrics, Result};

/// The columns serde gives `T`, in order: the header a CSV writer writes for a `T` (read back
/// from one written, so it is that header by construction).
pub fn header<T: Serialize + Default>() -> csv::Result<Vec<String>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.serialize(T::default())?;
    let bytes = w.into_inner().map_err(|e| csv::Error::from(e.into_error()))?;
    let mut r = csv::Reader::from_reader(bytes.as_slice());
    Ok(r.headers()?.iter().map(str::to_string).collect())
}

/// The columns measured on the wall clock: two records of one run (a rerun, a shard of an array
/// job, a resumed campaign) may differ in these and in nothing else. `scripts/slurm_check.py`
/// keeps the same list (a unit test below compares them).
pub const WALL_CLOCK_COLUMNS: &[&str] = &["wall_s", "phase_s", "golden_wall_s", "time_overhead_frac"];

/// The metric columns of a campaign of `kind`'s `runs.csv`, in order: the fields of
/// [`Metrics`] its runs fill, by their serde names (`runs.jsonl` keeps every field).
pub fn metric_columns(kind: Kind) -> Result<Vec<String>> {
    let bit = match kind {
        Kind::Restart => R,
        Kind::Eval => E,
        Kind::Train => T,
    };
    let names = header::<Metrics>().map_err(|source| Error::Csv { path: crate::RUNS_CSV.into(), source })?;
    Ok(names.into_iter().zip(Metrics::KINDS).filter(|(_, kinds)| *kinds & bit != 0).map(|(c, _)| c).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_columns_are_metric_columns() {
        let all = header::<Metrics>().unwrap();
        for c in WALL_CLOCK_COLUMNS {
            assert!(all.iter().any(|m| m == c), "{c} is not a runs.csv column");
        }
    }

    #[test]
    fn every_field_has_its_kinds_and_every_column_is_a_field_of_the_run_record() {
        let all = header::<Metrics>().unwrap();
        assert_eq!(all.len(), Metrics::KINDS.len(), "a field without kinds");
        assert!(Metrics::KINDS.iter().all(|k| *k != 0 && *k & !crate::metrics::ALL == 0));
        // The header is the record's keys: serde names, renames included.
        let record = serde_json::to_value(Metrics::default()).unwrap();
        let mut keys: Vec<&String> = record.as_object().unwrap().keys().collect();
        let mut sorted: Vec<&String> = all.iter().collect();
        keys.sort();
        sorted.sort();
        assert_eq!(keys, sorted);
        assert_eq!(all[..3], ["strategy", "failed", "steps"]);
        assert_eq!(all.last().map(String::as_str), Some("golden_key"));
    }

    /// The Slurm check compares merged shards with a single-process campaign on every column
    /// but these; a wall-clock column it does not know fails CI on timing noise.
    #[test]
    fn slurm_check_skips_the_same_columns() {
        let script = include_str!("../../../scripts/slurm_check.py");
        let line = script.lines().find(|l| l.starts_with("TIMING = {")).expect("TIMING in slurm_check.py");
        let inner = line.trim_start_matches("TIMING = {").trim_end_matches('}');
        let mut listed: Vec<&str> = inner.split(',').map(|c| c.trim().trim_matches('"')).collect();
        let mut ours = WALL_CLOCK_COLUMNS.to_vec();
        listed.sort_unstable();
        ours.sort_unstable();
        assert_eq!(listed, ours, "scripts/slurm_check.py's TIMING");
    }
}
