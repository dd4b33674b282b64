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
//!    it ([`check_pipeline`]); no message names a plugin directory.
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

/// The filters of a dataset's pipeline, after refusing one that names a filter HDF5 does not
/// build in (its plugin would be code from outside resilab) or whose pipeline cannot be read.
pub(crate) fn check_pipeline(ds: &hdf5::Dataset, invalid: &dyn Fn(String) -> Error) -> Result<Vec<hdf5::filters::Filter>> {
    let unreadable = |e: String| invalid(format!("its filter pipeline cannot be read ({e})"));
    let dcpl = ds.create_plist().map_err(|e| unreadable(e.to_string()))?;
    let filters = crate::base::caught(|| dcpl.get_filters()).map_err(unreadable)?.map_err(|e| unreadable(e.to_string()))?;
    for f in &filters {
        let id = f.id();
        if !BUILT_IN.iter().any(|&(b, _)| b == id) {
            let known: Vec<String> = BUILT_IN.iter().map(|(b, n)| format!("{n} ({b})")).collect();
            return Err(invalid(format!(
                "needs the HDF5 filter with id {id}, which is not built into the HDF5 library: resilab reads only \
                 datasets stored with the built-in filters ({}) and never loads a filter plugin",
                known.join(", ")
            )));
        }
    }
    Ok(filters)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Reader, Writer};

    #[test]
    fn opening_any_file_turns_plugin_loading_off_and_built_in_filters_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.h5");
        let w = Writer::create(&p).unwrap();
        w.write_f32("/model/w", &[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        w.close().unwrap();
        assert_eq!(loading_state(), 0, "plugins are still loadable after a file was created");
        let f = crate::base::open_rw_unlocked(&p).unwrap();
        f.new_dataset::<f32>().shape([64]).chunk([16]).shuffle().deflate(4).fletcher32().create("packed").unwrap();
        f.close().unwrap();
        let r = Reader::open(&p).unwrap();
        assert_eq!(r.read_f32("/packed", &[64]).unwrap(), vec![0.0; 64], "built-in filters are read");
        assert_eq!(loading_state(), 0);
    }

    #[test]
    fn the_built_in_list_is_hdf5s() {
        // H5Zpublic.h: H5Z_FILTER_DEFLATE 1 ... H5Z_FILTER_SCALEOFFSET 6, H5Z_FILTER_RESERVED 256.
        let ids: Vec<i32> = BUILT_IN.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [1, 2, 3, 4, 5, 6]);
        assert_eq!(hdf5_sys::h5z::H5Z_FILTER_SCALEOFFSET, 6);
    }
}
