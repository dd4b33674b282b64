#!/usr/bin/env bash
# resilab's simulated workers against real torch.distributed jobs (gloo, CPU), step for step
# (scripts/ddp_check.py): DDP's own buckets, fault-free DDP (and 10 free-running steps, whose
# drift is reported), Horovod-style averaging at 4 and 3 ranks (at 3, its sum-then-scale bit for
# bit), gradient bit flips, a rank killed inside a step under lossy forward, rollback and
# checkpoint-restart at three crash points and 4 and 8 ranks (the survivors rebuild their gloo
# group; scripts/rank_death.py), GPipe and 1F1B pipelines, and a pipeline stage killed inside
# a step (the pipeline rebuilt and restarted from the checkpoint; scripts/stage_death.py).
# Uses the PyTorch of the tch virtual environment (made by scripts/setup.sh --tch when missing)
# and the release binary; about 4.5 minutes on 2 cores. Extra arguments go to ddp_check.py
# (--only NAME, --workers 4, --out FILE.csv).
#
#   cargo build --release && bash scripts/ddp-check.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec bash "$ROOT/scripts/torch-check.sh" ddp_check.py "$@"
