//! HDF5 checkpoints through the CLI: exact resume, inspect, digest policies, corrupt files.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::{Path, PathBuf};

use common::{TINY, assert_clean_error, run, train_into as train, write};

fn config(dir: &Path, extra: &str) -> PathBuf {
    write(dir, "ckpt.toml", &format!("{TINY}\n[checkpoint]\nevery_steps = 4\nkeep_last = 0\n{extra}"))
}

fn summary(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap()
}

fn ok(o: &std::process::Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn resume_from_a_checkpoint_is_bit_exact() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let a = dir.path().join("a");
    ok(&train(&cfg, &a, &[]));
    let ckpts = a.join("checkpoints");
    assert!(ckpts.join("step-00000004/worker-0.h5").is_file());
    assert!(ckpts.join("step-00000008/worker-0.h5").is_file());
    let b = dir.path().join("b");
    ok(&train(&cfg, &b, &["--resume", ckpts.join("step-00000004").to_str().unwrap()]));
    let (sa, sb) = (summary(&a), summary(&b));
    assert_eq!(sb["steps"], 8);
    assert!(sb["resumed_from"].as_str().unwrap().ends_with("step-00000004"));
    assert_eq!(sa["final_params_digest"], sb["final_params_digest"], "resumed run must end with identical weights");
    // The resumed run's own checkpoint at step 8 holds the same values as the straight run's.
    let ia = run(&["inspect", "--json", ckpts.join("step-00000008").to_str().unwrap()]);
    let ib = run(&["inspect", "--json", b.join("checkpoints/step-00000008").to_str().unwrap()]);
    let hashes = |o: &std::process::Output| -> Vec<serde_json::Value> {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["datasets"].as_array().unwrap().iter().map(|d| d["stored_hash"].clone()).collect()
    };
    assert_eq!(hashes(&ia), hashes(&ib));
}

#[test]
fn keep_last_prunes_old_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "k.toml", &format!("{TINY}\n[checkpoint]\nevery_steps = 2\nkeep_last = 2\n"));
    let out = dir.path().join("run");
    ok(&train(&cfg, &out, &[]));
    let mut names: Vec<String> =
        std::fs::read_dir(out.join("checkpoints")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, [".resilab-checkpoints", "step-00000006", "step-00000008"]);
    assert_eq!(summary(&out)["checkpoints"], 4);
}

#[test]
fn inspect_lists_layout_shapes_types_and_digests() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    ok(&train(&config(dir.path(), ""), &out, &[]));
    let file = out.join("checkpoints/step-00000008/worker-0.h5");
    let o = run(&["inspect", "--json", file.to_str().unwrap()]);
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ds = v["datasets"].as_array().unwrap();
    let find = |p: &str| ds.iter().find(|d| d["path"] == p).unwrap_or_else(|| panic!("no {p} in {ds:?}")).clone();
    let w = find("/model/layer1/0/conv1/weight");
    assert_eq!(w["shape"], serde_json::json!([4, 4, 3, 3]));
    assert_eq!(w["dtype"], "f32");
    assert_eq!(w["hash_status"], "ok");
    assert_eq!(find("/model/layer1/0/bn1/running_var")["hash_status"], "ok");
    assert_eq!(find("/optimizer/layer1/0/conv1/weight/momentum_buffer")["shape"], serde_json::json!([4, 4, 3, 3]));
    assert!(ds.iter().all(|d| !d["path"].as_str().unwrap().contains("running_mean/")));
    assert_eq!(find("/train_state/step")["dtype"], "u64");
    assert_eq!(find("/train_state/step")["hash_status"], "ok");
    assert_eq!(find("/train_state/rng_seed")["hash_status"], "ok");
    assert_eq!(v["attributes_status"], "ok");
    let attrs = &v["attributes"];
    assert_eq!(attrs["format_version"], "3");
    assert_eq!(attrs["step"], "8");
    assert_eq!(attrs["arch"], "resnet8-w0.25");
    assert!(attrs["config"].as_str().unwrap().contains("[model]"));
    let table = run(&["inspect", file.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("/model/classifier/fc/bias") && text.contains("0 failing their digest"), "{text}");
}

