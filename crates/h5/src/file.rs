//! Files opened for writing ([`Writer`]) and for reading ([`Reader`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use hdf5::types::{IntSize, TypeDescriptor, VarLenUnicode};

use crate::base::{
    ATTRS_HASH_ATTR, AttrValue, DatasetInfo, Dtype, HASH_ATTR, SIEVE_BYTES, admit, budget_for, caught, digest_attrs, digest_bytes,
    digest_f32, digest_u64, dtype_of, require_regular_file, split,
};
use crate::error::{Error, Result};
use crate::tree;
use crate::writeback::Writeback;

/// A file being written.
///
/// Files opened for writing (here, by [`Editor`] and by the link helpers) take no HDF5 file
/// lock: resilab writes a new file under a temporary name and renames it into place, and
/// guards its directories with locks of its own. HDF5's lock is an `flock` on the open file,
/// which every child process started meanwhile inherits with the descriptor; such a child
/// (a worker, a probe) kept the lock after this process closed the file, and the next open of
/// that file anywhere failed with "unable to lock file".
pub struct Writer {
    file: hdf5::File,
    path: PathBuf,
    /// Attributes written so far, by group: sealed with [`ATTRS_HASH_ATTR`] on close.
    attrs: RefCell<BTreeMap<String, BTreeMap<String, AttrValue>>>,
    /// Groups opened or created so far, by path: each is looked up in the file once.
    groups: RefCell<HashMap<String, hdf5::Group>>,
    /// Starts the disk's work on the tensors already written while later ones are copied.
    writeback: Writeback,
}

/// Digests of f32 slices computed ahead, in order, on a helper thread while the caller writes
/// them ([`with_digests`]): hashing overlaps the writes. A digest is only ever used for the
/// very slice it was computed over (same address and length, borrowed unchanged since);
/// anything else is hashed where it is written.
pub struct Digests<'a> {
    ahead: Option<std::sync::mpsc::Receiver<(usize, usize, u64)>>,
    _slices: std::marker::PhantomData<&'a [f32]>,
}

impl Digests<'_> {
    /// No digests ahead: every slice is hashed where it is written.
    pub fn none() -> Self {
        Self { ahead: None, _slices: std::marker::PhantomData }
    }

    fn of(&self, values: &[f32]) -> u64 {
        if let Some(rx) = &self.ahead
            && let Ok((at, len, digest)) = rx.recv()
            && at == values.as_ptr() as usize
            && len == values.len()
        {
            return digest;
        }
        digest_f32(values)
    }
}

/// Runs `f` with the digests of `slices` computed ahead, in their order, on a helper thread
/// (on a machine with one core, `f` hashes each slice as it writes it). `f` writes the slices
/// in the same order with [`Writer::write_f32_digested`].
pub fn with_digests<'a, R>(slices: &[&'a [f32]], f: impl FnOnce(&Digests<'a>) -> R) -> R {
    // Looked up once: `available_parallelism` reads the cgroup's quota files on every call.
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    if slices.is_empty() || *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get())) < 2 {
        return f(&Digests::none());
    }
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel(slices.len());
        s.spawn(move || {
            for v in slices {
                if tx.send((v.as_ptr() as usize, v.len(), digest_f32(v))).is_err() {
                    break;
                }
            }
        });
        f(&Digests { ahead: Some(rx), _slices: std::marker::PhantomData })
    })
}

impl Writer {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> Result<Self> {
        crate::plugins::off(path)?;
        let file = hdf5::File::with_options()
            .with_fapl(|p| p.fclose_degree(hdf5::file::FileCloseDegree::Strong).file_locking(false))
            .create(path)
            .map_err(|e| Error::Hdf5 { file: path.to_path_buf(), object: "/".into(), message: e.to_string() })?;
        let writeback = Writeback::open(path);
        Ok(Self { file, path: path.to_path_buf(), attrs: RefCell::default(), groups: RefCell::default(), writeback })
    }

