//! Paired faults (common random numbers): the runs of a campaign that differ only in a paired
//! axis (`[campaign] paired`, by default the hypotheses' axes) meet the same faults. Runs a
//! tiny `train` campaign through the real CLI, with random crashes and silent flips arriving
//! over the job, and checks from its `faults.csv` and `runs.csv` that the four strategies of
//! every group met identical faults (step, worker, entry, time in the step, tensor, element and
//! bits) up to the end of the group's shortest run; that an unpaired campaign does not; and
//! that a crash met no completed bucket wherever rollback and lossy forward ended apart.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::csv_records as read;

use common::finished_campaign;

const CAMPAIGN: &str = r#"
[campaign]
kind = "train"
seeds = [3]
repetitions = 3
timeout_s = 300
PAIRED

[[campaign.hypothesis]]
name = "lossy forward costs less simulated time than rollback"
metric = "sim_overhead"
a = "rollback"
b = "lossy_forward"

[base]
data = { source = "synthetic", train_size = 128, test_size = 64, image_size = 8, classes = 4, difficulty = 0.3 }
model = { arch = "resnet", depth = 8, width = 0.25 }
train = { steps = 16, batch_size = 32, eval_every = 8 }
parallel = { workers = 4, bucket_mb = 0.004, compute = { gflops = 50.0 } }
checkpoint = { every_steps = 4 }
detect = { divergence_every = 2 }

[[base.fault]]
target = "crash"
system_mtbf_steps = 5

[[base.fault]]
target = "weights"
system_mtbf_steps = 5
injection_tries = 2
first_bit = 3
last_bit = 4
allow_sign_change = false

[grid]
"recovery.strategy" = ["none", "checkpoint_restart", "rollback", "lossy_forward"]
"#;

/// Runs the campaign with `paired` as its `[campaign] paired` line; returns its directory.
fn campaign(dir: &Path, name: &str, paired: &str) -> std::path::PathBuf {
    finished_campaign(dir, name, &CAMPAIGN.replace("PAIRED", paired), &[])
}

/// What a fault was, whatever the state it met: the columns a strategy cannot change.
const REALISATION: [&str; 10] = ["event", "step", "rank", "entry", "target", "crash_at_s", "permanent", "tensor", "index", "bits_ieee"];

/// A strategy's run in a group: its last step and its faults' realisations.
type Met = (u64, Vec<Vec<String>>);
/// Per group (seed, rep): per strategy, what its run met.
type Groups = BTreeMap<(String, String), BTreeMap<String, Met>>;

/// The groups of the campaign in `out`.
fn groups(out: &Path) -> Groups {
    let runs = read(&out.join("runs.csv"));
    let faults = read(&out.join("faults.csv"));
    let mut g: Groups = BTreeMap::new();
    for r in &runs {
        assert_eq!(r["status"], "ok", "{r:?}");
        // A run that failed (`none` at its first crash) ended at that step.
        let last = if r["failed"] == "true" { r["first_crash_step"].parse().unwrap() } else { 16 };
        let mine: Vec<Vec<String>> =
            faults.iter().filter(|f| f["run_id"] == r["id"]).map(|f| REALISATION.iter().map(|k| f[*k].clone()).collect()).collect();
        assert_eq!(
            mine.iter().map(|f| f[0].clone()).collect::<std::collections::BTreeSet<_>>().len() as u64,
            r["faults"].parse::<u64>().unwrap()
        );
        g.entry((r["seed"].clone(), r["rep"].clone())).or_default().insert(r["recovery.strategy"].clone(), (last, mine));
    }
    g
}

/// The faults of `f` up to step `last`.
fn upto(f: &[Vec<String>], last: u64) -> Vec<Vec<String>> {
    f.iter().filter(|x| x[1].parse::<u64>().unwrap() <= last).cloned().collect()
}

#[test]
fn the_strategies_of_a_group_meet_the_same_faults() {
    let tmp = tempfile::tempdir().unwrap();
    let out = campaign(tmp.path(), "paired", "");
    let stored = std::fs::read_to_string(out.join("campaign.toml")).unwrap();
    assert!(stored.contains("paired = [\"recovery.strategy\"]"), "the campaign as run names its paired axes:\n{stored}");
    let by_group = groups(&out);
    assert_eq!(by_group.len(), 3);
    let (mut crashes, mut flips) = (0, 0);
    for (key, by) in &by_group {
        assert_eq!(by.len(), 4, "{key:?}");
        let shortest = by.values().map(|v| v.0).min().unwrap();
        let reference = upto(&by["lossy_forward"].1, shortest);
        for (strategy, (_, faults)) in by {
            assert_eq!(
                upto(faults, shortest),
                reference,
                "group {key:?}: {strategy} met other faults than lossy_forward up to step {shortest}"
            );
        }
        // The strategies that complete meet every fault of the run.
        assert_eq!(by["rollback"].1, by["lossy_forward"].1, "{key:?}");
        assert_eq!(by["checkpoint_restart"].1, by["lossy_forward"].1, "{key:?}");
        crashes += by["lossy_forward"].1.iter().filter(|f| f[4] == "crash").count();
        flips += by["lossy_forward"].1.iter().filter(|f| f[4] == "weights").count();
    }
    assert!(crashes >= 3 && flips >= 3, "the test needs faults of both kinds to mean something: {crashes} crashes, {flips} flip records");

    // Rollback and lossy forward differ only where a crash met a completed bucket.
    let runs = read(&out.join("runs.csv"));
    let of =
        |s: &str, seed: &str, rep: &str| runs.iter().find(|r| r["recovery.strategy"] == s && r["seed"] == seed && r["rep"] == rep).unwrap();
    for (seed, rep) in by_group.keys() {
        let (rb, lf) = (of("rollback", seed, rep), of("lossy_forward", seed, rep));
        if rb["digest"] != lf["digest"] {
            assert!(
                lf["crashes_after_bucket"].parse::<u64>().unwrap() > 0,
                "rollback and lossy forward differ without a crash after a bucket: {lf:?}"
            );
        }
    }

    // Without pairing, each run draws its own faults.
    let own = groups(&campaign(tmp.path(), "unpaired", "paired = []"));
    let differ = own.values().filter(|by| by["rollback"].1 != by["lossy_forward"].1).count();
    assert!(differ > 0, "unpaired runs drew the same faults in every group");
}
