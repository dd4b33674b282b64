//! Labels stay labels: grid labels that are a spreadsheet formula, HTML, a line break with a
//! heading, a remote image or terminal commands are written to every CSV as text a spreadsheet
//! will not run, to `report.md` as text a renderer will not interpret, and never reach the
//! terminal raw; names in an HDF5 file that are terminal commands are printed as escapes by
//! `inspect` and `diff`.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{NEV, TINY, csv_records, run, write};

/// The hostile labels: each as a grid option's name.
const LABELS: [&str; 5] = [
    "=cmd|' /C calc'!A0",
    "<script>alert(1)</script>",
    "line\n# heading",
    "![x](http://example.invalid/x.png)",
    "esc\x1b]0;pwned\x07 bell\x07 cr\r nul\0 csi\x1b[2J",
];

/// Bytes that must never reach a terminal or a report raw.
const CONTROLS: [u8; 4] = [0x1b, 0x07, b'\r', 0];

/// `s` as a TOML basic string (quoted key).
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// An `eval` campaign (2 runs per option) whose one axis has the hostile labels as its options.
fn hostile_campaign() -> String {
    let base = NEV.replace("kind = \"restart\"", "kind = \"eval\"").replace("repetitions = 10", "repetitions = 2");
    let grid = base.split("[grid]").next().unwrap().to_string();
    let options: Vec<String> = LABELS.iter().enumerate().map(|(i, l)| format!("{} = {}", toml_string(l), i + 1)).collect();
    format!("{grid}[grid.\"inject.injection_tries\"]\n{}\n", options.join("\n"))
}

/// Whether a spreadsheet would read `cell` as a formula (OWASP): it begins with `=`, `+`, `-`,
/// `@`, a tab or a CR and is not a number.
fn formula(cell: &str) -> bool {
    cell.starts_with(['=', '+', '-', '@', '\t', '\r']) && cell.parse::<f64>().is_err()
}

/// Checks that no cell of the CSV `path` is a formula, and that its column `column` reads back
/// (one leading `'` removed where the writer added it) as exactly the labels.
fn check_csv(path: &Path, column: &str) {
    let records = csv_records(path);
    assert!(!records.is_empty(), "{}", path.display());
    for r in &records {
        for (k, v) in r {
            assert!(!formula(v), "{}: column {k} holds a formula: {v:?}", path.display());
        }
    }
    let read: BTreeSet<&str> = records.iter().map(|r| resilab_text::csv_uncell(&r[column])).collect();
    assert_eq!(read, LABELS.iter().copied().collect::<BTreeSet<_>>(), "{}", path.display());
    let raw = std::fs::read_to_string(path).unwrap();
    assert!(raw.contains("'=cmd|' /C calc'!A0"), "{raw}");
}

/// Checks the comparisons' `a` and `b` columns: text, never a formula, reading back as labels.
fn check_comparisons(path: &Path) {
    let records = csv_records(path);
    assert!(!records.is_empty(), "{}", path.display());
    let mut seen = BTreeSet::new();
    for r in &records {
        for (k, v) in r {
            assert!(!formula(v), "{}: column {k} holds a formula: {v:?}", path.display());
        }
        seen.insert(resilab_text::csv_uncell(&r["a"]).to_string());
        seen.insert(resilab_text::csv_uncell(&r["b"]).to_string());
    }
    assert_eq!(seen, LABELS.iter().map(|l| l.to_string()).collect::<BTreeSet<_>>());
}

/// Checks `report.md`: no HTML, no image, no heading or line of a label's own, no control
/// character, and every row of the cells table has the header's number of columns.
fn check_report_md(md: &str) {
    assert!(!md.contains("<script"), "raw HTML in report.md:\n{md}");
    assert!(md.contains("&lt;script&gt;alert\\(1\\)&lt;/script&gt;"), "{md}");
    assert!(!md.contains("![x]("), "a remote image in report.md:\n{md}");
    assert!(md.contains("\\!\\[x\\]\\(http://example.invalid/x.png\\)"), "{md}");
    assert!(!md.lines().any(|l| l.trim_start().starts_with("# heading")), "a label's heading in report.md:\n{md}");
    assert!(md.contains("line \\# heading"), "{md}");
    assert!(!md.bytes().any(|b| CONTROLS.contains(&b)), "a control character in report.md:\n{md:?}");
    assert!(md.contains("\\u{1b}\\]0;pwned\\u{7}"), "{md}");
    // A cell's `|` is escaped: every line of the cells table splits into as many cells as its header.
    let unescaped_pipes = |l: &str| {
        let b = l.as_bytes();
        (0..b.len()).filter(|&i| b[i] == b'|' && b[..i].iter().rev().take_while(|&&c| c == b'\\').count() % 2 == 0).count()
    };
    let table: Vec<&str> = md.lines().skip_while(|l| !l.starts_with("| injection_tries")).take_while(|l| l.starts_with('|')).collect();
    assert_eq!(table.len(), 2 + LABELS.len(), "{md}");
    for l in &table {
        assert_eq!(unescaped_pipes(l), unescaped_pipes(table[0]), "a label broke the table: {l:?}");
    }
}

