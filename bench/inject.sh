#!/usr/bin/env bash
# Injection benchmark: whole-process time of `resilab inject` for 1, 1,000, 10,000 and 100,000
# flips into a ResNet-18 checkpoint (weights, BatchNorm buffers, SGD momentum: 89 MB), writing
# the corrupted copy and the per-attempt log, against bench/inject_h5py.py, a Python/h5py
# implementation of the published injector's attempt loop doing the same work (copy, flips, log).
# Each figure is the median of REPS runs (the Python loop at 100,000 flips runs once).
# Writes results/bench/inject.csv. Knobs: REPS, FLIPS.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/bench/venv.sh"
REPS="${REPS:-5}"
FLIPS="${FLIPS:-1 1000 10000 100000}"
OUT_CSV="${OUT_CSV:-$ROOT/results/bench/inject.csv}"
WORK="$ROOT/target/bench-inject"
BIN="$ROOT/target/release/resilab"

bench_venv h5py numpy
(cd "$ROOT" && bash scripts/setup.sh && cargo build --release)

mkdir -p "$WORK"
if ! ls "$WORK"/ckpt/step-*/worker-0.h5 >/dev/null 2>&1; then
    echo "==> writing a ResNet-18 checkpoint" >&2
    "$BIN" bench checkpoint --arch resnet --depth 18 --width 1 --steps 1 --reps 1 --dir "$WORK" >/dev/null
fi
ckpt="$(ls -d "$WORK"/ckpt/step-*/worker-0.h5 | tail -n 1)"
cat > "$WORK/inject.toml" <<TOML
injection_type = "count"
injection_tries = 1
float_precision = 32
first_bit = 0
last_bit = 31
use_random_locations = true
TOML

# Whole-process wall time of a command, in seconds.
wall() { local t0 t1; t0=$EPOCHREALTIME; "$@" >/dev/null; t1=$EPOCHREALTIME; awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", b - a }'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

rows=()
for n in $FLIPS; do
    sed -i "s/^injection_tries = .*/injection_tries = $n/" "$WORK/inject.toml"
    # A fresh output name per run, as in a campaign (replacing an existing 90 MB file makes
    # ext4 flush it first); removed after its run, outside the timing.
    r=$(for i in $(seq "$REPS"); do wall "$BIN" inject --config "$WORK/inject.toml" --file "$ckpt" --seed "$i" --output "$WORK/resilab-$i.h5" --log "$WORK/resilab-$i.jsonl"; rm -f "$WORK/resilab-$i.h5"; done | median)
    corrupted=$("$BIN" inject --config "$WORK/inject.toml" --file "$ckpt" --seed 1 --output "$WORK/resilab.h5" --log "$WORK/resilab.jsonl" --json | "$VENV/bin/python" -c "import json,sys; print(json.load(sys.stdin)['summary']['corrupted'])")
    preps=$REPS; [ "$n" -ge 100000 ] && preps=1
    p=$(for i in $(seq "$preps"); do wall "$VENV/bin/python" "$ROOT/bench/inject_h5py.py" "$ckpt" "$WORK/python-$i.h5" --flips "$n" --seed "$i"; rm -f "$WORK/python-$i.h5"; done | median)
    echo "flips=$n resilab=${r}s python=${p}s" >&2
    rows+=("$n,$r,$p,$corrupted")
done

mkdir -p "$(dirname "$OUT_CSV")"
"$VENV/bin/python" - "$OUT_CSV" "$ckpt" "$REPS" "${rows[@]}" <<'PY'
import csv, datetime, os, platform, sys
out, ckpt, reps, rows = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
size_mb = os.path.getsize(ckpt) / 1e6
fields = ["flips", "corrupted", "resilab_s", "python_h5py_s", "speedup", "file_mb", "reps", "cpus", "date"]
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields)
    w.writeheader()
    print(f"{'flips':>7} {'resilab s':>10} {'python s':>10} {'speedup':>8}")
    for row in rows:
        n, r, p, c = row.split(",")
        r, p = float(r), float(p)
        w.writerow({"flips": n, "corrupted": c, "resilab_s": round(r, 4), "python_h5py_s": round(p, 3),
                    "speedup": round(p / r, 1), "file_mb": round(size_mb, 1), "reps": reps,
                    "cpus": os.cpu_count(), "date": datetime.date.today().isoformat()})
        print(f"{n:>7} {r:>10.4f} {p:>10.3f} {p / r:>7.1f}x")
print(f"wrote {out}")
PY
