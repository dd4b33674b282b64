//! Every N-EV, NaN and RWC cell of committed presets (and NaN <= N-EV in each), recomputed from their `runs.csv` alone
//! with the rules stated in their `report.md`, written out here a second time on purpose (this
//! test shares no code with the report): a reader with a spreadsheet gets the same counts as
//! `cells.csv`. It also checks that each run's recorded `nev` and `collapsed` flags say what its
//! evidence columns say, and that no committed comparison carries a Wald interval (one of zero
//! width, or one that leaves [-100, 100] points for a rate).

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::csv_records as read;

type Record = BTreeMap<String, String>;

fn num(r: &Record, key: &str) -> Option<f64> {
    r.get(key).filter(|v| !v.is_empty()).map(|v| v.parse::<f64>().unwrap_or_else(|e| panic!("{key} = {v:?}: {e}")))
}

/// The report's rules, from docs/metrics.md as `report.md` states them.
struct Judged {
    nan: bool,
    nev: bool,
    step_altered: bool,
    rwc: bool,
    rwc_all: Option<bool>,
}

fn judge(r: &Record, chance: f64, tolerance_points: f64) -> Judged {
    let bad = |k: &str| num(r, k).is_some_and(|v| !v.is_finite());
    let counts = ["param_non_finite", "buffer_non_finite", "optim_non_finite"].iter().map(|k| num(r, k).unwrap()).sum::<f64>();
    let largest = ["param_max_abs", "buffer_max_abs", "optim_max_abs"].iter().map(|k| num(r, k).unwrap()).fold(0.0, f64::max);
    let nan = bad("final_loss") || bad("final_train_loss") || counts > 0.0;
    let nev = nan || largest > num(r, "extreme_threshold").unwrap();
    let step_altered = r["base_step"] != r["restart_step"];
    let golden = num(r, "golden_acc_frac").unwrap();
    let within = |acc: f64| (golden - acc).abs() <= tolerance_points / 100.0 + 1e-9;
    let usable = |acc: f64| !nev && !step_altered && acc > chance + 0.05 + 1e-9 && golden - acc <= 0.05 + 1e-9;
    let acc = num(r, "final_acc_frac").unwrap();
    let rwc = usable(acc) && within(acc);
    // Each replica against the same replica's reference where the row has both lists; rows of
    // earlier revisions: the worst and best replica against rank 0's golden accuracy.
    let list = |k: &str| r.get(k).filter(|v| !v.is_empty()).map(|v| v.split(';').map(|x| x.parse::<f64>().unwrap()).collect::<Vec<f64>>());
    let rwc_all = match (list("replica_accs_frac"), list("golden_replica_accs_frac")) {
        (Some(accs), Some(refs)) => {
            let worst = accs.iter().copied().fold(f64::INFINITY, f64::min);
            let mine = |a: f64, g: f64| (g - a).abs() <= tolerance_points / 100.0 + 1e-9;
            Some(!nev && !step_altered && worst > chance + 0.05 + 1e-9 && accs.iter().zip(&refs).all(|(a, g)| mine(*a, *g)))
        }
        _ => match (num(r, "replica_acc_min_frac"), num(r, "replica_acc_max_frac")) {
            (Some(min), Some(max)) => Some(usable(min) && within(min) && within(max)),
            _ => None,
        },
    };
    Judged { nan, nev, step_altered, rwc, rwc_all }
}

