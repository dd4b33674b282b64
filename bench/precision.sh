#!/usr/bin/env bash
# Mixed-precision benchmark. Writes results/bench/precision.csv (model, batch, backend, fp32_ms,
# bf16_ms, fp16_ms, bf16_vs_fp32, fp16_vs_fp32, goal): the median training step (forward,
# backward, SGD-momentum update) of each `train.precision` against fp32, steps of the three
# interleaved in one process (`resilab bench precision`), on the default CPU backend. The goal
# (issue 65): bf16 and fp16 cost at most 1.3x the fp32 step.
# Knobs: THREADS (default 2), STEPS (default 20), MODELS (default "resnet:8 resnet:20 vgg:11").
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
THREADS="${THREADS:-2}"
STEPS="${STEPS:-20}"
MODELS="${MODELS:-resnet:8 resnet:20 vgg:11}"
OUT_CSV="${OUT_CSV:-$ROOT/results/bench/precision.csv}"
BIN="$ROOT/target/release/resilab"
WORK="$ROOT/target/bench-precision"

(cd "$ROOT" && bash scripts/setup.sh && cargo build --release)
rm -rf "$WORK" && mkdir -p "$WORK" "$(dirname "$OUT_CSV")"
echo "model,batch,backend,threads,fp32_ms,bf16_ms,fp16_ms,bf16_vs_fp32,fp16_vs_fp32,goal" > "$OUT_CSV"
for m in $MODELS; do
    arch="${m%%:*}" depth="${m##*:}"
    echo "==> $arch-$depth" >&2
    "$BIN" bench precision --arch "$arch" --depth "$depth" --batch 64 --warmup 3 --steps "$STEPS" \
        --threads "$THREADS" | tail -n 1 > "$WORK/$arch-$depth.json"
    python3 - "$WORK/$arch-$depth.json" "$OUT_CSV" "$THREADS" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
row = [d["model"], d["batch"], "native", sys.argv[3], f"{d['fp32_ms']:.2f}", f"{d['bf16_ms']:.2f}", f"{d['fp16_ms']:.2f}",
       f"{d['bf16_vs_fp32']:.3f}", f"{d['fp16_vs_fp32']:.3f}", "<= 1.3"]
with open(sys.argv[2], "a") as f:
    f.write(",".join(map(str, row)) + "\n")
print(f"{d['model']}: fp32 {d['fp32_ms']:.1f} ms, bf16 {d['bf16_vs_fp32']:.2f}x, fp16 {d['fp16_vs_fp32']:.2f}x", file=sys.stderr)
PY
done
cat "$OUT_CSV"
