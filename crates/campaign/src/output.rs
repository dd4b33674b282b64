//! Outputs written all or nothing: a command that fails part-way (a full disk, a kill) leaves
//! the earlier output or nothing, never a mixture that a later command would read as a result.
//!
//! Two ways, for two kinds of destination. A directory that is the output and nothing else (a
//! report) is written whole beside its destination and exchanged with it in one rename
//! ([`replace_dir`]). A directory that holds other files too (`merge --out`, which may be one
//! of the parts, with its bases and logs) gets its files under temporary names, each written
//! and synced, and renamed into place only once all of them are ([`Staged`]).

use std::path::{Path, PathBuf};

use crate::{Error, Result};

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// Fails when `path` exists and is not a directory (`what` names the option that gave it):
/// said before anything tries to create or lock it, which would fail with only "File exists".
pub fn check_out_dir(path: &Path, what: &str) -> Result<()> {
    let kind = match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(m) if m.is_file() => "a file",
        Ok(_) => "a special file",
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => "a path through a file",
        Err(source) => return Err(Error::Io { path: path.to_path_buf(), source }),
    };
    Err(Error::NotADirectory { what: what.to_string(), path: path.to_path_buf(), kind })
}

/// Files to be written into `dir` under temporary names (`.NAME.merging`), renamed into place
/// by [`Staged::commit`] in the order written, once every one is written and synced. Dropped
/// before that, it removes what it wrote.
pub struct Staged {
    dir: PathBuf,
    files: Vec<(PathBuf, PathBuf)>,
}

impl Staged {
    /// The temporary name of `name`.
    fn temporary(dir: &Path, name: &str) -> PathBuf {
        dir.join(format!(".{name}.merging"))
    }

    /// Starts staging into `dir`, first removing what an earlier staging of `names` that was
    /// killed left behind (the caller holds `dir`'s lock, so no other process is staging).
    pub fn new(dir: &Path, names: &[&str]) -> Result<Self> {
        for name in names {
            let p = Self::temporary(dir, name);
            match std::fs::remove_file(&p) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&p)(e)),
                _ => {}
            }
        }
        Ok(Self { dir: dir.to_path_buf(), files: Vec::new() })
    }

    /// Writes `bytes` as the temporary file of `name` and syncs it.
    pub fn write(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        use std::io::Write as _;
        let tmp = Self::temporary(&self.dir, name);
        self.files.push((tmp.clone(), self.dir.join(name)));
        let mut f = resilab_runner::files::create_output(&tmp)?;
        f.write_all(bytes).and_then(|()| f.sync_all()).map_err(io(&tmp))
    }

    /// Renames every file into place, in the order written, and syncs the directory.
    pub fn commit(mut self) -> Result<()> {
        for (tmp, path) in std::mem::take(&mut self.files) {
            std::fs::rename(&tmp, &path).map_err(io(&path))?;
        }
        sync_dir(&self.dir)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        for (tmp, _) in &self.files {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Removes `dir` when it holds nothing but a lock file: the directory a command created to
/// lock it and then wrote nothing into (it failed), so that it leaves nothing behind.
pub fn remove_if_bare(dir: &Path) {
    let lock = dir.join(resilab_runner::files::LOCK_FILE);
    let only_lock = std::fs::read_dir(dir).is_ok_and(|entries| entries.flatten().all(|e| e.path() == lock));
    if only_lock {
        let _ = std::fs::remove_file(&lock);
        let _ = std::fs::remove_dir(dir);
    }
}

/// Syncs a directory's entries (a rename into it) to disk.
fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// Syncs every file under `dir`, and the directories themselves, to disk.
pub fn sync_tree(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir).map_err(io(dir))? {
        let e = e.map_err(io(dir))?;
        let path = e.path();
        let kind = e.file_type().map_err(io(&path))?;
        if kind.is_dir() {
            sync_tree(&path)?;
        } else if kind.is_file() {
            std::fs::File::open(&path).and_then(|f| f.sync_all()).map_err(io(&path))?;
        }
    }
    sync_dir(dir)
}

/// The directory beside `out` in which its replacement is written (`.NAME.writing`). `out`
/// must exist (its lock is held).
pub fn staging_dir(out: &Path) -> Result<PathBuf> {
    let real = std::fs::canonicalize(out).map_err(io(out))?;
    let (Some(parent), Some(name)) = (real.parent(), real.file_name()) else {
        return Err(Error::Config(format!("--out {}: the root directory has no place beside it to write into", out.display())));
    };
    Ok(parent.join(format!(".{}.writing", name.to_string_lossy())))
}

/// Puts the directory `staged` (written and synced) in the place of `out`, which must exist,
/// and removes what `out` held. On Linux the two are exchanged in one rename, so `out` holds
/// the earlier output or the new one at every moment; elsewhere (or on a file system that
/// cannot exchange) `out` is moved aside first.
pub fn replace_dir(staged: &Path, out: &Path) -> Result<()> {
    let real = std::fs::canonicalize(out).map_err(io(out))?;
    if !exchange(staged, &real)? {
        let aside = PathBuf::from(format!("{}.old", staged.display()));
        let _ = std::fs::remove_dir_all(&aside);
        std::fs::rename(&real, &aside).map_err(io(out))?;
        if let Err(e) = std::fs::rename(staged, &real) {
            let _ = std::fs::rename(&aside, &real);
            return Err(io(out)(e));
        }
        std::fs::rename(&aside, staged).map_err(io(staged))?;
    }
    if let Some(parent) = real.parent() {
        sync_dir(parent)?;
    }
    // `staged` now holds the earlier output: gone with it (what is left, the next write into
    // `out` removes first).
    let _ = std::fs::remove_dir_all(staged);
    Ok(())
}

/// Exchanges the directories `a` and `b` atomically (`renameat2` with `RENAME_EXCHANGE`);
/// `false` where the kernel or the file system cannot.
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> Result<bool> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    match renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE) {
        Ok(()) => Ok(true),
        Err(e) if [rustix::io::Errno::NOSYS, rustix::io::Errno::INVAL, rustix::io::Errno::NOTSUP].contains(&e) => Ok(false),
        Err(e) => Err(io(b)(e.into())),
    }
}

