#!/usr/bin/env bash
# Two builds' training throughput, alternated on one machine: `resilab bench train` (the
# resilab side of bench/train_throughput.sh) with binary A, then B, ROUNDS times per model and
# backend, so that the machine's drift hits both alike. Prints each build's median images/s
# and B's over A's.
#
#   A=/tmp/resilab-before B=target/release/resilab bash bench/train_ab.sh
#
# Writes results/bench/train_ab.csv (OUT_CSV to change): one line per timed run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${A:?set A to the first resilab binary}" "${B:?set B to the second resilab binary}"
MODELS="${MODELS:-resnet:20:1:1 vgg:11:0.25:1 alexnet:0:0.5:0}"
BACKENDS="${BACKENDS:-native flex}"
ROUNDS="${ROUNDS:-3}"
STEPS="${STEPS:-10}"
THREADS="${THREADS:-$(nproc)}"
BATCH="${BATCH:-64}"
OUT_CSV="${OUT_CSV:-$ROOT/results/bench/train_ab.csv}"
mkdir -p "$(dirname "$OUT_CSV")"
echo "build,model,backend,round,images_per_s" > "$OUT_CSV"
for spec in $MODELS; do
    IFS=: read -r arch depth width bn <<<"$spec"
    extra=()
    [ "$bn" = 0 ] && extra+=(--no-batch-norm)
    for backend in $BACKENDS; do
        for round in $(seq "$ROUNDS"); do
            for side in A B; do
                bin=$A
                [ "$side" = B ] && bin=$B
                echo "==> $spec $backend, build $side, round $round" >&2
                line=$("$bin" bench train --arch "$arch" --depth "$depth" --width "$width" "${extra[@]}" \
                    --batch "$BATCH" --threads "$THREADS" --warmup 3 --steps "$STEPS" --backend "$backend")
                ips=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["images_per_s"])' "$line")
                echo "$side,$spec,$backend,$round,$ips" >> "$OUT_CSV"
            done
        done
    done
done
python3 - "$OUT_CSV" <<'PY'
import csv, statistics, sys
from collections import defaultdict
runs = defaultdict(list)
for r in csv.DictReader(open(sys.argv[1])):
    runs[(r["model"], r["backend"], r["build"])].append(float(r["images_per_s"]))
print(f"{'model':<18} {'backend':<7} {'A img/s':>9} {'B img/s':>9} {'B / A':>7}")
for (model, backend) in dict.fromkeys((m, b) for m, b, _ in runs):
    a, b = statistics.median(runs[(model, backend, "A")]), statistics.median(runs[(model, backend, "B")])
    print(f"{model:<18} {backend:<7} {a:>9.1f} {b:>9.1f} {b / a:>7.3f}")
PY
