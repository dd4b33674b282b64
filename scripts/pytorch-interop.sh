#!/usr/bin/env bash
# PyTorch weights in and out, end to end against PyTorch itself (scripts/pytorch_interop.py):
# a model trained in PyTorch imports with the same test accuracy, and exports back with
# strict=True and equal tensors. Uses the PyTorch of the tch virtual environment (made by
# scripts/setup.sh --tch when missing) and the release binary.
#
#   cargo build --release && bash scripts/pytorch-interop.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh" --tch
venv="${RESILAB_TCH_VENV:-$HOME/.cache/resilab/tch-venv}"
# safetensors' PyTorch helpers need packaging and numpy.
"$venv/bin/python" -m pip install -q safetensors==0.7.0 packaging numpy
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$venv/bin/python" "$ROOT/scripts/pytorch_interop.py" --resilab "${RESILAB:-$ROOT/target/release/resilab}" --work "$work"
