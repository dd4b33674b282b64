//! A preset folder's files as the README reads them: CSV tables by header name (into serde
//! structs where the columns are fixed, as [`Table`] where a campaign's axes name them),
//! `campaign.json` and `wall_s.txt`. A file that is not there reads as empty, as the report
//! of a preset that has not run yet would.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::{Error, Result};

/// The error for `path`, saying `what` is wrong with it.
pub(super) fn bad(path: &Path, what: impl Into<String>) -> Error {
    Error::Paper { path: path.to_path_buf(), what: what.into() }
}

/// The rows of the CSV file `path` as `T`, its columns matched to `T`'s fields by header name;
/// none where the file does not exist.
pub(crate) fn rows<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let mut r = csv::Reader::from_path(path).map_err(|e| bad(path, e.to_string()))?;
    resilab_text::csv_rows(&mut r).map_err(|e| bad(path, e.to_string()))
}

/// Whether the CSV file `path` exists and has a column `name`.
pub(super) fn has_column(path: &Path, name: &str) -> Result<bool> {
    if !path.exists() {
        return Ok(false);
    }
    let mut r = csv::Reader::from_path(path).map_err(|e| bad(path, e.to_string()))?;
    Ok(r.headers().map_err(|e| bad(path, e.to_string()))?.iter().any(|h| h == name))
}

/// A CSV file whose columns are known by name only: `cells.csv` starts with the campaign's
/// axes, `runs.csv` has a column per axis.
pub(super) struct Table {
    path: PathBuf,
    headers: Vec<String>,
    index: HashMap<String, usize>,
    rows: Vec<csv::StringRecord>,
}

impl Table {
    /// The CSV file `path`; no columns and no rows where it does not exist.
    pub(super) fn read(path: &Path) -> Result<Self> {
        let mut t = Self { path: path.to_path_buf(), headers: Vec::new(), index: HashMap::new(), rows: Vec::new() };
        if !path.exists() {
            return Ok(t);
        }
        let err = |e: csv::Error| bad(path, e.to_string());
        let mut r = csv::Reader::from_path(path).map_err(err)?;
        t.headers = r.headers().map_err(err)?.iter().map(String::from).collect();
        // A repeated name reads as its last column.
        t.index = t.headers.iter().enumerate().map(|(i, h)| (h.clone(), i)).collect();
        // Each cell as it was before the writer escaped it (a label `=x` is written `'=x`).
        t.rows = r.records().map(|row| row.map(|row| resilab_text::unescaped(&row))).collect::<std::result::Result<_, _>>().map_err(err)?;
        Ok(t)
    }

    /// The column names, in the file's order.
    pub(super) fn headers(&self) -> &[String] {
        &self.headers
    }

    /// Whether the file has no rows.
    pub(super) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows.
    pub(super) fn rows(&self) -> impl Iterator<Item = Rec<'_>> {
        self.rows.iter().map(move |row| Rec { table: self, row })
    }
}

/// One row of a [`Table`].
#[derive(Clone, Copy)]
pub(super) struct Rec<'a> {
    table: &'a Table,
    row: &'a csv::StringRecord,
}

impl<'a> Rec<'a> {
    /// The value in column `col`; `None` where the file has no such column.
    pub(super) fn get(&self, col: &str) -> Option<&'a str> {
        self.table.index.get(col).and_then(|&i| self.row.get(i))
    }

    /// Whether column `col` is there and not empty.
    pub(super) fn has(&self, col: &str) -> bool {
        self.get(col).is_some_and(|v| !v.is_empty())
    }

    /// The value in column `col`; an error naming the file and the column where it has none.
    pub(super) fn field(&self, col: &str) -> Result<&'a str> {
        self.get(col).ok_or_else(|| bad(&self.table.path, format!("no column {col}")))
    }

    /// The number in column `col`; an error where there is none.
    pub(super) fn float(&self, col: &str) -> Result<f64> {
        let v = self.field(col)?;
        v.trim().parse().map_err(|_| bad(&self.table.path, format!("column {col}: {v:?} is not a number")))
    }

    /// The whole number in column `col` (a count); an error where there is none.
    pub(super) fn count(&self, col: &str) -> Result<u64> {
        let v = self.field(col)?;
        v.trim().parse().map_err(|_| bad(&self.table.path, format!("column {col}: {v:?} is not a count")))
    }
}

/// What the README names from a campaign's `campaign.json`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Meta {
    /// Backend, device and CPU (`native / cpu (flex + resilab kernels r4) / ...`).
    pub(super) platform: Option<String>,
    /// When the campaign started.
    pub(super) started: Option<String>,
    /// The code revision that ran it.
    pub(super) revision: Option<String>,
    /// The revision of the data-parallel all-reduce buckets; absent before it was recorded
    /// (revision 1).
    #[serde(default)]
    pub(super) all_reduce_buckets: Option<u32>,
}