    fn err(&self, object: &str, e: hdf5::Error) -> Error {
        Error::Hdf5 { file: self.path.clone(), object: object.to_string(), message: e.to_string() }
    }

    fn remember(&self, group: &str, name: &str, value: AttrValue) {
        let key = format!("/{}", group.trim_matches('/'));
        self.attrs.borrow_mut().entry(key).or_default().insert(name.to_string(), value);
    }

    /// The group at `path` (`""` or `/` is the root), created with its parents if missing.
    fn group(&self, path: &str) -> Result<hdf5::Group> {
        let key = path.trim_matches('/');
        if let Some(g) = self.groups.borrow().get(key) {
            return Ok(g.clone());
        }
        let g = match key.rsplit_once('/') {
            _ if key.is_empty() => self.file.as_group().map_err(|e| self.err("/", e))?,
            Some((parent, name)) => self.child(&self.group(parent)?, name, path)?,
            None => self.child(&self.group("")?, key, path)?,
        };
        self.groups.borrow_mut().insert(key.to_string(), g.clone());
        Ok(g)
    }

    /// The group `name` in `parent`, created if missing.
    fn child(&self, parent: &hdf5::Group, name: &str, path: &str) -> Result<hdf5::Group> {
        if parent.link_exists(name) { parent.group(name) } else { parent.create_group(name) }.map_err(|e| self.err(path, e))
    }

    /// Writes an f32 dataset with its digest attribute.
    pub fn write_f32(&self, path: &str, shape: &[usize], values: &[f32]) -> Result<()> {
        self.write_f32_digested(path, shape, values, &Digests::none())
    }

    /// [`Writer::write_f32`] taking the digest from `digests` when it was computed ahead over
    /// these values.
    pub fn write_f32_digested(&self, path: &str, shape: &[usize], values: &[f32], digests: &Digests<'_>) -> Result<()> {
        if shape.iter().product::<usize>() != values.len() {
            return Err(Error::Invalid {
                file: self.path.clone(),
                object: path.to_string(),
                message: format!("{} values for shape {shape:?}", values.len()),
            });
        }
        let (parent, name) = split(path);
        let g = self.group(parent)?;
        let ds = g.new_dataset::<f32>().shape(shape.to_vec()).create(name).map_err(|e| self.err(path, e))?;
        ds.write_raw(values).map_err(|e| self.err(path, e))?;
        self.writeback.wrote(std::mem::size_of_val(values));
        ds.new_attr::<u64>().create(HASH_ATTR).and_then(|a| a.write_scalar(&digests.of(values))).map_err(|e| self.err(path, e))
    }

    /// Writes a scalar u64 dataset with its digest attribute.
    pub fn write_u64(&self, path: &str, value: u64) -> Result<()> {
        let (parent, name) = split(path);
        let g = self.group(parent)?;
        let ds = g.new_dataset::<u64>().create(name).map_err(|e| self.err(path, e))?;
        ds.write_scalar(&value).map_err(|e| self.err(path, e))?;
        ds.new_attr::<u64>().create(HASH_ATTR).and_then(|a| a.write_scalar(&digest_u64(value))).map_err(|e| self.err(path, e))
    }

    /// Writes a 1-D u8 dataset with its digest attribute.
    pub fn write_bytes(&self, path: &str, bytes: &[u8]) -> Result<()> {
        let (parent, name) = split(path);
        let g = self.group(parent)?;
        let ds = g.new_dataset::<u8>().shape([bytes.len()]).create(name).map_err(|e| self.err(path, e))?;
        ds.write_raw(bytes).map_err(|e| self.err(path, e))?;
        ds.new_attr::<u64>().create(HASH_ATTR).and_then(|a| a.write_scalar(&digest_bytes(bytes))).map_err(|e| self.err(path, e))
    }

