//! What a finished run leaves in its directory: no `faults.jsonl` when no fault struck (a
//! reader takes a missing log for a run without faults), one line per fault when some did, and
//! no `.resilab.lock`.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use common::{TINY, train_summary};

#[test]
fn a_run_without_faults_writes_no_fault_log_and_a_finished_run_keeps_no_lock() {
    let dir = tempfile::tempdir().unwrap();
    let clean = train_summary(dir.path(), "clean", TINY);
    assert_eq!(clean["faults_injected"], 0);
    let out = dir.path().join("clean");
    assert!(!out.join("faults.jsonl").exists(), "an empty fault log was written");
    assert!(!out.join(".resilab.lock").exists(), "a finished run keeps its lock file");
    // A fault that strikes is logged; a later run without faults into the same directory
    // leaves no stale log behind.
    let fault = "[[fault]]\ntarget = \"weights\"\nat_step = 3\ninjection_tries = 1\nlocations_to_corrupt = [\"model/stem\"]\n";
    let faulty = train_summary(dir.path(), "faulty", &format!("{TINY}\n{fault}"));
    assert_eq!(faulty["faults_injected"], 1);
    let log = std::fs::read_to_string(dir.path().join("faulty/faults.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 1, "{log}");
    std::fs::write(dir.path().join("faulty.toml"), TINY).unwrap();
    common::train_config(&dir.path().join("faulty.toml"), &dir.path().join("faulty"), &dir.path().join("golden-cache"));
    assert!(!dir.path().join("faulty/faults.jsonl").exists(), "the earlier run's fault log is left");
    assert!(!dir.path().join("faulty/.resilab.lock").exists());
}
