//! Links added to an existing file: a hard link from a group to one of its ancestors makes a
//! file whose group graph has a cycle, which resilab's fuzzing harness (`resilab-fuzz`) feeds to
//! every command that walks a checkpoint's groups.

use std::path::Path;

use crate::{Error, Result, split};

/// Adds a hard link named `link` (an absolute path whose parent group exists) to the existing
/// object `target` (an absolute path) in `file`, opened read-write. Linking a group under itself
/// or under one of its descendants (`/model/layer1/loop` -> `/model`) makes a cycle.
pub fn add_hard_link(file: &Path, link: &str, target: &str) -> Result<()> {
    let err = |object: &str, e: hdf5::Error| Error::Hdf5 { file: file.to_path_buf(), object: object.to_string(), message: e.to_string() };
    let f = crate::open_rw_unlocked(file).map_err(|e| err("/", e))?;
    let (parent, name) = split(link);
    let group = if parent.is_empty() { f.as_group() } else { f.group(parent) }.map_err(|e| err(link, e))?;
    group.link_hard(target, name).map_err(|e| err(link, e))?;
    drop(group);
    f.close().map_err(|e| err("/", e))
}

/// Adds to the existing `file` a chunked f32 dataset at `path` (its parent group must exist) of
/// the given shape whose chunks are never written: it claims `shape`'s elements and stores none,
/// as a corrupt dataspace does. Tests use it to check that readers refuse such claims.
pub fn add_unallocated_f32(file: &Path, path: &str, shape: &[usize]) -> Result<()> {
    let err = |object: &str, e: hdf5::Error| Error::Hdf5 { file: file.to_path_buf(), object: object.to_string(), message: e.to_string() };
    let f = crate::open_rw_unlocked(file).map_err(|e| err("/", e))?;
    let (parent, name) = split(path);
    let group = if parent.is_empty() { f.as_group() } else { f.group(parent) }.map_err(|e| err(path, e))?;
    let chunk: Vec<usize> = shape.iter().map(|&d| d.clamp(1, 16)).collect();
    group.new_dataset::<f32>().chunk(chunk).shape(shape.to_vec()).create(name).map_err(|e| err(path, e))?;
    drop(group);
    f.close().map_err(|e| err("/", e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Reader, Writer};

    #[test]
    fn a_hard_link_to_an_ancestor_makes_a_cycle() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.h5");
        let w = Writer::create(&p).unwrap();
        w.write_u64("/a/b/x", 42).unwrap();
        w.close().unwrap();
        add_hard_link(&p, "/a/b/loop", "/a").unwrap();
        add_hard_link(&p, "/self", "/").unwrap();
        let r = Reader::open(&p).unwrap();
        assert_eq!(r.read_u64("/a/b/loop/b/x").unwrap(), 42);
        assert_eq!(r.read_u64("/a/b/loop/b/loop/b/x").unwrap(), 42);
        assert_eq!(r.read_u64("/self/self/a/b/x").unwrap(), 42);
        assert!(add_hard_link(&p, "/a/b/loop2", "/missing").is_err());
        assert!(add_hard_link(&dir.path().join("none.h5"), "/l", "/").is_err());
    }
}