    /// Sets a u64 attribute on the group at `group` (created if missing).
    pub fn attr_u64(&self, group: &str, name: &str, value: u64) -> Result<()> {
        let g = self.group(group)?;
        g.new_attr::<u64>().create(name).and_then(|a| a.write_scalar(&value)).map_err(|e| self.err(&format!("{group}@{name}"), e))?;
        self.remember(group, name, AttrValue::U64(value));
        Ok(())
    }

    /// Sets a UTF-8 string attribute on the group at `group`.
    pub fn attr_str(&self, group: &str, name: &str, value: &str) -> Result<()> {
        let g = self.group(group)?;
        let v: VarLenUnicode = value.parse().map_err(|e: hdf5::types::StringError| Error::Invalid {
            file: self.path.clone(),
            object: format!("{group}@{name}"),
            message: e.to_string(),
        })?;
        g.new_attr::<VarLenUnicode>().create(name).and_then(|a| a.write_scalar(&v)).map_err(|e| self.err(&format!("{group}@{name}"), e))?;
        self.remember(group, name, AttrValue::Str(value.to_string()));
        Ok(())
    }

    /// Seals every group's attributes with their digest, then closes the file, which flushes it
    /// (all handles are dropped first).
    pub fn close(self) -> Result<()> {
        for (group, attrs) in self.attrs.take() {
            let g = self.group(&group)?;
            let object = format!("{group}@{ATTRS_HASH_ATTR}");
            g.new_attr::<u64>()
                .create(ATTRS_HASH_ATTR)
                .and_then(|a| a.write_scalar(&digest_attrs(&attrs)))
                .map_err(|e| self.err(&object, e))?;
        }
        self.groups.borrow_mut().clear();
        self.file.close().map_err(|e| Error::Hdf5 { file: self.path.clone(), object: "/".into(), message: e.to_string() })
    }
}

/// A file opened for reading.
pub struct Reader {
    pub(crate) file: hdf5::File,
    pub(crate) path: PathBuf,
    pub(crate) tree: tree::Tree,
    /// The process's memory budget, which every full read of a dataset is admitted to.
    pub(crate) budget: resilab_limits::Budget,
}

impl Reader {
    /// Opens `path` read-only and walks its tree (see the crate's documentation): anything but
    /// a regular file (a FIFO would block) is refused, and so is a file that is not
    /// self-contained or declares more than the file or the memory budget can hold. Nothing is
    /// read before that walk.
    pub fn open(path: &Path) -> Result<Self> {
        require_regular_file(path)?;
        let budget = budget_for(path)?;
        let file = hdf5::File::with_options().with_fapl(|p| p.sieve_buf_size(SIEVE_BYTES)).open(path).map_err(|e| Error::Hdf5 {
            file: path.to_path_buf(),
            object: "/".into(),
            message: e.to_string(),
        })?;
        let tree = tree::walk(&file, path, &budget)?;
        Ok(Self { file, path: path.to_path_buf(), tree, budget })
    }

    pub(crate) fn err(&self, object: &str, e: hdf5::Error) -> Error {
        Error::Hdf5 { file: self.path.clone(), object: object.to_string(), message: e.to_string() }
    }

