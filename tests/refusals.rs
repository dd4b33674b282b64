//! What a command leaves when it refuses, and what `inject` refuses: a directory a command did
//! not create and will not write is left exactly as it was (no lock file), a finished command
//! leaves no lock file, and `inject` names the datasets it cannot read, refuses to replace a
//! link in place and to overwrite an existing `--log` unless told to.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{NEV, TINY, assert_clean_error, run, write};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Every path under `dir`, relative to it, sorted.
fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.symlink_metadata().unwrap().is_dir() {
                todo.push(p.clone());
            }
            out.push(p.strip_prefix(dir).unwrap().to_path_buf());
        }
    }
    out.sort();
    out
}

/// The lock files under `dir`.
fn locks(dir: &Path) -> Vec<PathBuf> {
    listing(dir).into_iter().filter(|p| p.ends_with(".resilab.lock")).collect()
}

/// A directory nobody but the user wrote: a file and a subdirectory.
fn foreign(parent: &Path, name: &str) -> PathBuf {
    let d = parent.join(name);
    std::fs::create_dir_all(d.join("notes")).unwrap();
    std::fs::write(d.join("thesis.tex"), "mine").unwrap();
    std::fs::write(d.join("notes/a.txt"), "mine too").unwrap();
    d
}

/// A campaign of one run.
fn one_run_campaign(dir: &Path) -> (PathBuf, PathBuf) {
    let text = NEV.replace("repetitions = 10", "repetitions = 1").replace("[1, 30]", "[1]");
    let cfg = write(dir, "one.toml", &text);
    let out = dir.join("camp");
    let o = run(&["campaign", "--config", s(&cfg), "--out", s(&out), "--jobs", "1", "--threads", "1", "--quiet"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (cfg, out)
}

#[test]
fn a_refused_directory_is_left_as_it_was_and_a_finished_command_leaves_no_lock() {
    let d = tempfile::tempdir().unwrap();
    let (campaign_cfg, camp) = one_run_campaign(d.path());
    assert_eq!(locks(&camp), Vec::<PathBuf>::new(), "a finished campaign keeps a lock file");
    let tiny = write(d.path(), "tiny.toml", TINY);
    let cases: Vec<(&str, PathBuf, Vec<String>)> = vec![
        ("train", foreign(d.path(), "t"), vec!["train".into(), "--config".into(), s(&tiny).into(), "--quiet".into(), "--out".into()]),
        (
            "campaign",
            foreign(d.path(), "c"),
            vec!["campaign".into(), "--config".into(), s(&campaign_cfg).into(), "--quiet".into(), "--out".into()],
        ),
        ("report", foreign(d.path(), "r"), vec!["report".into(), s(&camp).into(), "--out".into()]),
        ("merge", foreign(d.path(), "m"), vec!["merge".into(), s(&camp).into(), "--out".into()]),
    ];
    for (command, dir, mut args) in cases {
        let before = listing(&dir);
        args.push(s(&dir).into());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run(&args);
        assert_clean_error(&o, &[s(&dir)]);
        assert_eq!(listing(&dir), before, "{command} changed the directory it refused");
    }
    // Finished commands release their directories without leaving the lock file behind.
    let run_dir = d.path().join("run");
    let o = run(&["train", "--config", s(&tiny), "--quiet", "--out", s(&run_dir)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (rep, merged) = (d.path().join("rep"), d.path().join("merged"));
    for (command, args) in [("report", ["report", s(&camp), "--out", s(&rep)]), ("merge", ["merge", s(&camp), "--out", s(&merged)])] {
        let o = run(&args);
        assert!(o.status.success(), "{command}: {}", String::from_utf8_lossy(&o.stderr));
    }
    for dir in [&run_dir, &rep, &merged] {
        assert_eq!(locks(dir), Vec::<PathBuf>::new(), "{} keeps a lock file", dir.display());
    }
}

/// A byte-mode config: one bit flip anywhere in the file, which is never opened with HDF5.
fn byte_config(dir: &Path) -> PathBuf {
    write(dir, "bytes.toml", "target = \"bytes\"\ninjection_tries = 1\nseed = 1\nuse_random_locations = true\n")
}

fn inject(args: &[&str]) -> Output {
    let mut all = vec!["inject"];
    all.extend_from_slice(args);
    run(&all)
}

#[test]
fn in_place_refuses_links_unless_told_to_replace_them() {
    let d = tempfile::tempdir().unwrap();
    let cfg = byte_config(d.path());
    let target = d.path().join("target.h5");
    let content = vec![0u8; 256];
    std::fs::write(&target, &content).unwrap();
    let symlink = d.path().join("symlink.h5");
    std::os::unix::fs::symlink(&target, &symlink).unwrap();
    let hard = d.path().join("hard.h5");
    std::fs::hard_link(&target, &hard).unwrap();
    let log = |name: &str| d.path().join(format!("{name}.log.jsonl"));
    for (link, what) in [(&symlink, "is a symbolic link to"), (&hard, "is a file with 2 hard links")] {
        let name = link.file_stem().unwrap().to_str().unwrap();
        let o = inject(&["--config", s(&cfg), "--file", s(link), "--in-place", "--log", s(&log(name))]);
        assert_clean_error(&o, &[s(link), what, "--replace-link"]);
        assert_eq!(std::fs::read(&target).unwrap(), content, "the link's target was changed");
        assert!(link.symlink_metadata().is_ok() && !log(name).exists());
    }
    assert!(symlink.symlink_metadata().unwrap().file_type().is_symlink());

    // With the flag each name becomes a file of its own; the target keeps its content.
    for (link, others) in [(&symlink, "the link's target keeps the old content"), (&hard, "its other names keep the old content")] {
        let name = link.file_stem().unwrap().to_str().unwrap();
        let o = inject(&["--config", s(&cfg), "--file", s(link), "--in-place", "--replace-link", "--log", s(&log(name))]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{stderr}");
        assert!(stderr.contains("warning:") && stderr.contains(s(link)) && stderr.contains(others), "{stderr}");
        let m = link.symlink_metadata().unwrap();
        assert!(m.is_file() && std::os::unix::fs::MetadataExt::nlink(&m) == 1);
        assert_ne!(std::fs::read(link).unwrap(), content, "{name} was not corrupted");
        assert_eq!(std::fs::read(&target).unwrap(), content, "the link's target was changed");
    }
}

#[test]
fn an_existing_log_is_refused_unless_forced() {
    let d = tempfile::tempdir().unwrap();
    let cfg = byte_config(d.path());
    let input = d.path().join("in.h5");
    std::fs::write(&input, vec![0u8; 64]).unwrap();
    let out = d.path().join("out.h5");
    let log = write(d.path(), "kept.jsonl", "precious\n");
    let o = inject(&["--config", s(&cfg), "--file", s(&input), "--output", s(&out), "--log", s(&log)]);
    assert_clean_error(&o, &["kept.jsonl: exists; resilab will not replace it", "--force"]);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "precious\n");
    assert!(!out.exists(), "a refused injection wrote its output");
    // A link there is refused as well, and the file it points to kept.
    let link = d.path().join("link.jsonl");
    std::os::unix::fs::symlink(&log, &link).unwrap();
    let o = inject(&["--config", s(&cfg), "--file", s(&input), "--output", s(&out), "--log", s(&link)]);
    assert_clean_error(&o, &["link.jsonl: exists"]);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "precious\n");
    let o = inject(&["--config", s(&cfg), "--file", s(&input), "--output", s(&out), "--log", s(&log), "--force"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read_to_string(&log).unwrap().starts_with("{\"kind\":\"header\""));
}

/// Writes with h5py a file of one f32 dataset and three it cannot read as numbers (a compound,
/// a 128-bit float, strings); `false` when h5py is missing outside CI.
fn unreadable_file(path: &Path) -> bool {
    let script = r#"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f["model/w"] = np.arange(16, dtype=np.float32)
    f["model/pair"] = np.zeros(4, dtype=[("a", np.float32), ("b", np.float32)])
    f["model/quad"] = np.zeros(4, dtype=np.longdouble)
    f["meta/names"] = np.array([b"conv1", b"fc"])
"#;
    let o = std::process::Command::new("python3").arg("-c").arg(script).arg(path).output();
    match o {
        Ok(o) if o.status.success() => true,
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("No module named") && std::env::var("CI").is_err() => {
            eprintln!("skipping: h5py is not installed");
            false
        }
        Ok(o) => panic!("h5py: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => panic!("python3: {e}"),
    }
}

#[test]
fn datasets_that_cannot_be_read_are_named_and_refused_unless_skipped() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("mixed.h5");
    if !unreadable_file(&input) {
        return;
    }
    let cfg = write(d.path(), "all.toml", "injection_tries = 4\nseed = 3\nuse_random_locations = true\n");
    let out = d.path().join("out.h5");
    let log = d.path().join("out.log.jsonl");
    let base = ["--config", s(&cfg), "--file", s(&input), "--output", s(&out), "--log", s(&log)];
    let o = inject(&base);
    assert_clean_error(&o, &["\"/model/pair\"", "\"/model/quad\"", "\"/meta/names\"", "3 dataset(s)", "--skip-unreadable"]);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("\"/model/w\""));
    assert!(!out.exists() && !log.exists(), "a refused injection wrote files");

    let mut skip = base.to_vec();
    skip.push("--skip-unreadable");
    let o = inject(&skip);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("warning: left out 3 dataset(s)") && stderr.contains("\"/model/quad\""), "{stderr}");
    let header: serde_json::Value = serde_json::from_str(std::fs::read_to_string(&log).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(header["candidates"], serde_json::json!(["/model/w"]));
    assert_eq!(header["unreadable"], serde_json::json!(["/meta/names", "/model/pair", "/model/quad"]));

    // Datasets the config does not target are not its concern.
    let only_w = write(d.path(), "w.toml", "injection_tries = 4\nseed = 3\nlocations_to_corrupt = [\"/model/w\"]\n");
    let o = inject(&["--config", s(&only_w), "--file", s(&input), "--output", s(&out), "--log", s(&d.path().join("w.jsonl"))]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("warning"));
}