/// Flips one bit inside the stored values of `dataset` by finding its bytes in the file (the
/// data of a small contiguous dataset is stored as one run of little-endian values).
fn flip_data_bit(file: &Path, values: &[f32]) {
    let mut bytes = std::fs::read(file).unwrap();
    let needle: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let at = bytes.windows(needle.len()).position(|w| w == needle.as_slice()).expect("values found in file");
    bytes[at + 1] ^= 0x10;
    std::fs::write(file, bytes).unwrap();
}

fn bias_values(file: &Path) -> Vec<f32> {
    let r = resilab_h5::Reader::open(file).unwrap();
    r.read_f32("/model/classifier/fc/bias", &[10]).unwrap()
}

#[test]
fn digest_mismatch_policies() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base");
    ok(&train(&config(dir.path(), ""), &base, &[]));
    let newest = base.join("checkpoints/step-00000008/worker-0.h5");
    flip_data_bit(&newest, &bias_values(&newest));
    let ckpts = base.join("checkpoints");

    // error (default): refuses, naming the dataset.
    let o = train(&config(dir.path(), ""), &dir.path().join("e"), &["--resume", ckpts.to_str().unwrap(), "--set", "train.steps=10"]);
    assert_clean_error(&o, &["/model/classifier/fc/bias", "digest"]);

    // fallback: the newest checkpoint that verifies (step 4).
    let f = dir.path().join("f");
    ok(&train(&config(dir.path(), "on_mismatch = \"fallback\""), &f, &["--resume", ckpts.to_str().unwrap(), "--set", "train.steps=10"]));
    assert!(summary(&f)["resumed_from"].as_str().unwrap().ends_with("step-00000004"));

    // load: the altered values are used, and reported.
    let l = dir.path().join("l");
    ok(&train(&config(dir.path(), "on_mismatch = \"load\""), &l, &["--resume", ckpts.to_str().unwrap(), "--set", "train.steps=10"]));
    let s = summary(&l);
    assert!(s["resumed_from"].as_str().unwrap().ends_with("step-00000008"));
    let m = s["checkpoint_mismatches"].as_array().unwrap();
    assert_eq!(m.len(), 1, "{m:?}");
    assert!(m[0].as_str().unwrap().contains("/model/classifier/fc/bias"));

    let o = run(&["inspect", newest.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("MISMATCH") && text.contains("1 failing their digest"), "{text}");
}

#[test]
fn corrupt_checkpoints_give_clean_errors() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base");
    let cfg = config(dir.path(), "");
    ok(&train(&cfg, &base, &[]));
    let good = std::fs::read(base.join("checkpoints/step-00000008/worker-0.h5")).unwrap();
    let victim_dir = dir.path().join("victim/step-00000008");
    std::fs::create_dir_all(&victim_dir).unwrap();
    let victim = victim_dir.join("worker-0.h5");
    let mut seed = 12345u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut cases: Vec<(String, Vec<u8>)> =
        vec![("empty".into(), Vec::new()), ("garbage".into(), (0..good.len()).map(|_| next() as u8).collect())];
    for frac in [0.1, 0.5, 0.9, 0.99] {
        cases.push((format!("truncated to {frac}"), good[..(good.len() as f64 * frac) as usize].to_vec()));
    }
    for (name, bytes) in cases {
        std::fs::write(&victim, &bytes).unwrap();
        let o = train(&cfg, &dir.path().join("out"), &["--resume", victim_dir.to_str().unwrap()]);
        assert_clean_error(&o, &["worker-0.h5"]);
        let i = run(&["inspect", victim.to_str().unwrap()]);
        assert!(!String::from_utf8_lossy(&i.stderr).contains("panicked"), "{name}: inspect panicked");
        assert!(i.status.code().is_some(), "{name}: inspect killed by a signal");
    }
}

