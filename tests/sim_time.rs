//! No committed table shows an overhead that cannot be. Simulated time is deterministic (every
//! preset that reports it runs on modelled compute), so a run with faults never ends below its
//! golden run's simulated time, except where fewer workers made its steps shorter (a shrunk
//! job); and a run whose strategy gave up (`failed`) has no overhead at all.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::csv_records as read;

type Record = BTreeMap<String, String>;

/// The workers (or stages) a preset's runs start with: the `parallel.workers` axis, else the
/// `[base]` table's `parallel.workers` or `parallel.stages` in its `campaign.toml`, else 1.
fn workers_at_start(dir: &Path, r: &Record) -> u64 {
    if let Some(w) = r.get("parallel.workers") {
        return w.parse().unwrap();
    }
    let text = std::fs::read_to_string(dir.join("campaign.toml")).unwrap();
    let find = |key: &str| {
        text.lines()
            .find_map(|l| l.split_once(&format!("{key} = ")).map(|(_, v)| v.split([',', ' ', '}']).next().unwrap().parse::<u64>().unwrap()))
    };
    find("workers").or_else(|| find("stages")).unwrap_or(1)
}

#[test]
fn no_committed_run_ends_below_its_golden_runs_simulated_time_unless_it_lost_workers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/paper");
    let mut checked = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(runs) = csv::Reader::from_path(dir.join("runs.csv")).map(|_| read(&dir.join("runs.csv"))) else { continue };
        for r in runs.iter().filter(|r| r.get("sim_overhead_frac").is_some_and(|v| !v.is_empty())) {
            let name = dir.file_name().unwrap().to_string_lossy();
            assert_ne!(r.get("failed").map(String::as_str), Some("true"), "{name} run {}: a failed run has an overhead", r["id"]);
            let overhead: f64 = r["sim_overhead_frac"].parse().unwrap();
            let shrunk = r.get("workers_end").is_some_and(|w| !w.is_empty() && w.parse::<u64>().unwrap() < workers_at_start(&dir, r));
            assert!(overhead >= -1e-12 || shrunk, "{name} run {}: simulated overhead {overhead} with all its workers", r["id"]);
            checked += 1;
        }
    }
    assert!(checked > 1000, "only {checked} runs with a simulated overhead");
}
