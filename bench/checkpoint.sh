#!/usr/bin/env bash
# Checkpoint benchmark: resilab's HDF5 checkpoint of ResNet-18's full training state (weights,
# BatchNorm buffers, SGD momentum) against a raw fsync'd write of the same bytes (same process)
# and against h5py writing the same arrays, plus the write time as a share of a training step.
# resilab's writer starts the disk's write-back every 8 MiB while it writes; the raw write is
# timed both plain (the `resilab_vs_raw_write` ratio) and with the same early write-back
# (`resilab_vs_raw_early_write`), so the HDF5 format's own cost is also shown on its own.
# Writes results/bench/checkpoint.csv. Knobs: REPS, THREADS, MODEL_ARGS.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/bench/venv.sh"
REPS="${REPS:-7}"
THREADS="${THREADS:-$(nproc)}"
MODEL_ARGS="${MODEL_ARGS:---arch resnet --depth 18 --width 1}"
OUT_CSV="${OUT_CSV:-$ROOT/results/bench/checkpoint.csv}"
WORK="$ROOT/target/bench-checkpoint"

bench_venv h5py numpy
rm -rf "$WORK"
(cd "$ROOT" && bash scripts/setup.sh && cargo build --release)

echo "==> resilab" >&2
# shellcheck disable=SC2086
r_json="$("$ROOT/target/release/resilab" bench checkpoint $MODEL_ARGS --reps "$REPS" --threads "$THREADS" --dir "$WORK" | tail -n 1)"
ckpt="$(ls -d "$WORK"/ckpt/step-*/worker-0.h5 | tail -n 1)"
echo "==> h5py" >&2
p_json="$("$VENV/bin/python" "$ROOT/bench/h5py_checkpoint.py" "$ckpt" --out "$WORK/h5py.h5" --reps "$REPS" | tail -n 1)"

mkdir -p "$(dirname "$OUT_CSV")"
"$VENV/bin/python" - "$r_json" "$p_json" "$OUT_CSV" <<'PY'
import csv, datetime, json, sys
r, p, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
row = {
    "model": r["model"], "payload_mb": round(r["payload_bytes"] / 1e6, 2), "file_mb": round(r["file_bytes"] / 1e6, 2),
    "resilab_write_mb_s": round(r["write_mb_s"], 1), "raw_write_mb_s": round(r["raw_write_mb_s"], 1),
    "resilab_vs_raw_write": round(r["write_vs_raw"], 3),
    "raw_early_write_mb_s": round(r["payload_bytes"] / 1e6 / r["raw_early_write_s"], 1),
    "resilab_vs_raw_early_write": round(r["write_vs_raw_early"], 3), "h5py_write_mb_s": round(p["write_mb_s"], 1),
    "resilab_vs_h5py_write": round(r["write_mb_s"] / p["write_mb_s"], 3),
    "resilab_read_mb_s": round(r["read_mb_s"], 1), "raw_read_mb_s": round(r["raw_read_mb_s"], 1),
    "h5py_read_mb_s": round(p["read_mb_s"], 1), "step_s": round(r["step_s"], 3), "batch": r["batch"],
    "write_share_of_step": round(r["write_share_of_step"], 4), "digest_s": round(r["digest_s"], 4), "resilab_write_s": round(r["write_s"], 4), "raw_write_s": round(r["raw_write_s"], 4), "raw_early_write_s": round(r["raw_early_write_s"], 4), "h5py_version": p["h5py_version"],
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
}
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(row))
    w.writeheader()
    w.writerow(row)
for k, v in row.items():
    print(f"{k:>24}  {v}")
print(f"wrote {out}")
PY
