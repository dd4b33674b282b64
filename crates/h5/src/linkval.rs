//! One of the crate's two `unsafe` modules (the other is `writeback`): reading the value of a
//! soft or external link, which `hdf5-metno` does not expose, so that an error can say where a
//! refused link points. The value is read into a fixed buffer under the HDF5 crate's library
//! lock; nothing is followed or opened.

#![allow(unsafe_code)]

use std::ffi::CString;

/// Bytes of a link value read: longer targets are cut (they are only shown in errors).
const VALUE_BYTES: usize = 4096;

/// The raw value of link `name` of `group`, or `None` when it cannot be read.
fn value(group: &hdf5::Group, name: &str) -> Option<Vec<u8>> {
    let cname = CString::new(name).ok()?;
    let mut buf = vec![0u8; VALUE_BYTES];
    let id = group.id();
    // SAFETY: `cname` is a NUL-terminated string and `buf` a writable buffer of `buf.len()`
    // bytes, both alive for the call; H5Lget_val writes at most `size` bytes into it. The
    // library lock of `hdf5-metno` is held, as for every other call into the library.
    let rc = hdf5::sync::sync(|| unsafe {
        hdf5_sys::h5l::H5Lget_val(id, cname.as_ptr(), buf.as_mut_ptr().cast(), buf.len(), hdf5_sys::h5p::H5P_DEFAULT)
    });
    (rc >= 0).then_some(buf)
}

/// The path a soft link names.
pub(crate) fn soft_target(group: &hdf5::Group, name: &str) -> Option<String> {
    let buf = value(group, name)?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// The file and object an external link names: its value is a version-and-flags byte, then the
/// file name and the object path, each NUL-terminated.
pub(crate) fn external_target(group: &hdf5::Group, name: &str) -> Option<(String, String)> {
    let buf = value(group, name)?;
    let mut parts = buf.get(1..)?.split(|&b| b == 0);
    let file = String::from_utf8_lossy(parts.next()?).into_owned();
    let object = String::from_utf8_lossy(parts.next()?).into_owned();
    (!file.is_empty()).then_some((file, object))
}