#[test]
fn resume_with_another_model_names_the_differences() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base");
    let cfg = config(dir.path(), "");
    ok(&train(&cfg, &base, &[]));
    let o = train(&cfg, &dir.path().join("o"), &["--resume", base.join("checkpoints").to_str().unwrap(), "--set", "model.width=0.5"]);
    assert_clean_error(&o, &["/model/", "expected ["]);
    let o = train(&cfg, &dir.path().join("o2"), &["--resume", "/nonexistent/ckpt"]);
    assert_clean_error(&o, &["/nonexistent/ckpt"]);
}

#[test]
fn resuming_into_the_same_directory_keeps_one_row_per_step() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let out = dir.path().join("run");
    ok(&train(&cfg, &out, &[]));
    let first = std::fs::read_to_string(out.join("metrics.csv")).unwrap();
    ok(&train(&cfg, &out, &["--resume", out.join("checkpoints/step-00000004").to_str().unwrap()]));
    let mut rdr = csv::Reader::from_path(out.join("metrics.csv")).unwrap();
    let steps: Vec<u64> = rdr.records().map(|r| r.unwrap()[0].parse().unwrap()).collect();
    assert_eq!(steps, [2, 4, 6, 8]);
    // Same numbers as the uninterrupted run, but for the two time columns (wall_s, sim_s).
    let strip = |t: &str| {
        let keep = |(i, _): &(usize, &str)| !matches!(*i, 7 | 8);
        t.lines().map(|l| l.split(',').enumerate().filter(keep).map(|(_, v)| v).collect::<Vec<_>>().join(",")).collect::<Vec<_>>()
    };
    assert!(first.starts_with("step,epoch,loss,train_acc,test_acc,test_loss,lr,wall_s,sim_s,"), "{first}");
    assert_eq!(strip(&first), strip(&std::fs::read_to_string(out.join("metrics.csv")).unwrap()));
}

#[test]
fn single_byte_flips_anywhere_never_crash_or_hang_the_process() {
    // One bit flipped at 150 seeded offsets of a checkpoint (headers, metadata and data): each
    // resume either loads (flips in data: digest policy `load`) or stops with one clean error.
    // The HDF5 C library itself can crash or hang on some corrupt headers; the probe process
    // turns that into an error too.
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "on_mismatch = \"load\"");
    let base = dir.path().join("base");
    ok(&train(&cfg, &base, &[]));
    let good = std::fs::read(base.join("checkpoints/step-00000008/worker-0.h5")).unwrap();
    let victim_dir = dir.path().join("v/step-00000008");
    std::fs::create_dir_all(&victim_dir).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let (mut loaded, mut refused) = (0, 0);
    for i in 0..150 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // Half of the flips in the first 4 KiB, where the superblock and object headers live.
        let span = if i % 2 == 0 { good.len().min(4096) } else { good.len() };
        let offset = (seed % span as u64) as usize;
        let mut bytes = good.clone();
        bytes[offset] ^= 1 << (seed >> 60 & 7);
        std::fs::write(victim_dir.join("worker-0.h5"), &bytes).unwrap();
        // One step more than the checkpoint holds: resuming a finished run is refused.
        let o = train(&cfg, &dir.path().join("o"), &["--resume", victim_dir.to_str().unwrap(), "--set", "train.steps=9"]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!stderr.contains("panicked"), "offset {offset}: {stderr}");
        match o.status.code() {
            Some(0) => loaded += 1,
            Some(1) => {
                assert!(stderr.lines().any(|l| l.starts_with("error:") && l.contains("worker-0.h5")), "offset {offset}: {stderr}");
                refused += 1;
            }
            other => panic!("offset {offset}: exit {other:?}: {stderr}"),
        }
    }
    assert!(loaded > 0 && refused > 0, "loaded {loaded}, refused {refused}");
}
