//! A bounded slice of resilab's own fuzzing harness (`crates/fuzz`) for CI: a few mutated
//! checkpoints per command (`inspect`, `eval`, `diff`, `inject`, `train --resume`) and a few
//! mutated configs (`train --config`), against the real binary. Every case must end with exit
//! status 0 or one clean `error:` line: no panic, signal, hang, messy error, and no change to its
//! input files. `scripts/fuzz.sh` runs the long fuzz (10,000 cases per command).
//!
//! Failing inputs are kept under `target/tmp/fuzz-ci/failures/` with the command that
//! reproduces them.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::path::Path;

use resilab_fuzz::{Class, Options, prepare, report, run};

/// Cases per command: about a minute in all on 2 cores (6 x 800 cases took 121 s on an idle
/// machine; halved to make room in CI for the README's tasks, which tests/readme.rs runs).
const CASES: usize = 400;

#[test]
fn mutated_checkpoints_and_configs_never_crash_hang_or_modify_their_input() {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-ci");
    let mut opts = Options::new(Path::new(env!("CARGO_BIN_EXE_resilab")), &scratch);
    opts.cases = CASES;
    opts.seed = 20260;
    // One case in 8 runs on a hostile file (external storage, virtual datasets, links out of
    // the file, declared sizes beyond memory) and must leave what it points to untouched.
    opts.corpus = Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile"));
    let base = prepare(&opts).unwrap();
    let r = run(&opts, &base, &|_| {}).unwrap();
    let table = report::table(&r);
    println!("{table}{:.0} s", r.seconds);
    assert_eq!(r.tallies.iter().map(|t| t.cases()).sum::<usize>(), CASES * opts.targets.len());
    // Some inputs of every command must work, or the harness is misconfigured.
    for t in &r.tallies {
        assert!(t.count(Class::Ok) > 0, "no {} case succeeded:\n{table}", t.target);
    }
    assert_eq!(r.failures(), 0, "\n{table}\nfirst failures (inputs in {}):\n{}", r.failures_dir.display(), report::examples(&r));
}

#[test]
fn the_hostile_pickles_of_the_corpus_are_refused_by_import() {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-ci-import");
    let mut opts = Options::new(Path::new(env!("CARGO_BIN_EXE_resilab")), &scratch);
    opts.corpus = Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile"));
    opts.targets = vec![resilab_fuzz::Target::Import];
    opts.cases = 8;
    let base = prepare(&opts).unwrap();
    let r = run(&opts, &base, &|_| {}).unwrap();
    let table = report::table(&r);
    assert_eq!(r.failures(), 0, "\n{table}\n{}", report::examples(&r));
    assert_eq!(r.tallies[0].count(Class::CleanError), 8, "every hostile pickle is refused:\n{table}");
}
