//! How resilab opens what it writes: an exclusive lock on every directory a command writes,
//! and output files that are never written through a symbolic link.
//!
//! The lock is an advisory lock (`flock`) on `<dir>/.resilab.lock`, held for the command's
//! life: a second writer fails at once, naming the process that holds the directory, and the
//! operating system releases it when that process ends, however it ends, so a lock left by a
//! killed run never blocks. The file keeps the holder's process id and start time for that
//! message; its presence alone means nothing. The holder removes the file when it lets the
//! directory go (a finished run, or a command that refused the directory), while it still
//! holds the lock; a process that opened the file before its removal and locks it then finds
//! it gone from the directory and locks the new one instead, so one directory never has two
//! holders.
//!
//! A lock inside the directory it guards does not survive the directory's removal: a second
//! run on a new directory of the same name would not be refused. So a run also records the
//! identity (device and inode) of each directory it writes into ([`Watch`]) and checks it
//! before every prune, rename or checkpoint: a run whose directory was replaced stops with an
//! error and touches nothing in the new one.
//!
//! Files are written only through names of their own: never through a symbolic link, and never
//! into a file with other hard links (a copy made with `cp -al` would change with it): such a
//! file is replaced by a private copy first, and a warning says so.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::{Error, Result, io};

/// The lock file in a directory a command writes.
pub const LOCK_FILE: &str = ".resilab.lock";

/// A directory held for writing; released when dropped (which removes the lock file) or when
/// the process ends (which leaves it, unheld).
#[derive(Debug)]
pub struct DirLock {
    file: File,
    /// The directory.
    pub dir: PathBuf,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Removed while still held, and only if it is still this lock's file (the directory may
        // have been replaced meanwhile, with another process's lock in it).
        let path = self.dir.join(LOCK_FILE);
        if is_current(&path, &self.file) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Whether `path` names the file `file` is open on (a link at `path` is not followed).
fn is_current(path: &Path, file: &File) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (path.symlink_metadata(), file.metadata()) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// How often [`lock_dir`] opens the lock file again after locking one its holder removed.
const LOCK_TRIES: usize = 100;

/// Directories a run writes into, each with the identity it had when the run claimed it.
#[derive(Clone, Debug, Default)]
pub struct Watch {
    dirs: Vec<(PathBuf, (u64, u64))>,
}

impl Watch {
    /// Records `dir`'s identity now (it must exist).
    pub fn add(&mut self, dir: &Path) -> Result<()> {
        let id = identity(dir)?;
        self.dirs.push((dir.to_path_buf(), id));
        Ok(())
    }

    /// Fails, naming the directory, when any of them is no longer the one recorded.
    pub fn check(&self) -> Result<()> {
        self.dirs.iter().try_for_each(|(dir, id)| check_identity(dir, *id))
    }
}

/// A directory's device and inode.
fn identity(dir: &Path) -> Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(dir).map_err(io(dir))?;
    Ok((m.dev(), m.ino()))
}

fn check_identity(dir: &Path, id: (u64, u64)) -> Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    match std::fs::metadata(dir) {
        Ok(m) if (m.dev(), m.ino()) == id => Ok(()),
        Ok(_) => Err(Error::Replaced { dir: dir.to_path_buf(), what: "was replaced by another directory" }),
        Err(_) => Err(Error::Replaced { dir: dir.to_path_buf(), what: "was removed" }),
    }
}

