#!/usr/bin/env bash
# Simulation-overhead benchmark of the simulated parallel workers: wall time of one global step
# (batch 256, 3x32x32 images, SGD momentum) for N = 4 and 8 data-parallel workers and for a
# pipeline of S = 4 stages x M = 8 micro-batches, against one worker on the same global batch,
# all measured in one process with the steps interleaved across layouts (so machine drift hits
# every layout alike). The ratio is the simulation's overhead; the goal is at most 1.10x.
# Writes results/bench/parallel.csv (rows also carry the simulated step time of the cost model).
# Knobs: STEPS (timed rounds, default 7), WARMUP (default 2), THREADS (default 2), MODELS.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STEPS="${STEPS:-7}"
WARMUP="${WARMUP:-2}"
THREADS="${THREADS:-2}"
# arch:depth:width:batch_norm
MODELS="${MODELS:-resnet:20:1:bn vgg:11:0.25:nobn alexnet:0:0.5:nobn}"
OUT_CSV="${OUT_CSV:-$ROOT/results/bench/parallel.csv}"
BIN="$ROOT/target/release/resilab"

(cd "$ROOT" && bash scripts/setup.sh && cargo build --release)
mkdir -p "$(dirname "$OUT_CSV")"
rm -f "$OUT_CSV"
for m in $MODELS; do
    IFS=: read -r arch depth width bn <<<"$m"
    extra=()
    [ "$bn" = "nobn" ] && extra+=(--no-batch-norm)
    echo "==> $arch depth $depth width $width ($bn)" >&2
    "$BIN" bench parallel --arch "$arch" --depth "$depth" --width "$width" "${extra[@]}" \
        --batch 256 --workers 4,8 --pipeline 4x8 --warmup "$WARMUP" --steps "$STEPS" \
        --threads "$THREADS" --csv "$OUT_CSV"
done
echo "wrote $OUT_CSV" >&2
