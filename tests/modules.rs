//! No import circles: within each crate of the workspace (and the binary), no module uses
//! another that uses it back, directly or through others (tests/common/modules.rs says what
//! counts as a use). A circle is reported with every use inside it, `file:line`, so that the
//! shared piece can be given a module of its own. What the reader cannot follow (a glob import
//! of the crate's own modules, a macro shared beyond its file) is refused in library code, so
//! that no circle hides behind it.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::modules::Graph;

fn crate_roots() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec![root.join("src/main.rs")];
    for entry in fs::read_dir(root.join("crates")).unwrap() {
        let src = entry.unwrap().path().join("src");
        out.extend(["lib.rs", "main.rs"].iter().map(|f| src.join(f)).filter(|p| p.exists()));
    }
    out.sort();
    out
}

#[test]
fn no_module_uses_one_that_uses_it_back() {
    let mut report = String::new();
    let mut modules = 0;
    for root in crate_roots() {
        let g = Graph::of_crate(&root);
        modules += g.modules();
        for (members, edges) in g.circles() {
            report += &format!("\n{}: circle of {}:\n", root.display(), members.join(", "));
            for e in edges {
                report += &format!("  {} uses {} ({})\n", e.from, e.to, e.at);
            }
        }
    }
    assert!(modules > 100, "only {modules} modules found: the reader lost its way");
    assert!(report.is_empty(), "import circles:{report}");
}

#[test]
fn library_code_has_no_glob_of_its_own_modules_and_no_shared_macro() {
    let found: Vec<String> = crate_roots().iter().flat_map(|root| Graph::of_crate(root).unreadable()).collect();
    assert!(found.is_empty(), "the module reader cannot follow these; name the items instead:\n{}", found.join("\n"));
}

/// A crate laid out in a temporary folder.
fn fixture(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    dir
}

#[test]
fn the_reader_finds_a_circle_through_three_modules_and_names_its_uses() {
    let dir = fixture(&[
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\npub use a::Thing;\n"),
        ("src/a.rs", "use crate::b::helper;\npub struct Thing;\n"),
        ("src/b.rs", "pub fn helper() { crate::c::other() }\n"),
        // No use in a comment, a raw byte string, or a string after an escaped-quote character.
        (
            "src/c.rs",
            "// crate::b::helper is not a use in a comment\npub fn other() { let _ = br\"crate::b\"; let _ = '\\''; let _ = \"crate::b\"; let _t: crate::Thing; }\n",
        ),
    ]);
    let circles = Graph::of_crate(&dir.path().join("src/lib.rs")).circles();
    assert_eq!(circles.len(), 1, "{circles:?}");
    let (members, edges) = &circles[0];
    assert_eq!(members, &["a", "b", "c"]);
    let lines: Vec<String> = edges.iter().map(|e| format!("{}>{}@{}", e.from, e.to, e.at.rsplit('/').next().unwrap())).collect();
    assert_eq!(lines, ["a>b@a.rs:1", "b>c@b.rs:1", "c>a@c.rs:2"]);
}

#[test]
fn facades_declarations_tests_and_one_way_uses_make_no_circle() {
    let dir = fixture(&[
        // The root re-exports and declares; its children use its error type: no circle.
        // A variant and a field that share re-exported names are not uses of them.
        (
            "src/lib.rs",
            "pub mod session;\nmod rows;\npub use session::{Session, run as go};\npub enum Error {\n    Session(String),\n    Other { go: u8 },\n}\n",
        ),
        (
            "src/session.rs",
            "mod state;\nuse super::Error;\nuse self::state::State;\npub struct Session(State);\npub fn run() -> Result<(), Error> { Ok(()) }\n#[cfg(test)]\nmod tests { use crate::rows::Row; }\n",
        ),
        ("src/session/state.rs", "use crate::rows::{self, Row};\npub struct State(Row);\n"),
        ("src/rows.rs", "pub struct Row;\n#[cfg(test)]\nfn t() { let _ = crate::session::state::State; }\n"),
    ]);
    let g = Graph::of_crate(&dir.path().join("src/lib.rs"));
    assert_eq!(g.modules(), 4);
    assert!(g.circles().is_empty(), "{:?}", g.circles());
    let mut uses: Vec<(String, String)> = g.edges.iter().map(|e| (e.from.clone(), e.to.clone())).collect();
    uses.sort();
    uses.dedup();
    let want = [("session", ""), ("session", "session::state"), ("session::state", "rows")];
    assert_eq!(uses, want.map(|(a, b)| (a.to_string(), b.to_string())));
}

#[test]
fn a_module_that_uses_a_name_it_reexports_uses_the_names_module() {
    let dir = fixture(&[
        (
            "src/lib.rs",
            "mod a;\nmod build;\npub use a::Thing;\npub use build::build;\npub struct Limit;\npub fn make() -> Thing { Thing }\n",
        ),
        ("src/a.rs", "pub struct Thing(crate::Limit);\n"),
        // `mod build;` declares the module whose function it re-exports: not a use of it.
        ("src/build.rs", "pub fn build() -> crate::Limit { crate::Limit }\n"),
    ]);
    let circles = Graph::of_crate(&dir.path().join("src/lib.rs")).circles();
    assert_eq!(circles.iter().map(|(m, _)| m.clone()).collect::<Vec<_>>(), [vec!["".to_string(), "a".to_string()]]);
}

#[test]
fn the_reader_refuses_globs_of_its_own_modules_and_shared_macros_only() {
    let dir = fixture(&[
        ("src/lib.rs", "mod a;\nmod b;\npub use a::*;\n#[macro_export]\nmacro_rules! m { () => {} }\n"),
        // Another crate's glob, a glob of the module's own enum and test code are fine.
        (
            "src/a.rs",
            "use std::io::*;\npub enum Kind { X, Y }\nuse Kind::*;\npub fn f() -> Kind { X }\n#[cfg(test)]\nmod tests { use super::*; }\n",
        ),
        ("src/b.rs", "use super::{a::{self, *}};\n#[macro_use]\nmod inner {}\n"),
    ]);
    let found: Vec<String> =
        Graph::of_crate(&dir.path().join("src/lib.rs")).unreadable().iter().map(|f| f.rsplit('/').next().unwrap().to_string()).collect();
    assert_eq!(
        found,
        [
            "lib.rs:3: glob import `use a::*`",
            "lib.rs:4: #[macro_export]",
            "b.rs:1: glob import `use super::{a::{self, *}}`",
            "b.rs:2: #[macro_use]"
        ]
    );
}
