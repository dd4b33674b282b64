//! No code from a data file: HDF5's dynamic plugins are off before any file is opened, and a
//! dataset that needs a filter the library does not build in is refused before it is read.
//!
//! When a dataset names a filter HDF5 does not have (an id such as 32001 or 31337, written
//! with h5py's `allow_unknown_filter=True`), the library looks for a plugin: it `dlopen`s every
//! shared library in `HDF5_PLUGIN_PATH`, or in the directory compiled into the binary (the build
//! tree, then `/usr/local/hdf5/lib/plugin`), and each library's constructor runs. A checkpoint
//! from someone else would then run whatever code lies there. So:
//!
//! 1. [`off`] turns plugin loading off (`H5PLset_loading_state(0)`) once per process, and every
//!    function of this crate that opens or creates a file calls it first; if the library
//!    refuses, no file is opened.
//! 2. The tree walk refuses a dataset whose filter pipeline holds any filter but HDF5's
//!    built-in ones ([`BUILT_IN`]), naming the dataset and the filter id, before anything reads
//!    it (`tree::check_pipeline`); no message names a plugin directory.
//!
//! This is one of the crate's `unsafe` modules (with `linkval` and `writeback`): one call into
//! the C library. `hdf5-metno-sys` declares `H5PLset_loading_state` with a pointer argument, but
//! the C function takes the mask by value (`herr_t H5PLset_loading_state(unsigned int)`), so the
//! two functions are declared here as HDF5's `H5PLpublic.h` does.

#![allow(unsafe_code)]

use std::os::raw::{c_int, c_uint};
use std::path::Path;
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// HDF5's built-in filters, by id: deflate (1), shuffle (2), fletcher32 (3), szip (4), nbit (5)
/// and scaleoffset (6) (`H5Zpublic.h`). Any other id would be looked up among plugins.
pub(crate) const BUILT_IN: [(i32, &str); 6] =
    [(1, "deflate"), (2, "shuffle"), (3, "fletcher32"), (4, "szip"), (5, "nbit"), (6, "scaleoffset")];

unsafe extern "C" {
    fn H5PLset_loading_state(plugin_control_mask: c_uint) -> c_int;
    fn H5PLget_loading_state(plugin_control_mask: *mut c_uint) -> c_int;
}

/// The outcome of turning plugins off, once per process.
static OFF: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// Turns HDF5's plugin loading off for the whole process (the first call does it; later calls
/// return its outcome), or says why it could not, naming `file`: no file may be opened then.
pub(crate) fn off(file: &Path) -> Result<()> {
    let outcome = OFF.get_or_init(|| {
        let mut state: c_uint = u32::MAX;
        // SAFETY: both functions take or fill one unsigned int; `state` is a valid, writable
        // u32 for the second. They run under `hdf5-metno`'s library lock, which also starts the
        // library (H5open) first, as for every other call into it.
        let (set, get) = hdf5::sync::sync(|| unsafe { (H5PLset_loading_state(0), H5PLget_loading_state(&mut state)) });
        match (set, get, state) {
            (s, g, 0) if s >= 0 && g >= 0 => Ok(()),
            _ => Err(format!("the HDF5 library did not turn its plugin loading off (status {set}, {get}; state {state:#x})")),
        }
    });
    outcome.clone().map_err(|message| Error::Invalid {
        file: file.to_path_buf(),
        object: "/".into(),
        message: format!("{message}: resilab opens no file while a file could make HDF5 load code"),
    })
}

/// Whether plugin loading is off now (tests).
#[cfg(test)]
pub(crate) fn loading_state() -> c_uint {
    let mut state: c_uint = u32::MAX;
    // SAFETY: as in `off`.
    hdf5::sync::sync(|| unsafe { H5PLget_loading_state(&mut state) });
    state
}
