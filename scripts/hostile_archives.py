#!/usr/bin/env python3
"""Writes hostile PyTorch ZIP archives and tensor views into the directory given as argument.

Archives that readers could read differently (each must be refused, naming the entry):

  dup-name.pt        two entries named good/data.pkl: the first calls posix.system (torch.load
                     reads it), the second is a clean state_dict (the zip crate reads it)
  local-name.pt      a local header naming good/data/0 as good/data/1
  local-size.pt      a local header giving good/data/0 one byte more than the central directory
  local-method.pt    a local header calling good/data/0 deflated, the central directory stored
  local-crc.pt       a local header with another CRC for good/data/0
  gap.pt             16 bytes between two entries that no entry claims
  before-central.pt  16 bytes after the last entry, before the central directory
  trailing.pt        16 bytes after the end-of-central-directory record

Tensor views (the archives are well formed):

  clean.pt           a state_dict of one tensor, fc.weight [2, 2], written the same way
  expanded-view.pt   `huge`, torch.zeros(1).expand(2_400_000_000): a 1-element storage seen
                     with shape (2400000000,) and stride (0,), 9.6 GB if materialised
  overrun-view.pt    classifier.fc.bias with shape (10,) and stride (1,) on a 1-element storage

The archives are written with Python's zipfile and then edited byte by byte where a case needs
it; the pickles are assembled opcode by opcode as in scripts/hostile_pickles.py, so nothing is
imported or run. Standard library only: tests/pytorch.rs runs it where torch is not installed.

Usage: python3 scripts/hostile_archives.py OUT_DIR
"""

import io
import os
import pickle
import pickletools
import struct
import sys
import warnings
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile_pickles import called_and_popped, global_, state_dict, text, u8  # noqa: E402


def long1(v):
    """LONG1: a 1-byte length, then the little-endian two's complement (any size of int)."""
    b = pickle.encode_long(v)
    return pickle.LONG1 + u8(len(b)) + b


def ints(values):
    return pickle.MARK + b"".join(long1(v) for v in values) + pickle.TUPLE


def view(key, numel, shape, stride, offset=0):
    """_rebuild_tensor_v2(storage, offset, shape, stride, False, OrderedDict()), the storage the
    persistent id ('storage', FloatStorage, key, 'cpu', numel)."""
    return b"".join([
        global_("torch._utils", "_rebuild_tensor_v2"),
        pickle.MARK,
        pickle.MARK, text("storage"), global_("torch", "FloatStorage"), text(key), text("cpu"), long1(numel),
        pickle.TUPLE, pickle.BINPERSID,
        long1(offset), ints(shape), ints(stride),
        pickle.NEWFALSE,
        global_("collections", "OrderedDict"), pickle.EMPTY_TUPLE, pickle.REDUCE,
        pickle.TUPLE, pickle.REDUCE,
    ])


def one_tensor(name, tensor):
    """PROTO 2, an OrderedDict holding `tensor` under `name`, STOP."""
    return b"".join([
        pickle.PROTO + u8(2),
        global_("collections", "OrderedDict"), pickle.EMPTY_TUPLE, pickle.REDUCE,
        text(name), tensor, pickle.SETITEM,
        pickle.STOP,
    ])


def checked(data):
    """`data`, after checking that every opcode decodes (nothing is imported or run)."""
    ops = list(pickletools.genops(io.BytesIO(data)))
    assert ops[-1][0].name == "STOP" and ops[-1][2] == len(data) - 1
    return data


def entries(data_pkl, storage):
    return [
        ("good/data.pkl", data_pkl),
        ("good/byteorder", b"little"),
        ("good/data/0", storage),
        ("good/version", b"3\n"),
    ]


def write(path, items, junk_after=None):
    """A ZIP of stored entries; `junk_after` (an entry's name, or "last") puts 16 bytes that no
    entry claims after that entry."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        for name, data in items:
            z.writestr(name, data)
            last = name == items[-1][0] and junk_after == "last"
            if junk_after == name or last:
                # zipfile writes each record where it last ended: moved past the junk.
                z.fp.write(b"J" * 16)
                z.start_dir = z.fp.tell()


def patch_local(path, entry, offset, new):
    """Overwrites bytes at `offset` within the local header of `entry`."""
    with zipfile.ZipFile(path) as z:
        at = z.getinfo(entry).header_offset + offset
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(new)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    clean = checked(state_dict(b""))
    system = checked(state_dict(called_and_popped("posix", "system")))
    four = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
    files = {}

    def add(name, items, junk_after=None):
        files[name] = os.path.join(out, name)
        write(files[name], items, junk_after)

    # zipfile warns of the duplicate name it is asked to write.
    warnings.simplefilter("ignore", UserWarning)
    add("dup-name.pt", [("good/data.pkl", system)] + entries(clean, four))
    for name in ["local-name.pt", "local-size.pt", "local-method.pt", "local-crc.pt", "clean.pt"]:
        add(name, entries(clean, four))
    # Local header fields: method at 8, CRC at 14, compressed size at 18, size at 22, name at 30.
    patch_local(files["local-name.pt"], "good/data/0", 30 + len("good/data/"), b"1")
    patch_local(files["local-size.pt"], "good/data/0", 18, struct.pack("<II", 17, 17))
    patch_local(files["local-method.pt"], "good/data/0", 8, struct.pack("<H", 8))
    patch_local(files["local-crc.pt"], "good/data/0", 14, struct.pack("<I", 0x12345678))
    add("gap.pt", entries(clean, four), junk_after="good/byteorder")
    add("before-central.pt", entries(clean, four), junk_after="last")
    add("trailing.pt", entries(clean, four))
    with open(files["trailing.pt"], "ab") as f:
        f.write(b"J" * 16)
    one = struct.pack("<f", 0.0)
    add("expanded-view.pt", entries(checked(one_tensor("huge", view("0", 1, [2_400_000_000], [0]))), one))
    add("overrun-view.pt", entries(checked(one_tensor("classifier.fc.bias", view("0", 1, [10], [1]))), one))
    for path in files.values():
        print(path)


if __name__ == "__main__":
    main()
