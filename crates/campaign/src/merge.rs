//! `resilab merge`: the records of campaign directories (shards) joined into one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::meta::{Meta, shard_text};
use crate::output::{Staged, check_out_dir};
use crate::spec::{Campaign, Kind};
use crate::store::{csv_bytes, jsonl_bytes};
use crate::{CAMPAIGN_FILE, Error, RUNS_CSV, RUNS_JSONL, Result, Row};

/// What [`merge`] found and wrote.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Merged {
    /// Rows written.
    pub rows: usize,
    /// The platform key of each part (`campaign.json`), in the order given; `?` where unknown.
    pub platforms: Vec<String>,
    /// Rows whose base (the same base configuration) was compared with golden runs of different
    /// keys in different parts: their differences may come from the platform, not a fault.
    pub mixed_golden_rows: usize,
    /// Runs of the grid no part recorded (merged under `partial` only).
    pub missing: u64,
}

/// Merges the records of campaign directories (shards) into `out`, sorted by grid index. The
/// parts must hold the same campaign and must not overlap: a run recorded by two parts with
/// different results is an error (the same record twice, as when `out` is one of the parts, is
/// kept once). Every run of the grid must be recorded unless `partial`. Parts run on different
/// platforms are merged, and the rows whose golden keys differ for one base are counted in
/// [`Merged::mixed_golden_rows`].
pub fn merge(out: &Path, parts: &[PathBuf], partial: bool) -> Result<Merged> {
    let (census, campaign, text) = crate::census::census(parts)?;
    if !census.conflicting.is_empty() {
        return Err(Error::Config(format!(
            "{} run(s) are recorded by more than one part with different results ({}): the parts overlap; were they run with the same --shard count?",
            census.conflicting.len(),
            census.conflicting.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    if !census.missing.is_empty() && !partial {
        return Err(Error::Config(format!(
            "{} of the grid's {} runs are recorded by no part: a shard has not finished (see `resilab campaign --status {}`); resume it, or pass --partial to merge what there is",
            census.missing.len(),
            census.grid,
            parts.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" ")
        )));
    }
    let mut merged = Merged { missing: census.missing.len() as u64, ..Merged::default() };
    let mut platform: Option<Vec<u8>> = None;
    for d in parts {
        if let Ok(m) = std::fs::read(d.join("campaign.json")) {
            merged.platforms.push(serde_json::from_slice::<Meta>(&m).map_or_else(|_| "?".to_string(), |m| m.platform));
            platform.get_or_insert(m);
        } else {
            merged.platforms.push("?".into());
        }
    }
    merged.mixed_golden_rows = mixed_golden_rows(&campaign, census.rows.values());
    let rows: Vec<Row> = census.rows.into_values().collect();
    check_out_dir(out, "--out")?;
    let created = !out.exists();
    let _lock = resilab_runner::files::lock_dir(out, "--out")?;
    let written = write_merged(out, &campaign, &text, &rows, platform, parts);
    if written.is_err() && created {
        crate::output::remove_if_bare(out);
    }
    written?;
    merged.rows = rows.len();
    Ok(merged)
}

/// Writes the merged record into `out` (locked) all or nothing: every file is written under a
/// temporary name and synced, then each is renamed into place, the campaign file last. `out`
/// may be one of the parts or hold an earlier merge (with bases and logs beside the record),
/// so it is not replaced whole; a full disk leaves its earlier files as they were.
fn write_merged(out: &Path, campaign: &Campaign, text: &str, rows: &[Row], meta: Option<Vec<u8>>, parts: &[PathBuf]) -> Result<()> {
    let first = &parts[0];
    let mut staged = Staged::new(out, &[RUNS_JSONL, RUNS_CSV, crate::FAULTS_CSV, "campaign.json", CAMPAIGN_FILE])?;
    resilab_runner::check_output_dir(out, &[CAMPAIGN_FILE], "--out")?;
    if out.join(CAMPAIGN_FILE).exists() && crate::census::campaign_text(out)? != text {
        return Err(Error::Config(format!("--out {} holds a different campaign from {}", out.display(), first.display())));
    }
    let (axes, kind) = (campaign.axis_keys(), campaign.settings.kind);
    staged.write(RUNS_JSONL, &jsonl_bytes(rows)?)?;
    staged.write(RUNS_CSV, &csv_bytes(&out.join(RUNS_CSV), &axes, kind, rows)?)?;
    let ids = rows.iter().map(|r| r.id.clone()).collect();
    if let Some(faults) = crate::fault_log::merged_faults_csv(parts, &ids)? {
        staged.write(crate::FAULTS_CSV, &faults)?;
    }
    if let Some(m) = meta {
        staged.write("campaign.json", &merged_meta(&m))?;
    }
    staged.write(CAMPAIGN_FILE, text.as_bytes())?;
    staged.commit()
}

/// The first part's `campaign.json` for the merged directory: the whole grid, not its shard.
fn merged_meta(first: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<Meta>(first) {
        Ok(m) => serde_json::to_vec_pretty(&Meta { shard: Some(shard_text(None)), ..m }).unwrap_or_else(|_| first.to_vec()),
        Err(_) => first.to_vec(),
    }
}

/// Rows of bases (one base configuration: the grid point without its fault) whose runs name
/// more than one golden key.
fn mixed_golden_rows<'a>(campaign: &Campaign, rows: impl Iterator<Item = &'a Row>) -> usize {
    let mut keys: BTreeMap<String, (std::collections::BTreeSet<String>, usize)> = BTreeMap::new();
    for r in rows {
        let (Ok(spec), Some(k)) = (campaign.run(r.index), r.metrics.golden_key.as_ref()) else { continue };
        // The base a run was compared against: its golden configuration (train runs) or base key.
        let base = if campaign.settings.kind == Kind::Train {
            resilab_runner::golden::golden_config(&spec.config).to_toml()
        } else {
            spec.base_key.clone()
        };
        let e = keys.entry(base).or_default();
        e.0.insert(k.clone());
        e.1 += 1;
    }
    keys.values().filter(|(k, _)| k.len() > 1).map(|(_, n)| n).sum()
}
