//! The one place resilab touches HDF5 (through `hdf5-metno` and the system HDF5 C library).
//!
//! Datasets are addressed by absolute paths such as `/model/layer1/0/conv1/weight`; writing one
//! creates its parent groups and stores an XXH3-64 digest of its little-endian bytes as the
//! attribute [`HASH_ATTR`], which [`Reader::verify`] recomputes (f32 tensors and the integer
//! datasets alike). The attributes of a group are sealed when the file is closed: the digest of
//! all of them is stored as [`ATTRS_HASH_ATTR`], which [`Reader::verify_attrs`] recomputes.
//! Every HDF5 failure comes back as an [`Error`] naming the file and the object; the C library's
//! own error printing is silenced by `hdf5-metno`.
//!
//! A corrupt or hostile file must not make the reader crash, loop, allocate what a damaged
//! header claims, or read or write any other file: opening a file walks its tree once
//! (the `tree` module), which stops at cycles and at [`MAX_DEPTH`], refuses external links, virtual
//! datasets and external storage, and checks every dataset's declared size against what the
//! file's bytes can hold and against the memory budget ([`resilab_limits`]) before anything is
//! read (see [`Reader::datasets`]). HDF5's dynamic plugin loading is turned off before the first
//! file is opened, and a dataset that needs a filter the library does not build in is refused
//! by the walk (the `plugins` module): no file can make resilab load code. The memory budget is
//! the process's: each full read of a dataset is admitted beside what the process already holds.

mod base;
mod error;
mod file;
mod links;
mod linkval;
mod plugins;
mod tree;
mod values;
mod writeback;

pub use base::{
    ATTRS_HASH_ATTR, AttrValue, DatasetInfo, Dtype, HASH_ATTR, MAX_DEPTH, digest_attrs, digest_bytes, digest_f32, digest_u64,
    library_version,
};
pub use error::{Error, Result};
pub use file::{Digests, Reader, Writer, with_digests};
pub use links::{add_hard_link, add_unallocated_f32, set_sealed_attr_str};
pub use values::{Column, Editor, Extent};
pub use writeback::{EVERY_BYTES as WRITEBACK_EVERY_BYTES, start_writeback};
