//! The command outputs that docs/ quotes are the commands' outputs today: every ```console
//! block of the pages below is run by trycmd, in order, in a scratch copy of the repository's
//! `configs/` and `results/paper/recovery/`, and each command's output must match the block
//! (`[..]` and `...` stand for what varies). A page whose block goes stale fails here, as
//! tests/readme.rs holds the README's.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::path::Path;

/// The pages whose quoted outputs are checked, and the least number of blocks each must have
/// (so that a block turned into plain text does not pass unseen).
const PAGES: [(&str, usize); 1] = [("docs/recovery.md", 2)];

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
