#!/usr/bin/env bash
# Two builds' simulation overhead, alternated on one machine: `resilab bench parallel` (as
# bench/parallel.sh runs it) with binary A, then B, then A, then B for each model, so that the
# machine's drift hits both alike. Each run's ratios are against the single worker measured in
# that same run; the summary compares the two builds' mean ratios per model and layout.
#
#   A=/tmp/resilab-before B=target/release/resilab bash bench/parallel_ab.sh
#
# Writes results/bench/parallel_ab_a.csv and parallel_ab_b.csv (OUT_DIR to change), then prints
# B's mean ratio over A's for each model and layout.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${A:?set A to the first resilab binary}" "${B:?set B to the second resilab binary}"
STEPS="${STEPS:-5}"
ROUNDS="${ROUNDS:-2}"
THREADS="${THREADS:-2}"
MODELS="${MODELS:-resnet:20:1:bn vgg:11:0.25:nobn alexnet:0:0.5:nobn}"
OUT_DIR="${OUT_DIR:-$ROOT/results/bench}"
mkdir -p "$OUT_DIR"
rm -f "$OUT_DIR/parallel_ab_a.csv" "$OUT_DIR/parallel_ab_b.csv"
for m in $MODELS; do
    IFS=: read -r arch depth width bn <<<"$m"
    extra=()
    [ "$bn" = "nobn" ] && extra+=(--no-batch-norm)
    for round in $(seq "$ROUNDS"); do
        for side in a b; do
            bin=$A
            [ "$side" = b ] && bin=$B
            echo "==> $arch, build ${side^^}, round $round" >&2
            "$bin" bench parallel --arch "$arch" --depth "$depth" --width "$width" "${extra[@]}" \
                --batch 256 --workers 4,8 --pipeline 4x8 --warmup 2 --steps "$STEPS" \
                --threads "$THREADS" --csv "$OUT_DIR/parallel_ab_$side.csv" >/dev/null
        done
    done
done
python3 - "$OUT_DIR/parallel_ab_a.csv" "$OUT_DIR/parallel_ab_b.csv" <<'PY'
import csv, sys
from collections import defaultdict
def means(path):
    acc = defaultdict(list)
    for r in csv.DictReader(open(path)):
        if r["layout"] != "single":
            acc[(r["model"], r["layout"], r["workers"], r["stages"])].append(float(r["ratio_vs_single"]))
    return {k: sum(v) / len(v) for k, v in acc.items()}
a, b = means(sys.argv[1]), means(sys.argv[2])
print(f"{'model':<10} {'layout':<9} {'N':>3} {'S':>3} {'A ratio':>8} {'B ratio':>8} {'B / A':>7}")
for k in a:
    print(f"{k[0]:<10} {k[1]:<9} {k[2]:>3} {k[3]:>3} {a[k]:>8.3f} {b[k]:>8.3f} {b[k] / a[k]:>7.3f}")
PY