/// Exchanges the directories `a` and `b` atomically; `false` where the system cannot.
#[cfg(not(target_os = "linux"))]
fn exchange(_a: &Path, _b: &Path) -> Result<bool> {
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staged_set_appears_only_when_committed_and_a_dropped_one_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.txt"), "old").unwrap();
        let mut s = Staged::new(d.path(), &["a.txt", "b.txt"]).unwrap();
        s.write("a.txt", b"new").unwrap();
        assert_eq!(std::fs::read_to_string(d.path().join("a.txt")).unwrap(), "old");
        drop(s);
        let names: Vec<String> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        assert_eq!(names, ["a.txt"]);
        // A leftover of a killed staging is cleared; a committed set replaces the files.
        std::fs::write(d.path().join(".b.txt.merging"), "stale").unwrap();
        let mut s = Staged::new(d.path(), &["a.txt", "b.txt"]).unwrap();
        assert!(!d.path().join(".b.txt.merging").exists());
        s.write("a.txt", b"new").unwrap();
        s.write("b.txt", b"b").unwrap();
        s.commit().unwrap();
        assert_eq!(std::fs::read_to_string(d.path().join("a.txt")).unwrap(), "new");
        assert_eq!(std::fs::read_to_string(d.path().join("b.txt")).unwrap(), "b");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
    }

    #[test]
    fn a_directory_is_replaced_whole_and_a_file_is_not_taken_for_one() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("report");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("stale.png"), "old").unwrap();
        let staged = staging_dir(&out).unwrap();
        assert_eq!(staged, std::fs::canonicalize(d.path()).unwrap().join(".report.writing"));
        std::fs::create_dir(&staged).unwrap();
        std::fs::write(staged.join("report.md"), "new").unwrap();
        sync_tree(&staged).unwrap();
        replace_dir(&staged, &out).unwrap();
        assert_eq!(std::fs::read_to_string(out.join("report.md")).unwrap(), "new");
        assert!(!out.join("stale.png").exists() && !staged.exists());
        let file = d.path().join("runs.jsonl");
        std::fs::write(&file, "").unwrap();
        let e = check_out_dir(&file, "--out").unwrap_err().to_string();
        assert_eq!(e, format!("--out {} is a file, not a directory", file.display()));
        check_out_dir(&out, "--out").unwrap();
        check_out_dir(&d.path().join("new"), "--out").unwrap();
    }
}