/// Locks `dir` (created if missing) for this process's writes; `what` names it in errors
/// (`--out`, `checkpoint.dir`). Fails at once, naming the holder, when another process holds it.
pub fn lock_dir(dir: &Path, what: &str) -> Result<DirLock> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join(LOCK_FILE);
    // A lock file shared with another directory (a copy made with `cp -al`) would lock both
    // and take this process's note into the other: this directory gets one of its own.
    if links(&path)? > 1 {
        std::fs::remove_file(&path).map_err(io(&path))?;
    }
    for _ in 0..LOCK_TRIES {
        let mut file = open_no_follow(&path, OpenOptions::new().read(true).write(true).create(true).truncate(false))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                let holder = if holder.trim().is_empty() { "another process".to_string() } else { holder.trim().to_string() };
                return Err(Error::InUse { what: what.to_string(), dir: dir.to_path_buf(), holder });
            }
            Err(TryLockError::Error(source)) => return Err(Error::Io { path, source }),
        }
        // Its holder removed it between the open and the lock: lock the one there now.
        if !is_current(&path, &file) {
            continue;
        }
        let note = format!("process {} (started {} UTC)\n", std::process::id(), crate::utc_stamp());
        file.set_len(0).and_then(|()| file.write_all(note.as_bytes())).and_then(|()| file.flush()).map_err(io(&path))?;
        return Ok(DirLock { file, dir: dir.to_path_buf() });
    }
    Err(Error::LockLost { what: what.to_string(), dir: dir.to_path_buf(), lock_file: LOCK_FILE, tries: LOCK_TRIES })
}

/// Opens `path` with `options`, refusing to follow a symbolic link at its last component: an
/// output named by a link is an error naming it, never a write into the file it points to.
pub fn open_no_follow(path: &Path, options: &mut OpenOptions) -> Result<File> {
    match options.custom_flags(libc::O_NOFOLLOW).open(path) {
        Ok(f) => Ok(f),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(Error::Link(path.to_path_buf())),
        Err(source) => Err(Error::Io { path: path.to_path_buf(), source }),
    }
}

/// Creates (or truncates) the output file `path`, never through a link. A file with other hard
/// links is unlinked first, so the other names keep their content.
pub fn create_output(path: &Path) -> Result<File> {
    if links(path)? > 1 {
        std::fs::remove_file(path).map_err(io(path))?;
        eprintln!("resilab: {} had other hard links; it is written anew, and the other names keep the old content", path.display());
    }
    single(path, open_no_follow(path, OpenOptions::new().write(true).create(true).truncate(true))?)
}

