//! The one place resilab touches HDF5 (through `hdf5-metno` and the system HDF5 C library).
//!
//! Datasets are addressed by absolute paths such as `/model/layer1/0/conv1/weight`; writing one
//! creates its parent groups and stores an XXH3-64 digest of its little-endian bytes as the
//! attribute [`HASH_ATTR`], which [`Reader::verify`] recomputes. Every HDF5 failure comes back as
//! an [`Error`] naming the file and the object; the C library's own error printing is silenced
//! by `hdf5-metno`. Sizes are checked against expectations before anything is read, so a corrupt
//! header cannot make the reader allocate what it claims.

use std::path::{Path, PathBuf};

use hdf5::types::{VarLenUnicode, TypeDescriptor, FloatSize, IntSize};

mod values;
pub use values::{Editor, Extent};

/// Name of the attribute holding a dataset's XXH3-64 digest.
pub const HASH_ATTR: &str = "xxh3";

/// Errors of the HDF5 layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The HDF5 library reported an error.
    #[error("{file}: {object}: {message}")]
    Hdf5 {
        /// The file.
        file: PathBuf,
        /// The group, dataset or attribute involved.
        object: String,
        /// HDF5's message.
        message: String,
    },
    /// The file's content is not what was expected (shape, size, type).
    #[error("{file}: {object}: {message}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// The object involved.
        object: String,
        /// What is wrong.
        message: String,
    },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// XXH3-64 of values' little-endian bytes.
pub fn digest_f32(values: &[f32]) -> u64 {
    if cfg!(target_endian = "little") {
        xxhash_rust::xxh3::xxh3_64(bytemuck::cast_slice(values))
    } else {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        xxhash_rust::xxh3::xxh3_64(&bytes)
    }
}

/// Element type of a dataset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// 16-bit float.
    F16,
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// Signed integer of the given byte width.
    Int(usize),
    /// Unsigned integer of the given byte width.
    Uint(usize),
    /// Anything else (strings, compounds).
    Other,
}

impl Dtype {
    /// Width of one element in bits (0 for [`Dtype::Other`]).
    pub fn bits(self) -> u32 {
        match self {
            Dtype::F16 => 16,
            Dtype::F32 => 32,
            Dtype::F64 => 64,
            Dtype::Int(b) | Dtype::Uint(b) => 8 * b as u32,
            Dtype::Other => 0,
        }
    }
    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, Dtype::F16 | Dtype::F32 | Dtype::F64)
    }
    /// Whether this is a number type (float or integer) whose elements can be read as raw bits.
    pub fn is_numeric(self) -> bool {
        self != Dtype::Other
    }
}

impl serde::Serialize for Dtype {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dtype::F16 => f.write_str("f16"),
            Dtype::F32 => f.write_str("f32"),
            Dtype::F64 => f.write_str("f64"),
            Dtype::Int(b) => write!(f, "i{}", b * 8),
            Dtype::Uint(b) => write!(f, "u{}", b * 8),
            Dtype::Other => f.write_str("other"),
        }
    }
}

/// A dataset's path, shape and type, and its stored digest if any.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DatasetInfo {
    /// Absolute path in the file.
    pub path: String,
    /// Shape (empty for a scalar).
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: Dtype,
    /// The digest stored in [`HASH_ATTR`].
    pub stored_hash: Option<u64>,
}

impl DatasetInfo {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    /// Whether the dataset has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn dtype_of(td: &TypeDescriptor) -> Dtype {
    match td {
        TypeDescriptor::Float(FloatSize::U4) => Dtype::F32,
        TypeDescriptor::Float(FloatSize::U8) => Dtype::F64,
        TypeDescriptor::Float(FloatSize::U2) => Dtype::F16,
        TypeDescriptor::Integer(s) => Dtype::Int(int_size(*s)),
        TypeDescriptor::Unsigned(s) => Dtype::Uint(int_size(*s)),
        _ => Dtype::Other,
    }
}

fn int_size(s: IntSize) -> usize {
    match s {
        IntSize::U1 => 1,
        IntSize::U2 => 2,
        IntSize::U4 => 4,
        IntSize::U8 => 8,
    }
}

/// Splits `/a/b/c` into the parent group path and the leaf name.
fn split(path: &str) -> (&str, &str) {
    let p = path.trim_start_matches('/');
    match p.rfind('/') {
        Some(i) => (&p[..i], &p[i + 1..]),
        None => ("", p),
    }
}

/// A file being written.
pub struct Writer {
    file: hdf5::File,
    path: PathBuf,
}

impl Writer {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> Result<Self> {
        let file = hdf5::File::with_options()
            .with_fapl(|p| p.fclose_degree(hdf5::file::FileCloseDegree::Strong))
            .create(path)
            .map_err(|e| Error::Hdf5 { file: path.to_path_buf(), object: "/".into(), message: e.to_string() })?;
        Ok(Self { file, path: path.to_path_buf() })
    }

    fn err(&self, object: &str, e: hdf5::Error) -> Error {
        Error::Hdf5 { file: self.path.clone(), object: object.to_string(), message: e.to_string() }
    }

    /// The group at `path` (`""` or `/` is the root), created with its parents if missing.
    fn group(&self, path: &str) -> Result<hdf5::Group> {
        let mut g = self.file.as_group().map_err(|e| self.err("/", e))?;
        for part in path.split('/').filter(|s| !s.is_empty()) {
            g = if g.link_exists(part) { g.group(part) } else { g.create_group(part) }.map_err(|e| self.err(path, e))?;
        }
        Ok(g)
    }

