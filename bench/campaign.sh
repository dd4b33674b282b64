#!/usr/bin/env bash
# Campaign throughput: runs per hour of the N-EV preset (configs/paper/nev.toml: three models,
# four flip counts; per run: load the altered checkpoint, 20 training steps of batch 64,
# evaluate on 1,000 test images) with resilab's worker processes, against the same per-run work
# done the published way (bench/campaign_torch.py: h5py injection and one PyTorch process per
# run), measured in the same invocation with the same number of processes and threads.
#
# Both sides run a fixed run length: every run trains all 20 steps, even after its weights
# turned NaN (campaign.stop_at_collapse = false; --full-length), over the same four flip
# counts. Runs per hour are timed on both sides once the base checkpoints exist (the Python
# side trains its base model before its clock starts; resilab's campaign reports how long its
# three base checkpoints and golden continuations took, and that time is also given). Writes
# results/bench/campaign.csv with the ratio and the projected time of the paper-sized grid
# (3,000 runs: the bases once, then the runs at the measured rate) at this fixed length (the
# preset itself stops runs at NaN, so it is faster).
# Knobs: REPS (resilab runs per cell, default 10), TORCH_RUNS (Python runs per model and flip
# count, default 4), JOBS (default 2), THREADS (per process, default 1).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RESILAB_BENCH_VENV:-$HOME/.cache/resilab/bench-venv}"
REPS="${REPS:-10}"
TORCH_RUNS="${TORCH_RUNS:-4}"
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
"$BIN" campaign --config "$PRESET" --out "$WORK/resilab" --set "campaign.repetitions=$REPS" \
    --set campaign.stop_at_collapse=false \
    --jobs "$JOBS" --threads "$THREADS" --quiet | tee "$WORK/resilab.out" >&2

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

python3 "$ROOT/bench/campaign_summary.py" "$WORK" "$OUT_CSV" "$JOBS" "$THREADS"
