"""Checks of scripts/slurm-local.sh: the merged shards against the single-process campaign.

    python3 scripts/slurm_check.py SINGLE MERGED SHARD... --logs DIR

- MERGED/runs.csv equals SINGLE/runs.csv row for row, ordered by grid index: the same columns
  and the same values, except the seconds a run took (wall_s, phase_s, golden_wall_s, time_overhead_frac: the
  campaign crate's WALL_CLOCK_COLUMNS, which a unit test holds this list to);
- no shard recorded a run twice, and together they recorded each run once;
- the tasks' logs hold one line per run they finished (a task killed between recording a run
  and logging it may miss that one line: at most one per interrupted task, --interrupted).
"""

import argparse
import csv
import json
import os
import sys

TIMING = {"wall_s", "phase_s", "golden_wall_s", "time_overhead_frac"}


def table(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("single")
    ap.add_argument("merged")
    ap.add_argument("shards", nargs="+")
    ap.add_argument("--logs", required=True)
    ap.add_argument("--interrupted", type=int, default=0)
    a = ap.parse_args()
    # A campaign appends rows as runs finish; merge writes them in grid order.
    single = sorted(table(os.path.join(a.single, "runs.csv")), key=lambda r: int(r["index"]))
    merged = table(os.path.join(a.merged, "runs.csv"))
    problems = []
    if [r.get("index") for r in merged] != sorted((r.get("index") for r in merged), key=int):
        problems.append("merged runs.csv is not ordered by grid index")
    if len(single) != len(merged):
        problems.append(f"{len(merged)} merged rows, {len(single)} single-process rows")
    for s, m in zip(single, merged):
        if s != m:
            keys = sorted(k for k in set(s) | set(m) if s.get(k) != m.get(k))
            problems.append(f"run {s.get('id')} (grid index {s.get('index')}) differs in {', '.join(keys)}")
    ids = []
    for d in a.shards:
        with open(os.path.join(d, "runs.jsonl")) as f:
            shard_ids = [json.loads(line)["id"] for line in f if line.strip()]
        if len(shard_ids) != len(set(shard_ids)):
            problems.append(f"{d} recorded a run twice")
        ids += shard_ids
    if sorted(ids) != sorted(r["id"] for r in single):
        problems.append(f"the shards recorded {len(ids)} runs ({len(set(ids))} distinct), the grid has {len(single)}")
    logged = 0
    for name in os.listdir(a.logs):
        with open(os.path.join(a.logs, name)) as f:
            logged += sum(1 for line in f if "] run " in line)
    if not len(ids) - a.interrupted <= logged <= len(ids):
        problems.append(f"the tasks' logs hold {logged} run lines for {len(ids)} runs recorded")
    if problems:
        sys.exit("slurm-local: FAILED:\n  " + "\n  ".join(problems))
    print(f"slurm-local: {len(merged)} runs equal, {len(a.shards)} shards, {logged} log lines")


if __name__ == "__main__":
    main()
