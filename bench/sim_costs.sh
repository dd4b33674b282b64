#!/usr/bin/env bash
# The simulation's own per-step work for 8 data-parallel workers: the all-reduce of their
# gradients and their 8 optimizer updates (SGD momentum, weight decay), each as one pass
# (resilab's kernels, the native backend) and as the tensor formulation (flex), alternated in
# one run, for VGG-11/4's and AlexNet/2's parameters. Writes results/bench/sim_costs.csv.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_CSV="${OUT_CSV:-$ROOT/results/bench/sim_costs.csv}"
export RAYON_NUM_THREADS="${THREADS:-2}"
(cd "$ROOT" && bash scripts/setup.sh && cargo build --release -p resilab-train --features avx512 --example sim_costs)
mkdir -p "$(dirname "$OUT_CSV")"
rm -f "$OUT_CSV"
"$ROOT/target/release/examples/sim_costs" "$OUT_CSV"
