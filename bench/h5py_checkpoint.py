"""h5py baseline for the checkpoint benchmark: writes the same arrays as a resilab checkpoint
(read from it) into a new HDF5 file the way a Python training script would (one contiguous
dataset per tensor), then flushes, closes and fsyncs it, and reads it back. Prints JSON."""
import argparse
import json
import os
import statistics
import time

import h5py
import numpy as np


def load_arrays(path):
    arrays = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and obj.dtype == np.float32:
            arrays[name] = obj[()]

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return arrays


def write(path, arrays):
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        for name, a in arrays.items():
            f.create_dataset(name, data=a)
    fd = os.open(tmp, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    os.rename(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)


def read(path):
    total = 0
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            nonlocal total
            if isinstance(obj, h5py.Dataset):
                total += obj[()].nbytes
        f.visititems(visit)
    return total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("checkpoint")
    p.add_argument("--out", required=True)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    arrays = load_arrays(args.checkpoint)
    payload = sum(a.nbytes for a in arrays.values())
    w, r = [], []
    for _ in range(args.reps):
        t = time.perf_counter()
        write(args.out, arrays)
        w.append(time.perf_counter() - t)
        t = time.perf_counter()
        read(args.out)
        r.append(time.perf_counter() - t)
    ws, rs = statistics.median(w), statistics.median(r)
    print(json.dumps({"impl": "h5py", "h5py_version": h5py.__version__, "payload_bytes": payload,
                      "write_s": ws, "read_s": rs, "write_mb_s": payload / 1e6 / ws, "read_mb_s": payload / 1e6 / rs}))


if __name__ == "__main__":
    main()