    /// Writes an f32 dataset with its digest attribute.
    pub fn write_f32(&self, path: &str, shape: &[usize], values: &[f32]) -> Result<()> {
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
        ds.new_attr::<u64>().create(HASH_ATTR).and_then(|a| a.write_scalar(&digest_f32(values))).map_err(|e| self.err(path, e))
    }

    /// Writes a scalar u64 dataset.
    pub fn write_u64(&self, path: &str, value: u64) -> Result<()> {
        let (parent, name) = split(path);
        let g = self.group(parent)?;
        let ds = g.new_dataset::<u64>().create(name).map_err(|e| self.err(path, e))?;
        ds.write_scalar(&value).map_err(|e| self.err(path, e))
    }

    /// Writes a 1-D u8 dataset.
    pub fn write_bytes(&self, path: &str, bytes: &[u8]) -> Result<()> {
        let (parent, name) = split(path);
        let g = self.group(parent)?;
        let ds = g.new_dataset::<u8>().shape([bytes.len()]).create(name).map_err(|e| self.err(path, e))?;
        ds.write_raw(bytes).map_err(|e| self.err(path, e))
    }

    /// Sets a u64 attribute on the group at `group` (created if missing).
    pub fn attr_u64(&self, group: &str, name: &str, value: u64) -> Result<()> {
        let g = self.group(group)?;
        g.new_attr::<u64>().create(name).and_then(|a| a.write_scalar(&value)).map_err(|e| self.err(&format!("{group}@{name}"), e))
    }

    /// Sets a UTF-8 string attribute on the group at `group`.
    pub fn attr_str(&self, group: &str, name: &str, value: &str) -> Result<()> {
        let g = self.group(group)?;
        let v: VarLenUnicode = value.parse().map_err(|e: hdf5::types::StringError| Error::Invalid {
            file: self.path.clone(),
            object: format!("{group}@{name}"),
            message: e.to_string(),
        })?;
        g.new_attr::<VarLenUnicode>().create(name).and_then(|a| a.write_scalar(&v)).map_err(|e| self.err(&format!("{group}@{name}"), e))
    }

    /// Flushes and closes the file (all handles are dropped first).
    pub fn close(self) -> Result<()> {
        self.file.flush().map_err(|e| Error::Hdf5 { file: self.path.clone(), object: "/".into(), message: e.to_string() })?;
        self.file.close().map_err(|e| Error::Hdf5 { file: self.path.clone(), object: "/".into(), message: e.to_string() })
    }
}

/// A file opened for reading.
pub struct Reader {
    file: hdf5::File,
    path: PathBuf,
}

impl Reader {
    /// Opens `path` read-only.
    pub fn open(path: &Path) -> Result<Self> {
        let file = hdf5::File::with_options()
            .with_fapl(|p| p.sieve_buf_size(values::SIEVE_BYTES))
            .open(path)
            .map_err(|e| Error::Hdf5 { file: path.to_path_buf(), object: "/".into(), message: e.to_string() })?;
        Ok(Self { file, path: path.to_path_buf() })
    }

    fn err(&self, object: &str, e: hdf5::Error) -> Error {
        Error::Hdf5 { file: self.path.clone(), object: object.to_string(), message: e.to_string() }
    }

    fn invalid(&self, object: &str, message: String) -> Error {
        Error::Invalid { file: self.path.clone(), object: object.to_string(), message }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every dataset in the file, depth first in name order.
    pub fn datasets(&self) -> Result<Vec<DatasetInfo>> {
        let mut out = Vec::new();
        let root = self.file.as_group().map_err(|e| self.err("/", e))?;
        self.walk(&root, "", &mut out)?;
        Ok(out)
    }

    fn walk(&self, g: &hdf5::Group, prefix: &str, out: &mut Vec<DatasetInfo>) -> Result<()> {
        let mut names = g.member_names().map_err(|e| self.err(if prefix.is_empty() { "/" } else { prefix }, e))?;
        names.sort();
        for name in names {
            let path = format!("{prefix}/{name}");
            if let Ok(ds) = g.dataset(&name) {
                let dtype = ds.dtype().and_then(|t| t.to_descriptor()).map(|d| dtype_of(&d)).unwrap_or(Dtype::Other);
                let stored_hash = ds.attr(HASH_ATTR).ok().and_then(|a| a.read_scalar::<u64>().ok());
                out.push(DatasetInfo { path, shape: ds.shape(), dtype, stored_hash });
            } else {
                let sub = g.group(&name).map_err(|e| self.err(&path, e))?;
                self.walk(&sub, &path, out)?;
            }
        }
        Ok(())
    }

    fn dataset(&self, path: &str) -> Result<hdf5::Dataset> {
        self.file.dataset(path).map_err(|e| self.err(path, e))
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
        self.location(object)?.attr_names().map_err(|e| self.err(object, e))
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

    /// Recomputes the digest of an f32 dataset and compares it with the stored one:
    /// `Some(true)` matches, `Some(false)` differs, `None` when there is no stored digest.
    pub fn verify(&self, info: &DatasetInfo) -> Result<Option<bool>> {
        if info.stored_hash.is_none() || info.dtype != Dtype::F32 {
            return Ok(None);
        }
        Ok(self.read_f32_verified(info, &info.shape)?.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn garbage_is_a_clean_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.h5");
        std::fs::write(&p, b"not an hdf5 file at all").unwrap();
        let err = Reader::open(&p).err().expect("must fail").to_string();
        assert!(err.contains("bad.h5"), "{err}");
    }
}
