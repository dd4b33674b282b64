#!/usr/bin/env bash
# Where a training step's time goes, by operation, resilab against PyTorch (CPU), per model
# and thread count: conv forward, conv backward (data and weight), BatchNorm, ReLU backward,
# pooling, linear layers, loss, optimizer, data, other. See bench/README.md.
#
# resilab: `resilab bench train` runs once as is (its median step time) and once under
# `perf record --call-graph dwarf`; breakdown.py gives each sample of the timed steps the
# category of the innermost kernel on its stack and scales the shares to the step time.
# PyTorch: breakdown_torch.py, torch_step.py's step under torch.profiler, self CPU time by op,
# scaled to its unprofiled step time. Does not build: run `cargo build --release` first.
#
# Knobs: MODELS (arch:depth:width:bn, as train_throughput.sh), THREADS_LIST, BATCH, STEPS
# (timed steps), WARMUP, PERF_FREQ (samples per second), PERF_STACK (bytes of stack copied
# per sample), EXPLAIN (N: print the N commonest stacks and ops counted as "other"), OUT_CSV,
# RESILAB (the binary; another build's, to compare).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODELS="${MODELS:-resnet:20:1:1 alexnet:0:0.5:0}"
THREADS_LIST="${THREADS_LIST:-1 2}"
BATCH="${BATCH:-64}"
STEPS="${STEPS:-30}"
WARMUP="${WARMUP:-5}"
PERF_FREQ="${PERF_FREQ:-2000}"
PERF_STACK="${PERF_STACK:-16384}"
EXPLAIN="${EXPLAIN:-0}"
OUT_CSV="${OUT_CSV:-$ROOT/results/bench/breakdown.csv}"

RESILAB="${RESILAB:-$ROOT/target/release/resilab}"
if [[ ! -x "$RESILAB" ]]; then
    echo "error: $RESILAB is missing: run \`cargo build --release\` first (this script does not build)" >&2
    exit 1
fi
PERF="$(command -v perf || true)"
if [[ -z "$PERF" ]]; then
    echo "error: perf is missing: \`apt-get install linux-perf\` (Debian; linux-tools-generic on Ubuntu)" >&2
    exit 1
fi

source "$ROOT/bench/venv.sh"
bench_venv torch numpy

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$(dirname "$OUT_CSV")"
: > "$OUT_CSV"
explain=()
if [[ "$EXPLAIN" != 0 ]]; then explain=(--explain "$EXPLAIN"); fi
ms() { "$PY" -c 'import json, sys; print("%.1f" % json.loads(sys.argv[1])["step_ms_median"])' "$1"; }

for spec in $MODELS; do
    IFS=: read -r arch depth width bn <<< "$spec"
    label="$("$PY" "$ROOT/bench/breakdown.py" label "$spec")"
    bn_flag="--batch-norm"; rl_bn=()
    if [[ "$bn" == 0 ]]; then bn_flag="--no-batch-norm"; rl_bn=(--no-batch-norm); fi
    for threads in $THREADS_LIST; do
        common=(--arch "$arch" --depth "$depth" --width "$width" --batch "$BATCH"
                --threads "$threads" --warmup "$WARMUP" --steps "$STEPS")

        echo "==> $label: resilab, $threads threads, step time" >&2
        r_json="$("$RESILAB" bench train "${common[@]}" "${rl_bn[@]}" | tail -n 1)"

        echo "==> $label: resilab, $threads threads, under perf record" >&2
        if ! "$PERF" record -q -F "$PERF_FREQ" -g --call-graph "dwarf,$PERF_STACK" -o "$tmp/perf.data" -- \
                "$RESILAB" bench train "${common[@]}" "${rl_bn[@]}" > "$tmp/perf_run.json"; then
            echo "error: perf record failed (as non-root, perf_event_paranoid must be 2 or less:" \
                 "\`sysctl kernel.perf_event_paranoid=1\`)" >&2
            exit 1
        fi
        echo "    step: $(ms "$r_json") ms, $(ms "$(tail -n 1 "$tmp/perf_run.json")") ms under perf" >&2
        "$PERF" script -i "$tmp/perf.data" -F comm,pid,tid,time,event,ip,sym --no-inline 2> /dev/null \
            | "$PY" "$ROOT/bench/breakdown.py" perf "$label" "$threads" "$r_json" "${explain[@]}" > "$tmp/resilab.json"
        rm -f "$tmp/perf.data"

        echo "==> $label: pytorch, $threads threads, step time and torch.profiler" >&2
        # The profiler's own log lines (kineto: USDT, INFO, no GPU) are left out of stderr.
        if ! (cd "$ROOT/bench" && "$PY" breakdown_torch.py --model "$label" "${common[@]}" "$bn_flag" \
                "${explain[@]}") 2> "$tmp/torch.err" | tail -n 1 > "$tmp/torch.json"; then
            cat "$tmp/torch.err" >&2
            exit 1
        fi
        grep -Ev '^(USDT|INFO):|gpuGetDeviceCount|IpcFabricConfigClient' "$tmp/torch.err" >&2 || true

        "$PY" "$ROOT/bench/breakdown.py" add "$OUT_CSV" "$(cat "$tmp/resilab.json")" "$(cat "$tmp/torch.json")"
    done
done

"$PY" "$ROOT/bench/breakdown.py" table "$OUT_CSV"
echo
echo "wrote $OUT_CSV"
