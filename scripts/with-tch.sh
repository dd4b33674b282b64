#!/usr/bin/env bash
# Runs a command (usually cargo) with what building the tch backend needs: PyTorch 2.9.0's
# libtorch from the virtual environment that `scripts/setup.sh --tch` makes (made here when
# missing). The resulting binary finds libtorch by its run path; it needs no environment.
#
#   bash scripts/with-tch.sh cargo build --release --features tch
#   bash scripts/with-tch.sh cargo test --release --features tch --test tch
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh" --tch
venv="${RESILAB_TCH_VENV:-$HOME/.cache/resilab/tch-venv}"
# torch-sys's build script asks this Python where libtorch is.
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" LIBTORCH_USE_PYTORCH=1
exec "$@"
