//! Element access by raw bit pattern, for fault injection and comparison.
//!
//! Every numeric element type is handled as its bit pattern, zero-extended into a `u64`
//! (an `i16` of -1 is `0xffff`, an `f32` of 1.0 is `0x3f80_0000`). Reads and writes go through
//! the HDF5 API with point selections, so only the touched elements move, whatever the storage
//! layout (contiguous, chunked, compressed) of the dataset.

use std::path::{Path, PathBuf};

use hdf5::{H5Type, Selection};
use ndarray::{Array1, Array2};

use crate::base::{Dtype, SIEVE_BYTES, budget_for, require_regular_file};
use crate::error::{Error, Result};
use crate::file::Reader;

/// A number type stored in HDF5, seen through its bit pattern.
trait Bits: H5Type + Copy {
    fn to_bits(self) -> u64;
    fn from_bits(raw: u64) -> Self;
}

macro_rules! int_bits {
    ($($t:ty => $u:ty),*) => {$(
        impl Bits for $t {
            fn to_bits(self) -> u64 { self as $u as u64 }
            fn from_bits(raw: u64) -> Self { raw as $u as $t }
        }
    )*};
}
int_bits!(i8 => u8, i16 => u16, i32 => u32, i64 => u64, u8 => u8, u16 => u16, u32 => u32, u64 => u64);

impl Bits for half::f16 {
    fn to_bits(self) -> u64 {
        half::f16::to_bits(self) as u64
    }
    fn from_bits(raw: u64) -> Self {
        half::f16::from_bits(raw as u16)
    }
}
impl Bits for f32 {
    fn to_bits(self) -> u64 {
        f32::to_bits(self) as u64
    }
    fn from_bits(raw: u64) -> Self {
        f32::from_bits(raw as u32)
    }
}
impl Bits for f64 {
    fn to_bits(self) -> u64 {
        f64::to_bits(self)
    }
    fn from_bits(raw: u64) -> Self {
        f64::from_bits(raw)
    }
}

/// Calls `$body` with `$t` bound to the Rust type of `$dtype`; `$other` for non-numeric types.
macro_rules! with_type {
    ($dtype:expr, $t:ident => $body:expr, $other:expr) => {
        match $dtype {
            Dtype::F16 => {
                type $t = half::f16;
                $body
            }
            Dtype::F32 => {
                type $t = f32;
                $body
            }
            Dtype::F64 => {
                type $t = f64;
                $body
            }
            Dtype::Int(1) => {
                type $t = i8;
                $body
            }
            Dtype::Int(2) => {
                type $t = i16;
                $body
            }
            Dtype::Int(4) => {
                type $t = i32;
                $body
            }
            Dtype::Int(8) => {
                type $t = i64;
                $body
            }
            Dtype::Uint(1) => {
                type $t = u8;
                $body
            }
            Dtype::Uint(2) => {
                type $t = u16;
                $body
            }
            Dtype::Uint(4) => {
                type $t = u32;
                $body
            }
            Dtype::Uint(8) => {
                type $t = u64;
                $body
            }
            _ => $other,
        }
    };
}

/// Row-major coordinates of flat element indices, as an `n x ndim` point list.
fn coords(shape: &[usize], indices: &[usize]) -> Array2<usize> {
    let mut out = Array2::zeros((indices.len(), shape.len()));
    for (row, &flat) in indices.iter().enumerate() {
        let mut rest = flat;
        for d in (0..shape.len()).rev() {
            out[[row, d]] = rest % shape[d];
            rest /= shape[d];
        }
    }
    out
}

fn check_points(file: &Path, ds: &hdf5::Dataset, path: &str, dtype: Dtype, indices: &[usize]) -> Result<Vec<usize>> {
    let shape = ds.shape();
    let len: usize = shape.iter().product();
    if let Some(&bad) = indices.iter().find(|&&i| i >= len) {
        return Err(Error::Invalid {
            file: file.to_path_buf(),
            object: path.into(),
            message: format!("element {bad} is out of range ({len} elements)"),
        });
    }
    if !dtype.is_numeric() {
        return Err(Error::Invalid { file: file.to_path_buf(), object: path.into(), message: "not a number dataset".into() });
    }
    Ok(shape)
}

fn read_points_typed<T: Bits>(ds: &hdf5::Dataset, shape: &[usize], indices: &[usize]) -> hdf5::Result<Vec<u64>> {
    if indices.is_empty() {
        return Ok(Vec::new());
    }
    if shape.is_empty() {
        let v = ds.read_scalar::<T>()?;
        return Ok(vec![v.to_bits(); indices.len()]);
    }
    let values: Array1<T> = ds.read_slice_1d(Selection::Points(coords(shape, indices)))?;
    Ok(values.iter().map(|v| v.to_bits()).collect())
}

