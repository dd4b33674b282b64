#!/usr/bin/env bash
# resilab's mixed precision (train.precision = "bf16" | "fp16") against PyTorch's torch.autocast
# and torch.amp.GradScaler, step for step (scripts/amp_check.py): weights, BatchNorm buffers,
# momentum, and fp16's loss scale and skipped steps, with two mutations the comparison must
# catch. Uses the PyTorch of the tch virtual environment (made by scripts/setup.sh --tch when
# missing) and the release binary; under a minute on 2 cores. Extra arguments go to
# amp_check.py (--only NAME, --mutate bn-fp32|conv-fp32, --out FILE.csv).
#
#   cargo build --release && bash scripts/amp-check.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh" --tch
venv="${RESILAB_TCH_VENV:-$HOME/.cache/resilab/tch-venv}"
# safetensors' PyTorch helpers need packaging and numpy.
"$venv/bin/python" -m pip install -q h5py==3.16.0 safetensors==0.7.0 packaging numpy
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$venv/bin/python" "$ROOT/scripts/amp_check.py" --resilab "${RESILAB:-$ROOT/target/release/resilab}" --work "$work" "$@"
