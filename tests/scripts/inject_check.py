"""Helper of tests/inject.rs, independent of resilab's code: h5py writes and checks files.

    python inject_check.py make OUT.h5
        A PyTorch-style checkpoint written by h5py: f16, f32 (one chunked and gzip-compressed),
        f64 and int64 datasets with dotted state_dict names under /model.
    python inject_check.py check ORIGINAL.h5 CORRUPTED.h5 LOG.jsonl
        Checks, with h5py, that the corrupted file differs from the original exactly in the
        elements the log says were corrupted, that each holds the logged final bits, and that the
        logged bits are consistent (reference index = width - 1 - IEEE index; at the stored
        width the old and new words differ in exactly the logged bits). Prints a JSON summary.
"""
import json
import sys

import h5py
import numpy as np


def make(path):
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f["model/conv1.weight"] = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
        f["model/layer1.0.bn1.weight"] = (1 + 0.1 * rng.standard_normal(16)).astype(np.float16)
        f["model/layer1.0.bn1.num_batches_tracked"] = np.int64(1234)
        f.create_dataset("model/fc.weight", data=rng.standard_normal((10, 16)).astype(np.float32), chunks=(5, 8), compression="gzip")
        f["model/fc.bias"] = rng.standard_normal(10).astype(np.float64)


UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def words(ds):
    a = np.asarray(ds[()]).reshape(-1)
    return a.view(UINT[a.dtype.itemsize]).astype(np.uint64)


def check(orig, corrupt, log):
    lines = [json.loads(l) for l in open(log) if l.strip()]
    assert lines[0]["kind"] == "header" and lines[-1]["kind"] == "summary", "header and summary lines"
    attempts = [l for l in lines if l["kind"] == "attempt"]
    assert len(attempts) == lines[-1]["attempts"] == lines[0]["attempts"]
    final = {}
    for a in attempts:
        assert a["bits_reference"] == [a["precision"] - 1 - b for b in a["bits_ieee"]], a
        if a["outcome"] != "corrupted":
            assert a["old_bits"] == a["new_bits"], a
            continue
        old, new = int(a["old_bits"], 16), int(a["new_bits"], 16)
        width = {"f16": 16, "f32": 32, "f64": 64}.get(a["dtype"])
        if width is not None and a["precision"] == width:
            mask = sum(1 << b for b in a["bits_ieee"])
            assert old ^ new == mask, a
        assert sorted(a["stored_bits_changed"]) == [b for b in range(64) if (old ^ new) >> b & 1], a
        final[(a["dataset"], a["index"])] = new
    changed = 0
    with h5py.File(orig, "r") as fa, h5py.File(corrupt, "r") as fb:
        names = []
        fa.visititems(lambda n, o: names.append("/" + n) if isinstance(o, h5py.Dataset) else None)
        for name in names:
            if fa[name].dtype.kind not in "fiu":
                continue
            wa, wb = words(fa[name]), words(fb[name])
            for i in np.nonzero(wa != wb)[0]:
                key = (name, int(i))
                assert key in final, f"{name}[{i}] changed but the log does not say so"
                assert int(wb[i]) == final[key], f"{name}[{i}] holds {int(wb[i]):#x}, log says {final[key]:#x}"
                changed += 1
            for (d, i), new in final.items():
                if d == name:
                    assert int(wb[i]) == new, f"{name}[{i}] should hold {new:#x}"
    print(json.dumps({"attempts": len(attempts), "corrupted_final": len(final), "changed": changed}))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        check(sys.argv[2], sys.argv[3], sys.argv[4])