#[test]
fn hostile_grid_labels_stay_text_in_csv_files_the_report_and_the_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write(tmp.path(), "labels.toml", &hostile_campaign());
    let out = tmp.path().join("labels");
    let args = ["campaign", "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap(), "--jobs", "2", "--threads", "1"];
    let o = run(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for stream in [&o.stdout, &o.stderr] {
        assert!(!stream.iter().any(|b| CONTROLS.contains(b)), "a control character on the terminal: {:?}", String::from_utf8_lossy(stream));
    }
    check_csv(&out.join("runs.csv"), "inject.injection_tries");

    let r = run(&["report", out.to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    check_csv(&out.join("report/cells.csv"), "inject.injection_tries");
    check_comparisons(&out.join("report/comparisons.csv"));
    check_report_md(&std::fs::read_to_string(out.join("report/report.md")).unwrap());

    // Merged, the record is read back and written again: the same cells, escaped once.
    let records = |p: &Path| {
        let mut r = csv_records(p);
        r.sort_by(|a, b| a["id"].cmp(&b["id"]));
        r
    };
    let merged = tmp.path().join("merged");
    let m = run(&["merge", out.to_str().unwrap(), "--out", merged.to_str().unwrap()]);
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    assert_eq!(records(&merged.join("runs.csv")), records(&out.join("runs.csv")));
    // Resumed, nothing runs again and the record keeps its cells.
    let before = records(&out.join("runs.csv"));
    let again = run(&[&args[..], &["--resume"]].concat());
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(records(&out.join("runs.csv")), before);
    check_csv(&out.join("runs.csv"), "inject.injection_tries");
}

/// Copies `ckpt` to `to` and adds, with h5py, datasets (`w` ESC `]0;pwned` BEL retitles the
/// terminal, `x` ESC `[2J` clears it) and a root attribute whose names (and
/// the attribute's value) are terminal commands; `false` when h5py is missing outside CI.
fn hostile_names(ckpt: &Path, to: &Path) -> bool {
    std::fs::copy(ckpt, to).unwrap();
    // RETITLE and CLEAR, in Python's escapes.
    let script = r"import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], 'r+')
r, c = 'w\x1b]0;pwned\x07', 'x\x1b[2J'
f.create_dataset('model/' + r, data=np.zeros(4, 'f4'))
f.create_dataset(c, data=np.zeros(4, 'f4'))
f.attrs[r] = c
f.attrs[c] = 1
f.close()
";
    match std::process::Command::new("python3").arg("-c").arg(script).arg(to).output() {
        Ok(o) if o.status.success() => true,
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("No module named") => {
            assert!(!std::env::var("CI").is_ok_and(|v| v == "true"), "python3 with h5py is required in CI (see .ci/run)");
            eprintln!("skipping: h5py is not installed");
            false
        }
        Ok(o) => panic!("h5py failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => panic!("python3: {e}"),
    }
}

/// Asserts that `o` wrote no ESC, BEL, CR or NUL (and, with `named`, showed a hostile name
/// escaped); returns what it wrote.
fn assert_escaped(what: &str, o: &std::process::Output, named: bool) -> String {
    let all = [&o.stdout[..], &o.stderr[..]].concat();
    let text = String::from_utf8_lossy(&all).into_owned();
    assert!(!all.iter().any(|b| CONTROLS.contains(b)), "{what} printed a control character: {text:?}");
    let shown = text.contains("w\\u{1b}]0;pwned\\u{7}") || text.contains("x\\u{1b}[2J");
    assert!(shown || !named, "{what} did not name the dataset: {text}");
    text
}

#[test]
fn names_in_an_hdf5_file_are_printed_with_their_control_characters_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let cfg = write(d, "c.toml", TINY);
    let run_dir = d.join("run");
    let t = run(&[
        "train",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        run_dir.to_str().unwrap(),
        "--quiet",
        "--set",
        "checkpoint.every_steps=8",
    ]);
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    let clean = run_dir.join("checkpoints/step-00000008/worker-0.h5");
    let hostile = d.join("hostile.h5");
    if !hostile_names(&clean, &hostile) {
        return;
    }
    let (c, h) = (clean.to_str().unwrap(), hostile.to_str().unwrap());
    for args in [vec!["inspect", h], vec!["diff", c, h], vec!["diff", c, h, "--all"], vec!["diff", h, c]] {
        let text = assert_escaped(&args.join(" "), &run(&args), true);
        eprintln!("{args:?}:\n{text}");
    }
    for args in [vec!["eval", h], vec!["export", h, "--out", d.join("w.safetensors").to_str().unwrap()]] {
        assert_escaped(&args.join(" "), &run(&args), false);
    }
    // JSON escapes them as JSON does.
    for args in [vec!["inspect", "--json", h], vec!["diff", "--json", c, h]] {
        let o = run(&args);
        assert!(!o.stdout.iter().any(|b| CONTROLS.contains(b)), "{args:?}: {}", String::from_utf8_lossy(&o.stdout));
    }
}
