//! What a campaign's directories hold, read without merging them: per directory (one shard
//! each) the runs recorded, by status, and those still missing; across them, the grid's runs
//! recorded, missing, and recorded in more than one directory. `resilab campaign --status` prints
//! it, and `merge` refuses parts that overlap or leave runs missing.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use crate::meta::{read_meta, shard_text};
use crate::spec::Campaign;
use crate::{CAMPAIGN_FILE, Error, RUNS_CSV, RUNS_JSONL, Result, Row, Status, read_record};

/// One campaign directory.
#[derive(Clone, Debug)]
pub struct Part {
    /// The directory.
    pub dir: PathBuf,
    /// The shard it was started as (`None`: the whole grid, or not recorded).
    pub shard: Option<(u64, u64)>,
    /// Runs of the grid in its shard.
    pub expected: u64,
    /// Runs it recorded, by status.
    pub by_status: BTreeMap<String, u64>,
    /// Runs of its shard it has not recorded, by grid index.
    pub missing: Vec<u64>,
    /// Runs it recorded of other shards of the grid (a directory resumed or merged into; they
    /// count in the whole grid, not in its shard).
    pub outside: u64,
}

impl Part {
    /// Runs of its shard recorded, one per grid index.
    pub fn recorded(&self) -> u64 {
        self.by_status.values().sum()
    }
}

/// A campaign's directories taken together.
#[derive(Clone, Debug)]
pub struct Census {
    /// The campaign's name.
    pub name: String,
    /// Runs in the grid.
    pub grid: u64,
    /// Each directory, in the order given.
    pub parts: Vec<Part>,
    /// Each run recorded, by grid index: the first directory's row.
    pub rows: BTreeMap<u64, Row>,
    /// Runs of the grid no directory recorded, by grid index.
    pub missing: Vec<u64>,
    /// Runs recorded by more than one directory with different results: the parts overlap.
    pub conflicting: Vec<String>,
}

/// The campaign file of a campaign directory, as run.
pub(crate) fn campaign_text(dir: &Path) -> Result<String> {
    let p = dir.join(CAMPAIGN_FILE);
    std::fs::read_to_string(&p).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => Error::Config(format!("{}: not a campaign directory (it has no {CAMPAIGN_FILE})", dir.display())),
        _ => Error::Io { path: p, source },
    })
}

/// Reads the directories `dirs`, which must hold the same campaign. Every row is checked
/// against the grid ([`read_rows`]), and runs are counted per grid index, never by rows.
pub fn census(dirs: &[PathBuf]) -> Result<(Census, Campaign, String)> {
    let Some(first) = dirs.first() else { return Err(Error::Config("name at least one campaign directory".into())) };
    let text = campaign_text(first)?;
    let campaign = Campaign::parse(&text, &[], &first.join(CAMPAIGN_FILE).display().to_string())?;
    let grid = campaign.len();
    let mut census =
        Census { name: campaign.name(), grid, parts: Vec::new(), rows: BTreeMap::new(), missing: Vec::new(), conflicting: Vec::new() };
    for dir in dirs {
        if campaign_text(dir)? != text {
            return Err(Error::Config(format!("{} holds a different campaign from {}", dir.display(), first.display())));
        }
        let shard = read_meta(dir).and_then(|m| m.shard()).flatten();
        let in_shard = |i: u64| shard.is_none_or(|(s, n)| i % n == s);
        let expected = match shard {
            None => grid,
            Some((s, n)) => grid.saturating_sub(s).div_ceil(n),
        };
        let mut part = Part { dir: dir.clone(), shard, expected, by_status: BTreeMap::new(), missing: Vec::new(), outside: 0 };
        let mut held = HashSet::new();
        for r in record(dir, &campaign)? {
            held.insert(r.index);
            if in_shard(r.index) {
                *part.by_status.entry(r.status.name().to_string()).or_default() += 1;
            } else {
                part.outside += 1;
            }
            match census.rows.get(&r.index) {
                Some(first) if !crate::store::same_result(first, &r) => census.conflicting.push(r.id.clone()),
                Some(_) => {}
                None => {
                    census.rows.insert(r.index, r);
                }
            }
        }
        part.missing = (0..grid).filter(|&i| in_shard(i) && !held.contains(&i)).collect();
        census.parts.push(part);
    }
    census.missing = (0..grid).filter(|i| !census.rows.contains_key(i)).collect();
    Ok((census, campaign, text))
}

/// The rows of the campaign directory `dir`, which must hold its record: `runs.jsonl`, or
/// `runs.csv` alone (the committed form of a study, [`read_record`]). A directory with the
/// campaign file and neither is a merge or a start that did not finish, not a campaign with
/// no runs recorded.
fn record(dir: &Path, campaign: &Campaign) -> Result<Vec<Row>> {
    if !dir.join(RUNS_JSONL).exists() && !dir.join(RUNS_CSV).exists() {
        return Err(Error::NoRecord(dir.to_path_buf()));
    }
    read_record(dir, campaign)
}

impl Census {
    /// Runs recorded, and of those not `ok`.
    pub fn recorded(&self) -> (u64, u64) {
        (self.rows.len() as u64, self.rows.values().filter(|r| r.status != Status::Ok).count() as u64)
    }

    /// The report of `resilab campaign --status`: one line per directory, then the whole grid.
    pub fn text(&self) -> String {
        let mut lines = vec![format!("campaign {}: {} runs in the grid", self.name, self.grid)];
        for p in &self.parts {
            let statuses: Vec<String> = p.by_status.iter().map(|(k, v)| format!("{v} {k}")).collect();
            let mut missing = if p.missing.is_empty() { "complete".to_string() } else { format!("{} missing", p.missing.len()) };
            if p.outside > 0 {
                missing.push_str(&format!(", and {} run(s) of other shards", p.outside));
            }
            lines.push(format!(
                "  {}  shard {}: {} of {} recorded ({}), {missing}",
                p.dir.display(),
                shard_text(p.shard),
                p.recorded(),
                p.expected,
                if statuses.is_empty() { "none".to_string() } else { statuses.join(", ") }
            ));
        }
        let (recorded, not_ok) = self.recorded();
        let mut all = format!("all: {recorded} of {} runs recorded ({not_ok} not ok), {} missing", self.grid, self.missing.len());
        if !self.missing.is_empty() {
            let shown: Vec<String> = self.missing.iter().take(8).map(u64::to_string).collect();
            all.push_str(&format!(" (grid index {}{})", shown.join(", "), if self.missing.len() > 8 { ", ..." } else { "" }));
        }
        if !self.conflicting.is_empty() {
            all.push_str(&format!(
                "; {} run(s) recorded twice with different results: {}",
                self.conflicting.len(),
                self.conflicting.join(", ")
            ));
        }
        lines.push(all);
        lines.join("\n")
    }
}