fn recompute(preset: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/paper").join(preset);
    let runs = read(&dir.join("runs.csv"));
    let cells = read(&dir.join("cells.csv"));
    let axes: Vec<String> =
        cells[0].keys().filter(|k| runs[0].contains_key(*k) && !["seed", "rep", "status"].contains(&k.as_str())).cloned().collect();
    let axes: Vec<String> =
        axes.into_iter().filter(|k| k.starts_with("inject") || k == "model" || k == "workers_hit" || k.starts_with("parallel")).collect();
    assert!(!axes.is_empty(), "{preset}: no axes");
    // Synthetic data of 10 classes, RWC tolerance 0.5 points (the presets' settings).
    let (chance, tolerance) = (0.1, 0.5);
    let mut tally: BTreeMap<Vec<String>, [u64; 6]> = BTreeMap::new();
    for r in runs.iter().filter(|r| r["status"] == "ok") {
        let j = judge(r, chance, tolerance);
        assert_eq!(r["nev"] == "true", j.nev, "{preset} run {}: its nev flag disagrees with its evidence", r["id"]);
        assert_eq!(r["collapsed"] == "true", j.nan, "{preset} run {}: its collapsed flag disagrees with its evidence", r["id"]);
        let t = tally.entry(axes.iter().map(|a| r[a].clone()).collect()).or_default();
        t[0] += 1;
        t[1] += u64::from(j.nan && !j.step_altered);
        t[2] += u64::from(j.nev && !j.step_altered);
        t[3] += u64::from(j.rwc);
        t[4] += u64::from(j.rwc_all == Some(true));
        t[5] += u64::from(j.step_altered);
    }
    assert_eq!(tally.len(), cells.len(), "{preset}: cells");
    for c in &cells {
        let key: Vec<String> = axes.iter().map(|a| c[a].clone()).collect();
        let t = tally[&key];
        let count = |k: &str| c[k].parse::<u64>().unwrap_or(0);
        let got = [count("ok"), count("nan"), count("nev"), count("rwc"), count("rwc_all"), count("step_altered")];
        assert!(got[1] <= got[2], "{preset} cell {key:?}: NaN {} above N-EV {}", got[1], got[2]);
        assert_eq!(got, t, "{preset} cell {key:?}: cells.csv [ok, nan, nev, rwc, rwc_all, step_altered] against runs.csv");
    }
}

fn no_wald_intervals(preset: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/paper").join(preset).join("comparisons.csv");
    for c in read(&path) {
        if c["test"] != "two_proportions" {
            continue;
        }
        let (lo, hi) = (num(&c, "ci_lo").unwrap(), num(&c, "ci_hi").unwrap());
        assert!(hi > lo, "{preset}: a zero-width interval for a rate: {c:?}");
        assert!((-100.0..=100.0).contains(&lo) && (-100.0..=100.0).contains(&hi), "{preset}: an interval beyond ±100 points: {c:?}");
    }
}

#[test]
fn the_nev_presets_cells_are_recomputed_from_its_runs() {
    recompute("nev");
    no_wald_intervals("nev");
}

#[test]
fn table_4s_cells_are_recomputed_from_its_runs_on_every_replica() {
    recompute("dp-one-flip");
    no_wald_intervals("dp-one-flip");
    let cells = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("results/paper/dp-one-flip-paper/cells.csv"));
    assert_eq!(cells.len(), 8, "Table 4 has eight rows: ResNet and VGG, DDP and Horovod, model and optimizer");
    assert!(
        cells
            .iter()
            .all(|c| c["ok"].parse::<u64>().unwrap() + c["not_ok"].split(':').nth(1).map_or(0, |n| n.parse::<u64>().unwrap()) == 180)
    );
}

#[test]
fn every_checkpoint_alteration_presets_golden_runs_lie_between_60_and_92_percent() {
    // The presets that restart from an altered checkpoint: room for RWC and AccR to move in
    // both directions on every seed and model (one of nev-factors' VGG bases reaches 90.1% in
    // its rerun of 2026-11-27 on AVX-512 numerics: the bound is a range, not a target).
    for preset in
        ["nev", "nev-paper", "nev-factors", "bits", "precision", "masks", "dp-one-flip", "dp-one-flip-paper", "dp-many-flips", "pipeline"]
    {
        let runs = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("results/paper").join(preset).join("runs.csv"));
        for r in &runs {
            if let Some(g) = num(r, "golden_acc_frac") {
                assert!((0.6..=0.92).contains(&g), "{preset} run {}: golden accuracy {g}", r["id"]);
            }
        }
    }
}

#[test]
fn no_committed_cell_counts_more_nan_than_nev_runs() {
    // A NaN run is an N-EV run, and step-altered runs leave both numerators. A `train` study
    // recorded before a failed run became its own class (its runs.csv has no `crashes` column)
    // counted every failed run as NaN.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/paper");
    let mut checked = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if !dir.join("cells.csv").is_file() {
            continue;
        }
        let runs = read(&dir.join("runs.csv"));
        let train = std::fs::read_to_string(dir.join("campaign.toml")).unwrap().contains("kind = \"train\"");
        assert!(!train || runs[0].contains_key("crashes"), "{name}: a train study without the failed class; rerun it");
        for c in read(&dir.join("cells.csv")) {
            let (Some(nan), Some(nev)) = (c.get("nan").filter(|v| !v.is_empty()), c.get("nev").filter(|v| !v.is_empty())) else { continue };
            let (nan, nev) = (nan.parse::<u64>().unwrap(), nev.parse::<u64>().unwrap());
            assert!(nan <= nev, "{name}: a cell with NaN {nan} above N-EV {nev}: {c:?}");
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} cells");
}
