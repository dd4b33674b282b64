#!/usr/bin/env python3
"""Hostile HDF5 checkpoints: copies of a resilab checkpoint rebuilt with h5py so that one
dataset or group lives somewhere else, or declares more than memory holds.

    python3 scripts/hostile_h5.py CHECKPOINT.h5 OUTDIR [CASE ...]

Writes OUTDIR/<case>.h5 for each case (all by default) and the victims they point to:
OUTDIR/victim.raw (64 bytes) and OUTDIR/victim.h5 (a copy of the checkpoint). Paths inside the
files are relative ("victim.raw", "victim.h5"), as an attacker's would be: HDF5 resolves them
against the working directory, so run the commands from OUTDIR. The `fifo` case names
OUTDIR/fifo, which the caller creates (mkfifo): reading it would block.

Cases (resilab must refuse each with one line naming the object and what it points to, and must
never read or write the file it names):
  external-storage   the first model weight's bytes kept in victim.raw (external storage)
  passwd             the same, in /etc/passwd
  fifo               the same, in the FIFO `fifo`
  virtual            the first model weight a virtual dataset reading victim.h5
  external-link      the first model weight an external link into victim.h5
  soft-external      /model a soft link to /elsewhere, an external link to victim.h5's /model
                     (every checksum matches: they are the victim's own)
  bomb               /model/bomb: 2^30 f32 declared (4 GiB), deflated to a few KiB
  wide-u8            /train_state/wide: 4e9 u8 declared, chunked and compressed, never written
  plugin-filter      the first model weight stored in one chunk through filter 31337, which HDF5 does
                     not build in (reading it makes HDF5 load every plugin library it finds)
  three-bombs        /model/bomb0, bomb1, bomb2: 220e6 f32 each (880 MB) declared, gzip-chunked, never
                     written: each fits a 1 GiB budget, any two do not
"""

import shutil
import sys
from pathlib import Path

import h5py
import numpy as np


def first_weight(f):
    """The path of the first f32 dataset under /model with more than 8 elements."""
    found = []

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and obj.dtype == np.float32 and obj.size > 8 and not found:
            found.append("/model/" + name)

    f["/model"].visititems(visit)
    return found[0]


def replace(f, path, make):
    """Replaces the dataset at `path` by what `make(group, name, data)` creates, keeping its attributes."""
    data = f[path][()]
    attrs = dict(f[path].attrs)
    group, name = path.rsplit("/", 1)
    del f[path]
    make(f[group], name, data)
    obj = f.get(path, getlink=False)
    if isinstance(obj, h5py.Dataset):
        for k, v in attrs.items():
            obj.attrs[k] = v


def external_storage(target):
    def make(g, name, data):
        g.create_dataset(name, shape=data.shape, dtype=data.dtype, external=[(target, 0, h5py.h5f.UNLIMITED)])
    return make


def virtual(g, name, data):
    path = g.name + "/" + name
    layout = h5py.VirtualLayout(shape=data.shape, dtype=data.dtype)
    layout[...] = h5py.VirtualSource("victim.h5", path, shape=data.shape)
    g.create_virtual_dataset(name, layout)


def external_link(g, name, data):
    g[name] = h5py.ExternalLink("victim.h5", g.name + "/" + name)


def plugin_filter(g, name, data):
    """The values stored in one chunk "through" filter 31337, which HDF5 does not build in: reading them
    makes HDF5 look for the filter among the shared libraries of its plugin directories."""
    ds = g.create_dataset(name, shape=data.shape, dtype=data.dtype, chunks=data.shape, compression=31337,
                          allow_unknown_filter=True)
    ds.id.write_direct_chunk((0,) * data.ndim, data.tobytes(), filter_mask=0)


def case(ckpt, out, name):
    dest = out / f"{name}.h5"
    shutil.copyfile(ckpt, dest)
    with h5py.File(dest, "r+") as f:
        w = first_weight(f)
        if name == "external-storage":
            replace(f, w, external_storage("victim.raw"))
        elif name == "passwd":
            replace(f, w, external_storage("/etc/passwd"))
        elif name == "fifo":
            replace(f, w, external_storage("fifo"))
        elif name == "virtual":
            replace(f, w, virtual)
        elif name == "external-link":
            replace(f, w, external_link)
        elif name == "soft-external":
            del f["/model"]
            f["/elsewhere"] = h5py.ExternalLink("victim.h5", "/model")
            f["/model"] = h5py.SoftLink("/elsewhere")
        elif name == "bomb":
            f["/model"].create_dataset("bomb", shape=(1 << 30,), dtype=np.float32, chunks=(1 << 20,), compression="gzip",
                                       compression_opts=9, fillvalue=0)
        elif name == "wide-u8":
            f["/train_state"].create_dataset("wide", shape=(4_000_000_000,), dtype=np.uint8, chunks=(1 << 20,),
                                             compression="gzip")
        elif name == "plugin-filter":
            replace(f, w, plugin_filter)
        elif name == "three-bombs":
            for i in range(3):
                f["/model"].create_dataset(f"bomb{i}", shape=(220_000_000,), dtype=np.float32, chunks=(1 << 20,),
                                           compression="gzip")
        else:
            raise SystemExit(f"unknown case {name!r}")
    return dest


CASES = ["external-storage", "passwd", "fifo", "virtual", "external-link", "soft-external", "bomb", "wide-u8",
         "plugin-filter", "three-bombs"]


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    ckpt, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    (out / "victim.raw").write_bytes(bytes(range(64)))
    shutil.copyfile(ckpt, out / "victim.h5")
    for name in sys.argv[3:] or CASES:
        print(case(ckpt, out, name))


if __name__ == "__main__":
    main()
