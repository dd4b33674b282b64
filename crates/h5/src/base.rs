//! What every part of the crate shares: the digest attributes and limits, the element types
//! and attribute values, and the guards around the C library (its panics, special files, the
//! memory budget).

use std::collections::BTreeMap;
use std::path::Path;

use hdf5::types::{FloatSize, IntSize, TypeDescriptor};

use crate::error::{Error, Result};

/// Name of the attribute holding a dataset's XXH3-64 digest.
pub const HASH_ATTR: &str = "xxh3";

/// Name of the attribute holding the XXH3-64 digest of a group's other attributes.
pub const ATTRS_HASH_ATTR: &str = "attrs_xxh3";

/// Sieve buffer of files opened for point access (HDF5's default is 64 KiB, which it fills for
/// every scattered element it reads).
pub(crate) const SIEVE_BYTES: usize = 4096;

/// Deepest group nesting the tree walk follows (resilab's checkpoints nest six deep).
pub const MAX_DEPTH: usize = 64;

/// The version of the HDF5 C library linked in, e.g. `1.10.8`.
pub fn library_version() -> String {
    let (major, minor, release) = hdf5::library_version();
    format!("{major}.{minor}.{release}")
}

/// XXH3-64 of bytes, the digest of integer datasets (their little-endian bytes).
pub fn digest_bytes(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// XXH3-64 of a u64 value's little-endian bytes (the digest of a scalar u64 dataset).
pub fn digest_u64(value: u64) -> u64 {
    digest_bytes(&value.to_le_bytes())
}

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
    /// 16-bit float (IEEE half precision: 5 exponent bits, 10 mantissa bits).
    F16,
    /// bfloat16 (float32's 8 exponent bits, 7 mantissa bits). HDF5 has no such type, so no
    /// dataset read from a file is one: it is the fault model's view of a value a bf16 training
    /// run holds (see `resilab_inject::inject_f32_as`).
    Bf16,
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
            Dtype::F16 | Dtype::Bf16 => 16,
            Dtype::F32 => 32,
            Dtype::F64 => 64,
            Dtype::Int(b) | Dtype::Uint(b) => 8 * b as u32,
            Dtype::Other => 0,
        }
    }
    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, Dtype::F16 | Dtype::Bf16 | Dtype::F32 | Dtype::F64)
    }
    /// Whether this is a number type (float or integer) whose elements can be read as raw bits.
    pub fn is_numeric(self) -> bool {
        self != Dtype::Other
    }
    /// Bytes of one element (0 for [`Dtype::Other`]).
    pub fn bytes(self) -> usize {
        self.bits() as usize / 8
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
            Dtype::Bf16 => f.write_str("bf16"),
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
    /// Number of elements (saturating: the walk refuses datasets whose count overflows).
    pub fn len(&self) -> usize {
        element_count(&self.shape).unwrap_or(usize::MAX)
    }
    /// Whether the dataset has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub(crate) fn dtype_of(td: &TypeDescriptor) -> Dtype {
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

/// The number of elements of `shape`, or `None` when it overflows.
pub(crate) fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// A root or group attribute's value, as resilab writes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttrValue {
    /// An unsigned 64-bit integer.
    U64(u64),
    /// A UTF-8 string.
    Str(String),
}

impl std::fmt::Display for AttrValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttrValue::U64(v) => write!(f, "{v}"),
            AttrValue::Str(s) => f.write_str(s),
        }
    }
}

/// The digest of a set of attributes: names and values, length-prefixed, in name order.
pub fn digest_attrs(attrs: &BTreeMap<String, AttrValue>) -> u64 {
    let mut buf = Vec::new();
    let mut field = |tag: u8, bytes: &[u8]| {
        buf.push(tag);
        buf.extend((bytes.len() as u64).to_le_bytes());
        buf.extend(bytes);
    };
    for (name, value) in attrs {
        field(b'n', name.as_bytes());
        match value {
            AttrValue::U64(v) => field(b'u', &v.to_le_bytes()),
            AttrValue::Str(s) => field(b's', s.as_bytes()),
        }
    }
    digest_bytes(&buf)
}

