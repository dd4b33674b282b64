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
# results/bench/campaign.csv (one row per backend) with the ratio and the projected time of the paper-sized grid
# (3,000 runs: the bases once, then the runs at the measured rate) at this fixed length (the
# preset itself stops runs at NaN, so it is faster).
# resilab runs once per backend in BACKENDS: native (the default: flex with resilab's kernels),
# flex (Burn's pure-Rust CPU backend as Burn ships it), both from the default build, and tch
# (Burn's LibTorch backend, built with `--features tch` into target/tch against the PyTorch
# 2.9.0 that scripts/with-tch.sh installs; about 15 minutes the first time).
# Also writes results/bench/campaign_phases.csv: where one run's time goes per model (resilab's phases
# from runs.csv's phase_s; the published way's process share against PyTorch's steps and evaluation).
# campaign.csv and campaign_models.csv name the processor (cpu): figures from different ones do
# not compare.
# Knobs: BACKENDS (default "native flex"), REPS (resilab runs per cell, default 10), TORCH_RUNS
# (Python runs per model and flip count, default 4), JOBS (default 2), THREADS (per process,
# default 1), RESILAB (a native/flex binary to run instead of building target/release/resilab:
# another build's, to compare).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/bench/venv.sh"
REPS="${REPS:-10}"
TORCH_RUNS="${TORCH_RUNS:-4}"
JOBS="${JOBS:-2}"
THREADS="${THREADS:-1}"
BACKENDS="${BACKENDS:-native flex}"
OUT_CSV="${OUT_CSV:-$ROOT/results/bench/campaign.csv}"
WORK="$ROOT/target/bench-campaign"
BIN="${RESILAB:-$ROOT/target/release/resilab}"
TCH_TARGET="$ROOT/target/tch"
PRESET="$ROOT/configs/paper/nev.toml"

bench_venv torch h5py numpy
rm -rf "$WORK"
mkdir -p "$WORK" "$(dirname "$OUT_CSV")"
for backend in $BACKENDS; do
    case "$backend" in
        native|flex) [[ -n "${RESILAB:-}" ]] || (cd "$ROOT" && bash scripts/setup.sh && cargo build --release) ;;
        tch) (cd "$ROOT" && CARGO_TARGET_DIR="$TCH_TARGET" bash scripts/with-tch.sh cargo build --release --features tch) ;;
        *) echo "bench/campaign.sh: unknown backend $backend in BACKENDS (native, flex, tch)" >&2; exit 2 ;;
    esac
done

for backend in $BACKENDS; do
    bin="$BIN"
    [ "$backend" = tch ] && bin="$TCH_TARGET/release/resilab"
    echo "==> resilab on $backend: N-EV preset, $REPS runs per cell, $JOBS processes x $THREADS thread(s)" >&2
    "$bin" campaign --config "$PRESET" --out "$WORK/resilab-$backend" --set "campaign.repetitions=$REPS" \
        --set campaign.stop_at_collapse=false --backend "$backend" \
        --jobs "$JOBS" --threads "$THREADS" --quiet | tee "$WORK/resilab-$backend.out" >&2
done

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

python3 "$ROOT/bench/campaign_summary.py" "$WORK" "$OUT_CSV" "$JOBS" "$THREADS" $BACKENDS
