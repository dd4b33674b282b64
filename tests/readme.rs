//! The README's five tasks run as written: every ```console block of README.md is run by
//! trycmd, in order, in a scratch copy of the repository's `configs/`, and each command's output
//! must match the block (`[..]` and `...` stand for what varies). The command outputs that docs/
//! quotes are held the same way: a page whose block goes stale fails here.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::path::Path;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn the_readme_tasks_run_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(readme.matches("```console").count() >= 5, "README.md should show the five tasks as ```console blocks");
    let scratch = tempfile::tempdir().unwrap();
    // trycmd runs `README.md`'s commands in `README.in/`, beside it.
    std::fs::write(scratch.path().join("README.md"), &readme).unwrap();
    copy_dir(&root.join("configs"), &scratch.path().join("README.in/configs"));
    trycmd::TestCases::new().register_bin("resilab", Path::new(env!("CARGO_BIN_EXE_resilab"))).case(scratch.path().join("README.md"));
}

/// The docs pages whose quoted outputs are checked (in a scratch copy of `configs/` and
/// `results/paper/recovery/`), and the least number of blocks each must have
/// (so that a block turned into plain text does not pass unseen).
const PAGES: [(&str, usize); 1] = [("docs/recovery.md", 2)];

#[test]
fn the_outputs_quoted_in_the_docs_are_todays() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scratch = tempfile::tempdir().unwrap();
    let cases = trycmd::TestCases::new();
    cases.register_bin("resilab", Path::new(env!("CARGO_BIN_EXE_resilab")));
    for (page, blocks) in PAGES {
        let text = std::fs::read_to_string(root.join(page)).unwrap();
        assert!(text.matches("```console").count() >= blocks, "{page} should quote at least {blocks} ```console blocks");
        let name = Path::new(page).file_name().unwrap();
        let stem = Path::new(page).file_stem().unwrap().to_string_lossy().to_string();
        // trycmd runs `<page>.md`'s commands in `<page>.in/`, beside it.
        std::fs::write(scratch.path().join(name), &text).unwrap();
        let dir = scratch.path().join(format!("{stem}.in"));
        copy_dir(&root.join("configs"), &dir.join("configs"));
        copy_dir(&root.join("results/paper/recovery"), &dir.join("results/paper/recovery"));
        cases.case(scratch.path().join(name));
    }
}
