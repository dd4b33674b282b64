//! `resilab inject` and `resilab diff` as a user runs them: the published injector's key sets on
//! checkpoints written by resilab and by h5py (checked with h5py), reproducibility and exact
//! replay, byte mode, in-place injection, and clean errors that leave the input untouched.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Args, TINY, assert_clean_error, run, run_args, write};

fn train_checkpoint(dir: &Path) -> PathBuf {
    let cfg = write(dir, "c.toml", TINY);
    let out = dir.join("run");
    let o = run_args(Args::train(&cfg, &out).set("checkpoint.every_steps=8"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out.join("checkpoints/step-00000008")
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/inject_check.py")
}

/// Runs the h5py helper; `None` when h5py is unavailable outside CI.
fn h5py(args: &[&Path]) -> Option<String> {
    match Command::new("python3").arg(script()).args(args).output() {
        Ok(o) if o.status.success() => Some(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("No module named") || o.status.code().is_none() => missing(),
        Ok(o) => panic!("h5py check failed for {args:?}:\n{}", String::from_utf8_lossy(&o.stderr)),
        Err(_) => missing(),
    }
}

fn missing() -> Option<String> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("python3 with h5py is required in CI (see .ci/run)");
    }
    eprintln!("skipping the h5py checks: python3 with h5py is not installed");
    None
}

fn inject(args: &[&str]) -> std::process::Output {
    let mut all = vec!["inject"];
    all.extend_from_slice(args);
    run(&all)
}

fn ok(o: &std::process::Output) -> String {
    assert!(o.status.success(), "stderr: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn log_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The reference tool's example key sets, each run on a resilab checkpoint and on an h5py one.
const KEY_SETS: &[(&str, &str)] = &[
    (
        "bit_range_burst.yaml",
        "injection_probability: 1\ninjection_type: \"count\"\ninjection_tries: 40\nlog_file_path: \"/home/someone/logs/\"\n\
         float_precision: 32\nfirst_bit: 1\nlast_bit: 12\nburst: 3\nallow_sign_change: True\nallow_NaN_values: True\n\
         save_injection_sequence: False\nuse_random_locations: true\nlocations_to_corrupt:\n  - \"/model/fc.weight\"\n",
    ),
    (
        "bit_mask.yaml",
        "injection_probability: 1\ninjection_type: \"count\"\ninjection_tries: 30\nfloat_precision: 64\nbit_mask: \"10110\"\n\
         allow_sign_change: True\nallow_NaN_values: True\nuse_random_locations: true\nlocations_to_corrupt:\n",
    ),
    (
        "scaling.yaml",
        "injection_probability: 0.5\ninjection_type: \"count\"\ninjection_tries: 30\nfloat_precision: 64\nscaling_factor: 4\n\
         allow_sign_change: True\nallow_NaN_values: False\nsave_injection_sequence: False\nuse_random_locations: True\n",
    ),
    ("float16.yaml", "injection_tries: 25\nfloat_precision: 16\nfirst_bit: 0\nlast_bit: 15\nuse_random_locations: true\n"),
    (
        "float32.yaml",
        "injection_tries: 25\nfloat_precision: 32\nfirst_bit: 0\nlast_bit: 31\nallow_NaN_values: False\nuse_random_locations: true\n",
    ),
    ("float64.yaml", "injection_tries: 25\nfloat_precision: 64\nfirst_bit: 0\nlast_bit: 63\nuse_random_locations: true\n"),
    (
        "auto_percentage.toml",
        "injection_type = \"percentage\"\ninjection_tries = 2.5\nfloat_precision = \"auto\"\nsampling = \"per_element\"\nuse_random_locations = true\n",
    ),
];

#[test]
fn reference_key_sets_on_resilab_and_h5py_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let resilab_file = train_checkpoint(d).join("worker-0.h5");
    let h5py_file = d.join("torch_style.h5");
    if h5py(&[Path::new("make"), &h5py_file]).is_none() {
        return;
    }
    for (i, file) in [resilab_file, h5py_file].iter().enumerate() {
        let before = std::fs::read(file).unwrap();
        for (name, cfg) in KEY_SETS {
            let cfg_path = write(d, name, cfg);
            let out = d.join(format!("out-{i}-{name}.h5"));
            let log = d.join(format!("out-{i}-{name}.jsonl"));
            let stdout = ok(&inject(&[
                "--config",
                cfg_path.to_str().unwrap(),
                "--file",
                file.to_str().unwrap(),
                "--seed",
                "17",
                "--output",
                out.to_str().unwrap(),
                "--log",
                log.to_str().unwrap(),
            ]));
            assert!(stdout.contains("corrupted"), "{stdout}");
            let checked = h5py(&[Path::new("check"), file, &out, &log]).expect("h5py is available");
            let summary: serde_json::Value = serde_json::from_str(checked.trim()).unwrap();
            let lines = log_lines(&log);
            let corrupted = lines.last().unwrap()["corrupted"].as_u64().unwrap();
            assert!(corrupted > 0, "{name} on file {i}: nothing corrupted");
            assert!(summary["changed"].as_u64().unwrap() > 0, "{name} on file {i}: {checked}");
            if name.starts_with("scaling") {
                assert!(lines.iter().filter(|l| l["outcome"] == "corrupted").all(|l| l["scale"] == 4.0));
                let n = lines.last().unwrap()["attempts"].as_u64().unwrap();
                assert!(corrupted < n, "probability 0.5 passed over no attempt");
            }
            if name.starts_with("bit_range") {
                for l in
                    lines.iter().filter(|l| l["outcome"] == "corrupted" && l["dtype"] != "i64" && l["dtype"] != "u64" && l["dtype"] != "u8")
                {
                    let bits: Vec<u64> = l["bits_reference"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap()).collect();
                    assert_eq!(bits.len(), 3, "{l}");
                    assert!(bits.iter().all(|b| *b == 0 || (1..=12).contains(b)), "{l}");
                }
            }
            if name.starts_with("float32") {
                assert!(
                    lines.iter().filter(|l| l["kind"] == "attempt").all(|l| !l["nan"].as_bool().unwrap() && !l["inf"].as_bool().unwrap())
                );
            }
        }
        assert_eq!(std::fs::read(file).unwrap(), before, "the input file must never change");
    }
}

#[test]
fn same_seed_gives_the_same_bytes_and_replay_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = train_checkpoint(d).join("worker-0.h5");
    let cfg = write(
        d,
        "c.toml",
        "injection_tries = 300\nfirst_bit = 1\nlast_bit = 31\nburst = 2\ninjection_probability = 0.8\nuse_random_locations = true\n",
    );
    let go = |seed: &str, name: &str| {
        let out = d.join(format!("{name}.h5"));
        ok(&inject(&["-c", cfg.to_str().unwrap(), "-f", file.to_str().unwrap(), "--seed", seed, "-o", out.to_str().unwrap()]));
        out
    };
    let a = go("5", "a");
    let b = go("5", "b");
    let c = go("6", "c");
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), "same seed, same file: same bytes");
    assert_ne!(std::fs::read(&a).unwrap(), std::fs::read(&c).unwrap());
    // The default log sits beside the output.
    let log = d.join("a.log.jsonl");
    assert_eq!(log_lines(&log)[0]["seed"], 5);
    let copy = d.join("copy.h5");
    std::fs::copy(&file, &copy).unwrap();
    let replayed = d.join("replayed.h5");
    let s = ok(&inject(&["--replay", log.to_str().unwrap(), "-f", copy.to_str().unwrap(), "-o", replayed.to_str().unwrap()]));
    assert!(!s.contains("different value"), "{s}");
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&replayed).unwrap(), "replay must reproduce the corruption exactly");

    // diff agrees with the log: the datasets and element counts that changed.
    let j: serde_json::Value =
        serde_json::from_slice(&run(&["diff", file.to_str().unwrap(), a.to_str().unwrap(), "--json"]).stdout).unwrap();
    let lines = log_lines(&log);
    let mut changed = std::collections::HashMap::<(String, u64), (String, String)>::new();
    for l in lines.iter().filter(|l| l["outcome"] == "corrupted") {
        let key = (l["dataset"].as_str().unwrap().to_string(), l["index"].as_u64().unwrap());
        let first_old = changed.get(&key).map(|v| v.0.clone()).unwrap_or_else(|| l["old_bits"].as_str().unwrap().to_string());
        changed.insert(key, (first_old, l["new_bits"].as_str().unwrap().to_string()));
    }
    let really = changed.values().filter(|(o, n)| o != n).count() as u64;
    assert_eq!(j["differ"].as_u64().unwrap(), really);
    let table = String::from_utf8_lossy(&run(&["diff", file.to_str().unwrap(), a.to_str().unwrap()]).stdout).into_owned();
    assert!(table.contains(&format!("{really} of ")), "{table}");
}

