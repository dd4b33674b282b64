//! Early write-back: asking the kernel to start writing a file's dirty pages to the disk while
//! the rest of the file is still being written, so that the closing `fsync` waits only for the
//! tail. The disk and the copy into the page cache then overlap, as they cannot when a whole
//! file is written first and synced after (`bench/checkpoint.sh` measures both).
//!
//! A hint only: durability still comes from the caller's `fsync`, and a failure here (or a
//! system without `sync_file_range`) changes nothing but the timing. This module holds one
//! of the crate's two `unsafe` blocks (the other is in `linkval`): the one call to
//! `sync_file_range`, which `std` and `rustix` do not wrap.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::fs::File;
use std::path::Path;

/// Bytes written between two requests: large enough that the requests cost nothing, small
/// enough that the disk starts early (a ResNet-18 checkpoint, 89 MB, makes about 11).
pub const EVERY_BYTES: usize = 8 << 20;

/// Starts the kernel's write-back of every dirty page of `file` without waiting for it
/// (`SYNC_FILE_RANGE_WRITE` over the whole file). Does nothing where the call does not exist.
pub fn start_writeback(file: &File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd as _;
        // SAFETY: the descriptor is open for the borrow's duration; the call reads no memory
        // of ours, and its result is deliberately ignored (a hint, see the module's doc).
        let _ = unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

/// Counts the bytes written to one file and starts its write-back every [`EVERY_BYTES`].
pub(crate) struct Writeback {
    /// The file, opened a second time read-only for the requests (`None` when that failed).
    file: Option<File>,
    pending: Cell<usize>,
}

impl Writeback {
    pub(crate) fn open(path: &Path) -> Self {
        Self { file: File::open(path).ok(), pending: Cell::new(0) }
    }

    /// Records `bytes` more written, starting the write-back once [`EVERY_BYTES`] have piled up.
    pub(crate) fn wrote(&self, bytes: usize) {
        let pending = self.pending.get() + bytes;
        if pending < EVERY_BYTES {
            self.pending.set(pending);
            return;
        }
        self.pending.set(0);
        if let Some(f) = &self.file {
            start_writeback(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_back_starts_once_per_interval_and_the_count_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let w = Writeback::open(&path);
        assert!(w.file.is_some());
        w.wrote(EVERY_BYTES - 1);
        assert_eq!(w.pending.get(), EVERY_BYTES - 1);
        w.wrote(1);
        assert_eq!(w.pending.get(), 0, "the request went out at the interval");
        w.wrote(3 * EVERY_BYTES);
        assert_eq!(w.pending.get(), 0);
        w.wrote(5);
        assert_eq!(w.pending.get(), 5);
        // A file that cannot be opened again only loses the hint.
        let gone = Writeback::open(&dir.path().join("missing"));
        gone.wrote(2 * EVERY_BYTES);
        assert_eq!(gone.pending.get(), 0);
    }
}
