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
exec bash "$ROOT/scripts/torch-check.sh" amp_check.py "$@"