#[test]
fn byte_mode_flips_exactly_the_logged_bits() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = train_checkpoint(d).join("worker-0.h5");
    let original = std::fs::read(&file).unwrap();
    for region in ["file", "data", "metadata"] {
        let cfg = write(
            d,
            "b.toml",
            &format!("target = \"bytes\"\nbyte_region = \"{region}\"\ninjection_tries = 60\nuse_random_locations = true\n"),
        );
        let out = d.join(format!("bytes-{region}.h5"));
        let log = d.join(format!("bytes-{region}.jsonl"));
        ok(&inject(&[
            "-c",
            cfg.to_str().unwrap(),
            "-f",
            file.to_str().unwrap(),
            "--seed",
            "3",
            "-o",
            out.to_str().unwrap(),
            "--log",
            log.to_str().unwrap(),
        ]));
        let corrupted = std::fs::read(&out).unwrap();
        let mut expect = original.clone();
        for l in log_lines(&log).iter().filter(|l| l["kind"] == "byte_attempt" && l["outcome"] == "corrupted") {
            let (o, b) = (l["offset"].as_u64().unwrap() as usize, l["bit"].as_u64().unwrap());
            if region != "file" {
                assert_eq!(l["region"], if region == "data" { "data" } else { "metadata" }, "{l}");
            }
            expect[o] ^= 1 << b;
        }
        assert_eq!(corrupted, expect, "region {region}: the file differs from the logged flips");
    }
    assert_eq!(std::fs::read(&file).unwrap(), original);
}

