//! Burn's ndarray CPU backend through the real CLI:
//! `cargo test --release --features ndarray --test ndarray` (the feature is off by default;
//! CI builds it beside the wgpu and tch backends, at opt-level 0).
//!
//! The same library code as on flex, with the device picked at the binary's edge: the tiny run
//! on ndarray agrees with flex within the tolerance `common::backends` states for the first 10
//! steps (the two backends order floating-point reductions differently), its loss falls, and a
//! second run repeats it bit for bit. The tiny run, not the 48-step one the wgpu and tch tests
//! train: at CI's opt-level 0 ndarray took about 100 s for those 48 steps.

#![cfg(feature = "ndarray")]
#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use common::backends::{flex_cli, losses_agree_with_flex, repeats_bit_for_bit, train};
use common::{TINY, run};

#[test]
fn ndarray_trains_repeats_exactly_and_agrees_with_flex_within_tolerance() {
    let dir = tempfile::tempdir().unwrap();
    let nd = train(&run, dir.path(), "ndarray", TINY, "ndarray");
    let flex = train(&flex_cli, dir.path(), "flex", TINY, "flex");
    assert_eq!(nd["provenance"]["backend"], "ndarray");
    assert_eq!(nd["provenance"]["device"], "cpu (ndarray)");
    let lo = losses_agree_with_flex(dir.path(), "ndarray");
    assert_eq!(lo.len(), 4, "steps 2, 4, 6 and 8 are logged");
    assert!(lo[3].1 < lo[0].1, "the loss falls on ndarray: {lo:?}");
    let (acc_n, acc_f) = (nd["final_test_acc"].as_f64().unwrap(), flex["final_test_acc"].as_f64().unwrap());
    assert!((acc_n - acc_f).abs() <= 0.05, "final test accuracy: ndarray {acc_n}, flex {acc_f}");
    repeats_bit_for_bit(&run, dir.path(), "ndarray", TINY, &nd);
}
