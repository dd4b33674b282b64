//! Edits of an existing file for tests and fuzzing: a hard link from a group to one of its
//! ancestors makes a file whose group graph has a cycle, which resilab's fuzzing harness
//! (`resilab-fuzz`) feeds to every command that walks a checkpoint's groups; a dataset that
//! claims more than it stores; an attribute changed with its seal renewed, as someone who
//! knows the format could.

use std::path::Path;

use std::collections::BTreeMap;

use hdf5::types::VarLenUnicode;

use crate::base::{ATTRS_HASH_ATTR, AttrValue, digest_attrs, open_rw_unlocked, split};
use crate::error::{Error, Result};
use crate::file::Reader;

/// Adds a hard link named `link` (an absolute path whose parent group exists) to the existing
/// object `target` (an absolute path) in `file`, opened read-write. Linking a group under itself
/// or under one of its descendants (`/model/layer1/loop` -> `/model`) makes a cycle.
pub fn add_hard_link(file: &Path, link: &str, target: &str) -> Result<()> {
    let err = |object: &str, e: hdf5::Error| Error::Hdf5 { file: file.to_path_buf(), object: object.to_string(), message: e.to_string() };
    let f = open_rw_unlocked(file)?;
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
    let f = open_rw_unlocked(file)?;
    let (parent, name) = split(path);
    let group = if parent.is_empty() { f.as_group() } else { f.group(parent) }.map_err(|e| err(path, e))?;
    let chunk: Vec<usize> = shape.iter().map(|&d| d.clamp(1, 16)).collect();
    group.new_dataset::<f32>().chunk(chunk).shape(shape.to_vec()).create(name).map_err(|e| err(path, e))?;
    drop(group);
    f.close().map_err(|e| err("/", e))
}

/// Sets the string attribute `name` of the group `object` of `file` to `value` and renews the
/// group's attribute seal ([`ATTRS_HASH_ATTR`]), so that the change passes verification.
pub fn set_sealed_attr_str(file: &Path, object: &str, name: &str, value: &str) -> Result<()> {
    let err = |e: hdf5::Error| Error::Hdf5 { file: file.to_path_buf(), object: format!("{object}@{name}"), message: e.to_string() };
    let invalid = |message: String| Error::Invalid { file: file.to_path_buf(), object: format!("{object}@{name}"), message };
    let v: VarLenUnicode = value.parse().map_err(|e: hdf5::types::StringError| invalid(e.to_string()))?;
    let f = open_rw_unlocked(file)?;
    let g = f.group(object).map_err(err)?;
    if g.attr(name).is_ok() {
        g.delete_attr(name).map_err(err)?;
    }
    g.new_attr::<VarLenUnicode>().create(name).and_then(|a| a.write_scalar(&v)).map_err(err)?;
    drop(g);
    f.close().map_err(err)?;
    let r = Reader::open(file)?;
    let mut attrs: BTreeMap<String, AttrValue> = BTreeMap::new();
    for n in r.attr_names(object)?.into_iter().filter(|n| n != ATTRS_HASH_ATTR) {
        let v = r.attr_value(object, &n)?;
        attrs.insert(n, v);
    }
    drop(r);
    let f = open_rw_unlocked(file)?;
    f.group(object).and_then(|g| g.attr(ATTRS_HASH_ATTR)).and_then(|a| a.write_scalar(&digest_attrs(&attrs))).map_err(err)?;
    f.close().map_err(err)
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
        let f = hdf5::File::with_options().with_fapl(|p| p.file_locking(false)).open(&p).unwrap();
        for path in ["/a/b/loop/b/x", "/a/b/loop/b/loop/b/x", "/self/self/a/b/x"] {
            assert_eq!(f.dataset(path).unwrap().read_scalar::<u64>().unwrap(), 42, "{path}");
        }
        drop(f);
        let e = Reader::open(&p).err().expect("a cycle is refused at open").to_string();
        assert!(e.contains("cycle"), "{e}");
        assert!(add_hard_link(&p, "/a/b/loop2", "/missing").is_err());
        assert!(add_hard_link(&dir.path().join("none.h5"), "/l", "/").is_err());
    }

    #[test]
    fn a_resealed_attribute_passes_verification_with_its_new_value() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.h5");
        let w = Writer::create(&p).unwrap();
        w.attr_str("/", "config", "width = 0.25\n").unwrap();
        w.attr_u64("/", "step", 3).unwrap();
        w.close().unwrap();
        set_sealed_attr_str(&p, "/", "config", "width = 16.0\n").unwrap();
        let r = Reader::open(&p).unwrap();
        assert_eq!(r.attr_str("/", "config").unwrap(), "width = 16.0\n");
        assert_eq!(r.attr_u64("/", "step").unwrap(), 3);
        assert_eq!(r.verify_attrs("/").unwrap(), Some(true));
    }
}
