#!/usr/bin/env bash
# Per-layer convolution timings: Burn's flex, resilab's kernels and PyTorch (CPU), forward,
# input gradient and weight gradient at batch 64, the same thread count, back to back.
# Writes results/bench/conv_layers.csv with the ratios. See bench/README.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
THREADS="${THREADS:-$(nproc)}"
OUT_CSV="${OUT_CSV:-$ROOT/results/bench/conv_layers.csv}"

source "$ROOT/bench/venv.sh"
bench_venv torch

echo "==> building the conv_backward example (release)" >&2
# --features avx512: the GEMM micro-kernels the default resilab build uses.
(cd "$ROOT" && cargo build --release -p resilab-models --features avx512 --example conv_backward)
EX="$ROOT/target/release/examples/conv_backward"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "==> flex and resilab kernels, $THREADS threads" >&2
RAYON_NUM_THREADS="$THREADS" "$EX" "$tmp/rust.csv"
echo "==> PyTorch, $THREADS threads" >&2
# shellcheck disable=SC2046
"$PY" "$ROOT/bench/conv_layers.py" --threads "$THREADS" $("$EX" --shapes) > "$tmp/torch.csv"

mkdir -p "$(dirname "$OUT_CSV")"
"$PY" - "$tmp/rust.csv" "$tmp/torch.csv" "$OUT_CSV" "$THREADS" "$("$PY" -c 'import torch; print(torch.__version__)')" <<'PY'
import csv, sys
rust = {r["shape"]: r for r in csv.DictReader(open(sys.argv[1]))}
torch = {r["shape"]: r for r in csv.DictReader(open(sys.argv[2]))}
out, threads, version = sys.argv[3], sys.argv[4], sys.argv[5]
rows = []
for shape, r in rust.items():
    t = torch[shape]
    row = {"shape": shape, "threads": threads, "torch_version": version, "gflop_forward": r["gflop_forward"]}
    for part in ["forward", "input_grad", "weight_grad"]:
        f, o, p = float(r[f"flex_{part}_ms"]), float(r[f"resilab_{part}_ms"]), float(t[f"torch_{part}_ms"])
        row.update({f"flex_{part}_ms": f, f"resilab_{part}_ms": o, f"torch_{part}_ms": p,
                    f"{part}_speedup_vs_flex": round(f / o, 3), f"{part}_vs_torch": round(p / o, 3)})
    g = float(r["gflop_forward"])
    row["resilab_gflops_forward"] = round(g / (row["resilab_forward_ms"] / 1e3), 1)
    row["torch_gflops_forward"] = round(g / (row["torch_forward_ms"] / 1e3), 1)
    rows.append(row)
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
print(f"{'shape':>20} | {'forward ms flex/ours/torch':>26} | {'input grad':>22} | {'weight grad':>22}")
for r in rows:
    cell = lambda p: f"{r[f'flex_{p}_ms']:6.2f}/{r[f'resilab_{p}_ms']:6.2f}/{r[f'torch_{p}_ms']:6.2f}"
    print(f"{r['shape']:>20} | {cell('forward'):>26} | {cell('input_grad'):>22} | {cell('weight_grad'):>22}")
print(f"wrote {out}")
PY