    fn invalid(&self, object: &str, message: String) -> Error {
        Error::Invalid { file: self.path.clone(), object: object.to_string(), message }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every dataset in the file, depth first in name order, each once (the first name in that
    /// order of an object reached by several links).
    ///
    /// The walk that made this list ran when the file was opened: it follows hard
    /// links, fails, naming the group, on a link back to a group it is inside (a cycle, which
    /// one flipped bit can make) and below [`MAX_DEPTH`](crate::MAX_DEPTH) levels, refuses anything that would
    /// read another file, and checks each dataset's declared size against the file's length
    /// (unfiltered datasets) and the memory budget, so a corrupt dataspace is an error before
    /// anything would allocate it.
    pub fn datasets(&self) -> Result<Vec<DatasetInfo>> {
        Ok(self.tree.datasets.clone())
    }

    /// Every group in the file (`/` first, then depth first in name order), from the same walk
    /// as [`Reader::datasets`].
    pub fn groups(&self) -> Result<Vec<String>> {
        Ok(self.tree.groups.clone())
    }

    /// Reads every group's attributes and their seal (see [`Reader::verify_attrs`]): what a
    /// loader may read of them, read once, so that a probe of the file covers it.
    pub fn read_all_attrs(&self) -> Result<()> {
        for g in &self.tree.groups {
            self.verify_attrs(g)?;
        }
        Ok(())
    }

    fn dataset(&self, path: &str) -> Result<hdf5::Dataset> {
        self.file.dataset(path).map_err(|e| self.err(path, e))
    }

    /// The walk's record of the dataset at `path`: only datasets the walk checked are read.
    pub(crate) fn checked(&self, path: &str) -> Result<&DatasetInfo> {
        self.tree.dataset(&self.path, path)
    }

    /// Reads an f32 dataset that must have exactly `shape` (checked before reading).
    pub fn read_f32(&self, path: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let ds = self.dataset(path)?;
        let found = ds.shape();
        if found != shape {
            return Err(self.invalid(path, format!("shape {found:?}, expected {shape:?}")));
        }
        let dtype = ds.dtype().and_then(|t| t.to_descriptor()).map(|d| dtype_of(&d)).map_err(|e| self.err(path, e))?;
        if dtype != Dtype::F32 {
            return Err(self.invalid(path, format!("type {dtype}, expected f32")));
        }
        admit(&ds, &self.path, path, &self.budget)?;
        let values = ds.read_raw::<f32>().map_err(|e| self.err(path, e))?;
        if values.len() != shape.iter().product::<usize>() {
            return Err(self.invalid(path, format!("{} values read, expected {}", values.len(), shape.iter().product::<usize>())));
        }
        Ok(values)
    }

    /// Reads a scalar u64 dataset.
    pub fn read_u64(&self, path: &str) -> Result<u64> {
        let ds = self.dataset(path)?;
        if !ds.is_scalar() {
            return Err(self.invalid(path, format!("shape {:?}, expected a scalar", ds.shape())));
        }
        ds.read_scalar::<u64>().map_err(|e| self.err(path, e))
    }

    /// Reads a 1-D u8 dataset of exactly `len` bytes.
    pub fn read_bytes(&self, path: &str, len: usize) -> Result<Vec<u8>> {
        let ds = self.dataset(path)?;
        if ds.shape() != [len] {
            return Err(self.invalid(path, format!("shape {:?}, expected [{len}]", ds.shape())));
        }
        admit(&ds, &self.path, path, &self.budget)?;
        ds.read_raw::<u8>().map_err(|e| self.err(path, e))
    }

    /// Reads a u64 attribute of a group or dataset.
    pub fn attr_u64(&self, object: &str, name: &str) -> Result<u64> {
        let loc = self.location(object)?;
        loc.attr(name).and_then(|a| a.read_scalar::<u64>()).map_err(|e| self.err(&format!("{object}@{name}"), e))
    }

    /// Reads a string attribute as bytes and validates it as UTF-8 (never panics on corrupt data).
    pub fn attr_str(&self, object: &str, name: &str) -> Result<String> {
        let loc = self.location(object)?;
        let v = loc.attr(name).and_then(|a| a.read_scalar::<VarLenUnicode>()).map_err(|e| self.err(&format!("{object}@{name}"), e))?;
        let bytes = v.as_bytes().to_vec();
        String::from_utf8(bytes).map_err(|_| self.invalid(&format!("{object}@{name}"), "not valid UTF-8".into()))
    }

    /// Names of the attributes of a group or dataset.
    pub fn attr_names(&self, object: &str) -> Result<Vec<String>> {
        let loc = self.location(object)?;
        caught(|| loc.attr_names()).map_err(|m| self.invalid(object, m))?.map_err(|e| self.err(object, e))
    }

    fn location(&self, object: &str) -> Result<hdf5::Location> {
        let obj = if object.is_empty() { "/" } else { object };
        if let Ok(ds) = self.file.dataset(obj) {
            return Ok((**ds).clone());
        }
        self.file.group(obj).map(|g| (*g).clone()).map_err(|e| self.err(obj, e))
    }

    /// Reads an f32 dataset of exactly `shape` and checks it against its stored digest:
    /// the values, and `Some(true)` / `Some(false)` for a match / mismatch, `None` without one.
    pub fn read_f32_verified(&self, info: &DatasetInfo, shape: &[usize]) -> Result<(Vec<f32>, Option<bool>)> {
        let values = self.read_f32(&info.path, shape)?;
        let ok = info.stored_hash.map(|h| digest_f32(&values) == h);
        Ok((values, ok))
    }

    /// Recomputes the digest of a dataset (f32, or an integer type: its little-endian bytes)
    /// and compares it with the stored one: `Some(true)` matches, `Some(false)` differs, `None`
    /// when there is no stored digest or the type carries none.
    pub fn verify(&self, info: &DatasetInfo) -> Result<Option<bool>> {
        let Some(stored) = info.stored_hash else { return Ok(None) };
        match info.dtype {
            Dtype::F32 => Ok(self.read_f32_verified(info, &info.shape)?.1),
            Dtype::Int(_) | Dtype::Uint(_) => Ok(Some(self.read_column(&info.path, info.dtype)?.digest() == stored)),
            _ => Ok(None),
        }
    }

    /// A u64 or string attribute's value.
    pub fn attr_value(&self, object: &str, name: &str) -> Result<AttrValue> {
        let loc = self.location(object)?;
        let what = format!("{object}@{name}");
        let attr = loc.attr(name).map_err(|e| self.err(&what, e))?;
        let td = attr.dtype().and_then(|t| t.to_descriptor()).map_err(|e| self.err(&what, e))?;
        match td {
            TypeDescriptor::Unsigned(IntSize::U8) => attr.read_scalar::<u64>().map(AttrValue::U64).map_err(|e| self.err(&what, e)),
            TypeDescriptor::VarLenUnicode => self.attr_str(object, name).map(AttrValue::Str),
            other => Err(self.invalid(&what, format!("attribute of type {other:?}, expected u64 or a string"))),
        }
    }

    /// Recomputes the digest of a group's attributes and compares it with the stored
    /// [`ATTRS_HASH_ATTR`]: `Some(true)` matches, `Some(false)` differs (an attribute was
    /// altered, added or removed), `None` when the group carries no such digest.
    pub fn verify_attrs(&self, object: &str) -> Result<Option<bool>> {
        let names = self.attr_names(object)?;
        if !names.iter().any(|n| n == ATTRS_HASH_ATTR) {
            return Ok(None);
        }
        let stored = self.attr_u64(object, ATTRS_HASH_ATTR)?;
        let mut attrs = BTreeMap::new();
        for name in names.into_iter().filter(|n| n != ATTRS_HASH_ATTR) {
            match self.attr_value(object, &name) {
                Ok(v) => {
                    attrs.insert(name, v);
                }
                Err(_) => return Ok(Some(false)),
            }
        }
        Ok(Some(digest_attrs(&attrs) == stored))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::MAX_DEPTH;
    use crate::links::add_unallocated_f32;

    #[test]
    fn round_trip_with_digests_and_attributes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.h5");
        let w = Writer::create(&p).unwrap();
        w.write_f32("/model/layer1/0/conv1/weight", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        w.write_f32("/model/fc/bias", &[2], &[0.5, -0.5]).unwrap();
        w.write_u64("/train_state/step", 17).unwrap();
        w.write_bytes("/train_state/rng_seed", &[7u8; 32]).unwrap();
        w.attr_u64("/", "step", 17).unwrap();
        w.attr_str("/", "config", "seed = 1\n").unwrap();
        w.close().unwrap();

        let r = Reader::open(&p).unwrap();
        let ds = r.datasets().unwrap();
        let paths: Vec<&str> = ds.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["/model/fc/bias", "/model/layer1/0/conv1/weight", "/train_state/rng_seed", "/train_state/step"]);
        assert_eq!(ds[1].shape, vec![2, 3]);
        assert_eq!(ds[1].dtype, Dtype::F32);
        assert!(ds.iter().take(2).all(|d| r.verify(d).unwrap() == Some(true)));
        assert_eq!(r.read_f32("/model/fc/bias", &[2]).unwrap(), vec![0.5, -0.5]);
        assert_eq!(r.read_u64("/train_state/step").unwrap(), 17);
        assert_eq!(r.read_bytes("/train_state/rng_seed", 32).unwrap(), vec![7u8; 32]);
        assert_eq!(r.attr_u64("/", "step").unwrap(), 17);
        assert_eq!(r.attr_str("/", "config").unwrap(), "seed = 1\n");
        let err = r.read_f32("/model/fc/bias", &[3]).unwrap_err().to_string();
        assert!(err.contains("t.h5") && err.contains("/model/fc/bias") && err.contains("expected [3]"), "{err}");
        let err = r.read_f32("/model/nope", &[3]).unwrap_err().to_string();
        assert!(err.contains("/model/nope"), "{err}");
    }

    #[test]
    fn digests_computed_ahead_are_those_of_the_slices_written_and_only_of_those() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.h5");
        let (a, b, c) = (vec![1.0f32, -0.0, f32::NAN], vec![2.5f32; 5], vec![3.0f32]);
        let w = Writer::create(&p).unwrap();
        // Written out of the order the digests were computed in: the ones that do not match
        // their slice are hashed again where written.
        with_digests(&[&a, &b, &c], |d| {
            w.write_f32_digested("/g/a", &[3], &a, d).unwrap();
            w.write_f32_digested("/g/c", &[1], &c, d).unwrap();
            w.write_f32_digested("/g/b", &[5], &b, d).unwrap();
        });
        w.close().unwrap();
        let r = Reader::open(&p).unwrap();
        let ds = r.datasets().unwrap();
        assert_eq!(ds.len(), 3);
        for d in &ds {
            assert_eq!(r.verify(d).unwrap(), Some(true), "{}", d.path);
        }
        assert_eq!(Digests::none().of(&b), digest_f32(&b));
    }

    #[test]
    fn integer_datasets_and_attributes_carry_digests() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.h5");
        let w = Writer::create(&p).unwrap();
        w.write_u64("/train_state/step", 17).unwrap();
        w.write_bytes("/train_state/rng_seed", &[7u8; 32]).unwrap();
        w.attr_u64("/", "step", 17).unwrap();
        w.attr_str("/", "config", "seed = 1\n").unwrap();
        w.attr_u64("/optimizer/fc/weight", "step", 3).unwrap();
        w.close().unwrap();

        let r = Reader::open(&p).unwrap();
        for d in r.datasets().unwrap() {
            assert_eq!(r.verify(&d).unwrap(), Some(true), "{}", d.path);
        }
        assert_eq!(r.verify_attrs("/").unwrap(), Some(true));
        assert_eq!(r.verify_attrs("/optimizer/fc/weight").unwrap(), Some(true));
        assert_eq!(r.verify_attrs("/train_state").unwrap(), None);
        drop(r);

        // Change a value and an attribute behind the writer's back.
        let f = hdf5::File::open_rw(&p).unwrap();
        f.dataset("/train_state/step").unwrap().write_scalar(&(17u64 | 1 << 62)).unwrap();
        f.attr("step").unwrap().write_scalar(&18u64).unwrap();
        let cfg: VarLenUnicode = "seed = 2\n".parse().unwrap();
        f.group("/optimizer/fc/weight").unwrap().new_attr::<VarLenUnicode>().create("note").unwrap().write_scalar(&cfg).unwrap();
        f.close().unwrap();
        let r = Reader::open(&p).unwrap();
        let step = r.datasets().unwrap().into_iter().find(|d| d.path == "/train_state/step").unwrap();
        assert_eq!(r.verify(&step).unwrap(), Some(false));
        assert_eq!(r.verify_attrs("/").unwrap(), Some(false));
        assert_eq!(r.verify_attrs("/optimizer/fc/weight").unwrap(), Some(false), "an added attribute breaks the seal");
    }

