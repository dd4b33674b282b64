//! Crash safety: a training process killed with SIGKILL at random moments while it writes a
//! checkpoint at every step always leaves a newest checkpoint that loads and verifies.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::time::Duration;

use common::{TINY, resilab, run, write};

#[test]
fn sigkill_during_checkpointing_leaves_a_loadable_newest_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "crash.toml",
        &format!("{}\n[checkpoint]\nevery_steps = 1\nkeep_last = 2\n", TINY.replace("steps = 8", "steps = 100000")),
    );
    let out = dir.path().join("run");
    let ckpts = out.join("checkpoints");
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut kills = 0;
    let mut attempts = 0;
    while kills < 20 {
        attempts += 1;
        assert!(attempts < 60, "could not catch the process checkpointing");
        let mut args = vec![
            "train".to_string(),
            "--config".into(),
            cfg.display().to_string(),
            "--out".into(),
            out.display().to_string(),
            "--quiet".into(),
            "--threads".into(),
            "1".into(),
        ];
        if ckpts.exists() {
            args.extend(["--resume".into(), ckpts.display().to_string()]);
        }
        let mut child = resilab().args(&args).spawn().unwrap();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(150 + seed % 350));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        if !ckpts.exists() {
            continue;
        }
        kills += 1;
        // The newest complete checkpoint verifies...
        let newest = std::fs::read_dir(&ckpts)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("step-"))
            .max()
            .expect("a complete checkpoint");
        let o = run(&["inspect", "--json", newest.to_str().unwrap()]);
        assert!(o.status.success(), "kill {kills}: {}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        for d in v["datasets"].as_array().unwrap() {
            assert!(d["hash_status"] == "ok" || d["hash_status"] == "no-hash", "kill {kills}: {d}");
        }
    }
    // ...and the run resumes from it (the next loop iteration did so each time; once more, two
    // steps past the newest checkpoint, to end).
    let newest = std::fs::read_dir(&ckpts)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_string_lossy().strip_prefix("step-")?.parse::<u64>().ok())
        .max()
        .unwrap();
    let steps = format!("train.steps={}", newest + 2);
    let o = run(&[
        "train",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
        "--resume",
        ckpts.to_str().unwrap(),
        "--set",
        &steps,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["steps"], newest + 2);
}