/// Runs `f`, turning a panic inside it into an error message. `hdf5-metno` builds Rust values
/// (names, encodings, error texts) from what a corrupt file holds and can panic doing so, for
/// example with "capacity overflow" on a damaged attribute table; a panic on any file content is
/// an error here, not a crash. The panic hook is silenced meanwhile, so nothing is printed.
pub(crate) fn caught<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    r.map_err(|p| {
        let what = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_default();
        format!("the HDF5 crate failed on corrupt metadata ({what}): the file is corrupt")
    })
}

/// Refuses anything but an existing regular file (symbolic links are followed).
pub(crate) fn require_regular_file(path: &Path) -> Result<()> {
    let invalid = |message: String| Error::Invalid { file: path.to_path_buf(), object: "/".into(), message };
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => Err(invalid("is not a regular file".into())),
        Err(e) => Err(invalid(e.to_string())),
    }
}

/// Splits `/a/b/c` into the parent group path and the leaf name.
pub(crate) fn split(path: &str) -> (&str, &str) {
    let p = path.trim_start_matches('/');
    match p.rfind('/') {
        Some(i) => (&p[..i], &p[i + 1..]),
        None => ("", p),
    }
}

/// Opens `path` read-write without HDF5's file lock (see [`Writer::create`]), plugins off.
pub(crate) fn open_rw_unlocked(path: &Path) -> Result<hdf5::File> {
    crate::plugins::off(path)?;
    hdf5::File::with_options().with_fapl(|p| p.file_locking(false)).open_rw(path).map_err(|e| Error::Hdf5 {
        file: path.to_path_buf(),
        object: "/".into(),
        message: e.to_string(),
    })
}

/// The memory budget, or an error naming the file it was needed for. Called before any file is
/// opened, it also turns HDF5's plugin loading off first (see the `plugins` module).
pub(crate) fn budget_for(path: &Path) -> Result<resilab_limits::Budget> {
    crate::plugins::off(path)?;
    resilab_limits::memory_budget().map_err(|source| Error::Budget { file: path.to_path_buf(), source })
}

/// Refuses to read all of dataset `ds` (at `path` of `file`) when what that asks for does not
/// fit beside what the process already holds: the budget is one for the whole process, so
/// three datasets that each fit can still not be held at once.
pub(crate) fn admit(ds: &hdf5::Dataset, file: &Path, path: &str, budget: &resilab_limits::Budget) -> Result<()> {
    let bytes = element_count(&ds.shape()).and_then(|n| (n as u64).checked_mul(element_size(ds)));
    let needs = read_needs(ds, bytes, ds.filters().is_empty());
    if budget.admits(needs) {
        return Ok(());
    }
    Err(Error::OverBudget { file: file.to_path_buf(), object: path.to_string(), needs, budget: budget.describe().into() })
}

/// The bytes reading all of a dataset asks for: its `bytes` of elements, and for a filtered one
/// the HDF5 library's own buffer for one decompressed chunk (allocated by the C library, so not
/// counted by the process's allocator).
pub(crate) fn read_needs(ds: &hdf5::Dataset, bytes: Option<u64>, unfiltered: bool) -> Option<u64> {
    if unfiltered {
        return bytes;
    }
    let chunk = ds.chunk().map_or(Some(0), |c| element_count(&c).and_then(|n| (n as u64).checked_mul(element_size(ds))));
    bytes.zip(chunk).and_then(|(b, c)| b.checked_add(c))
}

/// Bytes of one element of `ds` (1 where its type cannot be read), as the size checks count it.
pub(crate) fn element_size(ds: &hdf5::Dataset) -> u64 {
    ds.dtype().map(|t| t.size() as u64).unwrap_or(1).max(1)
}
