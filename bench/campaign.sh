#!/usr/bin/env bash
# Campaign throughput: runs per hour of the N-EV preset (configs/paper/nev.toml: three models,
# four flip counts; per run: load the altered checkpoint, 20 training steps of batch 64,
# evaluate on 1,000 test images) with resilab's worker processes, against the same per-run work
# done the published way (bench/campaign_torch.py: h5py injection and one PyTorch process per
# run), measured in the same invocation with the same number of processes and threads.
#
# Both sides run a fixed run length: every run trains all 20 steps, even after its weights
# turned NaN (campaign.stop_at_collapse = false; --full-length), over the same four flip
# counts. resilab's time includes training the three base checkpoints and golden
# continuations; the Python side's base model is trained before its clock starts. Writes
# results/bench/campaign.csv with the ratio and the projected time of the paper-sized grid
# (3,000 runs) at this fixed length (the preset itself stops runs at NaN, so it is faster).
# Knobs: REPS (resilab runs per cell, default 10), TORCH_RUNS (Python runs per model and flip
# count, default 2), JOBS (default 2), THREADS (per process, default 1).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RESILAB_BENCH_VENV:-$HOME/.cache/resilab/bench-venv}"
REPS="${REPS:-10}"
TORCH_RUNS="${TORCH_RUNS:-2}"
JOBS="${JOBS:-2}"
THREADS="${THREADS:-1}"
OUT_CSV="${OUT_CSV:-$ROOT/results/bench/campaign.csv}"
WORK="$ROOT/target/bench-campaign"
BIN="$ROOT/target/release/resilab"
PRESET="$ROOT/configs/paper/nev.toml"

if ! "$VENV/bin/python" -c "import torch, h5py, numpy" 2>/dev/null; then
    echo "==> installing PyTorch, h5py and numpy into $VENV" >&2
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q torch h5py numpy
fi
(cd "$ROOT" && bash scripts/setup.sh && cargo build --release)
rm -rf "$WORK"
mkdir -p "$WORK" "$(dirname "$OUT_CSV")"

echo "==> resilab: N-EV preset, $REPS runs per cell, $JOBS processes x $THREADS thread(s)" >&2
t0=$(date +%s.%N)
"$BIN" campaign --config "$PRESET" --out "$WORK/resilab" --set "campaign.repetitions=$REPS" \
    --set campaign.stop_at_collapse=false \
    --jobs "$JOBS" --threads "$THREADS" --quiet >&2
t1=$(date +%s.%N)
runs=$(wc -l < "$WORK/resilab/runs.jsonl")
ok=$(grep -c '"status":"ok"' "$WORK/resilab/runs.jsonl" || true)

# The same models and run length, the published way.
torch_json="$WORK/torch.jsonl"
: > "$torch_json"
for spec in "alexnet 0 0.25" "resnet 8 0.25" "vgg 11 0.25"; do
    set -- $spec
    for flips in 1 10 100 1000; do
        echo "==> PyTorch + h5py, one process per run: $1, $flips flips, $TORCH_RUNS runs" >&2
        "$VENV/bin/python" "$ROOT/bench/campaign_torch.py" --arch "$1" --depth "$2" --width "$3" \
            --image-size 32 --runs "$TORCH_RUNS" --jobs "$JOBS" --threads "$THREADS" --flips "$flips" \
            --steps 20 --batch 64 --test-images 1000 --full-length | tail -n 1 >> "$torch_json"
    done
done

python3 - "$t0" "$t1" "$runs" "$ok" "$torch_json" "$OUT_CSV" "$JOBS" "$THREADS" "$REPS" <<'PY'
import csv, datetime, json, sys
t0, t1, runs, ok, torch_json, out, jobs, threads, reps = sys.argv[1:]
seconds = float(t1) - float(t0)
runs, ok = int(runs), int(ok)
ours = 3600.0 * runs / seconds
torch = [json.loads(l) for l in open(torch_json)]
t_runs = sum(t["runs"] for t in torch)
t_seconds = sum(t["seconds"] for t in torch)
theirs = 3600.0 * t_runs / t_seconds
ratio = ours / theirs
grid_min = 3000 / ours * 60
row = {
    "date": datetime.date.today().isoformat(), "jobs": jobs, "threads_per_job": threads,
    "resilab_runs": runs, "resilab_ok": ok, "resilab_seconds": round(seconds, 1),
    "resilab_runs_per_hour": round(ours), "published_way_runs": t_runs,
    "published_way_seconds": round(t_seconds, 1), "published_way_runs_per_hour": round(theirs),
    "ratio": round(ratio, 2), "projected_3000_runs_min": round(grid_min, 1),
    "run": "fixed length: load, 20 steps x batch 64, 1,000 test images; alexnet/resnet8/vgg11 width 0.25, 32x32; flips 1/10/100/1000",
}
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(row))
    w.writeheader()
    w.writerow(row)
print(f"resilab         {runs} runs in {seconds:.1f} s (bases and golden runs included): {ours:.0f} runs/hour")
print(f"published way   {t_runs} runs in {t_seconds:.1f} s: {theirs:.0f} runs/hour")
print(f"ratio           {ratio:.2f}x (goal >= 3x)")
print(f"3,000 runs      {grid_min:.1f} min projected at this rate (goal <= 60 min)")
print(f"-> {out}")
PY