/// Removes the output file `path` left by an earlier run, if there is one; a symbolic link
/// there is refused as [`create_output`] refuses it, so that a directory holding one is
/// refused whether or not the run writes that file.
pub fn remove_output(path: &Path) -> Result<()> {
    match path.symlink_metadata() {
        Ok(m) if m.file_type().is_symlink() => Err(Error::Link(path.to_path_buf())),
        Ok(_) => std::fs::remove_file(path).map_err(io(path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Io { path: path.to_path_buf(), source }),
    }
}

/// Opens the output file `path` for appending (created if missing), never through a link. A
/// file with other hard links is first replaced by a copy of its own, so what is appended does
/// not change the other names.
pub fn append_output(path: &Path) -> Result<File> {
    own_copy(path)?;
    single(path, open_no_follow(path, OpenOptions::new().append(true).create(true))?)
}

/// Makes the file at `path`, if it has other hard links, a copy of its own (the other names
/// keep the content), saying so: call it before changing a file in place.
pub fn own_copy(path: &Path) -> Result<()> {
    if links(path)? > 1 {
        let copy = path.with_extension("tmp");
        std::fs::copy(path, &copy).and_then(|_| std::fs::rename(&copy, path)).map_err(io(path))?;
        eprintln!("resilab: {} had other hard links; changing a copy of its own, the other names keep the old content", path.display());
    }
    Ok(())
}

/// The hard links of the file at `path` (0 when there is none; a link is not followed).
fn links(path: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt as _;
    match path.symlink_metadata() {
        Ok(m) if m.is_file() => Ok(m.nlink()),
        Ok(_) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(source) => Err(Error::Io { path: path.to_path_buf(), source }),
    }
}

/// `file`, once it is known to be the only link to its content (another process may have linked
/// it between the check and the open).
fn single(path: &Path, file: File) -> Result<File> {
    use std::os::unix::fs::MetadataExt as _;
    let n = file.metadata().map_err(io(path))?.nlink();
    if n > 1 {
        return Err(Error::HardLinks { path: path.to_path_buf(), links: n });
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_fails_at_once_naming_the_holder_and_a_dropped_one_frees_the_directory() {
        let d = tempfile::tempdir().unwrap();
        let held = lock_dir(d.path(), "--out").unwrap();
        let e = lock_dir(d.path(), "--out").unwrap_err();
        assert!(
            matches!(&e, Error::InUse { what, dir, holder } if what == "--out" && dir == d.path() && holder.starts_with("process ")),
            "{e:?}"
        );
        let e = e.to_string();
        assert!(e.contains("is in use by process") && e.contains(&std::process::id().to_string()), "{e}");
        drop(held);
        lock_dir(d.path(), "--out").unwrap();
    }

    #[test]
    fn a_released_lock_leaves_no_file_and_is_never_held_twice() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(LOCK_FILE);
        let held = lock_dir(d.path(), "--out").unwrap();
        // A second process that opened the lock file before the holder let it go ...
        let late = File::open(&path).unwrap();
        drop(held);
        assert!(!path.exists(), "a released lock leaves its file");
        // ... locks a file no longer in the directory, so it does not hold the directory, and
        // a third process locks a new file there.
        late.try_lock().unwrap();
        assert!(!is_current(&path, &late));
        let third = lock_dir(d.path(), "--out").unwrap();
        assert!(is_current(&path, &third.file));
        drop(late);
        let e = lock_dir(d.path(), "--out").unwrap_err().to_string();
        assert!(e.contains("is in use by process"), "{e}");
    }

    #[test]
    fn a_replaced_directory_is_noticed() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("out");
        let _held = lock_dir(&dir, "--out").unwrap();
        let mut watch = Watch::default();
        watch.add(&dir).unwrap();
        watch.check().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(watch.check().unwrap_err().to_string().contains("was removed"));
        std::fs::create_dir(&dir).unwrap();
        let e = watch.check().unwrap_err().to_string();
        assert!(e.contains("out") && e.contains("was replaced by another directory"), "{e}");
        // A second writer can lock the new directory, and the first is told before it writes.
        let _second = lock_dir(&dir, "--out").unwrap();
    }

    #[test]
    fn hard_linked_outputs_get_a_copy_of_their_own() {
        let d = tempfile::tempdir().unwrap();
        let original = d.path().join("a.csv");
        std::fs::write(&original, "step\n1\n").unwrap();
        let twin = d.path().join("b.csv");
        std::fs::hard_link(&original, &twin).unwrap();
        let mut f = append_output(&twin).unwrap();
        f.write_all(b"2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&original).unwrap(), "step\n1\n");
        assert_eq!(std::fs::read_to_string(&twin).unwrap(), "step\n1\n2\n");
        std::fs::hard_link(&original, d.path().join("c.csv")).unwrap();
        let mut f = create_output(&original).unwrap();
        f.write_all(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(d.path().join("c.csv")).unwrap(), "step\n1\n");
        assert_eq!(std::fs::read_to_string(&original).unwrap(), "new");
    }

    #[test]
    fn outputs_are_never_written_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim.txt");
        std::fs::write(&victim, "keep me").unwrap();
        let link = d.path().join("metrics.csv");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        for e in [create_output(&link).unwrap_err(), append_output(&link).unwrap_err(), remove_output(&link).unwrap_err()] {
            assert!(matches!(&e, Error::Link(p) if *p == link), "{e:?}");
            assert!(e.to_string().contains("metrics.csv is a symbolic link"), "{e}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        let mut f = create_output(&d.path().join("plain.csv")).unwrap();
        f.write_all(b"x").unwrap();
    }

    #[test]
    fn an_unwritable_output_directory_is_an_io_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        let out = file.join("out");
        let e = lock_dir(&out, "--out").unwrap_err();
        assert!(matches!(&e, Error::Io { path, .. } if *path == out), "{e:?}");
    }
}
