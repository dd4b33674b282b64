//! What resilab may touch in a checkpoint root: the directories it marked as its own.
//!
//! A root is claimed once ([`claim`]): a new or empty directory gets the marker file
//! [`ROOT_MARKER`]; a directory that already holds other files is refused unless the caller
//! adopts it, and even then only marked checkpoints are ever listed, pruned or replaced. Each
//! checkpoint directory holds [`STEP_MARKER`], written inside the temporary directory before it
//! is renamed into place, so a `step-*` directory that lacks it (a user's, or a foreign one
//! copied in) is invisible to [`list`] and [`prune`].

use std::path::{Path, PathBuf};

use crate::error::{Error, Result, io};

/// The file that marks a directory as a resilab checkpoint root.
pub const ROOT_MARKER: &str = ".resilab-checkpoints";

/// The file that marks a `step-*` directory as a checkpoint resilab wrote.
pub const STEP_MARKER: &str = ".resilab-checkpoint";

fn invalid(path: &Path, message: String) -> Error {
    Error::Invalid { path: path.to_path_buf(), message }
}

/// Whether `dir` is a checkpoint resilab wrote (it holds [`STEP_MARKER`]).
pub fn is_checkpoint_dir(dir: &Path) -> bool {
    dir.join(STEP_MARKER).symlink_metadata().is_ok_and(|m| m.is_file())
}

/// Writes [`STEP_MARKER`] into a checkpoint directory being written.
pub(crate) fn write_step_marker(dir: &Path, step: u64) -> Result<()> {
    let path = dir.join(STEP_MARKER);
    let text = format!("{{\"format_version\": {}, \"step\": {step}}}\n", FORMAT_VERSION);
    std::fs::write(&path, text).map_err(io(&path))
}

/// Makes `root` a checkpoint root this process may write into, creating it if missing.
///
/// A root that is new, empty or already marked is accepted (and marked). A directory holding
/// anything else is refused, naming a few of its entries, unless `adopt` is set: then it is
/// marked and its existing content is left alone for good (only marked checkpoints are ever
/// pruned or replaced). A path that exists and is not a directory is always refused.
pub fn claim(root: &Path, adopt: bool) -> Result<()> {
    if root.as_os_str().is_empty() {
        return Err(invalid(root, "the checkpoint directory is empty: name a directory".into()));
    }
    match std::fs::metadata(root) {
        Ok(m) if !m.is_dir() => return Err(invalid(root, "exists and is not a directory; choose another checkpoint.dir".into())),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(root).map_err(io(root))?,
        Err(e) => return Err(Error::Io { path: root.to_path_buf(), source: e }),
    }
    let marker = root.join(ROOT_MARKER);
    if marker.symlink_metadata().is_ok() {
        return Ok(());
    }
    let foreign = foreign_entries(root)?;
    if !foreign.is_empty() && !adopt {
        let shown: Vec<String> = foreign.iter().take(3).map(|p| p.display().to_string()).collect();
        return Err(invalid(
            root,
            format!(
                "holds {} entr{} resilab did not write ({}{}); resilab replaces and prunes checkpoints in its checkpoint directory, \
                 so it starts only in a new or empty one: choose another checkpoint.dir (or --out), or set \
                 checkpoint.adopt_dir = true to add checkpoints beside them (existing entries are never touched)",
                foreign.len(),
                if foreign.len() == 1 { "y" } else { "ies" },
                shown.join(", "),
                if foreign.len() > 3 { ", ..." } else { "" }
            ),
        ));
    }
    let text = format!(
        "resilab checkpoint directory (format {}): resilab lists, replaces and prunes only step-* directories holding {STEP_MARKER}\n",
        FORMAT_VERSION
    );
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&marker) {
        Ok(mut f) => {
            use std::io::Write as _;
            f.write_all(text.as_bytes()).and_then(|()| f.sync_all()).map_err(io(&marker))?;
            sync_dir(root)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::Io { path: marker, source: e }),
    }
}

