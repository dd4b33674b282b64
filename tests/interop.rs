//! Other tools read resilab's checkpoints: h5py (every dataset's shape, dtype and values) and
//! the HDF5 command-line tools (h5ls, h5dump). CI installs both; elsewhere a missing tool skips
//! its test with a message, except under `CI=true`, where it fails.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::Path;
use std::process::Command;

use common::{Args, TINY, run_args, write};

fn checkpoint(dir: &Path) -> std::path::PathBuf {
    let adam = TINY.replace("kind = \"sgd\"\nlr = 0.05", "kind = \"adam\"\nlr = 0.001");
    assert_ne!(adam, TINY);
    let cfg = write(dir, "c.toml", &adam);
    let out = dir.join("run");
    let o = run_args(Args::train(&cfg, &out).set("checkpoint.every_steps=8"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out.join("checkpoints/step-00000008/worker-0.h5")
}

fn tool_missing(what: &str) -> bool {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} is required in CI (see .ci/run)");
    }
    eprintln!("skipping: {what} is not installed");
    true
}

#[test]
fn h5py_reads_every_dataset_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let file = checkpoint(dir.path());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/h5py_dump.py");
    let o = match Command::new("python3").arg(&script).arg(&file).output() {
        Ok(o) if o.status.success() => o,
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("No module named 'h5py'") => {
            if tool_missing("h5py") {
                return;
            }
            unreachable!()
        }
        Ok(o) => panic!("h5py failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(_) => {
            if tool_missing("python3") {
                return;
            }
            unreachable!()
        }
    };
    let py: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let datasets = py["datasets"].as_object().unwrap();
    let r = resilab_h5::Reader::open(&file).unwrap();
    let ours = r.datasets().unwrap();
    assert_eq!(datasets.len(), ours.len());
    let mut optimizer = 0;
    for info in &ours {
        let p = &datasets[&info.path];
        assert_eq!(
            p["shape"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect::<Vec<_>>(),
            info.shape,
            "{}",
            info.path
        );
        let values = p["values"].as_array().unwrap();
        match info.dtype {
            resilab_h5::Dtype::F32 => {
                assert_eq!(p["dtype"], "float32", "{}", info.path);
                let expected = r.read_f32(&info.path, &info.shape).unwrap();
                let got: Vec<f32> = values.iter().map(|v| v.as_f64().unwrap() as f32).collect();
                assert!(expected.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()), "{} values differ", info.path);
                optimizer += usize::from(info.path.ends_with("exp_avg_sq"));
            }
            resilab_h5::Dtype::Uint(8) => {
                assert_eq!(p["dtype"], "uint64", "{}", info.path);
                assert_eq!(values[0].as_u64().unwrap(), r.read_u64(&info.path).unwrap(), "{}", info.path);
            }
            resilab_h5::Dtype::Uint(1) => assert_eq!(p["dtype"], "uint8"),
            other => panic!("unexpected type {other} at {}", info.path),
        }
    }
    assert!(optimizer > 0, "Adam moments were written");
    assert_eq!(py["attributes"]["arch"], "resnet8-w0.25");
    assert_eq!(py["attributes"]["step"], "8");
}

#[test]
fn h5ls_and_h5dump_read_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let file = checkpoint(dir.path());
    let Ok(ls) = Command::new("h5ls").arg("-r").arg(&file).output() else {
        if tool_missing("h5ls (hdf5-tools)") {
            return;
        }
        unreachable!()
    };
    assert!(ls.status.success(), "{}", String::from_utf8_lossy(&ls.stderr));
    let text = String::from_utf8_lossy(&ls.stdout);
    assert!(text.contains("/model/layer1/0/conv1/weight Dataset {4, 4, 3, 3}"), "{text}");
    assert!(text.contains("/optimizer/layer1/0/conv1/weight/exp_avg Dataset {4, 4, 3, 3}"), "{text}");
    let dump = Command::new("h5dump").args(["-d", "/train_state/step"]).arg(&file).output().unwrap();
    assert!(dump.status.success(), "{}", String::from_utf8_lossy(&dump.stderr));
    assert!(String::from_utf8_lossy(&dump.stdout).contains("(0): 8"), "{}", String::from_utf8_lossy(&dump.stdout));
}
