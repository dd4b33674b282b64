//! The wgpu backend through the real CLI: `cargo test --release --features wgpu --test wgpu`.
//!
//! Runs on any Vulkan (or Metal, DX12) adapter; without a GPU, on Mesa's software Vulkan
//! (lavapipe), as in CI. Kept tiny: on lavapipe every kernel compiles its shader once (minutes
//! in all when the shader caches are cold), then runs at about a tenth of flex's speed. The
//! tests run one after another (`Mutex`), so that the second and later reuse the shaders the
//! first compiled instead of compiling them at the same time. Even with both caches warm, each
//! new process spends about 30 s of CPU preparing its kernels again (CubeCL expands them, and
//! lavapipe builds their pipelines), so the tests start few processes.
//!
//! Agreement with the CPU backend is checked within stated tolerances, not bit for bit: the two
//! backends order floating-point reductions differently, so their values differ in the last
//! bits from the first step on, and the difference grows as training goes on.

#![cfg(feature = "wgpu")]
#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::PathBuf;
use std::process::Output;
use std::sync::Mutex;

use common::backends::{faults_checkpoints_and_recovery_work, learns_and_agrees_with_flex};
use common::{TINY, assert_clean_error, resilab, write};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A private runtime directory: Mesa's Vulkan driver complains on stderr without one.
fn runtime_dir() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("resilab-wgpu-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// `resilab` with `env` added, on the tests' runtime directory. CubeCL's autotune runs at its
/// minimal level, so that fewer candidate kernels are compiled and timed: on lavapipe with a
/// cold shader cache (as in CI) these tests took 246 and 252 s with CI's build instead of 268 s,
/// and the 48-step run ended on the same weights, bit for bit.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = resilab();
    c.env("XDG_RUNTIME_DIR", runtime_dir()).env("CUBECL_AUTOTUNE_LEVEL", "minimal").args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run resilab")
}

/// `resilab` on the wgpu tests' runtime directory.
fn cli(args: &[&str]) -> Output {
    run(args, &[])
}

#[test]
fn wgpu_learns_and_agrees_with_flex_within_tolerance() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // No second LEARN run here (about a minute on lavapipe): that a new process repeats wgpu's
    // steps bit for bit is checked by the faults test, whose resumed run ends on the weights
    // the uninterrupted run, in another process, ended on.
    let gpu = learns_and_agrees_with_flex(&cli, dir.path(), "wgpu");
    let device = gpu["provenance"]["device"].as_str().unwrap();
    assert!(device.starts_with("wgpu: "), "the adapter is named: {device}");
}

#[test]
fn faults_checkpoints_and_recovery_work_and_compare_runs_every_strategy_on_wgpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    faults_checkpoints_and_recovery_work(&cli, dir.path(), "wgpu");
}

#[test]
fn no_adapter_is_a_clear_error() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "t.toml", TINY);
    let out = dir.path().join("o");
    let args = ["train", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet", "--backend", "wgpu"];
    // No Vulkan driver and no EGL (OpenGL) vendor library: wgpu finds no adapter at all.
    let o = run(
        &args,
        &[
            ("VK_ICD_FILENAMES", "/nonexistent.json"),
            ("VK_DRIVER_FILES", "/nonexistent.json"),
            ("__EGL_VENDOR_LIBRARY_FILENAMES", "/nonexistent.json"),
        ],
    );
    assert_clean_error(&o, &["no usable wgpu adapter", "--backend flex"]);
    // An adapter the machine lacks.
    let mut with_kind = args.to_vec();
    with_kind.extend(["--wgpu-device", "virtual:7"]);
    assert_clean_error(&run(&with_kind, &[]), &["no usable wgpu adapter", "virtual:7"]);
    let mut bad = args.to_vec();
    bad.extend(["--wgpu-device", "fastest"]);
    assert_clean_error(&run(&bad, &[]), &["--wgpu-device fastest", "discrete[:N]"]);
}
