"""The published injector's attempt loop, in Python/h5py, as the baseline of bench/inject.sh.

Per attempt, as the reference tool does: pick a dataset uniformly among all leaf datasets, a
uniform random index in it, read that element through h5py, pack it big-endian into a bit
string, flip one random bit of [first_bit, last_bit] (reference numbering, 0 = sign), unpack,
and write the element back. Unlike the tool, it draws from one seeded generator instead of
reseeding from the clock before every draw (which would only make it slower), works on a copy
of the input (as resilab does by default), and logs each attempt as a JSON line.

    python bench/inject_h5py.py IN.h5 OUT.h5 --flips N [--seed S] [--log LOG.jsonl]
"""
import argparse
import json
import random
import shutil
import struct

import h5py
import numpy as np


def leaf_datasets(f):
    out = []
    f.visititems(lambda name, obj: out.append("/" + name) if isinstance(obj, h5py.Dataset) else None)
    return out


def float_to_bin(x, code):
    return "".join(f"{b:08b}" for b in struct.pack(code, x))


def bin_to_float(s, code, nbytes):
    return struct.unpack(code, int(s, 2).to_bytes(nbytes, "big"))[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--flips", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first-bit", type=int, default=0)
    ap.add_argument("--last-bit", type=int, default=31)
    ap.add_argument("--log", default=None)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    shutil.copyfile(a.input, a.output)
    log = open(a.log or a.output + ".jsonl", "w")
    corrupted = 0
    with h5py.File(a.output, "a") as f:
        locations = [p for p in leaf_datasets(f) if f[p].dtype.kind == "f" and f[p].size > 0]
        for attempt in range(a.flips):
            loc = locations[rng.randint(0, len(locations) - 1)]
            ds = f[loc]
            idx = tuple(rng.randint(0, n - 1) for n in ds.shape) if ds.ndim else ()
            old = ds[idx]
            code, nbytes = (">f", 4) if ds.dtype.itemsize == 4 else (">d", 8)
            bits = float_to_bin(float(old), code)
            bit = rng.randint(a.first_bit, min(a.last_bit, len(bits) - 1))
            flipped = bits[:bit] + ("1" if bits[bit] == "0" else "0") + bits[bit + 1:]
            new = np.array(bin_to_float(flipped, code, nbytes), dtype=ds.dtype)
            ds[idx] = new
            corrupted += 1
            log.write(json.dumps({"attempt": attempt, "dataset": loc, "index": list(idx), "bit": bit,
                                  "old": float(old), "new": float(new)}) + "\n")
    log.close()
    print(json.dumps({"flips": a.flips, "corrupted": corrupted}))


if __name__ == "__main__":
    main()