    #[test]
    fn a_cycle_of_groups_is_an_error_not_a_stack_overflow() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("loop.h5");
        let w = Writer::create(&p).unwrap();
        w.write_f32("/model/layer1/w", &[2], &[1.0, 2.0]).unwrap();
        w.close().unwrap();
        let f = hdf5::File::open_rw(&p).unwrap();
        f.group("/model/layer1").unwrap().link_hard("/model", "loop").unwrap();
        f.close().unwrap();
        let err = Reader::open(&p).err().expect("refused at open").to_string();
        assert!(err.contains("loop.h5") && err.contains("/model/layer1/loop") && err.contains("cycle"), "{err}");

        let p2 = dir.path().join("shared.h5");
        let w = Writer::create(&p2).unwrap();
        w.write_f32("/model/layer1/w", &[2], &[1.0, 2.0]).unwrap();
        w.close().unwrap();
        let f = hdf5::File::open_rw(&p2).unwrap();
        f.link_hard("/model/layer1", "again").unwrap();
        f.close().unwrap();
        let paths: Vec<String> = Reader::open(&p2).unwrap().datasets().unwrap().into_iter().map(|d| d.path).collect();
        // A group reached twice without a cycle is listed once, under the first name in order.
        assert_eq!(paths, ["/again/w"]);
    }

    #[test]
    fn groups_are_listed_and_their_attributes_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("g.h5");
        let w = Writer::create(&p).unwrap();
        w.write_f32("/model/fc/w", &[1], &[1.0]).unwrap();
        w.attr_u64("/optimizer/fc/w", "step", 3).unwrap();
        w.close().unwrap();
        let r = Reader::open(&p).unwrap();
        assert_eq!(r.groups().unwrap(), ["/", "/model", "/model/fc", "/optimizer", "/optimizer/fc", "/optimizer/fc/w"]);
        r.read_all_attrs().unwrap();
        // The attribute reads back, sealed; a group without attributes has no seal to check.
        assert_eq!(r.attr_u64("/optimizer/fc/w", "step").unwrap(), 3);
        assert_eq!(r.verify_attrs("/optimizer/fc/w").unwrap(), Some(true));
        assert_eq!(r.verify_attrs("/model/fc").unwrap(), None);
        let err = r.attr_u64("/optimizer/fc/w", "nope").unwrap_err().to_string();
        assert!(err.contains("g.h5") && err.contains("nope"), "{err}");
    }

    #[test]
    fn deep_nesting_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("deep.h5");
        let path: String = (0..MAX_DEPTH + 2).map(|i| format!("/g{i}")).collect();
        let w = Writer::create(&p).unwrap();
        w.write_f32(&format!("{path}/w"), &[1], &[1.0]).unwrap();
        w.close().unwrap();
        let err = Reader::open(&p).err().expect("refused at open").to_string();
        assert!(err.contains("deeper than 64"), "{err}");
    }

    #[test]
    fn a_dataset_claiming_more_than_the_file_holds_is_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("huge.h5");
        Writer::create(&p).unwrap().close().unwrap();
        // Chunked and never written: it claims 2^40 f32 values and stores none.
        add_unallocated_f32(&p, "/big", &[1usize << 40]).unwrap();
        let err = Reader::open(&p).err().expect("refused at open").to_string();
        assert!(err.contains("huge.h5") && err.contains("/big") && err.contains("more than the file"), "{err}");
    }

    #[test]
    fn garbage_is_a_clean_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.h5");
        std::fs::write(&p, b"not an hdf5 file at all").unwrap();
        let err = Reader::open(&p).err().expect("must fail").to_string();
        assert!(err.contains("bad.h5"), "{err}");
    }
}
