//! `train.reduction_order`: the all-reduce's summation order fixed (the default: same
//! configuration, same seed, same bits) or drawn per step and per attempt of that step
//! (`seeded`), through the CLI on the tiny run with 4 workers.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::Path;

use common::{TINY, assert_clean_error, train_config_with, train_with, write};

/// Four replicas (so that the order of a sum can change its bits), checkpoints at steps 3 and
/// 6, and `extra` (faults, recovery); `args` are more arguments (`--set`, `--resume`).
fn train(dir: &Path, name: &str, extra: &str, args: &[&str]) -> serde_json::Value {
    let cfg = write(
        dir,
        &format!("{name}.toml"),
        &format!("{TINY}\n[parallel]\nworkers = 4\n\n[checkpoint]\nevery_steps = 3\nkeep_last = 0\n\n{extra}"),
    );
    train_config_with(&cfg, &dir.join(name), &dir.join("golden-cache"), args)
}

const SEEDED: &str = "train.reduction_order=\"seeded\"";

/// `--set train.reduction_order="seeded"` and `sets` as `--set` overrides.
fn seeded<'a>(sets: &[&'a str]) -> Vec<&'a str> {
    std::iter::once(SEEDED).chain(sets.iter().copied()).flat_map(|s| ["--set", s]).collect()
}

fn digest(s: &serde_json::Value) -> String {
    s["final_params_digest"].as_str().unwrap().to_string()
}

#[test]
fn a_seeded_order_is_repeatable_and_its_seed_changes_the_bits() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fixed = train(d, "fixed", "", &[]);
    let a = train(d, "a", "", &seeded(&[]));
    let again = train(d, "again", "", &seeded(&[]));
    assert_eq!(digest(&a), digest(&again), "the same configuration, seed and reduction seed: the same bits");
    assert_ne!(digest(&a), digest(&fixed), "the drawn orders are not rank order");
    let one = train(d, "one", "", &seeded(&["train.reduction_seed=1"]));
    let two = train(d, "two", "", &seeded(&["train.reduction_seed=2"]));
    assert_ne!(digest(&one), digest(&two), "two reduction seeds round differently");
    // The default reduction seed is the run's seed (7 in the tiny run).
    let seven = train(d, "seven", "", &seeded(&["train.reduction_seed=7"]));
    assert_eq!(digest(&seven), digest(&a));
    // The run's provenance records the order and the seed; a fixed run's configuration keeps
    // the text it had before the option existed.
    let resolved = std::fs::read_to_string(d.join("one/config.resolved.toml")).unwrap();
    assert!(resolved.contains("reduction_order = \"seeded\"") && resolved.contains("reduction_seed = 1"), "{resolved}");
    let resolved = std::fs::read_to_string(d.join("fixed/config.resolved.toml")).unwrap();
    assert!(!resolved.contains("reduction_"), "{resolved}");
    // A run resumed from its step-3 checkpoint computes steps 4-8 for the first time: the
    // uninterrupted run's bits.
    let at3 = d.join("a/checkpoints/step-00000003");
    let resumed = train(d, "resumed", "", &[seeded(&[]), vec!["--resume", at3.to_str().unwrap()]].concat());
    assert_eq!(digest(&resumed), digest(&a));
}

/// Worker 1 crashes in step 5: checkpoint-restart reloads step 3 and recomputes steps 4 and 5.
const CRASH: &str = "[[fault]]\ntarget = \"crash\"\nat_step = 5\nworker = 1\n\n[recovery]\nstrategy = \"checkpoint_restart\"\n";

#[test]
fn checkpoint_restart_replays_its_golden_run_only_in_the_fixed_order() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Fixed: the recomputed steps are the golden run's, bit for bit.
    let golden = train(d, "golden", "", &[]);
    let restart = train(d, "restart", CRASH, &[]);
    assert_eq!(restart["restarts"][0]["to_step"], 3);
    assert_eq!(digest(&restart), digest(&golden), "a fixed order replays the golden run");
    // Seeded: the recomputed steps 4 and 5 are second executions and round differently.
    let golden = train(d, "golden-seeded", "", &seeded(&[]));
    let restart = train(d, "restart-seeded", CRASH, &seeded(&[]));
    assert_eq!(restart["restarts"][0]["to_step"], 3);
    assert_ne!(digest(&restart), digest(&golden), "a restart under a seeded order diverges from its golden run");
    let again = train(d, "restart-seeded-again", CRASH, &seeded(&[]));
    assert_eq!(digest(&again), digest(&restart), "and is repeatable");
}

#[test]
fn a_reduction_seed_without_the_seeded_order_and_a_seeded_pipeline_are_refused() {
    let out = train_with(&format!("{TINY}\n[parallel]\nworkers = 4\n"), &["--set", "train.reduction_seed=3"]);
    assert_clean_error(&out, &["train.reduction_seed = 3", "train.reduction_order = \"fixed\""]);
    let pipeline = format!("{TINY}\n[parallel]\nmode = \"pipeline\"\nstages = 2\nmicro_batches = 4\n");
    let out = train_with(&pipeline, &["--set", SEEDED]);
    assert_clean_error(&out, &["train.reduction_order = \"seeded\"", "pipeline"]);
}
