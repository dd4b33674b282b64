"""Reads every dataset of an HDF5 file with h5py and prints them as JSON (path, shape, dtype,
values as exact float/int lists), so the Rust tests can compare with what resilab wrote."""
import json
import sys

import h5py


def main(path):
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            data = obj[()]
            values = data.reshape(-1).tolist() if hasattr(data, "reshape") else [data]
            out["/" + name] = {"shape": list(obj.shape), "dtype": str(obj.dtype), "values": values}

    with h5py.File(path, "r") as f:
        f.visititems(visit)
        attrs = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in f.attrs.items()}
    print(json.dumps({"datasets": out, "attributes": attrs}))


if __name__ == "__main__":
    main(sys.argv[1])
