#!/usr/bin/env bash
# Runs one of resilab's checks against PyTorch (scripts/ddp_check.py, scripts/amp_check.py) with
# the PyTorch of the tch virtual environment (made by scripts/setup.sh --tch when missing), the
# Python packages the checks read resilab's files with, a scratch directory removed at the end,
# and the release binary ($RESILAB, or target/release/resilab). Called by ddp-check.sh and
# amp-check.sh:
#
#   bash scripts/torch-check.sh ddp_check.py --only ddp
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
check="$1"
shift
bash "$ROOT/scripts/setup.sh" --tch
venv="${RESILAB_TCH_VENV:-$HOME/.cache/resilab/tch-venv}"
# safetensors' PyTorch helpers need packaging and numpy.
"$venv/bin/python" -m pip install -q h5py==3.16.0 safetensors==0.7.0 packaging numpy
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$venv/bin/python" "$ROOT/scripts/$check" --resilab "${RESILAB:-$ROOT/target/release/resilab}" --work "$work" "$@"