/// Entries of `root` that are neither marked checkpoints nor resilab's own temporary directories.
fn foreign_entries(root: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root).map_err(io(root))? {
        let p = e.map_err(io(root))?.path();
        let ours = p.file_name().is_some_and(|n| n == ROOT_MARKER) || is_checkpoint_dir(&p);
        if !ours {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// Complete checkpoints under `root` that resilab wrote, oldest first. Temporary directories,
/// unmarked `step-*` directories and everything else are ignored.
pub fn list(root: &Path) -> Result<Vec<(u64, PathBuf)>> {
    if !root.exists() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for e in std::fs::read_dir(root).map_err(io(root))? {
        let e = e.map_err(io(root))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(step) = name.strip_prefix("step-").and_then(|s| s.parse::<u64>().ok())
            && e.file_type().is_ok_and(|t| t.is_dir())
            && is_checkpoint_dir(&e.path())
        {
            out.push((step, e.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Deletes all but the newest `keep` of the checkpoints [`list`] finds, and the temporary
/// directories of interrupted writes (`.step-*.tmp` holding [`STEP_MARKER`]). Nothing else in
/// `root` is touched.
pub fn prune(root: &Path, keep: usize) -> Result<()> {
    let all = list(root)?;
    for (_, p) in all.iter().take(all.len().saturating_sub(keep)) {
        std::fs::remove_dir_all(p).map_err(io(p))?;
    }
    for e in std::fs::read_dir(root).map_err(io(root))? {
        let e = e.map_err(io(root))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let stale =
            name.starts_with(".step-") && name.ends_with(".tmp") && e.file_type().is_ok_and(|t| t.is_dir()) && is_checkpoint_dir(&e.path());
        if stale {
            std::fs::remove_dir_all(e.path()).map_err(io(&e.path()))?;
        }
    }
    Ok(())
}

/// The directory name of the checkpoint at `step`.
pub fn dir_name(step: u64) -> String {
    format!("step-{step:08}")
}

/// Version of the file layout written by this crate (2: digests on the training state and on the
/// attributes; 3: the data cursor counts images, `/train_state/sample`, not batches).
pub const FORMAT_VERSION: u64 = 3;

/// Flushes `dir`'s entries (a rename or a new file in it) to the disk.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir).and_then(|f| f.sync_all()).map_err(io(dir))
}

/// Refuses anything but a regular file (a FIFO or device would block or never end).
pub fn require_regular_file(file: &Path) -> Result<()> {
    match std::fs::metadata(file) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => Err(Error::Invalid { path: file.to_path_buf(), message: "is not a regular file".into() }),
        Err(e) => Err(Error::Io { path: file.to_path_buf(), source: e }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_checkpoint(root: &Path, step: u64) -> PathBuf {
        let d = root.join(dir_name(step));
        std::fs::create_dir(&d).unwrap();
        write_step_marker(&d, step).unwrap();
        std::fs::write(d.join("worker-0.h5"), b"x").unwrap();
        d
    }

    #[test]
    fn a_new_or_empty_root_is_claimed_and_a_full_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("a/b");
        claim(&new, false).unwrap();
        assert!(new.join(ROOT_MARKER).is_file());
        claim(&new, false).unwrap();

        let full = dir.path().join("mine");
        std::fs::create_dir(&full).unwrap();
        std::fs::write(full.join("thesis.tex"), b"precious").unwrap();
        let err = claim(&full, false).unwrap_err().to_string();
        assert!(err.contains("thesis.tex") && err.contains("checkpoint.adopt_dir"), "{err}");
        assert!(!full.join(ROOT_MARKER).exists());
        claim(&full, true).unwrap();
        assert!(full.join(ROOT_MARKER).is_file());

        let file = dir.path().join("plain");
        std::fs::write(&file, b"").unwrap();
        assert!(claim(&file, true).unwrap_err().to_string().contains("not a directory"));
        assert!(claim(Path::new(""), true).is_err());
    }

    #[test]
    fn prune_and_list_see_only_marked_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        claim(root, true).unwrap();
        for s in [10, 20, 30] {
            fake_checkpoint(root, s);
        }
        // A user's directories that look like resilab's: never listed, never deleted.
        let foreign = root.join("step-99999999");
        std::fs::create_dir(&foreign).unwrap();
        std::fs::write(foreign.join("data.bin"), b"keep").unwrap();
        let user_tmp = root.join(".cache.tmp");
        std::fs::create_dir(&user_tmp).unwrap();
        let stale = root.join(".step-00000040.abc.tmp");
        std::fs::create_dir(&stale).unwrap();
        write_step_marker(&stale, 40).unwrap();

        let steps: Vec<u64> = list(root).unwrap().into_iter().map(|(s, _)| s).collect();
        assert_eq!(steps, [10, 20, 30]);
        prune(root, 2).unwrap();
        let steps: Vec<u64> = list(root).unwrap().into_iter().map(|(s, _)| s).collect();
        assert_eq!(steps, [20, 30], "the foreign step-99999999 must not push out the run's own newest");
        assert!(foreign.join("data.bin").is_file());
        assert!(user_tmp.is_dir());
        assert!(!stale.exists());
    }
}