#[test]
fn in_place_corrupts_the_input_and_resume_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let step = train_checkpoint(d);
    let file = step.join("worker-0.h5");
    let before = std::fs::read(&file).unwrap();
    // The critical bit (reference 1, the exponent's top bit) in the model's weights.
    let cfg = write(
        d,
        "crit.yaml",
        "injection_tries: 3\nfloat_precision: 32\nfirst_bit: 1\nlast_bit: 1\nallow_sign_change: false\nlocations_to_corrupt:\n  - /model/layer1\n",
    );
    ok(&inject(&[
        "-c",
        cfg.to_str().unwrap(),
        "-f",
        file.to_str().unwrap(),
        "--seed",
        "1",
        "--in-place",
        "--log",
        d.join("crit.jsonl").to_str().unwrap(),
    ]));
    assert_ne!(std::fs::read(&file).unwrap(), before);
    assert!(
        std::fs::read_dir(&step).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().contains(".tmp")),
        "no staged file left behind"
    );
    for l in log_lines(&d.join("crit.jsonl")).iter().filter(|l| l["kind"] == "attempt") {
        assert!(l["dataset"].as_str().unwrap().starts_with("/model/layer1/"), "{l}");
        assert_eq!(l["bits_reference"], serde_json::json!([1]));
        assert_eq!(l["bits_ieee"], serde_json::json!([30]));
    }
    // The checkpoint's digests catch the alteration; on_mismatch = "load" resumes from it anyway.
    let cfg = write(d, "t.toml", TINY);
    let o = run_args(Args::train(&cfg, &d.join("r1")).resume_from(&step).set("train.steps=10"));
    assert_clean_error(&o, &["digest"]);
    let o = run_args(Args::train(&cfg, &d.join("r2")).resume_from(&step).set("train.steps=10").set("checkpoint.on_mismatch=\"load\""));
    ok(&o);
}

#[test]
fn bad_input_is_a_clean_error_and_leaves_the_input_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = train_checkpoint(d).join("worker-0.h5");
    let before = std::fs::read(&file).unwrap();
    let base = "injection_tries: 5\nuse_random_locations: true\n";
    let cases: &[(&str, &[&str])] = &[
        ("injection_tries: 5\nuse_random_locations: true\ninjection_attempts: 5\n", &["unknown field", "injection_attempts"]),
        ("injection_tries: 5\nuse_random_locations: true\nbit_mask: \"101\"\nscaling_factor: 2\n", &["scaling_factor", "only one mode"]),
        ("injection_tries: 5\nuse_random_locations: true\nfirst_bit: 9\nlast_bit: 2\n", &["first_bit", "greater than last_bit"]),
        (
            "injection_tries: 5\nuse_random_locations: true\nfloat_precision: 16\nbit_mask: \"11111111111111111\"\n",
            &["bit_mask", "17 bits"],
        ),
        ("injection_tries: 5\nuse_random_locations: true\ninjection_probability: -0.1\n", &["injection_probability", "[0, 1]"]),
        ("injection_tries: 5\nlocations_to_corrupt:\n  - /model/conv9\n", &["/model/conv9", "matches no dataset"]),
        ("injection_tries: 5\nlocations_to_corrupt:\n  - /model/layer1/0/conv\n", &["/model/layer1/0/conv", "matches no dataset"]),
    ];
    for (i, (cfg, needles)) in cases.iter().enumerate() {
        let c = write(d, &format!("bad{i}.yaml"), cfg);
        let out = d.join(format!("bad{i}.h5"));
        let o = inject(&["-c", c.to_str().unwrap(), "-f", file.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert_clean_error(&o, needles);
        assert!(!out.exists(), "case {i}: no output may be written on error");
    }
    let c = write(d, "ok.yaml", base);
    let o = inject(&["-c", c.to_str().unwrap(), "-f", d.join("missing.h5").to_str().unwrap()]);
    assert_clean_error(&o, &["missing.h5"]);
    let o = inject(&["-c", d.join("nope.yaml").to_str().unwrap(), "-f", file.to_str().unwrap()]);
    assert_clean_error(&o, &["nope.yaml"]);
    let o = inject(&["-c", c.to_str().unwrap(), "-f", file.to_str().unwrap(), "-o", file.to_str().unwrap()]);
    assert_clean_error(&o, &["--in-place"]);
    let garbage = write(d, "garbage.h5", "not hdf5");
    let o = inject(&["-c", c.to_str().unwrap(), "-f", garbage.to_str().unwrap()]);
    assert_clean_error(&o, &["garbage.h5"]);
    assert_eq!(std::fs::read(&file).unwrap(), before, "the input must be untouched after every error");
    let mut leftovers: Vec<String> =
        std::fs::read_dir(file.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    leftovers.sort();
    assert_eq!(leftovers, [".resilab-checkpoint", "worker-0.h5"], "nothing written beside the input");
}
