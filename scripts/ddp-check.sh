#!/usr/bin/env bash
# resilab's simulated workers against real torch.distributed jobs (gloo, CPU), step for step
# (scripts/ddp_check.py): fault-free DDP and Horovod-style averaging, gradient bit flips, a crash
# inside a step under lossy forward, rollback and checkpoint-restart at three crash points and 4
# and 8 ranks, and GPipe over 2 and 4 stages. Uses the PyTorch of the tch virtual environment
# (made by scripts/setup.sh --tch when missing) and the release binary; about 2 minutes on 2
# cores. Extra arguments go to ddp_check.py (--only NAME, --workers 4, --out FILE.csv).
#
#   cargo build --release && bash scripts/ddp-check.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec bash "$ROOT/scripts/torch-check.sh" ddp_check.py "$@"
