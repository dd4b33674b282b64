//! Whether two paths name the same file, under any spelling: `..`, symbolic links, hard links.
//!
//! An injection reads one file and writes others (the corrupted copy, the log); no output may
//! be an input or another output, or a command would replace what it was asked to read.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The device and inode of the file `path` names now (symbolic links followed).
fn inode(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Where `path` resolves: itself canonicalised when it exists, otherwise its canonical parent
/// joined with its name (so `a/../b.h5` and `./b.h5` agree before either exists).
fn resolved(path: &Path) -> Option<PathBuf> {
    if let Ok(p) = path.canonicalize() {
        return Some(p);
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Some(parent.canonicalize().ok()?.join(path.file_name()?))
}

/// Whether `a` and `b` name the same file: the same inode (hard links, symbolic links to it)
/// or the same resolved location (spellings with `..` or `.`, files not yet created, dangling
/// links).
pub fn same_file(a: &Path, b: &Path) -> bool {
    if let (Some(x), Some(y)) = (inode(a), inode(b))
        && x == y
    {
        return true;
    }
    match (resolved(a), resolved(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// Fails, naming both, when two of the given `(role, path)` pairs name the same file.
pub fn check_distinct(paths: &[(&str, &Path)]) -> Result<()> {
    for (i, (role_a, a)) in paths.iter().enumerate() {
        for (role_b, b) in &paths[i + 1..] {
            if same_file(a, b) {
                return Err(Error::Io {
                    path: b.to_path_buf(),
                    message: format!("{role_b} names the same file as {role_a} ({}); resilab will not overwrite it", a.display()),
                });
            }
        }
    }
    Ok(())
}

/// `inject`'s output when none is given: `<stem>.injected.h5` beside the input.
pub fn default_output(input: &Path) -> PathBuf {
    let stem = input.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "file".into());
    input.with_file_name(format!("{stem}.injected.h5"))
}

/// `inject`'s log when none is given: `<stem>.log.jsonl` beside the output.
pub fn default_log(output: &Path) -> PathBuf {
    let stem = output.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "injection".into());
    output.with_file_name(format!("{stem}.log.jsonl"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_one_file_is_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("sub")).unwrap();
        let input = d.join("in.h5");
        std::fs::write(&input, b"data").unwrap();
        std::os::unix::fs::symlink(&input, d.join("link.h5")).unwrap();
        std::fs::hard_link(&input, d.join("hard.h5")).unwrap();
        for other in [d.join("sub/../in.h5"), d.join("./in.h5"), d.join("link.h5"), d.join("hard.h5")] {
            assert!(same_file(&input, &other), "{}", other.display());
        }
        assert!(same_file(&d.join("new.log"), &d.join("sub/../new.log")), "not yet created");
        assert!(!same_file(&input, &d.join("other.h5")));
        assert!(!same_file(&d.join("a.log"), &d.join("b.log")));

        let err = check_distinct(&[("the input", &input), ("--output", &d.join("out.h5")), ("--log", &d.join("sub/../link.h5"))])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--log") && err.contains("the input"), "{err}");
        check_distinct(&[("the input", &input), ("--output", &d.join("out.h5")), ("--log", &d.join("out.log"))]).unwrap();
    }
}