fn write_points_typed<T: Bits>(ds: &hdf5::Dataset, shape: &[usize], indices: &[usize], raw: &[u64]) -> hdf5::Result<()> {
    if indices.is_empty() {
        return Ok(());
    }
    if shape.is_empty() {
        let last = raw.last().copied().unwrap_or_default();
        return ds.write_scalar(&T::from_bits(last));
    }
    let values: Array1<T> = raw.iter().map(|&r| T::from_bits(r)).collect();
    ds.write_slice(&values, Selection::Points(coords(shape, indices)))
}

fn read_points(file: &hdf5::File, name: &Path, path: &str, dtype: Dtype, indices: &[usize]) -> Result<Vec<u64>> {
    let err = |e: hdf5::Error| Error::Hdf5 { file: name.to_path_buf(), object: path.into(), message: e.to_string() };
    let ds = file.dataset(path).map_err(err)?;
    let shape = check_points(name, &ds, path, dtype, indices)?;
    with_type!(dtype, T => read_points_typed::<T>(&ds, &shape, indices).map_err(err), unreachable_numeric(name, path))
}

fn unreachable_numeric<T>(name: &Path, path: &str) -> Result<T> {
    Err(Error::Invalid { file: name.to_path_buf(), object: path.into(), message: "not a number dataset".into() })
}

/// The byte range a dataset's elements occupy in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Dataset path.
    pub path: String,
    /// Element type.
    pub dtype: Dtype,
    /// First byte in the file.
    pub offset: u64,
    /// Bytes of storage.
    pub size: u64,
}

/// Every element of a number dataset, kept in its own width (an 8-bit dataset takes a byte per
/// element), read as raw bit patterns.
pub struct Column {
    dtype: Dtype,
    data: Box<dyn ColumnData>,
}

/// The typed vector behind a [`Column`].
trait ColumnData {
    fn len(&self) -> usize;
    fn bits(&self, i: usize) -> u64;
}

impl<T: Bits> ColumnData for Vec<T> {
    fn len(&self) -> usize {
        <[T]>::len(self)
    }
    fn bits(&self, i: usize) -> u64 {
        self[i].to_bits()
    }
}

impl Column {
    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }
    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Element `i`'s bit pattern, zero-extended.
    pub fn bits(&self, i: usize) -> u64 {
        self.data.bits(i)
    }
    /// Every element's bit pattern, in row-major order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len()).map(|i| self.bits(i))
    }
    /// XXH3-64 of the elements' little-endian bytes at their width (the digest resilab stores
    /// for integer datasets), computed in pieces without a second copy of the column.
    pub fn digest(&self) -> u64 {
        let width = self.dtype.bytes();
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        let mut buf = Vec::with_capacity(64 * 1024);
        for bits in self.iter() {
            buf.extend_from_slice(&bits.to_le_bytes()[..width]);
            if buf.len() >= 64 * 1024 - 8 {
                hasher.update(&buf);
                buf.clear();
            }
        }
        hasher.update(&buf);
        hasher.digest()
    }
}

impl Reader {
    /// The raw bit patterns of the elements at the given row-major flat indices, in that order.
    pub fn read_points(&self, path: &str, dtype: Dtype, indices: &[usize]) -> Result<Vec<u64>> {
        self.checked(path)?;
        read_points(&self.file, &self.path, path, dtype, indices)
    }

    /// Every element of a number dataset, in its own width. Its declared size was checked
    /// against the file and the memory budget when the file was opened.
    pub fn read_column(&self, path: &str, dtype: Dtype) -> Result<Column> {
        self.checked(path)?;
        let err = |e: hdf5::Error| Error::Hdf5 { file: self.path.clone(), object: path.into(), message: e.to_string() };
        let ds = self.file.dataset(path).map_err(err)?;
        crate::base::admit(&ds, &self.path, path, &self.budget)?;
        with_type!(
            dtype,
            T => ds.read_raw::<T>().map(|v| Column { dtype, data: Box::new(v) }).map_err(err),
            unreachable_numeric(&self.path, path)
        )
    }

    /// Where each dataset with contiguous storage keeps its elements in the file, sorted by offset.
    /// Chunked and compact datasets (whose bytes are scattered or inside object headers) are absent.
    pub fn extents(&self) -> Result<Vec<Extent>> {
        let mut out = Vec::new();
        for info in self.datasets()? {
            let ds = self.file.dataset(&info.path).map_err(|e| self.err(&info.path, e))?;
            if let (Some(offset), false) = (ds.offset(), ds.is_chunked()) {
                let size = ds.storage_size();
                if size > 0 {
                    out.push(Extent { path: info.path, dtype: info.dtype, offset, size });
                }
            }
        }
        out.sort_by_key(|e| e.offset);
        Ok(out)
    }
}

