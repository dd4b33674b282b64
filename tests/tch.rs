//! The tch (LibTorch) backend through the real CLI:
//! `bash scripts/with-tch.sh cargo test --release --features tch --test tch`.
//!
//! The same library code as on flex, with the device picked at the binary's edge: training,
//! mid-run faults with rollback, checkpoint-restart and resuming from a checkpoint, and a
//! campaign whose worker processes run on libtorch. Agreement with flex is checked within the
//! tolerances `common::backends` states, not bit for bit (the two backends order
//! floating-point reductions differently); on tch itself the numbers repeat exactly.

#![cfg(feature = "tch")]
#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use common::backends::{LEARN, faults_checkpoints_and_recovery_work, learns_and_agrees_with_flex, repeats_bit_for_bit};
use common::{NEV, run, table, write};

#[test]
fn tch_learns_repeats_exactly_and_agrees_with_flex_within_tolerance() {
    let dir = tempfile::tempdir().unwrap();
    let t = learns_and_agrees_with_flex(&run, dir.path(), "tch");
    repeats_bit_for_bit(&run, dir.path(), "tch", LEARN, &t);
    assert_eq!(t["provenance"]["backend"], "tch");
    assert_eq!(t["provenance"]["device"], "cpu (libtorch)");
}

#[test]
fn faults_checkpoints_and_recovery_work_on_tch_as_on_flex() {
    let dir = tempfile::tempdir().unwrap();
    faults_checkpoints_and_recovery_work(&run, dir.path(), "tch");
}

#[test]
fn campaign_workers_run_on_tch_and_repeat_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "nev.toml", NEV);
    let go = |name: &str| {
        let out = dir.path().join(name);
        let o = run(&[
            "campaign",
            "--config",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--set",
            "campaign.repetitions=4",
            "--jobs",
            "2",
            "--threads",
            "1",
            "--backend",
            "tch",
            "--quiet",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("campaign.json")).unwrap()).unwrap();
        let platform = meta["platform"].as_str().unwrap();
        assert!(platform.starts_with("tch / cpu (libtorch) / "), "keyed by backend, device, CPU and ISA: {platform}");
        table(&out)
    };
    let first = go("a");
    assert_eq!(first.len(), 8);
    for (id, row) in &first {
        let r: serde_json::Value = serde_json::from_str(row).unwrap();
        assert_eq!(r["status"], "ok", "run {id}: {row}");
    }
    assert_eq!(go("b"), first, "the same campaign on tch gives the same rows");
}
