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
                return Err(Error::Path {
                    path: b.to_path_buf(),
                    message: format!("{role_b} names the same file as {role_a} ({}); resilab will not overwrite it", a.display()),
                });
            }
        }
    }
    Ok(())
}

/// What makes a path more than a file's one name: replacing it (`--in-place`) gives that name a
/// new file and leaves the other names with the old content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Link {
    /// A symbolic link to this target.
    Symbolic(PathBuf),
    /// A file with this many hard links in all.
    Hard(u64),
}

impl Link {
    /// What the link is, in words.
    fn what(&self) -> String {
        match self {
            Link::Symbolic(target) => format!("a symbolic link to {target:?}"),
            Link::Hard(n) => format!("a file with {n} hard links"),
        }
    }

    /// Who keeps the old content when the name is replaced.
    fn others(&self) -> &'static str {
        match self {
            Link::Symbolic(_) => "the link's target keeps",
            Link::Hard(_) => "its other names keep",
        }
    }

    /// The error for an `--in-place` on `path` without `--replace-link`.
    pub fn refusal(&self, path: &Path) -> String {
        format!(
            "--in-place: {} is {}; corrupting it in place would replace it with a file of its own and {} the old content. Pass --replace-link to do that, or give --output",
            path.display(),
            self.what(),
            self.others()
        )
    }

    /// The warning once `path` was replaced.
    pub fn replaced(&self, path: &Path) -> String {
        format!(
            "{} was {}: it is now a file of its own with the corrupted content, and {} the old content (--replace-link)",
            path.display(),
            self.what(),
            self.others()
        )
    }
}

/// Whether `path` is a symbolic link or a file with other hard links (its last component is
/// not followed).
pub fn link_of(path: &Path) -> Result<Option<Link>> {
    let m = std::fs::symlink_metadata(path).map_err(|error| Error::Io { path: path.to_path_buf(), error })?;
    if m.file_type().is_symlink() {
        let target = std::fs::read_link(path).map_err(|error| Error::Io { path: path.to_path_buf(), error })?;
        return Ok(Some(Link::Symbolic(target)));
    }
    Ok((m.is_file() && m.nlink() > 1).then(|| Link::Hard(m.nlink())))
}

/// Refuses an explicit `--log` that exists (a file, a link, anything), unless `force`; the
/// words are `export`'s for an existing `--out`.
pub fn check_new_log(log: &Path, force: bool) -> Result<()> {
    if force || log.symlink_metadata().is_err() {
        return Ok(());
    }
    Err(Error::Path { path: log.to_path_buf(), message: EXISTING_LOG.into() })
}

/// The error for an existing `--log`.
pub(crate) const EXISTING_LOG: &str = "exists; resilab will not replace it: choose another --log, or pass --force to replace it";

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

    #[test]
    fn links_are_told_from_files_of_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let file = d.join("in.h5");
        std::fs::write(&file, b"data").unwrap();
        assert_eq!(link_of(&file).unwrap(), None);
        std::os::unix::fs::symlink(&file, d.join("link.h5")).unwrap();
        assert_eq!(link_of(&d.join("link.h5")).unwrap(), Some(Link::Symbolic(file.clone())));
        std::fs::hard_link(&file, d.join("hard.h5")).unwrap();
        assert_eq!(link_of(&file).unwrap(), Some(Link::Hard(2)));
        let e = Link::Hard(2).refusal(&file);
        assert!(e.contains("in.h5 is a file with 2 hard links") && e.contains("--replace-link"), "{e}");
        assert!(link_of(&d.join("missing.h5")).is_err());
    }

    #[test]
    fn an_existing_log_is_refused_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("a.log.jsonl");
        check_new_log(&log, false).unwrap();
        std::fs::write(&log, b"keep").unwrap();
        let e = check_new_log(&log, false).unwrap_err().to_string();
        assert!(e.contains("a.log.jsonl: exists; resilab will not replace it") && e.contains("--force"), "{e}");
        check_new_log(&log, true).unwrap();
    }
}