/// A file opened for reading and writing single elements in place.
pub struct Editor {
    file: hdf5::File,
    path: PathBuf,
    tree: crate::tree::Tree,
}

impl Editor {
    /// Opens an existing file read-write, after the same walk as [`Reader::open`]: a file that
    /// could make a write land in another file (external links or storage, virtual datasets)
    /// is refused before anything is written.
    pub fn open(path: &Path) -> Result<Self> {
        require_regular_file(path)?;
        let budget = budget_for(path)?;
        let file = hdf5::File::with_options()
            // Point access: a small sieve buffer, so a scattered element costs a page, not 64 KiB.
            .with_fapl(|p| p.fclose_degree(hdf5::file::FileCloseDegree::Strong).sieve_buf_size(SIEVE_BYTES).file_locking(false))
            .open_rw(path)
            .map_err(|e| Error::Hdf5 { file: path.to_path_buf(), object: "/".into(), message: e.to_string() })?;
        let tree = crate::tree::walk(&file, path, &budget)?;
        Ok(Self { file, path: path.to_path_buf(), tree })
    }

    /// Refuses a path the walk did not list.
    fn checked(&self, path: &str) -> Result<()> {
        self.tree.dataset(&self.path, path).map(drop)
    }

    /// See [`Reader::read_points`].
    pub fn read_points(&self, path: &str, dtype: Dtype, indices: &[usize]) -> Result<Vec<u64>> {
        self.checked(path)?;
        read_points(&self.file, &self.path, path, dtype, indices)
    }

    /// Writes raw bit patterns to the elements at the given flat indices (which should be distinct).
    pub fn write_points(&self, path: &str, dtype: Dtype, indices: &[usize], raw: &[u64]) -> Result<()> {
        let err = |e: hdf5::Error| Error::Hdf5 { file: self.path.clone(), object: path.into(), message: e.to_string() };
        if indices.len() != raw.len() {
            return Err(Error::Invalid {
                file: self.path.clone(),
                object: path.into(),
                message: format!("{} indices for {} values", indices.len(), raw.len()),
            });
        }
        self.checked(path)?;
        let ds = self.file.dataset(path).map_err(err)?;
        let shape = check_points(&self.path, &ds, path, dtype, indices)?;
        with_type!(dtype, T => write_points_typed::<T>(&ds, &shape, indices, raw).map_err(err), unreachable_numeric(&self.path, path))
    }

    /// Flushes and closes the file.
    pub fn close(self) -> Result<()> {
        let err = |e: hdf5::Error| Error::Hdf5 { file: self.path.clone(), object: "/".into(), message: e.to_string() };
        self.file.flush().map_err(err)?;
        self.file.close().map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Writer;

    #[test]
    fn coords_are_row_major() {
        let c = coords(&[2, 3, 4], &[0, 5, 23]);
        assert_eq!(c.row(0).to_vec(), [0, 0, 0]);
        assert_eq!(c.row(1).to_vec(), [0, 1, 1]);
        assert_eq!(c.row(2).to_vec(), [1, 2, 3]);
    }

    #[test]
    fn points_round_trip_and_only_touch_their_elements() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.h5");
        let w = Writer::create(&p).unwrap();
        let values: Vec<f32> = (0..24).map(|i| i as f32).collect();
        w.write_f32("/model/w", &[2, 3, 4], &values).unwrap();
        w.write_u64("/train_state/step", 7).unwrap();
        w.close().unwrap();

        let e = Editor::open(&p).unwrap();
        let got = e.read_points("/model/w", Dtype::F32, &[5, 23]).unwrap();
        assert_eq!(got, [5.0f32.to_bits() as u64, 23.0f32.to_bits() as u64]);
        e.write_points("/model/w", Dtype::F32, &[5, 23], &[(-1.5f32).to_bits() as u64, 2.5f32.to_bits() as u64]).unwrap();
        e.write_points("/train_state/step", Dtype::Uint(8), &[0], &[9]).unwrap();
        assert!(e.read_points("/model/w", Dtype::F32, &[24]).is_err());
        e.close().unwrap();

        let r = Reader::open(&p).unwrap();
        let all = r.read_f32("/model/w", &[2, 3, 4]).unwrap();
        for (i, v) in all.iter().enumerate() {
            let want = match i {
                5 => -1.5,
                23 => 2.5,
                _ => i as f32,
            };
            assert_eq!(*v, want, "element {i}");
        }
        assert_eq!(r.read_u64("/train_state/step").unwrap(), 9);
        assert_eq!(r.read_column("/train_state/step", Dtype::Uint(8)).unwrap().iter().collect::<Vec<_>>(), [9]);
        let ext = r.extents().unwrap();
        assert!(ext.iter().any(|x| x.path == "/model/w" && x.size == 96), "{ext:?}");
    }
}
