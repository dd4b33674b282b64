"""Robustness survey: flips one bit at every STRIDE-th byte of the first LIMIT bytes of a
checkpoint file and runs `resilab inspect` on each copy, counting clean loads, clean errors,
crashes and hangs caught by resilab's probe guard, and anything else (panics, signals).

    python3 bench/flip_survey.py results/runs/<run>/checkpoints/step-*/worker-0.h5 --stride 5 --limit 4096
"""
import argparse
import collections
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--stride", type=int, default=5)
    p.add_argument("--limit", type=int, default=4096)
    p.add_argument("--mask", type=lambda s: int(s, 0), default=0x04)
    p.add_argument("--resilab", default=os.path.join(ROOT, "target", "release", "resilab"))
    args = p.parse_args()
    src = open(args.file, "rb").read()
    counts = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        victim = os.path.join(tmp, "worker-0.h5")
        offsets = range(0, min(args.limit, len(src)), args.stride)
        for off in offsets:
            b = bytearray(src)
            b[off] ^= args.mask
            with open(victim, "wb") as f:
                f.write(b)
            r = subprocess.run([args.resilab, "inspect", victim], capture_output=True, text=True, timeout=300)
            if "panicked" in r.stderr:
                counts["panic"] += 1
            elif r.returncode == 0:
                counts["loaded"] += 1
            elif "crashed the HDF5 library" in r.stderr:
                counts["crash caught by guard"] += 1
            elif "did not finish" in r.stderr:
                counts["hang caught by guard"] += 1
            elif r.returncode == 1:
                counts["clean error"] += 1
            else:
                counts[f"exit {r.returncode}"] += 1
    print(f"{len(offsets)} flipped copies of {args.file} ({len(src)} bytes): {dict(counts)}")


if __name__ == "__main__":
    main()