/// Whether a run of the preset folder `dir`'s campaign trains more than one data-parallel
/// worker (each run's configuration as the campaign resolves it from `campaign.toml`), so that
/// its bits depend on the all-reduce buckets; false without a `campaign.toml`.
pub(super) fn data_parallel(dir: &Path) -> Result<bool> {
    if !dir.join(resilab_campaign::CAMPAIGN_FILE).exists() {
        return Ok(false);
    }
    let campaign = resilab_campaign::Campaign::stored(dir)?;
    for index in 0..campaign.len() {
        let p = campaign.run(index)?.config.parallel;
        if p.mode == resilab_train::ParallelMode::Data && p.workers > 1 {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The `campaign.json` of the preset folder `dir`; empty where there is none.
pub(super) fn meta(dir: &Path) -> Result<Meta> {
    let path = dir.join("campaign.json");
    if !path.exists() {
        return Ok(Meta::default());
    }
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
    serde_json::from_str(&text).map_err(|e| bad(&path, e.to_string()))
}

/// The campaign's wall time in seconds (`wall_s.txt`, which `scripts/paper.sh` writes); `?`
/// where there is none.
pub(super) fn wall(dir: &Path) -> Result<String> {
    let path = dir.join("wall_s.txt");
    if !path.exists() {
        return Ok("?".to_string());
    }
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Io { path, source })?;
    Ok(text.trim().to_string())
}

/// The numerics the preset folder `dir` ran on: [`numerics`] of its `campaign.json`'s platform.
pub(super) fn numerics_of(dir: &Path) -> Result<String> {
    Ok(numerics(meta(dir)?.platform.as_deref()))
}

/// The numerics a platform string names: its backend and kernels revision, the part in its
/// first parentheses (`flex + resilab kernels r4`), which decides the bits a run computes;
/// the whole string without one, `?` without a platform.
pub(super) fn numerics(platform: Option<&str>) -> String {
    let p = platform.unwrap_or("");
    let inner = p.find('(').and_then(|open| p[open + 1..].find(')').map(|close| &p[open + 1..open + 1 + close]));
    match inner {
        Some(s) => s.to_string(),
        None if p.is_empty() => "?".to_string(),
        None => p.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preset_is_data_parallel_by_its_base_or_its_grid_of_workers() {
        let paper = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../results/paper");
        assert!(data_parallel(&paper.join("detectors")).unwrap(), "4 workers in its base");
        assert!(data_parallel(&paper.join("recovery")).unwrap(), "a grid over parallel.workers");
        assert!(!data_parallel(&paper.join("pipeline")).unwrap(), "pipeline stages");
        assert!(!data_parallel(&paper.join("precision-training")).unwrap(), "one worker");
        assert!(!data_parallel(tempfile::tempdir().unwrap().path()).unwrap(), "no campaign.toml");
    }

    #[test]
    fn numerics_is_the_first_parenthesis() {
        assert_eq!(numerics(Some("native / cpu (flex + resilab kernels r4) / AMD EPYC / x86-64-v3")), "flex + resilab kernels r4");
        assert_eq!(numerics(Some("a (b (c) d)")), "b (c");
        assert_eq!(numerics(Some("wgpu / gpu")), "wgpu / gpu");
        assert_eq!(numerics(Some("open ( only")), "open ( only");
        assert_eq!(numerics(Some("")), "?");
        assert_eq!(numerics(None), "?");
    }

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq, Default)]
    struct Labelled {
        option: String,
        value: f64,
    }

    #[test]
    fn labels_read_back_as_the_writer_was_given_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cells.csv");
        let written = vec![
            Labelled { option: "=cmd|' /C calc'!A0".into(), value: -0.5 },
            Labelled { option: "'quoted".into(), value: 1.0 },
            Labelled { option: "-rollback".into(), value: 2.0 },
        ];
        let text = crate::rows::table::<Labelled, _>(&["axis".to_string()], written.iter().map(|r| (vec![r.option.clone()], r))).unwrap();
        assert!(text.contains("'=cmd|' /C calc'!A0,'=cmd|' /C calc'!A0,-0.5"), "{text}");
        std::fs::write(&path, text).unwrap();
        let table = Table::read(&path).unwrap();
        let axis: Vec<&str> = table.rows().map(|r| r.get("axis").unwrap()).collect();
        assert_eq!(axis, ["=cmd|' /C calc'!A0", "'quoted", "-rollback"]);
        let back: Vec<Labelled> = rows::<std::collections::BTreeMap<String, String>>(&path)
            .unwrap()
            .into_iter()
            .map(|m| Labelled { option: m["option"].clone(), value: m["value"].parse().unwrap() })
            .collect();
        assert_eq!(back, written);
    }
}
