//! `campaign.json`: the platform, start time, revision and shard of a campaign directory.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// What `campaign.json` holds.
#[derive(Serialize, Deserialize)]
pub(crate) struct Meta {
    pub(crate) platform: String,
    pub(crate) started: String,
    /// Absent in campaigns started before it was recorded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) revision: String,
    /// The shard of the grid this directory holds (`I/N`, or `all`); absent in campaigns
    /// started before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) shard: Option<String>,
    /// The revision of the data-parallel all-reduce buckets the campaign's runs made
    /// ([`resilab_train::REDUCE_PLAN_REVISION`]); absent in campaigns started before it was
    /// recorded (revision 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) all_reduce_buckets: Option<u32>,
}

/// How a shard is written in `campaign.json`: `I/N`, or `all` for the whole grid.
pub(crate) fn shard_text(shard: Option<(u64, u64)>) -> String {
    shard.map_or_else(|| "all".to_string(), |(i, n)| format!("{i}/{n}"))
}

/// Reads `campaign.json` of a campaign directory.
pub(crate) fn read_meta(dir: &Path) -> Option<Meta> {
    crate::read_json::<Meta>(&dir.join("campaign.json")).ok()
}

impl Meta {
    /// The shard recorded, parsed: `Some(None)` for the whole grid, `None` when unrecorded.
    pub(crate) fn shard(&self) -> Option<Option<(u64, u64)>> {
        match self.shard.as_deref() {
            None => None,
            Some("all") => Some(None),
            Some(s) => parse_shard(s).ok().map(Some),
        }
    }
}

/// `--shard I/N`: `(I, N)` with `0 <= I < N`.
pub fn parse_shard(s: &str) -> Result<(u64, u64)> {
    let parsed = s.split_once('/').and_then(|(i, n)| Some((i.trim().parse::<u64>().ok()?, n.trim().parse::<u64>().ok()?)));
    match parsed {
        Some((i, n)) if n > 0 && i < n => Ok((i, n)),
        // What a Slurm array task resubmitted on its own passes when it takes the count from
        // SLURM_ARRAY_TASK_COUNT, which is then 1.
        Some((i, n)) if n > 0 => Err(Error::Config(format!(
            "--shard {s}: shard {i} of {n} does not exist (I must be below N); an array task resubmitted on its own sees an array of {n} task(s): set RESILAB_SHARDS to the campaign's shard count (configs/slurm/campaign-array.sh reads it)"
        ))),
        _ => Err(Error::Config(format!("--shard {s}: expected I/N with 0 <= I < N, e.g. 0/4"))),
    }
}
