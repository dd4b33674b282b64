#!/usr/bin/env bash
# Training-throughput benchmark: resilab vs PyTorch on CPU, same models, same
# thread counts (THREADS_LIST, default 1 and 2: campaigns run processes of one thread), run
# back to back per model. See bench/README.md.
# Each side runs REPEATS times per model (default 3), PyTorch and the resilab backends in
# turn, and the CSV keeps each side's median run: PyTorch's figure on a shared machine moves
# by up to 2x between runs, a single run would make the ratio a coin toss.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODELS="${MODELS:-resnet:8:1:1 resnet:20:1:1 resnet:18:0.25:1 vgg:11:0.25:1 alexnet:0:0.5:0 alexnet:0:0.25:0}"
THREADS_LIST="${THREADS_LIST:-${THREADS:-1 2}}" # thread counts, each timed on both sides
BATCH="${BATCH:-64}"
STEPS="${STEPS:-20}"
WARMUP="${WARMUP:-3}"
REPEATS="${REPEATS:-3}"
BACKENDS="${BACKENDS:-${BACKEND:-flex native}}" # resilab backends timed per model, in this order
FEATURES="${FEATURES:-}"          # cargo features of the resilab build (wgpu for BACKEND=wgpu)
TORCH_DEVICE="${TORCH_DEVICE:-cpu}" # cpu, cuda, mps or auto
OUT_CSV="${OUT_CSV:-$ROOT/results/bench/train_throughput.csv}"

source "$ROOT/bench/venv.sh"
bench_venv torch numpy

echo "==> building resilab (release)" >&2
(cd "$ROOT" && cargo build --release ${FEATURES:+--features "$FEATURES"})
RESILAB="$ROOT/target/release/resilab"

mkdir -p "$(dirname "$OUT_CSV")"
: > "$OUT_CSV"

for spec in $MODELS; do
  for THREADS in $THREADS_LIST; do
    IFS=: read -r arch depth width bn <<< "$spec"
    bn_flag="--batch-norm"; rl_bn=()
    if [[ "$bn" == 0 ]]; then bn_flag="--no-batch-norm"; rl_bn=(--no-batch-norm); fi
    common=(--arch "$arch" --depth "$depth" --width "$width" --batch "$BATCH"
            --threads "$THREADS" --warmup "$WARMUP" --steps "$STEPS")

    declare -A runs=()
    for ((r = 1; r <= REPEATS; r++)); do
        echo "==> $spec: pytorch ($TORCH_DEVICE), $THREADS threads, run $r of $REPEATS" >&2
        runs[torch]+="$("$PY" "$ROOT/bench/torch_step.py" "${common[@]}" "$bn_flag" --device "$TORCH_DEVICE" | tail -n 1)"$'\n'
        for backend in $BACKENDS; do
            echo "==> $spec: resilab ($backend), $THREADS threads, run $r of $REPEATS" >&2
            runs[$backend]+="$("$RESILAB" bench train "${common[@]}" "${rl_bn[@]}" --backend "$backend" | tail -n 1)"$'\n'
        done
    done
    t_json="$(printf '%s' "${runs[torch]}" | "$PY" "$ROOT/bench/collect.py" median)"
    for backend in $BACKENDS; do
        r_json="$(printf '%s' "${runs[$backend]}" | "$PY" "$ROOT/bench/collect.py" median)"
        "$PY" "$ROOT/bench/collect.py" add "$OUT_CSV" "$spec" "$r_json" "$t_json"
    done
  done
done

echo
"$PY" "$ROOT/bench/collect.py" show "$OUT_CSV"
echo
echo "wrote $OUT_CSV"
